package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// The op an NDJSON record or a truth entry names (docs/ndjson.md, "TT-NN
// ops"); nil: none.
type opRef struct {
	Name      string  `json:"name"`
	DeviceOp  string  `json:"device_op,omitempty"`
	RuntimeID *uint64 `json:"runtime_id,omitempty"`
	Depth     uint8   `json:"depth"`
}

func (o *opRef) String() string {
	if o == nil {
		return "no op"
	}
	s := o.Name
	if o.DeviceOp != "" {
		s += " > " + o.DeviceOp
	}
	if o.RuntimeID != nil {
		s += fmt.Sprintf(" #%d", *o.RuntimeID)
	}
	return s + fmt.Sprintf(" depth %d", o.Depth)
}

// opTruth is the replica's op truth (testdata/replica/README.md, "The op
// truth"), made by its own op frames.
type opTruth struct {
	Recorded  bool `json:"ops_recorded"`
	Truncated bool `json:"ops_truncated"`
	Allocs    []struct {
		N      uint64 `json:"n"`
		Tid    uint32 `json:"tid"`
		Buffer string `json:"buffer"`
		Hooked bool   `json:"hooked"`
		Op     *opRef `json:"op"`
	} `json:"op_allocs"`
	Layouts []struct {
		Program string `json:"program"`
		Tid     uint32 `json:"tid"`
		Op      *opRef `json:"op"`
	} `json:"op_layouts"`
	// Traces: every Metal trace call's entry (begin, end, replay, release)
	// with the op it was made in.
	Traces []struct {
		Tid   uint32 `json:"tid"`
		Call  string `json:"call"`
		Trace uint32 `json:"trace"`
		Op    *opRef `json:"op"`
	} `json:"op_traces"`
	Ops      []devices.OpRow `json:"ops"`
	Failures []struct {
		Op *opRef `json:"op"`
	} `json:"alloc_failures"`
}

// opKey names the k-th record of one object on one thread: the stream and
// the truth order a thread's records alike.
type opKey struct {
	tid uint32
	obj string
	k   int
}

// traceLine is a trace record's trace id (nil when the call takes it inside)
// and its TT-NN op.
type traceLine struct {
	traceID *uint32
	op      *opRef
}

// opRecords reads the op of every alloc and cb_layout line of the NDJSON
// at path, and of every trace line, keyed by its call (begin, end, replay,
// release) as obj.
func opRecords(t *testing.T, path string) (allocs, layouts map[opKey]*opRef, traces map[opKey]traceLine) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	allocs, layouts, traces = map[opKey]*opRef{}, map[opKey]*opRef{}, map[opKey]traceLine{}
	seen := map[opKey]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var l struct {
			Type    string          `json:"type"`
			Tid     uint32          `json:"tid"`
			Buffer  json.RawMessage `json:"buffer"` // an object on trace_capture_alloc
			Program string          `json:"program"`
			Op      json.RawMessage `json:"op"`
			TTNNOp  *opRef          `json:"ttnn_op"`
			TraceID *uint32         `json:"trace_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == "trace" {
			// A trace record's "op" is its call; its TT-NN op is "ttnn_op".
			var call string
			if err := json.Unmarshal(l.Op, &call); err != nil {
				t.Fatalf("trace line with op %s: %v", l.Op, err)
			}
			base := opKey{l.Tid, "trace " + call, 0}
			traces[opKey{l.Tid, call, seen[base]}] = traceLine{l.TraceID, l.TTNNOp}
			seen[base]++
			continue
		}
		var obj string
		var into map[opKey]*opRef
		switch l.Type {
		case "alloc":
			if err := json.Unmarshal(l.Buffer, &obj); err != nil {
				t.Fatalf("alloc line with buffer %s: %v", l.Buffer, err)
			}
			into = allocs
		case "cb_layout":
			obj, into = l.Program, layouts
		default:
			continue
		}
		var op *opRef
		if len(l.Op) > 0 && string(l.Op) != "null" {
			op = &opRef{}
			if err := json.Unmarshal(l.Op, op); err != nil {
				t.Fatal(err)
			}
		}
		base := opKey{l.Tid, l.Type + " " + obj, 0}
		k := opKey{l.Tid, obj, seen[base]}
		seen[base]++
		into[k] = op
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return allocs, layouts, traces
}

// compareOps compares the ops tttrace gave every allocation, CB layout,
// Metal trace call and failed allocation, and its summary's ops rows, with
// the truth.
func compareOps(t *testing.T, name, out, truthPath string, sum *devices.Summary) {
	t.Helper()
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	var tr opTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if !tr.Recorded || tr.Truncated || len(tr.Allocs) == 0 {
		t.Fatalf("%s: the truth has no complete op record (recorded %v, truncated %v, %d allocations)", name, tr.Recorded, tr.Truncated, len(tr.Allocs))
	}
	allocs, layouts, traces := opRecords(t, out)
	var diffs []string
	same := func(what string, got, want *opRef) {
		if got.String() != want.String() {
			diffs = append(diffs, fmt.Sprintf("%s: tttrace says %s, the truth %s", what, got, want))
		}
	}
	seen := map[opKey]int{}
	inOp := 0
	for _, a := range tr.Allocs {
		base := opKey{a.Tid, a.Buffer, -1}
		k := opKey{a.Tid, a.Buffer, seen[base]}
		seen[base]++
		got, ok := allocs[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("alloc %d of buffer %s (tid %d): no alloc line", a.N, a.Buffer, a.Tid))
			continue
		}
		if a.Op != nil {
			inOp++
		}
		same(fmt.Sprintf("alloc %d of buffer %s (tid %d)", a.N, a.Buffer, a.Tid), got, a.Op)
	}
	if inOp == 0 {
		diffs = append(diffs, "no allocation of the truth was made in an op: the scenario tests nothing")
	}
	seen = map[opKey]int{}
	for i, l := range tr.Layouts {
		base := opKey{l.Tid, l.Program, -1}
		k := opKey{l.Tid, l.Program, seen[base]}
		seen[base]++
		got, ok := layouts[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("CB layout %d of program %s (tid %d): no cb_layout line", i, l.Program, l.Tid))
			continue
		}
		same(fmt.Sprintf("CB layout %d of program %s (tid %d)", i, l.Program, l.Tid), got, l.Op)
	}
	// Each trace call of the truth is the k-th of its kind on its thread,
	// as in the stream; a trace line the truth has no call for is wrong too.
	seen = map[opKey]int{}
	inOp, outside := 0, 0
	for _, c := range tr.Traces {
		base := opKey{c.Tid, c.Call, -1}
		k := opKey{c.Tid, c.Call, seen[base]}
		seen[base]++
		what := fmt.Sprintf("%s %d of trace %d (tid %d)", c.Call, k.k, c.Trace, c.Tid)
		got, ok := traces[k]
		if !ok {
			diffs = append(diffs, what+": no trace line")
			continue
		}
		delete(traces, k)
		if got.traceID != nil && *got.traceID != c.Trace {
			diffs = append(diffs, fmt.Sprintf("%s: its line says trace %d", what, *got.traceID))
		}
		if c.Op != nil {
			inOp++
		} else {
			outside++
		}
		same(what, got.op, c.Op)
	}
	for k := range traces {
		diffs = append(diffs, fmt.Sprintf("trace line %s %d (tid %d): no such call in the truth", k.obj, k.k, k.tid))
	}
	if len(tr.Traces) > 0 && (inOp == 0 || outside == 0) {
		diffs = append(diffs, fmt.Sprintf("%d trace calls in ops and %d outside: the scenario tests only one side", inOp, outside))
	}
	if len(sum.Processes) != 1 {
		t.Fatalf("%s: %d processes in the summary", name, len(sum.Processes))
	}
	ps := &sum.Processes[0]
	if len(ps.AllocFailures) != len(tr.Failures) {
		diffs = append(diffs, fmt.Sprintf("%d failed allocations, the truth %d", len(ps.AllocFailures), len(tr.Failures)))
	} else {
		for i := range tr.Failures {
			var got *opRef
			if o := ps.AllocFailures[i].Op; o != nil {
				got = &opRef{Name: o.Name, DeviceOp: o.DeviceOp, RuntimeID: o.RuntimeID, Depth: o.Depth}
			}
			same(fmt.Sprintf("failed allocation %d", i), got, tr.Failures[i].Op)
		}
	}
	rows := func(rs []devices.OpRow) []string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%+v", r))
		}
		sort.Strings(out)
		return out
	}
	if got, want := rows(ps.Ops), rows(tr.Ops); !reflect.DeepEqual(got, want) {
		diffs = append(diffs, fmt.Sprintf("ops rows\n  tttrace: %s\n  truth:   %s", strings.Join(got, "\n           "), strings.Join(want, "\n           ")))
	}
	if len(diffs) > 0 {
		if len(diffs) > 30 {
			diffs = append(diffs[:30], fmt.Sprintf("... %d more", len(diffs)-30))
		}
		t.Errorf("%s: %d difference(s) with the replica's op truth:\n%s", name, len(diffs), strings.Join(diffs, "\n"))
	}
}

// Every allocation, CB layout and failed allocation of the TT-NN stand-in's
// scenarios names the op the replica's own op frames say made it (name,
// device op, runtime id, depth), in each era's build (2026 free functions,
// 2025 and 2024 registered operations, stripped copies), started by
// tttrace, attached to with -p, and from Python; the summary's ops rows
// equal the truth's sums. The scenarios hold nested ops (conv2d > add), an
// op that throws after allocating (no later allocation is its), a failed
// allocation inside a device op, program cache hits, two threads sharing a
// program cache, and a dispatch thread where no op is live (its CB layouts
// carry their launch's op). ops_trace makes Metal trace calls outside any op
// around a capture of ops, and inside an op (ttnn.traced_add captures a
// nested ttnn.add and replays it): each trace record's ttnn_op is the
// truth's, in each era's trace forms (2026 through a MeshCommandQueue&,
// 2025 the mesh cq-id forms, g1 a Device's).
func TestE2EOps(t *testing.T) {
	bin, replica := setup(t)
	for _, c := range []struct {
		variant, mode, scenario string
		args                    []string
	}{
		{"gcc-O2", "cmd", "ops", nil},
		{"gcc-O2", "cmd", "ops", []string{"--leak"}},
		{"gcc-O2", "pid", "ops", nil},
		{"gcc-O2", "python", "ops", nil},
		{"gcc-O2", "cmd", "ops_threads", nil},
		{"gcc-O2", "python", "ops_threads", nil},
		{"v2-gcc-O2-symtab", "cmd", "ops", nil},
		{"clang-O2-symtab", "cmd", "ops", []string{"--leak"}},
		{"clang-O2-symtab", "python", "ops", nil},
		{"clang-O3", "cmd", "ops", nil},
		{"clang-O3", "cmd", "ops_threads", nil},
		{"gcc-O2", "cmd", "ops_trace", nil},
		{"gcc-O2", "cmd", "ops_trace", []string{"--leak"}},
		{"gcc-O2", "pid", "ops_trace", nil},
		{"gcc-O2", "python", "ops_trace", nil},
		{"clang-O2-symtab", "cmd", "ops_trace", nil},
		{"clang-O2-symtab", "pid", "ops_trace", []string{"--leak"}},
		{"clang-O3", "cmd", "ops_trace", nil},
	} {
		name := fmt.Sprintf("%s_%s_%s%s", c.variant, c.mode, c.scenario, strings.Join(c.args, ""))
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(replica, c.variant, "_ttnn.so")); err != nil {
				t.Fatalf("%s has no TT-NN stand-in: %v (make replica)", c.variant, err)
			}
			var out string
			r := run{variant: c.variant, mode: c.mode, scenario: c.scenario, args: c.args, out: &out}
			sum, tr := trace(t, r)
			compareOps(t, name, out, tr.path, sum)
			// The run's NDJSON (op_enter and runtime_id lines, each
			// record's op) replays to the same stream.
			again := filepath.Join(t.TempDir(), "again.ndjson")
			if code := runTool(t, bin, "report", out, "--json", "-o", again); code != 0 {
				t.Fatalf("tttrace report: exit %d", code)
			}
			sameBytes(t, "the replayed NDJSON", out, again)
		})
	}
}
