// Package conformance is a wire-conformance test for gangscaler's Cluster Autoscaler
// externalgrpc CloudProvider server.
//
// This client is a STAND-IN for Cluster Autoscaler's own generated Go client
// (k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc/protos), because the
// Go module proxy available here refuses the CA module:
//
//	$ go mod download -json k8s.io/autoscaler/cluster-autoscaler@v0.0.0-20260722070747-35e8a280425c
//	"Error": "k8s.io/autoscaler/cluster-autoscaler@v0.0.0-20260722070747-35e8a280425c:
//	  reading <the Go module proxy>/k8s.io/autoscaler/cluster-autoscaler/@v/v0.0.0-20260722070747-35e8a280425c.info:
//	  403 Forbidden\n\tserver response: This module version is not available."
//
// Instead, requests are hand-encoded with google.golang.org/protobuf/encoding/protowire
// and sent through google.golang.org/grpc with a pass-through []byte codec to the exact
// method paths /clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/<Method>;
// responses are decoded with protowire against field tables transcribed from the
// UPSTREAM CA proto (wire_test.go), failing on any field number or wire type that
// upstream does not declare. Template nodes are decoded with the real Kubernetes Go
// types (k8s.io/api/core/v1 Node.Unmarshal), as CA does.
//
// Run with ./run.sh (GANGSCALER_BIN selects the server binary).
package conformance

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const unknownGroup = "no-such-group"

// ---------------------------------------------------------------------------
// Typed RPC helpers.

// rpc invokes method and decodes an OK response against s, reporting every wire
// conformance problem as a test error (assertion 12).
func rpc(t *testing.T, method string, req pb, s *schema) (*msg, error) {
	t.Helper()
	b, err := invoke(t, method, req)
	if err != nil {
		return nil, err
	}
	m, errs := decode(b, s, method)
	// Report each distinct problem once (repeated elements would repeat it).
	seen := map[string]int{}
	var order []string
	for _, e := range errs {
		if seen[e.Error()] == 0 {
			order = append(order, e.Error())
		}
		seen[e.Error()]++
	}
	for _, e := range order {
		if n := seen[e]; n > 1 {
			t.Errorf("wire conformance: %s (x%d)", e, n)
		} else {
			t.Errorf("wire conformance: %s", e)
		}
	}
	return m, nil
}

func wantCode(t *testing.T, err error, want codes.Code, what string) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != want {
		t.Errorf("%s: got status %s (%q), want %s", what, st.Code(), st.Message(), want)
	} else if want != codes.OK {
		t.Logf("%s: %s %q", what, st.Code(), st.Message())
	}
	return st
}

func mustOK(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		st := status.Convert(err)
		t.Fatalf("%s: got status %s (%q), want OK", what, st.Code(), st.Message())
	}
}

type nodeGroup struct {
	id       string
	min, max int32
	debug    string
}

func toNodeGroup(m *msg) nodeGroup {
	return nodeGroup{id: m.str(1), min: m.i32(2), max: m.i32(3), debug: m.str(4)}
}

func listGroups(t *testing.T) map[string]nodeGroup {
	t.Helper()
	m, err := rpc(t, "NodeGroups", nil, sNodeGroupsResponse)
	mustOK(t, err, "NodeGroups")
	out := map[string]nodeGroup{}
	for _, g := range m.subs(1) {
		ng := toNodeGroup(g)
		if _, dup := out[ng.id]; dup {
			t.Errorf("NodeGroups: duplicate group id %q", ng.id)
		}
		out[ng.id] = ng
	}
	return out
}

func targetSize(t *testing.T, id string) (int32, error) {
	t.Helper()
	m, err := rpc(t, "NodeGroupTargetSize", pb(nil).str(1, id), sTargetSizeResponse)
	if err != nil {
		return 0, err
	}
	return m.i32(1), nil
}

func mustTarget(t *testing.T, id string) int32 {
	t.Helper()
	n, err := targetSize(t, id)
	mustOK(t, err, "NodeGroupTargetSize("+id+")")
	return n
}

func increase(t *testing.T, id string, delta int32) error {
	t.Helper()
	_, err := rpc(t, "NodeGroupIncreaseSize", pb(nil).i32(1, delta).str(2, id), sEmpty)
	return err
}

func decrease(t *testing.T, id string, delta int32) error {
	t.Helper()
	_, err := rpc(t, "NodeGroupDecreaseTargetSize", pb(nil).i32(1, delta).str(2, id), sEmpty)
	return err
}

func deleteNodes(t *testing.T, id string, nodes ...pb) error {
	t.Helper()
	var req pb
	for _, n := range nodes {
		req = req.msg(1, n)
	}
	req = req.str(2, id)
	_, err := rpc(t, "NodeGroupDeleteNodes", req, sEmpty)
	return err
}

const (
	stateUnspecified = 0
	stateRunning     = 1
	stateCreating    = 2
	stateDeleting    = 3
)

type instance struct {
	id            string
	statusPresent bool
	state         int32
	errPresent    bool
	errCode       string
	errMsg        string
	errClass      int32
}

// failed reports whether CA would treat the instance as a failed creation
// (state instanceCreating with errorInfo.errorCode != "").
func (i instance) failed() bool { return i.state == stateCreating && i.errCode != "" }

func nodesOf(t *testing.T, id string) ([]instance, error) {
	t.Helper()
	m, err := rpc(t, "NodeGroupNodes", pb(nil).str(1, id), sNodeGroupNodesResonse)
	if err != nil {
		return nil, err
	}
	var out []instance
	for _, im := range m.subs(1) {
		in := instance{id: im.str(1), statusPresent: im.has(2)}
		if st := im.sub(2); st != nil {
			in.state = st.i32(1)
			if ei := st.sub(2); ei != nil {
				in.errPresent = true
				in.errCode, in.errMsg, in.errClass = ei.str(1), ei.str(2), ei.i32(3)
			}
		}
		out = append(out, in)
	}
	return out, nil
}

func mustNodes(t *testing.T, id string) []instance {
	t.Helper()
	ins, err := nodesOf(t, id)
	mustOK(t, err, "NodeGroupNodes("+id+")")
	return ins
}

func ids(ins []instance) []string {
	var out []string
	for _, i := range ins {
		out = append(out, i.id)
	}
	return out
}

func containsID(ins []instance, id string) bool {
	for _, i := range ins {
		if i.id == id {
			return true
		}
	}
	return false
}

// eventually polls cond every 50 ms for up to d; it returns cond's last result.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ensureInstance returns an instance of group id, scaling it up by one if it has none.
func ensureInstance(t *testing.T, id string) instance {
	t.Helper()
	ins := mustNodes(t, id)
	if len(ins) == 0 {
		mustOK(t, increase(t, id, 1), "NodeGroupIncreaseSize("+id+", 1)")
		if !eventually(2*time.Second, func() bool { ins = mustNodes(t, id); return len(ins) > 0 }) {
			t.Fatalf("group %s: no instance listed after IncreaseSize(1)", id)
		}
	}
	return ins[0]
}

// lastSegment is the node name the memory backend gives an instance
// (gangscaler-memory://<group>/<group>-<n> -> <group>-<n>).
func lastSegment(id string) string { return id[strings.LastIndex(id, "/")+1:] }

func forNode(t *testing.T, node pb) (nodeGroup, bool, error) {
	t.Helper()
	m, err := rpc(t, "NodeGroupForNode", pb(nil).msg(1, node), sNodeGroupForNodeResponse)
	if err != nil {
		return nodeGroup{}, false, err
	}
	g := m.sub(1)
	return toNodeGroup(g), g != nil, nil
}

const fakeNodeReasonAnnotation = "k8s.io/cluster-autoscaler/fake-node-reason"

// caFakeNode is what CA sends for an instance without a registered node.
func caFakeNode(instanceID, reason string) pb {
	return grpcNode(instanceID, instanceID, nil, map[string]string{fakeNodeReasonAnnotation: reason})
}

// realNode is what CA sends for a registered Kubernetes node.
func realNode(providerID, name string) pb {
	return grpcNode(providerID, name, map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}, nil)
}

func nodePrice(t *testing.T, req pb) (float64, error) {
	t.Helper()
	m, err := rpc(t, "PricingNodePrice", req, sPriceResponse)
	if err != nil {
		return 0, err
	}
	return m.dbl(1), nil
}

func mentionsNumber(s string, n int32) bool {
	return regexp.MustCompile(`(^|[^0-9])` + strconv.Itoa(int(n)) + `([^0-9]|$)`).MatchString(s)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// ---------------------------------------------------------------------------
// Tests. They run in source order and share one server; each mutating test works on
// its own node groups (see fixtureFiles) so that results do not depend on each other.

// Assertion 1.
func TestNodeGroups(t *testing.T) {
	groups := listGroups(t)
	var got, want []string
	for id := range groups {
		got = append(got, id)
	}
	for id := range fixtureGroups {
		want = append(want, id)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("NodeGroups ids = %v, want %v", got, want)
	}
	for id, mm := range fixtureGroups {
		g, ok := groups[id]
		if !ok {
			continue
		}
		if g.min != mm[0] || g.max != mm[1] {
			t.Errorf("NodeGroups %s: min/max = %d/%d, want %d/%d", id, g.min, g.max, mm[0], mm[1])
		}
		t.Logf("group %s debug=%q", id, g.debug)
	}
}

// Assertion 5.
func TestNodeGroupTargetSize(t *testing.T) {
	for id, mm := range fixtureGroups {
		if got := mustTarget(t, id); got != mm[0] {
			t.Errorf("initial NodeGroupTargetSize(%s) = %d, want minSize %d", id, got, mm[0])
		}
	}
	_, err := targetSize(t, unknownGroup)
	wantCode(t, err, codes.NotFound, "NodeGroupTargetSize(unknown group)")
}

// Assertion 4.
func TestGPULabelAndTypes(t *testing.T) {
	m, err := rpc(t, "GPULabel", nil, sGPULabelResponse)
	mustOK(t, err, "GPULabel")
	if got := m.str(1); got != "nvidia.com/gpu.product" {
		t.Errorf("GPULabel = %q, want nvidia.com/gpu.product", got)
	}

	m, err = rpc(t, "GetAvailableGPUTypes", nil, sGPUTypesResponse)
	mustOK(t, err, "GetAvailableGPUTypes")
	var keys []string
	for _, e := range m.subs(1) {
		keys = append(keys, e.str(1))
	}
	sort.Strings(keys)
	want := append([]string(nil), fixtureGPUProducts...)
	sort.Strings(want)
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("GetAvailableGPUTypes keys = %q, want %q", keys, want)
	}
}

// Assertion 4.
func TestRefreshAndPodPrice(t *testing.T) {
	_, err := rpc(t, "Refresh", nil, sEmpty)
	mustOK(t, err, "Refresh")

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	podBytes, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := pb(nil).msg(4, podBytes).msg(5, timestamp(start)).msg(6, timestamp(start.Add(time.Hour)))
	_, err = rpc(t, "PricingPodPrice", req, sPriceResponse)
	wantCode(t, err, codes.Unimplemented, "PricingPodPrice")
}

// Assertion 6 (on gpu-a).
func TestNodeGroupIncreaseSize(t *testing.T) {
	const id = "gpu-a"
	maxSize := fixtureGroups[id][1]
	before := mustTarget(t, id)

	for _, d := range []int32{0, -1} {
		st := wantCode(t, increase(t, id, d), codes.InvalidArgument, "IncreaseSize(gpu-a, "+itoa(d)+")")
		if st.Code() == codes.InvalidArgument && !strings.Contains(st.Message(), id) {
			t.Errorf("IncreaseSize(gpu-a, %d): message %q does not name the group", d, st.Message())
		}
	}
	if got := mustTarget(t, id); got != before {
		t.Errorf("target changed after rejected increases: %d -> %d", before, got)
	}

	st := wantCode(t, increase(t, unknownGroup, 1), codes.NotFound, "IncreaseSize(unknown group)")
	if st.Code() == codes.NotFound && !strings.Contains(st.Message(), unknownGroup) {
		t.Errorf("IncreaseSize(unknown): message %q does not name the group", st.Message())
	}

	mustOK(t, increase(t, id, 1), "IncreaseSize(gpu-a, 1)")
	cur := mustTarget(t, id)
	if cur != before+1 {
		t.Errorf("TargetSize right after IncreaseSize(1) = %d, want %d", cur, before+1)
	}

	// Past maxSize: delta chosen so that delta, max and the resulting size are distinct numbers.
	delta := maxSize - cur + 2
	st = wantCode(t, increase(t, id, delta), codes.FailedPrecondition, "IncreaseSize past maxSize")
	if st.Code() == codes.FailedPrecondition {
		msgText := st.Message()
		if !strings.Contains(msgText, id) {
			t.Errorf("past-max message %q does not name the group", msgText)
		}
		if !mentionsNumber(msgText, maxSize) {
			t.Errorf("past-max message %q does not mention maxSize %d", msgText, maxSize)
		}
		if !mentionsNumber(msgText, delta) && !mentionsNumber(msgText, cur+delta) {
			t.Errorf("past-max message %q mentions neither the delta %d nor the requested size %d", msgText, delta, cur+delta)
		}
	}
	if got := mustTarget(t, id); got != cur {
		t.Errorf("target changed after past-max increase: %d -> %d", cur, got)
	}
}

// Assertion 7.
func TestNodeGroupNodes(t *testing.T) {
	all := map[string]string{}
	record := func(group string, ins []instance) {
		for _, i := range ins {
			if i.id == "" || lastSegment(i.id) == "" {
				t.Errorf("group %s: instance id %q is empty or has an empty last path segment", group, i.id)
			}
			if g, dup := all[i.id]; dup && g != group {
				t.Errorf("instance id %q listed by both %s and %s", i.id, g, group)
			}
			all[i.id] = group
			if !i.statusPresent {
				t.Errorf("group %s: instance %q has no status (CA would treat it as status nil)", group, i.id)
			}
		}
	}

	t.Run("gpu-a provisionDelay=1h is instanceCreating", func(t *testing.T) {
		ensureInstance(t, "gpu-a")
		ins := mustNodes(t, "gpu-a")
		record("gpu-a", ins)
		if tgt := mustTarget(t, "gpu-a"); int32(len(ins)) != tgt {
			t.Errorf("gpu-a lists %d instances, target is %d (createDelay 0s: capacity is created at once)", len(ins), tgt)
		}
		for _, i := range ins {
			if i.state != stateCreating {
				t.Errorf("gpu-a instance %s state = %d, want instanceCreating (2)", i.id, i.state)
			}
			if i.errCode != "" || i.errMsg != "" {
				t.Errorf("gpu-a instance %s has errorInfo {%q, %q, %d}, want none", i.id, i.errCode, i.errMsg, i.errClass)
			} else if i.errPresent {
				t.Logf("note: gpu-a instance %s carries an empty errorInfo message (CA ignores it)", i.id)
			}
			if !strings.HasPrefix(i.id, "gangscaler-memory://gpu-a/") {
				t.Logf("note: instance id %q does not look like gangscaler-memory://gpu-a/<name>", i.id)
			}
		}
	})

	t.Run("cpu-b provisionDelay=0s is instanceRunning", func(t *testing.T) {
		var ins []instance
		ok := eventually(2*time.Second, func() bool {
			ins = mustNodes(t, "cpu-b")
			if len(ins) == 0 {
				return false
			}
			for _, i := range ins {
				if i.state != stateRunning {
					return false
				}
			}
			return true
		})
		record("cpu-b", ins)
		if tgt := mustTarget(t, "cpu-b"); int32(len(ins)) != tgt {
			t.Errorf("cpu-b lists %d instances %v, target is %d", len(ins), ids(ins), tgt)
		}
		if !ok {
			for _, i := range ins {
				t.Errorf("cpu-b instance %s state = %d, want instanceRunning (1)", i.id, i.state)
			}
		}
		for _, i := range ins {
			if i.errCode != "" {
				t.Errorf("cpu-b instance %s has errorInfo code %q", i.id, i.errCode)
			}
		}
	})

	t.Run("stock failure afterInstances=1", func(t *testing.T) {
		before := mustTarget(t, "stock")
		mustOK(t, increase(t, "stock", 2), "IncreaseSize(stock, 2)")
		if got := mustTarget(t, "stock"); got != before+2 {
			t.Errorf("stock target = %d, want %d", got, before+2)
		}
		var ins []instance
		var good, bad []instance
		eventually(3*time.Second, func() bool {
			ins = mustNodes(t, "stock")
			good, bad = nil, nil
			for _, i := range ins {
				if i.failed() {
					bad = append(bad, i)
				} else {
					good = append(good, i)
				}
			}
			return len(good) == 1 && len(bad) == 1
		})
		record("stock", ins)
		if len(good) != 1 || len(bad) != 1 {
			t.Fatalf("stock instances = %+v, want one healthy and one instanceCreating+errorInfo", ins)
		}
		g, b := good[0], bad[0]
		if g.state != stateRunning && g.state != stateCreating {
			t.Errorf("healthy stock instance %s state = %d, want 1 or 2", g.id, g.state)
		}
		if g.errCode != "" {
			t.Errorf("healthy stock instance %s has errorCode %q", g.id, g.errCode)
		}
		if b.errCode != "stockout" {
			t.Errorf("failed instance errorCode = %q, want stockout", b.errCode)
		}
		if b.errClass != 1 {
			t.Errorf("failed instance instanceErrorClass = %d, want 1 (OutOfResources)", b.errClass)
		}
		if b.errMsg == "" {
			t.Errorf("failed instance has an empty errorMessage")
		}
		t.Logf("failed instance: %+v", b)
	})

	t.Run("unknown group", func(t *testing.T) {
		_, err := nodesOf(t, unknownGroup)
		wantCode(t, err, codes.NotFound, "NodeGroupNodes(unknown group)")
	})
}

// Assertion 2.
func TestNodeGroupForNode(t *testing.T) {
	groups := listGroups(t)

	check := func(what string, node pb, wantID string) {
		t.Helper()
		g, present, err := forNode(t, node)
		if err != nil {
			wantCode(t, err, codes.OK, what)
			return
		}
		if g.id != wantID {
			t.Errorf("%s: NodeGroupForNode id = %q, want %q", what, g.id, wantID)
			return
		}
		if wantID == "" {
			t.Logf("%s: unmanaged (nodeGroup message present=%v)", what, present)
			return
		}
		if ref := groups[wantID]; g.min != ref.min || g.max != ref.max {
			t.Errorf("%s: min/max = %d/%d, NodeGroups says %d/%d", what, g.min, g.max, ref.min, ref.max)
		}
	}

	check("unknown node", realNode("aws:///us-east-1a/i-0123456789abcdef0", "ip-10-0-0-1.ec2.internal"), "")
	check("unknown node without providerID", realNode("", "control-plane-0"), "")

	for _, group := range []string{"gpu-a", "cpu-b"} {
		inst := ensureInstance(t, group)
		name := lastSegment(inst.id)
		check(group+": providerID only", grpcNode(inst.id, "", nil, nil), group)
		check(group+": registered node", realNode(inst.id, name), group)
		check(group+": CA fake node (unregistered)", caFakeNode(inst.id, "unregistered"), group)
		check(group+": CA fake node (create-error)", caFakeNode(inst.id, "create-error"), group)
		check(group+": name fallback, empty providerID", realNode("", name), group)
	}
}

// Assertion 3.
func TestPricingNodePrice(t *testing.T) {
	const hourly = 98.32
	inst := ensureInstance(t, "gpu-a")
	node := realNode(inst.id, lastSegment(inst.id))
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	want := 2 * hourly

	checkPrice := func(what string, req pb) {
		t.Helper()
		got, err := nodePrice(t, req)
		if err != nil {
			wantCode(t, err, codes.OK, what)
			return
		}
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: price = %.9f, want %.9f (2h x %.2f/h)", what, got, want, hourly)
		}
	}
	checkPrice("new fields 4/5", pb(nil).msg(1, node).msg(4, timestamp(start)).msg(5, timestamp(end)))
	checkPrice("legacy fields 2/3 only", pb(nil).msg(1, node).msg(2, timestamp(start)).msg(3, timestamp(end)))
	checkPrice("both (CA 1.34.2 peer fields)", pb(nil).msg(1, node).msg(2, timestamp(start)).msg(3, timestamp(end)).
		msg(4, timestamp(start)).msg(5, timestamp(end)))

	cpu := ensureInstance(t, "cpu-b")
	_, err := nodePrice(t, pb(nil).msg(1, realNode(cpu.id, lastSegment(cpu.id))).msg(4, timestamp(start)).msg(5, timestamp(end)))
	wantCode(t, err, codes.Unimplemented, "PricingNodePrice(group without price)")

	_, err = nodePrice(t, pb(nil).msg(1, realNode("aws:///us-east-1a/i-0123456789abcdef0", "ip-10-0-0-1")).
		msg(4, timestamp(start)).msg(5, timestamp(end)))
	wantCode(t, err, codes.NotFound, "PricingNodePrice(unmanaged node)")

	_, err = nodePrice(t, pb(nil).msg(1, node).msg(4, timestamp(end)).msg(5, timestamp(start)))
	wantCode(t, err, codes.InvalidArgument, "PricingNodePrice(end before start)")
}

// Assertion 8.
func TestNodeGroupDeleteNodes(t *testing.T) {
	t.Run("cpu-b", func(t *testing.T) {
		const id = "cpu-b"
		minSize := fixtureGroups[id][0]
		t0 := mustTarget(t, id)
		if t0 != minSize {
			t.Fatalf("cpu-b target = %d, expected to start at minSize %d", t0, minSize)
		}
		own := ensureInstance(t, id)
		foreign := ensureInstance(t, "gpu-a")

		err := deleteNodes(t, id, realNode(foreign.id, lastSegment(foreign.id)))
		wantCode(t, err, codes.InvalidArgument, "DeleteNodes(cpu-b, node of gpu-a)")
		err = deleteNodes(t, id, realNode("aws:///us-east-1a/i-0123456789abcdef0", "ip-10-0-0-1"))
		wantCode(t, err, codes.InvalidArgument, "DeleteNodes(cpu-b, unknown node)")
		if got := mustTarget(t, id); got != t0 {
			t.Errorf("target changed after rejected deletes: %d -> %d", t0, got)
		}
		if !containsID(mustNodes(t, "gpu-a"), foreign.id) {
			t.Errorf("gpu-a instance %s vanished after being offered to DeleteNodes(cpu-b)", foreign.id)
		}

		err = deleteNodes(t, id, realNode(own.id, lastSegment(own.id)))
		wantCode(t, err, codes.FailedPrecondition, "DeleteNodes(cpu-b) below minSize")
		if got := mustTarget(t, id); got != t0 {
			t.Errorf("target changed after below-min delete: %d -> %d", t0, got)
		}
		if !containsID(mustNodes(t, id), own.id) {
			t.Errorf("instance %s vanished after a rejected below-min delete", own.id)
		}

		mustOK(t, increase(t, id, 1), "IncreaseSize(cpu-b, 1)")
		var ins []instance
		if !eventually(2*time.Second, func() bool { ins = mustNodes(t, id); return len(ins) == int(t0)+1 }) {
			t.Fatalf("cpu-b lists %v after IncreaseSize, want %d instances", ids(ins), t0+1)
		}
		victim := ins[len(ins)-1]
		mustOK(t, deleteNodes(t, id, grpcNode(victim.id, "", nil, nil)), "DeleteNodes(cpu-b, by providerID)")
		if got := mustTarget(t, id); got != t0 {
			t.Errorf("target after deleting one node = %d, want %d", got, t0)
		}
		if after := mustNodes(t, id); containsID(after, victim.id) {
			t.Errorf("deleted instance %s still listed: %+v", victim.id, after)
		}
	})

	t.Run("stock errored instance", func(t *testing.T) {
		const id = "stock"
		var bad *instance
		for _, i := range mustNodes(t, id) {
			if i.failed() {
				bad = &i
				break
			}
		}
		if bad == nil {
			t.Skip("no errored stock instance (see TestNodeGroupNodes/stock)")
		}
		t0 := mustTarget(t, id)
		mustOK(t, deleteNodes(t, id, caFakeNode(bad.id, "create-error")), "DeleteNodes(stock, create-error fake node)")
		if got := mustTarget(t, id); got != t0-1 {
			t.Errorf("stock target after deleting errored instance = %d, want %d", got, t0-1)
		}
		if containsID(mustNodes(t, id), bad.id) {
			t.Errorf("deleted errored instance %s still listed", bad.id)
		}
	})

	t.Run("stockmin errored instance at minSize", func(t *testing.T) {
		// The instances gangscaler starts a group with (minSize) are healthy; failure
		// injection applies to instances created later. So: scale up once (that instance
		// fails), delete the healthy one (target == minSize), then the errored one.
		const id = "stockmin"
		minSize := fixtureGroups[id][0]
		if t0 := mustTarget(t, id); t0 != minSize {
			t.Fatalf("stockmin target = %d, expected to start at minSize %d", t0, minSize)
		}
		mustOK(t, increase(t, id, 1), "IncreaseSize(stockmin, 1)")
		var ins, good, bad []instance
		eventually(3*time.Second, func() bool {
			ins = mustNodes(t, id)
			good, bad = nil, nil
			for _, i := range ins {
				if i.failed() {
					bad = append(bad, i)
				} else {
					good = append(good, i)
				}
			}
			return len(good) == int(minSize) && len(bad) == 1
		})
		if len(good) != int(minSize) || len(bad) != 1 {
			t.Fatalf("stockmin after IncreaseSize(1) lists %+v; want %d healthy and 1 instanceCreating+errorInfo", ins, minSize)
		}
		mustOK(t, deleteNodes(t, id, realNode(good[0].id, lastSegment(good[0].id))), "DeleteNodes(stockmin, healthy instance)")
		if got := mustTarget(t, id); got != minSize {
			t.Fatalf("stockmin target after deleting the healthy instance = %d, want minSize %d", got, minSize)
		}
		mustOK(t, deleteNodes(t, id, caFakeNode(bad[0].id, "create-error")), "DeleteNodes(stockmin, errored instance at minSize)")
		if got := mustTarget(t, id); got != minSize-1 {
			t.Errorf("stockmin target after deleting the errored instance = %d, want %d", got, minSize-1)
		}
		if containsID(mustNodes(t, id), bad[0].id) {
			t.Errorf("deleted errored instance %s still listed", bad[0].id)
		}
	})

	t.Run("unknown group", func(t *testing.T) {
		err := deleteNodes(t, unknownGroup, realNode("aws:///x/i-1", "n1"))
		wantCode(t, err, codes.NotFound, "DeleteNodes(unknown group)")
	})
}

// Assertion 9.
func TestNodeGroupDecreaseTargetSize(t *testing.T) {
	t.Run("lazy createDelay=1h", func(t *testing.T) {
		const id = "lazy"
		for _, d := range []int32{0, 1} {
			wantCode(t, decrease(t, id, d), codes.InvalidArgument, "DecreaseTargetSize(lazy, "+itoa(d)+")")
		}
		t0 := mustTarget(t, id)
		mustOK(t, increase(t, id, 2), "IncreaseSize(lazy, 2)")
		if got := mustTarget(t, id); got != t0+2 {
			t.Fatalf("lazy target = %d, want %d", got, t0+2)
		}
		t.Logf("lazy lists %d instances with target %d", len(mustNodes(t, id)), t0+2)
		mustOK(t, decrease(t, id, -1), "DecreaseTargetSize(lazy, -1)")
		if got := mustTarget(t, id); got != t0+1 {
			t.Errorf("lazy target after DecreaseTargetSize(-1) = %d, want %d", got, t0+1)
		}
		wantCode(t, decrease(t, id, -5), codes.FailedPrecondition, "DecreaseTargetSize(lazy, -5)")
		if got := mustTarget(t, id); got != t0+1 {
			t.Errorf("lazy target after rejected DecreaseTargetSize(-5) = %d, want %d", got, t0+1)
		}
	})

	for _, id := range []string{"gpu-a", "cpu-b"} {
		t.Run(id+" all capacity created", func(t *testing.T) {
			ensureInstance(t, id)
			t0 := mustTarget(t, id)
			wantCode(t, decrease(t, id, -1), codes.FailedPrecondition, "DecreaseTargetSize("+id+", -1)")
			if got := mustTarget(t, id); got != t0 {
				t.Errorf("%s target changed after rejected decrease: %d -> %d", id, t0, got)
			}
		})
	}

	t.Run("unknown group", func(t *testing.T) {
		wantCode(t, decrease(t, unknownGroup, -1), codes.NotFound, "DecreaseTargetSize(unknown group)")
	})
}

// Assertion 10.
func TestNodeGroupTemplateNodeInfo(t *testing.T) {
	template := func(id string) (*msg, error) {
		return rpc(t, "NodeGroupTemplateNodeInfo", pb(nil).str(1, id), sTemplateResponse)
	}
	_, err := template("notemplate")
	wantCode(t, err, codes.Unimplemented, "NodeGroupTemplateNodeInfo(group without capacity)")
	_, err = template(unknownGroup)
	wantCode(t, err, codes.NotFound, "NodeGroupTemplateNodeInfo(unknown group)")

	t.Run("gpu-a", func(t *testing.T) {
		m, err := template("gpu-a")
		mustOK(t, err, "NodeGroupTemplateNodeInfo(gpu-a)")
		if !m.has(1) || !m.has(2) {
			t.Fatalf("template response has field 1: %v, field 2: %v; want both", m.has(1), m.has(2))
		}
		legacy, nodeBytes := m.bytes(1), m.bytes(2)
		if string(legacy) != string(nodeBytes) {
			t.Errorf("field 1 (%d bytes) and field 2 (%d bytes) differ", len(legacy), len(nodeBytes))
		}
		if m.has(3) {
			t.Errorf("field 3 resourceSliceBytes present (%d entries), want absent", len(m.bytesList(3)))
		}
		var legacyNode v1.Node
		if err := legacyNode.Unmarshal(legacy); err != nil {
			t.Errorf("field 1 does not decode as v1.Node: %v", err)
		}
		var node v1.Node
		if err := node.Unmarshal(nodeBytes); err != nil {
			t.Fatalf("field 2 does not decode as v1.Node: %v", err)
		}
		checkQuantityStrings(t, nodeBytes)

		wantRes := map[v1.ResourceName]string{
			"cpu": "192", "memory": "2048Gi", "ephemeral-storage": "7600Gi", "pods": "110",
			"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8", "gangscaler.io/rdma-gbps": "3200",
		}
		exact := map[v1.ResourceName]bool{"nvidia.com/gpu": true, "rdma/rdma_shared_device_a": true, "gangscaler.io/rdma-gbps": true}
		for name, ws := range wantRes {
			w := resource.MustParse(ws)
			c, ok := node.Status.Capacity[name]
			if !ok {
				t.Errorf("status.capacity lacks %s", name)
			} else if c.Cmp(w) != 0 {
				t.Errorf("status.capacity[%s] = %s, want %s", name, c.String(), ws)
			}
			a, ok := node.Status.Allocatable[name]
			switch {
			case !ok:
				t.Errorf("status.allocatable lacks %s", name)
			case exact[name] && a.Cmp(w) != 0:
				t.Errorf("status.allocatable[%s] = %s, want %s", name, a.String(), ws)
			case a.Sign() <= 0 || a.Cmp(w) > 0:
				t.Errorf("status.allocatable[%s] = %s, want > 0 and <= capacity %s", name, a.String(), ws)
			}
		}

		wantLabels := map[string]string{
			"kubernetes.io/os":                 "linux",
			"kubernetes.io/arch":               "amd64",
			"node.kubernetes.io/instance-type": "p5.48xlarge",
			"topology.kubernetes.io/zone":      "us-east-1a",
			"topology.kubernetes.io/region":    "us-east-1",
			"nvidia.com/gpu.product":           "NVIDIA-H100-80GB-HBM3",
			"nvidia.com/gpu.count":             "8",
			"nvidia.com/gpu.memory":            "81559",
			"gangscaler.io/pool":               "h100",
			"topology.gangscaler.io/block":     "block-a",
		}
		for k, v := range wantLabels {
			if got, ok := node.Labels[k]; !ok || got != v {
				t.Errorf("label %s = %q (present=%v), want %q", k, got, ok, v)
			}
		}

		foundTaint := false
		for _, tn := range node.Spec.Taints {
			if tn.Key == "nvidia.com/gpu" && tn.Value == "present" && tn.Effect == v1.TaintEffectNoSchedule {
				foundTaint = true
			}
		}
		if !foundTaint {
			t.Errorf("spec.taints = %+v, want nvidia.com/gpu=present:NoSchedule", node.Spec.Taints)
		}

		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			t.Errorf("status.conditions = %+v, want Ready=True", node.Status.Conditions)
		}

		if got := node.Annotations["gangscaler.io/csi-attach-limits"]; got != "ebs.csi.aws.com=4" {
			t.Errorf("annotation gangscaler.io/csi-attach-limits = %q, want ebs.csi.aws.com=4", got)
		}
		t.Logf("template node name=%q providerID=%q labels=%d taints=%d conditions=%d",
			node.Name, node.Spec.ProviderID, len(node.Labels), len(node.Spec.Taints), len(node.Status.Conditions))
	})

	t.Run("cpu-b", func(t *testing.T) {
		m, err := template("cpu-b")
		mustOK(t, err, "NodeGroupTemplateNodeInfo(cpu-b)")
		var node v1.Node
		if err := node.Unmarshal(m.bytes(2)); err != nil {
			t.Fatalf("field 2 does not decode as v1.Node: %v", err)
		}
		checkQuantityStrings(t, m.bytes(2))
		if c := node.Status.Capacity["cpu"]; c.Cmp(resource.MustParse("32")) != 0 {
			t.Errorf("cpu-b capacity cpu = %s, want 32", c.String())
		}
		if _, ok := node.Status.Capacity["nvidia.com/gpu"]; ok {
			t.Errorf("cpu-b (no gpu) template advertises nvidia.com/gpu")
		}
		if _, ok := node.Labels["nvidia.com/gpu.product"]; ok {
			t.Errorf("cpu-b (no gpu) template carries the GPU label")
		}
	})
}

// checkQuantityStrings walks Node.status (3) capacity (1) and allocatable (2) map
// entries on the wire and parses every Quantity string (entry field 2, Quantity field 1).
func checkQuantityStrings(t *testing.T, nodeBytes []byte) {
	t.Helper()
	for _, mapField := range []struct {
		num  int
		name string
	}{{1, "capacity"}, {2, "allocatable"}} {
		entries, err := walkPath(nodeBytes, 3, protowire.Number(mapField.num))
		if err != nil {
			t.Errorf("walking status.%s: %v", mapField.name, err)
			continue
		}
		if len(entries) == 0 {
			t.Errorf("status.%s is empty", mapField.name)
		}
		for _, e := range entries {
			keys, _ := walkPath(e, 1)
			vals, err := walkPath(e, 2, 1)
			if err != nil || len(keys) != 1 || len(vals) != 1 {
				t.Errorf("status.%s: malformed map entry (err=%v keys=%d quantity strings=%d)", mapField.name, err, len(keys), len(vals))
				continue
			}
			if _, err := resource.ParseQuantity(string(vals[0])); err != nil {
				t.Errorf("status.%s[%s] = %q does not parse: %v", mapField.name, keys[0], vals[0], err)
			}
		}
	}
}

// Assertion 11.
func TestNodeGroupGetOptions(t *testing.T) {
	options := func(id string, defaults pb) (*msg, error) {
		return rpc(t, "NodeGroupGetOptions", pb(nil).str(1, id).msg(2, defaults), sOptionsResponse)
	}
	// CA >= 1.35 defaults as CA fills them (6, 7 false -> not encoded).
	newDefaults := pb(nil).dbl(1, 0.5).dbl(2, 0.5).
		msg(8, duration(10*time.Minute)).msg(9, duration(20*time.Minute)).
		msg(10, duration(15*time.Minute)).msg(11, duration(15*time.Minute))

	t.Run("no overrides", func(t *testing.T) {
		m, err := options("notemplate", newDefaults)
		mustOK(t, err, "NodeGroupGetOptions(notemplate)")
		if m.has(1) {
			t.Errorf("group without overrides: response carries nodeGroupAutoscalingOptions; want empty response")
		}
	})

	checkGPUA := func(t *testing.T, m *msg, wantStartup bool) {
		t.Helper()
		o := m.sub(1)
		if o == nil {
			t.Fatalf("gpu-a: response lacks nodeGroupAutoscalingOptions (field 1)")
		}
		if got := o.dbl(1); got != 0.3 {
			t.Errorf("scaleDownUtilizationThreshold = %v, want 0.3 (override)", got)
		}
		if got := o.dbl(2); got != 0.5 {
			t.Errorf("scaleDownGpuUtilizationThreshold = %v, want 0.5 (echoed)", got)
		}
		if o.boolean(6) || o.boolean(7) || o.boolean(12) {
			t.Errorf("bools 6/7/12 = %v/%v/%v, want false", o.boolean(6), o.boolean(7), o.boolean(12))
		}
		want := map[int]time.Duration{8: 20 * time.Minute, 9: 20 * time.Minute, 10: 15 * time.Minute}
		if wantStartup {
			want[11] = 15 * time.Minute
		}
		for n, w := range want {
			d := o.sub(protowire.Number(n))
			if d == nil {
				t.Errorf("field %d absent, want %v", n, w)
			} else if got := durationValue(d); got != w {
				t.Errorf("field %d = %v, want %v", n, got, w)
			}
		}
		for legacy, modern := range map[int]int{3: 8, 4: 9, 5: 10} {
			l := o.sub(protowire.Number(legacy))
			if l == nil {
				t.Errorf("legacy duration field %d absent, want %v in nanoseconds", legacy, want[modern])
			} else if got := time.Duration(l.i64(1)); got != want[modern] {
				t.Errorf("legacy field %d = %d ns (%v), want %d ns (field %d)", legacy, int64(got), got, int64(want[modern]), modern)
			}
		}
	}

	t.Run("gpu-a overrides", func(t *testing.T) {
		m, err := options("gpu-a", newDefaults)
		mustOK(t, err, "NodeGroupGetOptions(gpu-a)")
		checkGPUA(t, m, true)
	})

	// Beyond the brief's list: CA 1.30-1.34.1 send durations only in legacy fields 3-5
	// (meta.v1.Duration, ns). A server that reads only 8-10 would echo 0 for
	// MaxNodeProvisionTime, the #5935 trap (CA deletes booting nodes at once).
	t.Run("gpu-a legacy-only defaults (CA <= 1.34.1)", func(t *testing.T) {
		legacyDefaults := pb(nil).dbl(1, 0.5).dbl(2, 0.5).
			msg(3, pb(nil).i64(1, int64(10*time.Minute))).
			msg(4, pb(nil).i64(1, int64(20*time.Minute))).
			msg(5, pb(nil).i64(1, int64(15*time.Minute)))
		m, err := options("gpu-a", legacyDefaults)
		mustOK(t, err, "NodeGroupGetOptions(gpu-a, legacy defaults)")
		checkGPUA(t, m, false)
	})

	t.Run("unknown group", func(t *testing.T) {
		_, err := options(unknownGroup, newDefaults)
		wantCode(t, err, codes.NotFound, "NodeGroupGetOptions(unknown group)")
	})
}

// Assertion 4; last, because CA calls Cleanup on exit.
func TestCleanup(t *testing.T) {
	_, err := rpc(t, "Cleanup", nil, sEmpty)
	mustOK(t, err, "Cleanup")
}
