package conformance

// Process harness: writes the fixture config, starts `gangscaler serve` on loopback
// ports, waits for /readyz, and stops it by pid at the end.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const servicePath = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"

// CA's default grpc_timeout.
const rpcTimeout = 5 * time.Second

// The fixture. Groups, and which assertions use them:
//
//	gpu-a      template (GPU, RDMA, CSI, labels, taints, topology), price, option
//	           overrides, provisionDelay 1h (instances stay instanceCreating);
//	           IncreaseSize, NodeGroupForNode and pricing.
//	cpu-b      minSize 1, no price, capacity without GPU, provisionDelay 0s
//	           (instances instanceRunning); DeleteNodes and "all created" decrease.
//	stock      GPU (second product for GetAvailableGPUTypes), failure after 1
//	           instance with code stockout.
//	stockmin   minSize 1, failure after 1 instance: after one scale-up and deleting
//	           the healthy instance, target == minSize with only the errored instance
//	           left, which must still be deletable (below minSize).
//	lazy       createDelay 1h: capacity is not created, so DecreaseTargetSize can cancel it.
//	notemplate no capacity: no template node, no price, no option overrides.
var fixtureFiles = map[string]string{
	"provider.yaml": `server:
  address: "127.0.0.1:8086"
  metricsAddress: "127.0.0.1:9464"
  plaintext: true
gpu:
  label: nvidia.com/gpu.product
nodeGroupsDir: nodegroups
defaults:
  backend:
    type: memory
    provisionDelay: 0s
`,
	"nodegroups/gpu-a.yaml": `id: gpu-a
minSize: 0
maxSize: 4
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "192", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}
gpu: {count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}
rdma: {resourceName: rdma/rdma_shared_device_a, devices: 8, bandwidthGbps: 3200}
csi: {ebs.csi.aws.com: 4}
labels: {gangscaler.io/pool: h100}
taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
topology: {topology.gangscaler.io/block: block-a}
price: 98.32
backend:
  type: memory
  provisionDelay: 1h
autoscalingOptions:
  scaleDownUtilizationThreshold: 0.3
  scaleDownUnneededTime: 20m
`,
	"nodegroups/cpu-b.yaml": `id: cpu-b
minSize: 1
maxSize: 3
instanceType: m7i.8xlarge
region: us-east-1
zone: us-east-1b
capacity: {cpu: "32", memory: 128Gi, ephemeralStorage: 200Gi, pods: 110}
labels: {gangscaler.io/pool: cpu}
backend:
  type: memory
  provisionDelay: 0s
`,
	"nodegroups/stock.yaml": `id: stock
minSize: 0
maxSize: 3
instanceType: g6.12xlarge
region: us-east-1
zone: us-east-1c
capacity: {cpu: "48", memory: 192Gi, ephemeralStorage: 3800Gi, pods: 110}
gpu: {count: 4, product: NVIDIA-L4, memory: 23034Mi}
price: 4.6
backend:
  type: memory
  provisionDelay: 0s
  failure: {afterInstances: 1, code: stockout}
`,
	"nodegroups/stockmin.yaml": `id: stockmin
minSize: 1
maxSize: 3
instanceType: m7i.large
region: us-east-1
zone: us-east-1a
capacity: {cpu: "2", memory: 8Gi, ephemeralStorage: 50Gi, pods: 29}
backend:
  type: memory
  provisionDelay: 0s
  failure: {afterInstances: 1, code: stockout}
`,
	"nodegroups/lazy.yaml": `id: lazy
minSize: 0
maxSize: 5
instanceType: m7i.2xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "8", memory: 32Gi, ephemeralStorage: 100Gi, pods: 58}
backend:
  type: memory
  provisionDelay: 0s
  createDelay: 1h
`,
	"nodegroups/notemplate.yaml": `id: notemplate
minSize: 0
maxSize: 2
instanceType: m7i.xlarge
region: us-east-1
zone: us-east-1a
`,
}

// Expected fixture facts.
var (
	fixtureGroups = map[string][2]int32{ // id -> {min, max}
		"gpu-a": {0, 4}, "cpu-b": {1, 3}, "stock": {0, 3}, "stockmin": {1, 3}, "lazy": {0, 5}, "notemplate": {0, 2},
	}
	fixtureGPUProducts = []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"}
)

type server struct {
	dir         string
	cmd         *exec.Cmd
	done        chan struct{}
	waitErr     error
	grpcAddr    string
	metricsAddr string
	stopping    bool
}

var (
	srv  *server
	conn *grpc.ClientConn
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	s, err := startServer()
	if s != nil {
		defer func() {
			if !s.stop() && srv != nil {
				fmt.Fprintln(os.Stderr, "FAIL: gangscaler exited on its own during the test run:", s.exitString())
				code = 1
			}
			if code != 0 {
				s.dumpLogs()
				fmt.Fprintln(os.Stderr, "fixture and logs kept in", s.dir)
			} else {
				os.RemoveAll(s.dir)
			}
		}()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting gangscaler:", err)
		return 1
	}
	srv = s
	conn, err = grpc.NewClient("passthrough:///"+s.grpcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithNoProxy(), // loopback only, never through an environment proxy
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: grpc.NewClient:", err)
		return 1
	}
	defer conn.Close()
	return m.Run()
}

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// freePort returns a free address on 127.0.0.1 for a server the harness starts. Ports come
// from 20000-31999, below Linux's ephemeral range (32768-60999), so a port checked and
// released here cannot be taken meanwhile as the source port of an outgoing connection (as
// a port picked by binding to :0 can). A port handed out once is never handed out again.
func freePort() (string, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for try := 0; try < 1000; try++ {
		port := 20000 + rand.IntN(12000)
		if given[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		given[port] = true
		return addr, nil
	}
	return "", errors.New("no free port in 20000-31999 after 1000 tries")
}

func binaryPath() (string, error) {
	bin := os.Getenv("GANGSCALER_BIN")
	if bin == "" {
		bin = "../../target/debug/gangscaler"
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("gangscaler binary (GANGSCALER_BIN, default ../../target/debug/gangscaler): %w", err)
	}
	return abs, nil
}

func startServer() (*server, error) {
	return startServerWith(fixtureFiles, nil)
}

// startServerWith writes files (paths relative to the config dir) into a fresh temp
// dir's config/, runs prepare(configDir) if it is non-nil (e.g. to add certificates),
// then starts `gangscaler serve` on free loopback ports and waits for /readyz.
func startServerWith(files map[string]string, prepare func(cfg string) error) (*server, error) {
	bin, err := binaryPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gangscaler-conformance-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, done: make(chan struct{})}
	cfg := filepath.Join(dir, "config")
	for name, content := range files {
		p := filepath.Join(cfg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return s, err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return s, err
		}
	}
	if prepare != nil {
		if err := prepare(cfg); err != nil {
			return s, err
		}
	}
	if s.grpcAddr, err = freePort(); err != nil {
		return s, err
	}
	if s.metricsAddr, err = freePort(); err != nil {
		return s, err
	}
	stdout, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return s, err
	}
	stderr, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return s, err
	}
	s.cmd = exec.Command(bin, "serve", "--config", cfg)
	s.cmd.Env = append(os.Environ(),
		"GANGSCALER__SERVER__ADDRESS="+s.grpcAddr,
		"GANGSCALER__SERVER__METRICS_ADDRESS="+s.metricsAddr)
	s.cmd.Stdout, s.cmd.Stderr = stdout, stderr
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return s, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		stdout.Close()
		stderr.Close()
		close(s.done)
	}()

	readyURL := "http://" + s.metricsAddr + "/readyz"
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(20 * time.Second)
	last := "no response"
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return s, fmt.Errorf("gangscaler exited before becoming ready (%s)", s.exitString())
		default:
		}
		resp, err := client.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
			last = "HTTP " + strconv.Itoa(resp.StatusCode)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s, fmt.Errorf("GET %s did not return 200 within 20s (last: %s)", readyURL, last)
}

// stop sends SIGTERM, then SIGKILL after 5 s. It returns false if the process had
// already exited on its own.
func (s *server) stop() bool {
	if s.cmd == nil || s.cmd.Process == nil {
		return true
	}
	select {
	case <-s.done:
		return false
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		fmt.Fprintf(os.Stderr, "gangscaler (pid %d) stopped after SIGTERM: %s\n", s.cmd.Process.Pid, s.exitString())
	case <-time.After(5 * time.Second):
		fmt.Fprintf(os.Stderr, "gangscaler (pid %d) ignored SIGTERM for 5s; sending SIGKILL\n", s.cmd.Process.Pid)
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return true
}

func (s *server) exitString() string {
	if s.waitErr == nil {
		return "exit status 0"
	}
	return s.waitErr.Error()
}

func (s *server) dumpLogs() {
	for _, name := range []string{"stdout.log", "stderr.log"} {
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			continue
		}
		const max = 64 << 10
		if len(b) > max {
			b = append([]byte("...(truncated)...\n"), b[len(b)-max:]...)
		}
		fmt.Fprintf(os.Stderr, "----- gangscaler %s -----\n%s\n----- end %s -----\n", name, b, name)
	}
}

// alive fails the test if the server process has died.
func alive(t *testing.T) {
	t.Helper()
	select {
	case <-srv.done:
		t.Fatalf("gangscaler process has exited: %s", srv.exitString())
	default:
	}
}

// invoke calls method with the raw request bytes and returns the raw response bytes.
func invoke(t *testing.T, method string, req pb) ([]byte, error) {
	t.Helper()
	alive(t)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	var resp []byte
	err := conn.Invoke(ctx, servicePath+method, []byte(req), &resp)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("%s: exceeded CA's default 5s grpc_timeout", method)
	}
	return resp, err
}
