package conformance

// Mutual-TLS conformance: a second gangscaler instance serving gRPC over mutual TLS
// with certificates from deploy/gen-certs.sh, called with grpc-go. grpc-go >= 1.67
// (like Cluster Autoscaler 1.33+) refuses TLS servers that do not negotiate ALPN "h2",
// so the accepted case also asserts the negotiated protocol.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const tlsCallTimeout = 3 * time.Second

// TLS fixture: certificate paths are relative to the config dir.
var tlsFixtureFiles = map[string]string{
	"provider.yaml": `server:
  address: "127.0.0.1:0"        # overridden by GANGSCALER__SERVER__ADDRESS
  metricsAddress: "127.0.0.1:0" # overridden by GANGSCALER__SERVER__METRICS_ADDRESS
  tls: {certFile: certs/server.crt, keyFile: certs/server.key, clientCaFile: certs/ca.crt}
nodeGroupsDir: nodegroups
`,
	"nodegroups/tls-cpu.yaml": `id: tls-cpu
minSize: 0
maxSize: 2
instanceType: m7i.8xlarge
region: us-east-1
zone: us-east-1b
capacity: {cpu: "32", memory: 128Gi, ephemeralStorage: 200Gi, pods: 110}
labels: {gangscaler.io/pool: cpu}
backend:
  type: memory
  provisionDelay: 0s
`,
}

// genCerts runs deploy/gen-certs.sh OUT localhost (CA, server cert with
// DNS:localhost + IP:127.0.0.1, clientAuth client cert).
func genCerts(out string) error {
	script, err := filepath.Abs("../../deploy/gen-certs.sh")
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", script, out, "localhost")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s localhost: %w\n%s", script, out, err, b)
	}
	return nil
}

type certSet struct {
	pool   *x509.CertPool
	client tls.Certificate
}

func loadCertSet(t *testing.T, dir string) certSet {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", filepath.Join(dir, "ca.crt"))
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return certSet{pool: pool, client: client}
}

// tlsCall dials addr with creds (grpc.NewClient, no blocking dial) and makes one
// NodeGroups call with a short timeout, returning the raw response and the peer.
func tlsCall(t *testing.T, addr string, creds credentials.TransportCredentials) ([]byte, *peer.Peer, error) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithNoProxy(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), tlsCallTimeout)
	defer cancel()
	var resp []byte
	var p peer.Peer
	err = cc.Invoke(ctx, servicePath+"NodeGroups", []byte(nil), &resp, grpc.Peer(&p))
	return resp, &p, err
}

func wantRejected(t *testing.T, err error, what string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() == codes.OK {
		t.Fatalf("%s: call succeeded, want it rejected", what)
	}
	t.Logf("%s: rejected as expected: %s %q", what, st.Code(), st.Message())
}

func TestMutualTLS(t *testing.T) {
	other := t.TempDir()
	if err := genCerts(other); err != nil {
		t.Fatal(err)
	}
	var certs string
	s, err := startServerWith(tlsFixtureFiles, func(cfg string) error {
		certs = filepath.Join(cfg, "certs")
		return genCerts(certs)
	})
	if s != nil {
		t.Cleanup(func() {
			if !s.stop() {
				t.Errorf("TLS gangscaler exited on its own during the test: %s", s.exitString())
			}
			if t.Failed() {
				s.dumpLogs()
				t.Logf("TLS fixture and logs kept in %s", s.dir)
			} else {
				os.RemoveAll(s.dir)
			}
		})
	}
	if err != nil {
		t.Fatalf("starting TLS gangscaler: %v", err)
	}
	good := loadCertSet(t, certs)
	bad := loadCertSet(t, other)
	tlsCreds := credentials.NewTLS
	addr := s.grpcAddr

	accepted := func(t *testing.T) {
		t.Helper()
		resp, p, err := tlsCall(t, addr, tlsCreds(&tls.Config{
			Certificates: []tls.Certificate{good.client},
			RootCAs:      good.pool,
			ServerName:   "localhost",
		}))
		mustOK(t, err, "NodeGroups over mutual TLS")
		m, errs := decode(resp, sNodeGroupsResponse, "NodeGroups")
		for _, e := range errs {
			t.Errorf("wire conformance: %v", e)
		}
		var got []string
		for _, g := range m.subs(1) {
			got = append(got, toNodeGroup(g).id)
		}
		if len(got) != 1 || got[0] != "tls-cpu" {
			t.Errorf("NodeGroups over mutual TLS: got groups %q, want [tls-cpu]", got)
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			t.Fatalf("peer AuthInfo is %T, want credentials.TLSInfo", p.AuthInfo)
		}
		st := info.State
		if st.NegotiatedProtocol != "h2" {
			t.Errorf("negotiated ALPN protocol %q, want \"h2\"", st.NegotiatedProtocol)
		}
		if !st.HandshakeComplete {
			t.Errorf("TLS handshake not complete")
		}
		cn := ""
		if len(st.PeerCertificates) > 0 {
			cn = st.PeerCertificates[0].Subject.CommonName
		}
		t.Logf("TLS %s, cipher %s, ALPN %q, server cert CN %q, groups %q",
			tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), st.NegotiatedProtocol,
			cn, got)
	}

	t.Run("ClientCertAccepted", accepted)
	t.Run("NoClientCertRejected", func(t *testing.T) {
		_, _, err := tlsCall(t, addr, tlsCreds(&tls.Config{RootCAs: good.pool, ServerName: "localhost"}))
		wantRejected(t, err, "no client certificate")
	})
	t.Run("ClientCertFromOtherCARejected", func(t *testing.T) {
		_, _, err := tlsCall(t, addr, tlsCreds(&tls.Config{
			Certificates: []tls.Certificate{bad.client},
			RootCAs:      good.pool,
			ServerName:   "localhost",
		}))
		wantRejected(t, err, "client certificate from an unrelated CA")
	})
	t.Run("PlaintextClientRejected", func(t *testing.T) {
		_, _, err := tlsCall(t, addr, insecure.NewCredentials())
		wantRejected(t, err, "plaintext client")
	})
	t.Run("UntrustedServerCertRejected", func(t *testing.T) {
		_, _, err := tlsCall(t, addr, tlsCreds(&tls.Config{
			Certificates: []tls.Certificate{good.client},
			RootCAs:      bad.pool,
			ServerName:   "localhost",
		}))
		wantRejected(t, err, "server certificate not signed by the trusted CA")
	})
	// The rejected handshakes must not have hurt the server.
	t.Run("ClientCertAcceptedAfterRejections", func(t *testing.T) {
		select {
		case <-s.done:
			t.Fatalf("TLS gangscaler exited: %s", s.exitString())
		default:
		}
		accepted(t)
	})
}
