package main

// --perfetto's TT-NN op slices end to end: the timeline of a real traced
// run of the replica's TT-NN stand-in, decoded by Debian's protoc with
// Perfetto's official schema and by perfettotest, against the op_enter
// records and every record's op in the NDJSON of the same run.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// opLine is what the check reads of an NDJSON record.
type opLine struct {
	Type    string `json:"type"`
	Pid     uint32 `json:"pid"`
	Tid     uint32 `json:"tid"`
	Ts      uint64 `json:"ts_ns"`
	Entered string `json:"entered"`
	Op      *opRef `json:"op"`
	TTNNOp  *opRef `json:"ttnn_op"` // a trace record's
}

// opLines reads, per thread of pid, the records that state their
// thread's op (docs/perfetto.md, "TT-NN ops") in stream order.
func opLines(t *testing.T, path string, pid uint32) map[uint32][]opLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[uint32][]opLine{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var l opLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		switch l.Type {
		case "alloc", "alloc_request", "alloc_oom", "op_enter", "runtime_id":
		case "trace":
			l.Op = l.TTNNOp
		default:
			continue
		}
		if l.Pid == pid {
			out[l.Tid] = append(out[l.Tid], l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// entry is a call an op_enter began: an op (its name) or a launch (its
// device op).
type entry struct {
	name   string
	launch bool
	depth  uint8
	ts     uint64
}

func entries(lines []opLine) []entry {
	var es []entry
	for _, l := range lines {
		if l.Type != "op_enter" || l.Op == nil {
			continue
		}
		switch l.Entered {
		case "op":
			es = append(es, entry{name: l.Op.Name, depth: l.Op.Depth, ts: l.Ts})
		case "launch":
			es = append(es, entry{name: l.Op.DeviceOp, launch: true, depth: l.Op.Depth, ts: l.Ts})
		}
	}
	return es
}

// checkOpSlices compares the slices of each thread (OpMin 0: one per
// call) with the op_enter records of the NDJSON: the same names in the
// same order, each begun at its record; each nested in the op the records
// say it was called or launched in (an op at depth d in the last op
// entered at depth d-1, a launch in the last op entered at its depth);
// and at every record stating its thread's op, the innermost slice open
// is that op (its device op, at its depth), none outside any op.
func checkOpSlices(t *testing.T, name string, lines map[uint32][]opLine, got map[uint32][]*perfettotest.Slice) {
	t.Helper()
	var diffs []string
	nested, launches := 0, 0
	for tid := range got {
		if len(entries(lines[tid])) == 0 {
			diffs = append(diffs, fmt.Sprintf("thread %d: %d slices, no op_enter record", tid, len(got[tid])))
		}
	}
	for tid, ls := range lines {
		es, ss := entries(ls), got[tid]
		if len(es) != len(ss) {
			diffs = append(diffs, fmt.Sprintf("thread %d: %d slices, %d op and launch entries", tid, len(ss), len(es)))
			continue
		}
		lastOp := map[uint8]int{}
		for i, e := range es {
			s := ss[i]
			if s.Name != e.name || s.Ts != e.ts {
				diffs = append(diffs, fmt.Sprintf("thread %d: slice %d is %s at %d, entry %s at %d", tid, i, s.Name, s.Ts, e.name, e.ts))
				continue
			}
			want := -1
			switch {
			case e.launch:
				launches++
				if e.depth > 0 {
					want = lastOp[e.depth]
				}
			default:
				if e.depth > 1 {
					want = lastOp[e.depth-1]
					nested++
				}
				lastOp[e.depth] = i
			}
			switch {
			case want < 0 && s.Parent != nil:
				diffs = append(diffs, fmt.Sprintf("thread %d: %s at %d is inside %s, want top level", tid, s.Name, s.Ts, s.Parent.Path()))
			case want >= 0 && s.Parent != ss[want]:
				diffs = append(diffs, fmt.Sprintf("thread %d: %s at %d is %s, want inside %s at %d", tid, s.Name, s.Ts, s.Path(), ss[want].Path(), ss[want].Ts))
			}
		}
		for _, l := range ls {
			var in *perfettotest.Slice
			for _, s := range ss {
				if s.Ts <= l.Ts && (!s.Ended || l.Ts < s.End) && (in == nil || s.Depth > in.Depth) {
					in = s
				}
			}
			want, depth := "", 0
			if o := l.Op; o != nil {
				want, depth = o.Name, int(o.Depth)-1
				if o.DeviceOp != "" {
					want, depth = o.DeviceOp, int(o.Depth)
				}
			}
			switch {
			case in == nil && want == "":
			case in == nil:
				diffs = append(diffs, fmt.Sprintf("thread %d: %s at %d (%s): no slice open", tid, l.Type, l.Ts, l.Op))
			case want == "":
				diffs = append(diffs, fmt.Sprintf("thread %d: %s at %d outside any op: %s open", tid, l.Type, l.Ts, in.Path()))
			case in.Name != want || in.Depth != depth || l.Op.DeviceOp != "" && l.Op.Depth > 0 && (in.Parent == nil || in.Parent.Name != l.Op.Name):
				diffs = append(diffs, fmt.Sprintf("thread %d: %s at %d (%s): %s open (depth %d)", tid, l.Type, l.Ts, l.Op, in.Path(), in.Depth))
			}
		}
	}
	if nested == 0 || launches == 0 {
		diffs = append(diffs, fmt.Sprintf("%d nested ops, %d launches: the scenario tests nothing", nested, launches))
	}
	if len(diffs) > 0 {
		if len(diffs) > 30 {
			diffs = append(diffs[:30], fmt.Sprintf("... %d more", len(diffs)-30))
		}
		t.Errorf("%s: %d difference(s) between the op slices and the NDJSON:\n%s", name, len(diffs), strings.Join(diffs, "\n"))
	}
}

// decodedSlices decodes the timeline at path with perfettotest and, when
// pc is a protoc, with protoc and the official schema (the two must read
// the same slice events), and returns the slices of pid's threads by tid.
func decodedSlices(t *testing.T, path, pc string, pid uint32) map[uint32][]*perfettotest.Slice {
	t.Helper()
	tl, err := perfettotest.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	evs := tl.SliceEvents
	tids := map[uint64]int64{}
	for u, tr := range tl.Tracks {
		if tr.IsThread && uint32(tr.Pid) == pid {
			tids[u] = int64(tr.Tid)
		}
	}
	if pc != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := perfettotest.Protoc(pc, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range perfettotest.CheckSchema(ps) {
			t.Errorf("%s: %s", path, p)
		}
		if evs, err = perfettotest.ProtocSliceEvents(ps); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(evs) != fmt.Sprint(tl.SliceEvents) {
			t.Errorf("%s: protoc reads %d slice events, perfettotest %d", path, len(evs), len(tl.SliceEvents))
		}
		// The threads as the official schema names them.
		clear(tids)
		for _, p := range ps {
			td := p.Child("track_descriptor")
			if td == nil || td.Child("thread") == nil {
				continue
			}
			u, _ := strconv.ParseUint(td.Get("uuid"), 10, 64)
			if p, _ := strconv.ParseUint(td.Child("thread").Get("pid"), 10, 32); uint32(p) == pid {
				tids[u], _ = strconv.ParseInt(td.Child("thread").Get("tid"), 10, 32)
			}
		}
	}
	byTrack, err := perfettotest.Slices(evs)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[uint32][]*perfettotest.Slice{}
	for u, ss := range byTrack {
		tid, ok := tids[u]
		if !ok {
			t.Errorf("%s: %d slices on track %d, no thread of pid %d", path, len(ss), u, pid)
			continue
		}
		out[uint32(tid)] = ss
	}
	return out
}

func sliceList(ss []*perfettotest.Slice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s [%d %d %v] %v", s.Path(), s.Ts, s.End, s.Ended, s.Args))
	}
	return out
}

// The ops and ops_threads scenarios (nested ops, launches one after the
// other, an op that throws, two threads sharing a program cache, a
// dispatch thread) traced with --perfetto-op-min 0: a slice per call,
// named, nested and ordered as the op_enter records of the same run's
// NDJSON say, each open exactly while the records say its op is; the
// saved run replayed (tttrace report --perfetto) gives the same slices;
// with the default --perfetto-op-min the replay's slices count every
// top-level call, each gathered slice holds nothing and each slice of one
// call is a call of the run lasting 1 ms or more.
func TestE2EPerfettoOps(t *testing.T) {
	pc := requireTool(t, "protoc", "protobuf-compiler")
	bin, replica := setup(t)
	if _, err := os.Stat(filepath.Join(replica, "gcc-O2", "_ttnn.so")); err != nil {
		t.Fatalf("gcc-O2 has no TT-NN stand-in: %v (make replica)", err)
	}
	for _, scenario := range []string{"ops", "ops_threads"} {
		t.Run(scenario, func(t *testing.T) {
			tmp := t.TempDir()
			pf := filepath.Join(tmp, "trace.pftrace")
			var out string
			r := run{variant: "gcc-O2", mode: "cmd", scenario: scenario, out: &out,
				flags: []string{"--perfetto", pf, "--perfetto-op-min", "0"}}
			sum, tr := trace(t, r)
			compareOps(t, r.name(), out, tr.path, sum)
			lines := opLines(t, out, tr.Pid)
			live := decodedSlices(t, pf, pc, tr.Pid)
			checkOpSlices(t, r.name(), lines, live)

			again := filepath.Join(tmp, "again.pftrace")
			if code := runTool(t, bin, "report", out, "-o", os.DevNull, "--perfetto", again, "--perfetto-op-min", "0"); code != 0 {
				t.Fatalf("tttrace report: exit %d", code)
			}
			replayed := decodedSlices(t, again, "", tr.Pid)
			for tid, ss := range live {
				if a, b := strings.Join(sliceList(ss), "\n"), strings.Join(sliceList(replayed[tid]), "\n"); a != b {
					t.Errorf("thread %d: the replay's slices differ:\n%s\nlive:\n%s", tid, b, a)
				}
			}

			gathered := filepath.Join(tmp, "gathered.pftrace")
			if code := runTool(t, bin, "report", out, "-o", os.DevNull, "--perfetto", gathered); code != 0 {
				t.Fatalf("tttrace report: exit %d", code)
			}
			for tid, ss := range decodedSlices(t, gathered, pc, tr.Pid) {
				var top, calls uint64
				for _, s := range live[tid] {
					if s.Depth == 0 {
						top++
					}
				}
				long := map[string]*perfettotest.Slice{}
				for _, s := range live[tid] {
					long[fmt.Sprintf("%s@%d", s.Name, s.Ts)] = s
				}
				for _, s := range ss {
					if s.Depth == 0 {
						calls += s.Calls()
					}
					if _, ok := s.Args["calls"]; ok {
						if s.Children() > 0 {
							t.Errorf("thread %d: gathered slice %s at %d holds %d slices", tid, s.Path(), s.Ts, s.Children())
						}
						continue
					}
					if c := long[fmt.Sprintf("%s@%d", s.Name, s.Ts)]; c == nil || c.End != s.End || c.End-c.Ts < 1e6 {
						t.Errorf("thread %d: slice %s [%d, %d] is no call of 1 ms or more", tid, s.Path(), s.Ts, s.End)
					}
				}
				if calls != top {
					t.Errorf("thread %d: the gathered top-level slices count %d calls, the run made %d", tid, calls, top)
				}
			}
		})
	}
}
