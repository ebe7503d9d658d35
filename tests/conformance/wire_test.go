package conformance

// Hand-rolled protobuf wire handling for the externalgrpc contract: a pass-through
// gRPC codec, a tiny request encoder and a schema-checking response decoder.
//
// The schemas below are written from the UPSTREAM Cluster Autoscaler proto
// (cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto, current
// CA >= 1.35 plus the legacy CA <= 1.34 fields and the two open proposals the brief
// names), not from gangscaler's own proto, so that a drift in gangscaler's schema
// shows up here as a wrong field number or wire type.

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ---------------------------------------------------------------------------
// gRPC codec: []byte in, []byte out.

type rawCodec struct{}

// Name is "proto" so that the call looks exactly like a generated-client call
// (content-type application/grpc, grpc-encoding of the payload unchanged).
func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	switch b := v.(type) {
	case []byte:
		return b, nil
	case pb:
		return []byte(b), nil
	case *[]byte:
		return *b, nil
	}
	return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*p = append([]byte(nil), data...)
	return nil
}

// ---------------------------------------------------------------------------
// Request encoding. Proto3 semantics: scalar zero values are not written.

type pb []byte

func (b pb) str(n protowire.Number, s string) pb {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// i32 encodes an int32 the way protobuf does: negative values are sign-extended
// to 64 bits (10-byte varint).
func (b pb) i32(n protowire.Number, v int32) pb {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(v)))
}

func (b pb) i64(n protowire.Number, v int64) pb {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func (b pb) boolean(n protowire.Number, v bool) pb {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

func (b pb) dbl(n protowire.Number, v float64) pb {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// msg always writes the sub-message (message fields have presence).
func (b pb) msg(n protowire.Number, sub pb) pb {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, sub)
}

// strMap writes a map<string,string> as repeated entries {1 key, 2 value}, keys sorted.
func (b pb) strMap(n protowire.Number, m map[string]string) pb {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = b.msg(n, pb(nil).str(1, k).str(2, m[k]))
	}
	return b
}

// grpcNode encodes an ExternalGrpcNode {1 providerID, 2 name, 3 labels, 4 annotations}.
func grpcNode(providerID, name string, labels, annotations map[string]string) pb {
	return pb(nil).str(1, providerID).str(2, name).strMap(3, labels).strMap(4, annotations)
}

// timestamp encodes google.protobuf.Timestamp / meta.v1.Time: {1 int64 seconds, 2 int32 nanos}.
func timestamp(t time.Time) pb {
	return pb(nil).i64(1, t.Unix()).i32(2, int32(t.Nanosecond()))
}

// duration encodes google.protobuf.Duration: {1 int64 seconds, 2 int32 nanos}.
func duration(d time.Duration) pb {
	sec := int64(d / time.Second)
	return pb(nil).i64(1, sec).i32(2, int32(d-time.Duration(sec)*time.Second))
}

// ---------------------------------------------------------------------------
// Schema-checked decoding.

type kind int

const (
	kString kind = iota // length-delimited, must be valid UTF-8
	kBytes              // length-delimited
	kMsg                // length-delimited, decoded with field.msg
	kInt32              // varint, must fit int32 (sign-extended)
	kInt64              // varint
	kEnum               // varint, int32 range
	kBool               // varint 0 or 1
	kDouble             // fixed64
)

func (k kind) wireType() protowire.Type {
	switch k {
	case kString, kBytes, kMsg:
		return protowire.BytesType
	case kDouble:
		return protowire.Fixed64Type
	default:
		return protowire.VarintType
	}
}

func (k kind) String() string {
	return [...]string{"string", "bytes", "message", "int32", "int64", "enum", "bool", "double"}[k]
}

type field struct {
	name     string
	kind     kind
	repeated bool
	msg      *schema
}

type schema struct {
	name   string
	fields map[protowire.Number]field
}

func (s *schema) allowed() []protowire.Number {
	var ns []protowire.Number
	for n := range s.fields {
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	return ns
}

func f(name string, k kind) field     { return field{name: name, kind: k} }
func fm(name string, s *schema) field { return field{name: name, kind: kMsg, msg: s} }
func frep(name string, k kind) field  { return field{name: name, kind: k, repeated: true} }
func frepm(name string, s *schema) field {
	return field{name: name, kind: kMsg, msg: s, repeated: true}
}
func mapEntry(name string, v field) *schema {
	return &schema{name: name, fields: map[protowire.Number]field{1: f("key", kString), 2: v}}
}
func sch(name string, fs map[protowire.Number]field) *schema { return &schema{name: name, fields: fs} }

// Upstream field tables (reference §1, §5, §6).
var (
	sDuration       = sch("google.protobuf.Duration", map[protowire.Number]field{1: f("seconds", kInt64), 2: f("nanos", kInt32)})
	sAny            = sch("google.protobuf.Any", map[protowire.Number]field{1: f("type_url", kString), 2: f("value", kBytes)})
	sLegacyDuration = sch("k8s.io.apimachinery.pkg.apis.meta.v1.Duration", map[protowire.Number]field{1: f("duration", kInt64)})

	sNodeGroup = sch("NodeGroup", map[protowire.Number]field{
		1: f("id", kString), 2: f("minSize", kInt32), 3: f("maxSize", kInt32), 4: f("debug", kString),
	})
	sNodeGroupsResponse       = sch("NodeGroupsResponse", map[protowire.Number]field{1: frepm("nodeGroups", sNodeGroup)})
	sNodeGroupForNodeResponse = sch("NodeGroupForNodeResponse", map[protowire.Number]field{1: fm("nodeGroup", sNodeGroup)})
	sPriceResponse            = sch("PricingNodePriceResponse", map[protowire.Number]field{1: f("price", kDouble)})
	sGPULabelResponse         = sch("GPULabelResponse", map[protowire.Number]field{1: f("label", kString)})
	sGPUTypesResponse         = sch("GetAvailableGPUTypesResponse", map[protowire.Number]field{
		1: frepm("gpuTypes", mapEntry("GpuTypesEntry", fm("value", sAny))),
	})
	sEmpty              = sch("(empty response)", map[protowire.Number]field{})
	sTargetSizeResponse = sch("NodeGroupTargetSizeResponse", map[protowire.Number]field{1: f("targetSize", kInt32)})

	sInstanceErrorInfo = sch("InstanceErrorInfo", map[protowire.Number]field{
		1: f("errorCode", kString), 2: f("errorMessage", kString), 3: f("instanceErrorClass", kInt32),
	})
	sInstanceStatus = sch("InstanceStatus", map[protowire.Number]field{
		1: f("instanceState", kEnum), 2: fm("errorInfo", sInstanceErrorInfo),
	})
	sInstance              = sch("Instance", map[protowire.Number]field{1: f("id", kString), 2: fm("status", sInstanceStatus)})
	sNodeGroupNodesResonse = sch("NodeGroupNodesResponse", map[protowire.Number]field{1: frepm("instances", sInstance)})

	sTemplateResponse = sch("NodeGroupTemplateNodeInfoResponse", map[protowire.Number]field{
		1: f("nodeInfo (legacy k8s.io.api.core.v1.Node message)", kBytes),
		2: f("nodeBytes", kBytes),
		3: frep("resourceSliceBytes", kBytes),
	})

	sAutoscalingOptions = sch("NodeGroupAutoscalingOptions", map[protowire.Number]field{
		1:  f("scaleDownUtilizationThreshold", kDouble),
		2:  f("scaleDownGpuUtilizationThreshold", kDouble),
		3:  fm("scaleDownUnneededTime (legacy)", sLegacyDuration),
		4:  fm("scaleDownUnreadyTime (legacy)", sLegacyDuration),
		5:  fm("MaxNodeProvisionTime (legacy)", sLegacyDuration),
		6:  f("zeroOrMaxNodeScaling", kBool),
		7:  f("ignoreDaemonSetsUtilization", kBool),
		8:  fm("scaleDownUnneededDuration", sDuration),
		9:  fm("scaleDownUnreadyDuration", sDuration),
		10: fm("MaxNodeProvisionDuration", sDuration),
		11: fm("maxNodeStartupDuration", sDuration),
		12: f("allowNonAtomicScaleUpToMax", kBool),
	})
	sOptionsResponse = sch("NodeGroupAutoscalingOptionsResponse", map[protowire.Number]field{
		1: fm("nodeGroupAutoscalingOptions", sAutoscalingOptions),
	})
)

type value struct {
	u   uint64 // varint or fixed64 payload
	raw []byte // length-delimited payload
	sub *msg   // decoded sub-message (kMsg only)
}

// msg is a decoded message; accessors return proto3 zero values for absent fields
// and the last occurrence for non-repeated ones.
type msg struct {
	s      *schema
	fields map[protowire.Number][]value
}

// decode parses b against s, returning every conformance problem found (unknown field
// numbers, wrong wire types, bad UTF-8, out-of-range varints, duplicated singular
// fields). A returned msg is always usable, even if problems were reported.
func decode(b []byte, s *schema, path string) (*msg, []error) {
	m := &msg{s: s, fields: map[protowire.Number][]value{}}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(path+": "+format, a...)) }
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			bad("malformed tag: %v", protowire.ParseError(n))
			return m, errs
		}
		b = b[n:]
		fd, known := s.fields[num]
		if !known {
			bad("field %d (wire type %d) is not declared in upstream %s (allowed: %v)", num, wt, s.name, s.allowed())
			n = protowire.ConsumeFieldValue(num, wt, b)
			if n < 0 {
				bad("malformed value of field %d: %v", num, protowire.ParseError(n))
				return m, errs
			}
			b = b[n:]
			continue
		}
		fpath := fmt.Sprintf("%s.%s(#%d)", path, fd.name, num)
		if wt != fd.kind.wireType() {
			bad("field %d %q has wire type %d, upstream declares %s (wire type %d)", num, fd.name, wt, fd.kind, fd.kind.wireType())
			n = protowire.ConsumeFieldValue(num, wt, b)
			if n < 0 {
				bad("malformed value of field %d: %v", num, protowire.ParseError(n))
				return m, errs
			}
			b = b[n:]
			continue
		}
		var v value
		switch wt {
		case protowire.VarintType:
			v.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			v.u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v.raw, n = protowire.ConsumeBytes(b)
		}
		if n < 0 {
			bad("malformed value of field %d: %v", num, protowire.ParseError(n))
			return m, errs
		}
		b = b[n:]
		switch fd.kind {
		case kString:
			if !utf8.Valid(v.raw) {
				errs = append(errs, fmt.Errorf("%s: string is not valid UTF-8", fpath))
			}
		case kInt32, kEnum:
			if x := int64(v.u); x < math.MinInt32 || x > math.MaxInt32 {
				errs = append(errs, fmt.Errorf("%s: varint %d does not fit int32", fpath, x))
			}
		case kBool:
			if v.u > 1 {
				errs = append(errs, fmt.Errorf("%s: bool varint is %d, not 0/1", fpath, v.u))
			}
		case kMsg:
			sub, subErrs := decode(v.raw, fd.msg, fpath)
			v.sub = sub
			errs = append(errs, subErrs...)
		}
		if !fd.repeated && len(m.fields[num]) > 0 {
			errs = append(errs, fmt.Errorf("%s: singular field occurs more than once", fpath))
		}
		m.fields[num] = append(m.fields[num], v)
	}
	return m, errs
}

func (m *msg) has(n protowire.Number) bool { return m != nil && len(m.fields[n]) > 0 }

func (m *msg) last(n protowire.Number) (value, bool) {
	if !m.has(n) {
		return value{}, false
	}
	vs := m.fields[n]
	return vs[len(vs)-1], true
}

func (m *msg) str(n protowire.Number) string   { v, _ := m.last(n); return string(v.raw) }
func (m *msg) bytes(n protowire.Number) []byte { v, _ := m.last(n); return v.raw }
func (m *msg) i64(n protowire.Number) int64    { v, _ := m.last(n); return int64(v.u) }
func (m *msg) i32(n protowire.Number) int32    { v, _ := m.last(n); return int32(int64(v.u)) }
func (m *msg) boolean(n protowire.Number) bool { v, _ := m.last(n); return v.u != 0 }
func (m *msg) dbl(n protowire.Number) float64  { v, _ := m.last(n); return math.Float64frombits(v.u) }

// sub returns the decoded sub-message or nil when absent.
func (m *msg) sub(n protowire.Number) *msg { v, _ := m.last(n); return v.sub }

func (m *msg) subs(n protowire.Number) []*msg {
	if m == nil {
		return nil
	}
	var out []*msg
	for _, v := range m.fields[n] {
		out = append(out, v.sub)
	}
	return out
}

func (m *msg) bytesList(n protowire.Number) [][]byte {
	if m == nil {
		return nil
	}
	var out [][]byte
	for _, v := range m.fields[n] {
		out = append(out, v.raw)
	}
	return out
}

// durationValue reads a google.protobuf.Duration message.
func durationValue(d *msg) time.Duration {
	return time.Duration(d.i64(1))*time.Second + time.Duration(d.i32(2))
}

// ---------------------------------------------------------------------------
// Lenient walking, for foreign messages (k8s Node) where only a few fields matter.

type rawField struct {
	num protowire.Number
	wt  protowire.Type
	u   uint64
	raw []byte
}

func walk(b []byte) ([]rawField, error) {
	var out []rawField
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		b = b[n:]
		rf := rawField{num: num, wt: wt}
		switch wt {
		case protowire.VarintType:
			rf.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			rf.u, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			rf.u = uint64(x)
		case protowire.BytesType:
			rf.raw, n = protowire.ConsumeBytes(b)
		default:
			return out, errors.New("unexpected group wire type")
		}
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		b = b[n:]
		out = append(out, rf)
	}
	return out, nil
}

// walkPath returns the payloads of all length-delimited fields reached by following
// the field numbers in path (each step may match repeated occurrences).
func walkPath(b []byte, path ...protowire.Number) ([][]byte, error) {
	cur := [][]byte{b}
	for _, num := range path {
		var next [][]byte
		for _, c := range cur {
			fs, err := walk(c)
			if err != nil {
				return nil, err
			}
			for _, rf := range fs {
				if rf.num == num && rf.wt == protowire.BytesType {
					next = append(next, rf.raw)
				}
			}
		}
		cur = next
	}
	return cur, nil
}
