package main

// Allocation sites end to end: each leak of the replica names the stack
// that allocated it, checked against what the replica's source says (the
// function and the line that leak, and the path through TT-Metal), and the
// NDJSON stream describes each site before the first alloc naming it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// basicLeaks are the explicit leaks of the basic scenario (ttwork.cpp,
// scenario_basic): size, type, and the statement that allocates each.
var basicLeaks = []struct {
	size uint64
	typ  string
	stmt string
}{
	{4096, "DRAM", "keep_forever(Buffer::create(d, 4096, 1024, BufferType::DRAM));"},
	{2048, "L1", "keep_forever(Buffer::create(d, 2048, 1024, BufferType::L1));"},
	{1 << 16, "TRACE", "keep_forever(Buffer::create(d, 1 << 16, 4096, BufferType::TRACE));"},
}

// sourceLine is the line of ttwork.cpp that holds stmt (exactly once).
func sourceLine(t *testing.T, stmt string) int {
	t.Helper()
	b, err := os.ReadFile("../../testdata/replica/work/ttwork.cpp")
	if err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, stmt) {
			if line != 0 {
				t.Fatalf("%q is on lines %d and %d of ttwork.cpp", stmt, line, i+1)
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("%q is not in ttwork.cpp", stmt)
	}
	return line
}

func TestE2ESites(t *testing.T) {
	for _, c := range []struct {
		r     run
		lines bool // the build has DWARF: the scenario's frame names its line
	}{
		{r: run{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true}},
		{r: run{variant: "gcc-O2", mode: "pid", scenario: "basic", args: []string{"--leak"}, peaks: true}},
		{r: run{variant: "gcc-O2", mode: "python", scenario: "basic", args: []string{"--leak"}, peaks: true}},
		{r: run{variant: "gcc-O3-dwarf-zstd", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true}, lines: true},
		// The lifecycle plan: the allocation is taken at a ret of allocate_impl.
		{r: run{variant: "inline-gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true}},
		{r: run{variant: "clang-O3", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true}},
	} {
		r := c.r
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			var out string
			r.out = &out
			if r.mode != "pid" {
				// The scenario takes milliseconds; the process then keeps
				// its leaks, as a real program lives on.
				holdForSites(t, &r)
			}
			sum, tr := trace(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			p := procOf(t, sum, tr.Pid)
			checkSites(t, r, p, c.lines)
			checkSiteStream(t, out, p)
		})
	}
}

// TestE2ENoStacks: --no-stacks leaves the sites out and the ledger exact.
func TestE2ENoStacks(t *testing.T) {
	r := run{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true, flags: []string{"--no-stacks"}}
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	p := procOf(t, sum, tr.Pid)
	if len(p.Sites) != 0 || len(p.LeakSites) != 0 || p.LostStacks != 0 {
		t.Errorf("--no-stacks: sites %d, leak_sites %d, lost_stacks %d", len(p.Sites), len(p.LeakSites), p.LostStacks)
	}
	for _, lk := range p.Leaks {
		if lk.Site != 0 {
			t.Errorf("--no-stacks: leak %+v has a site", lk)
		}
	}
}

func procOf(t *testing.T, sum *devices.Summary, pid uint32) *devices.ProcessSummary {
	t.Helper()
	for i := range sum.Processes {
		if sum.Processes[i].Pid == pid {
			return &sum.Processes[i]
		}
	}
	t.Fatalf("pid %d is not in the summary", pid)
	return nil
}

func checkSites(t *testing.T, r run, p *devices.ProcessSummary, lines bool) {
	t.Helper()
	if p.LostStacks != 0 {
		t.Errorf("lost_stacks = %d", p.LostStacks)
	}
	sites := map[uint32]*devices.Site{}
	for i := range p.Sites {
		sites[p.Sites[i].Site] = &p.Sites[i]
	}
	// leak_sites sum the leaks exactly, most bytes first.
	type tot struct{ count, bytes uint64 }
	want := map[uint32]tot{}
	for _, lk := range p.Leaks {
		if lk.Site == 0 {
			t.Errorf("leak %+v has no site", lk)
			continue
		}
		if sites[lk.Site] == nil {
			t.Errorf("leak %+v: site %d is not in sites", lk, lk.Site)
		}
		w := want[lk.Site]
		want[lk.Site] = tot{w.count + 1, w.bytes + lk.Size}
	}
	if len(p.LeakSites) != len(want) {
		t.Errorf("%d leak_sites, want %d", len(p.LeakSites), len(want))
	}
	for i, ls := range p.LeakSites {
		if w := want[ls.Site]; w.count != ls.Count || w.bytes != ls.Bytes {
			t.Errorf("leak_sites[%d] = %+v, the leaks of site %d are %d, %d bytes", i, ls, ls.Site, w.count, w.bytes)
		}
		if i > 0 && p.LeakSites[i-1].Bytes < ls.Bytes {
			t.Errorf("leak_sites not sorted by bytes: %+v", p.LeakSites)
		}
	}
	dir := filepath.Join(replicaRoot, r.variant)
	seen := map[uint32]bool{}
	for _, bl := range basicLeaks {
		var lk *devices.Leak
		for i := range p.Leaks {
			if p.Leaks[i].Size == bl.size && p.Leaks[i].Type == bl.typ {
				lk = &p.Leaks[i]
			}
		}
		if lk == nil {
			t.Errorf("no %s leak of %d bytes", bl.typ, bl.size)
			continue
		}
		s := sites[lk.Site]
		if s == nil {
			continue
		}
		if seen[lk.Site] {
			t.Errorf("site %d is given to two leaks allocated on different lines", lk.Site)
		}
		seen[lk.Site] = true
		desc := describe(s)
		if s.Truncated {
			t.Errorf("%d-byte leak: stack truncated:\n%s", bl.size, desc)
		}
		nat := s.Native
		if len(nat) == 0 || nat[0].Module != filepath.Join(dir, "libtt_metal.so") {
			t.Errorf("%d-byte leak: innermost frame not in the probed library:\n%s", bl.size, desc)
			continue
		}
		// Through TT-Metal's Buffer::create, called by scenario_basic on
		// the leak's line, called by ttwork_main (the C entry point).
		create, scen := -1, -1
		for i, f := range nat {
			if create < 0 && strings.HasPrefix(f.Function, "tt::tt_metal::Buffer::create(") && f.Module == nat[0].Module {
				create = i
			}
			if f.Function == "(anonymous namespace)::scenario_basic((anonymous namespace)::Ctx&)" && f.Module == filepath.Join(dir, "libttwork.so") {
				scen = i
				break
			}
		}
		if create < 0 || scen < create || scen+1 >= len(nat) || nat[scen+1].Function != "ttwork_main" {
			t.Errorf("%d-byte leak: not Buffer::create <- scenario_basic <- ttwork_main:\n%s", bl.size, desc)
			continue
		}
		if lines {
			f := nat[scen]
			if want := sourceLine(t, bl.stmt); filepath.Base(f.File) != "ttwork.cpp" || f.Line != want {
				t.Errorf("%d-byte leak: scenario_basic frame at %s:%d, the statement is on ttwork.cpp:%d", bl.size, f.File, f.Line, want)
			}
		}
		outer := nat[len(nat)-1].Function
		switch r.mode {
		case "python":
			// ctypes: through libffi and the interpreter, up to the frame
			// its first evaluation loop frame called, where the Python
			// frames take over (docs/stacks.md: a Python thread's native
			// stack ends at the interpreter).
			var ffi, py bool
			for _, f := range nat[scen+1:] {
				ffi = ffi || strings.Contains(filepath.Base(f.Module), "libffi")
				py = py || strings.Contains(filepath.Base(f.Module), "python3")
			}
			if !ffi || !py || outer == "_PyEval_EvalFrameDefault" || len(s.Python) == 0 {
				t.Errorf("%d-byte leak: no libffi / python frames, a _PyEval_EvalFrameDefault frame kept, or no Python frames:\n%s", bl.size, desc)
			}
		default:
			if outer != "_start" {
				t.Errorf("%d-byte leak: the stack does not end at _start:\n%s", bl.size, desc)
			}
		}
	}
}

func describe(s *devices.Site) string {
	var b strings.Builder
	for _, f := range s.Native {
		fmt.Fprintf(&b, "  %#x %s %s+%#x %s:%d\n", f.PC, filepath.Base(f.Module), f.Function, f.Offset, f.File, f.Line)
	}
	for _, f := range s.Python {
		fmt.Fprintf(&b, "  py %s %s:%d\n", f.Function, f.File, f.Line)
	}
	return b.String()
}

// checkSiteStream: in the NDJSON stream each site record comes before the
// first alloc naming it and says what the summary says; the alloc of each
// leak names the leak's site.
func checkSiteStream(t *testing.T, path string, p *devices.ProcessSummary) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	described := map[uint32]string{}
	allocSite := map[uint64]uint32{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		var rec struct {
			Type string `json:"type"`
			Pid  uint32 `json:"pid"`
			Seq  uint64 `json:"seq"`
			Site uint32 `json:"site"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if rec.Pid != p.Pid {
			continue
		}
		switch rec.Type {
		case "site":
			if _, dup := described[rec.Site]; dup {
				t.Errorf("line %d: site %d described twice", n, rec.Site)
			}
			var s devices.Site
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(s)
			described[rec.Site] = string(b)
		case "alloc":
			if rec.Site != 0 {
				if _, ok := described[rec.Site]; !ok {
					t.Errorf("line %d: alloc names site %d before its site record", n, rec.Site)
				}
			}
			allocSite[rec.Seq] = rec.Site
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, lk := range p.Leaks {
		if s, ok := allocSite[lk.Seq]; !ok || s != lk.Site {
			t.Errorf("leak seq %d has site %d, its alloc line %d (present %v)", lk.Seq, lk.Site, s, ok)
		}
	}
	for i := range p.Sites {
		b, _ := json.Marshal(p.Sites[i])
		if got := described[p.Sites[i].Site]; got != string(b) {
			t.Errorf("site %d: the stream says %s, the summary %s", p.Sites[i].Site, got, b)
		}
	}
}
