package main

// tttrace diff end to end: two runs of one replica workload are the same;
// a run with a known change (the basic scenario with --leak: three buffers
// left allocated at three statements, and one of its random ones kept) is
// named exactly: its chips' counters, leaks and allocator numbers as the
// replica's truths differ, the three statements' sites as appeared (by
// their source lines, from DWARF), the per-site changes summing to the
// truths' differences, and --fail-on-growth exits 13 just past the largest
// growth.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/sinks/diff"
)

// diffTruth is a replica truth with the allocator's numbers.
type diffTruth struct {
	Pid     uint32 `json:"pid"`
	Devices []struct {
		truthDevice
		Allocator map[string]struct {
			Allocated   uint64 `json:"total_allocated_bytes"`
			Free        uint64 `json:"total_free_bytes"`
			LargestFree uint64 `json:"largest_free_block_bytes"`
		} `json:"allocator"`
	} `json:"devices"`
	Leaks []truthLeak `json:"leaks"`
	// l1: per chip, L1 per core (l1_busiest_core_bytes) at the end and its
	// peak: the totals of the truth's l1_busiest_core and
	// peak_l1_busiest_core; perCore: per chip and type ("93 L1"), the
	// allocator's per-core (HYBRID) buffer bytes (readL1).
	l1      map[int32][2]uint64
	perCore map[string]uint64
}

// readL1 reads tr's L1 per core and per-core buffer bytes from its truth b.
func (tr *diffTruth) readL1(t *testing.T, b []byte) {
	t.Helper()
	var lt struct {
		Devices []struct {
			Device    int32        `json:"device"`
			Now       *l1CoreTruth `json:"l1_busiest_core"`
			Peak      *l1CoreTruth `json:"peak_l1_busiest_core"`
			Allocator map[string]struct {
				PerCore uint64 `json:"per_core_bytes"`
			} `json:"allocator"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &lt); err != nil {
		t.Fatal(err)
	}
	tr.l1, tr.perCore = map[int32][2]uint64{}, map[string]uint64{}
	for _, d := range lt.Devices {
		for typ, a := range d.Allocator {
			tr.perCore[fmt.Sprintf("%d %s", d.Device, typ)] = a.PerCore
		}
		var v [2]uint64
		if d.Now != nil {
			v[0] = d.Now.TotalBytes
		}
		if d.Peak != nil {
			v[1] = d.Peak.TotalBytes
		}
		tr.l1[d.Device] = v
	}
}

// diffCounters are the summary's chip counters; tttrace diff compares
// them and L1 per core (l1CoreCounter).
var diffCounters = []string{"dram_bytes", "l1_bytes", "l1_small_bytes", "trace_bytes", "system_memory_bytes", "cb_bytes", "live_buffers",
	"cb_registered_bytes", "cb_resident_total_bytes"}

// l1CoreCounter is L1 per core as tttrace diff names it (a window's peaks
// too): l1_busiest_core.total_bytes, its peak peak_l1_busiest_core's.
const l1CoreCounter = "l1_busiest_core_bytes"

// diffFig is one counter of a chip in a truth: at the end and its peak.
func (tr *diffTruth) fig(dev int32, counter string) (end, peak uint64) {
	for i := range tr.Devices {
		if d := &tr.Devices[i]; d.Device == dev {
			switch counter {
			case "live_buffers":
				return d.LiveBuffers, d.Peaks[counter]
			case l1CoreCounter:
				if tr.l1 == nil {
					panic("L1 per core of a truth not read (readL1)")
				}
				return tr.l1[dev][0], tr.l1[dev][1]
			}
			return d.total(counter), d.Peaks[counter]
		}
	}
	return 0, 0
}

// diffWork runs the basic scenario under tttrace in dir (relative paths:
// two runs with the same arguments have the same command line) and returns
// its NDJSON and truth.
func diffWork(t *testing.T, bin, variant, dir string, extra ...string) (string, *diffTruth) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, truthPath := filepath.Join(dir, "run.ndjson"), filepath.Join(dir, "truth.json")
	done := make(chan struct{})
	defer close(done)
	go releaseHold(filepath.Join(dir, "hold"), truthPath, out, done)
	args := append([]string{"--json", "-o", out, "--lib", filepath.Join(variant, "libtt_metal.so"), "--",
		filepath.Join(variant, "ttwork"), "--scenario", "basic", "--truth", "truth.json", "--hold-file", "hold"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, log.String())
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	var tr diffTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	tr.readL1(t, b)
	return out, &tr
}

// runDiff runs tttrace diff and returns its exit status and output.
func runDiff(t *testing.T, bin string, args ...string) (int, []byte) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"diff"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := exitCode(err)
	if code != 0 && code != 13 {
		t.Fatalf("tttrace diff %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return code, stdout.Bytes()
}

func TestE2EDiff(t *testing.T) {
	bin, replica := setup(t)
	variant := filepath.Join(replica, "gcc-O3-dwarf-zstd") // DWARF: sites have their lines
	tmp := t.TempDir()
	a, trA := diffWork(t, bin, variant, filepath.Join(tmp, "a"))
	again, _ := diffWork(t, bin, variant, filepath.Join(tmp, "again"))
	b, trB := diffWork(t, bin, variant, filepath.Join(tmp, "b"), "--leak")

	t.Run("same", func(t *testing.T) {
		code, out := runDiff(t, bin, a, again, "--json", "--fail-on-growth", "0")
		var r diff.Result
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if code != 0 || !r.Same || r.Unchanged != 1 || len(r.Processes) != 0 || len(r.Growth) != 0 || r.SitesBy != "usage" {
			t.Errorf("two runs of one workload: exit %d, %s", code, out)
		}
		if _, text := runDiff(t, bin, a, again); !bytes.Contains(text, []byte("no change: 1 process(es) matched")) {
			t.Errorf("table:\n%s", text)
		}
	})

	code, out := runDiff(t, bin, a, b, "--json")
	var r diff.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if code != 0 || r.Same || r.Unchanged != 0 || len(r.Processes) != 1 {
		t.Fatalf("exit %d: %s", code, out)
	}
	p := &r.Processes[0]
	if p.Status != "changed" || p.PidA == nil || *p.PidA != trA.Pid || p.PidB == nil || *p.PidB != trB.Pid || p.Exit != nil ||
		p.Counts != nil || len(p.Records) != 0 || len(p.Meshes) != 0 || p.Trimmed {
		t.Errorf("process: %+v", p)
	}

	wantGrowth, most := checkDiffChips(t, p, trA, trB, true)

	// Sites: the three statements that leak appeared, by their lines; the
	// changes of all sites sum to the truths' differences.
	type sum struct{ inuse, peak, alloc int64 }
	sums := map[string]*sum{}
	appeared := map[int]diff.SiteDiff{}
	for _, s := range p.Sites {
		k := fmt.Sprintf("%d %s", s.Device, s.Type)
		if sums[k] == nil {
			sums[k] = &sum{}
		}
		sm := sums[k]
		sm.inuse += int64(s.B.InUseBytes) - int64(s.A.InUseBytes)
		sm.peak += int64(s.B.PeakBytes) - int64(s.A.PeakBytes)
		sm.alloc += int64(s.B.AllocBytes) - int64(s.A.AllocBytes)
		switch s.Status {
		case "appeared":
			appeared[siteLine(s.Site)] = s
		case "vanished":
			t.Errorf("a site vanished: %+v at %+v", s, s.Site)
		}
	}
	lines := map[int]bool{}
	allocated := map[string]int64{}
	for _, lk := range basicLeaks {
		line := sourceLine(t, lk.stmt)
		lines[line] = true
		allocated["0 "+lk.typ] += int64(lk.size)
		s, ok := appeared[line]
		if !ok || s.Device != 0 || s.Type != lk.typ || s.B != (diff.SiteFig{InUseBytes: lk.size, InUseObjects: 1, AllocBytes: lk.size, AllocObjects: 1, PeakBytes: s.B.PeakBytes}) {
			t.Errorf("ttwork.cpp:%d (%s): appeared %v, %+v", line, lk.stmt, ok, s)
		}
	}
	for line, s := range appeared {
		if !lines[line] {
			t.Errorf("a site appeared at ttwork.cpp:%d: %+v", line, s)
		}
	}
	for k, sm := range sums {
		var dev int32
		var typ string
		fmt.Sscanf(k, "%d %s", &dev, &typ)
		name := map[string]string{"DRAM": "dram_bytes", "L1": "l1_bytes", "L1_SMALL": "l1_small_bytes", "TRACE": "trace_bytes", "SYSTEM_MEMORY": "system_memory_bytes"}[typ]
		ea, pa := trA.fig(dev, name)
		eb, pb := trB.fig(dev, name)
		if sm.inuse != int64(eb)-int64(ea) || sm.peak != int64(pb)-int64(pa) || sm.alloc != allocated[k] {
			t.Errorf("sites of %s: in use %+d, at the peak %+d, allocated %+d; truths: end %+d, peak %+d; leaked statements %+d",
				k, sm.inuse, sm.peak, sm.alloc, int64(eb)-int64(ea), int64(pb)-int64(pa), allocated[k])
		}
	}

	// Growth: every counter higher in B, and the gate just past the most.
	gotGrowth := map[string]uint64{}
	for _, g := range r.Growth {
		gotGrowth[fmt.Sprintf("%d %s %s", g.Device, g.Counter, g.At)] = g.Bytes
	}
	if fmt.Sprint(gotGrowth) != fmt.Sprint(wantGrowth) {
		t.Errorf("growth %v, truths %v", gotGrowth, wantGrowth)
	}
	for _, c := range []struct {
		limit string
		code  int
	}{{fmt.Sprint(most), 0}, {fmt.Sprint(most - 1), 13}, {"0", 13}, {"1000000%", 13}} {
		if code, _ := runDiff(t, bin, a, b, "--fail-on-growth", c.limit); code != c.code {
			t.Errorf("--fail-on-growth %s: exit %d, want %d", c.limit, code, c.code)
		}
	}

	// The table names the statements.
	_, text := runDiff(t, bin, a, b)
	for line := range lines {
		if want := fmt.Sprintf("ttwork.cpp:%d)", line); !bytes.Contains(text, []byte(want)) {
			t.Errorf("the table does not name %s:\n%s", want, text)
		}
	}
	var ls []int
	for l := range lines {
		ls = append(ls, l)
	}
	sort.Ints(ls)
	t.Logf("diff named ttwork.cpp lines %v; growth up to %d bytes", ls, most)
}

// siteLine is the ttwork.cpp line of a site's scenario frame (0: none).
func siteLine(s *diff.SiteRef) int {
	if s == nil {
		return 0
	}
	for _, f := range s.Native {
		if strings.Contains(f.Function, "scenario_basic") && strings.HasSuffix(f.File, "ttwork.cpp") {
			return f.Line
		}
	}
	return 0
}

// checkDiffChips checks p's chips against two runs' truths: exactly the
// counters (L1 per core among them), leaks and (withAllocs) allocator
// numbers (per-core buffer bytes too) the truths differ in, with their
// values. It returns the growth the truths make ("chip
// counter at" to bytes) and the most of it.
func checkDiffChips(t *testing.T, p *diff.ProcessDiff, trA, trB *diffTruth, withAllocs bool) (map[string]uint64, uint64) {
	t.Helper()
	// Chips: the counters the truths differ in, with their numbers.
	chips := map[int32]bool{}
	for _, tr := range []*diffTruth{trA, trB} {
		for _, d := range tr.Devices {
			chips[d.Device] = true
		}
	}
	got := map[string]diff.CounterDiff{}
	leaks := map[string]diff.LeakDiff{}
	allocs := map[string]diff.AllocDiff{}
	for _, c := range p.Chips {
		if !chips[c.Device] || c.Status != "changed" || c.MinL1Headroom != nil {
			t.Errorf("chip %+v", c)
		}
		for _, cd := range c.Counters {
			got[fmt.Sprintf("%d %s", c.Device, cd.Counter)] = cd
		}
		for _, l := range c.Leaks {
			leaks[fmt.Sprintf("%d %s", c.Device, l.Type)] = l
		}
		for _, ad := range c.Allocator {
			allocs[fmt.Sprintf("%d %s", c.Device, ad.Type)] = ad
		}
	}
	wantGrowth := map[string]uint64{}
	var most uint64
	for dev := range chips {
		for _, name := range append(slices.Clone(diffCounters), l1CoreCounter) {
			ea, pa := trA.fig(dev, name)
			eb, pb := trB.fig(dev, name)
			k := fmt.Sprintf("%d %s", dev, name)
			cd, ok := got[k]
			delete(got, k)
			if ea == eb && pa == pb {
				if ok {
					t.Errorf("%s unchanged in the truths, in the diff: %+v", k, cd)
				}
				continue
			}
			if !ok || cd.End.A != ea || cd.End.B != eb || cd.Peak.A != pa || cd.Peak.B != pb || cd.PeakAtA == nil || cd.PeakAtB == nil {
				t.Errorf("%s: diff %+v, truths: end %d -> %d, peak %d -> %d", k, cd, ea, eb, pa, pb)
			}
			if name == "live_buffers" || name == "cb_registered_bytes" || name == "cb_resident_total_bytes" {
				continue // not what --fail-on-growth judges
			}
			for _, v := range [][3]any{{"end", ea, eb}, {"peak", pa, pb}} {
				if x, y := v[1].(uint64), v[2].(uint64); y > x {
					wantGrowth[fmt.Sprintf("%s %s", k, v[0])] = y - x
					most = max(most, y-x)
				}
			}
		}
		// Leaks and the allocator's numbers.
		lk := func(tr *diffTruth, typ string) (n, bytes uint64) {
			for _, l := range tr.Leaks {
				if l.Device == dev && l.Type == typ {
					n, bytes = n+1, bytes+l.Size
				}
			}
			return n, bytes
		}
		for _, typ := range []string{"DRAM", "L1", "L1_SMALL", "TRACE", "SYSTEM_MEMORY"} {
			na, ba := lk(trA, typ)
			nb, bb := lk(trB, typ)
			k := fmt.Sprintf("%d %s", dev, typ)
			l, ok := leaks[k]
			delete(leaks, k)
			if (na != nb || ba != bb) != ok || l.Count.A != na || l.Count.B != nb || l.Bytes.A != ba || l.Bytes.B != bb {
				t.Errorf("leaks %s: diff %+v, truths %d (%d B) -> %d (%d B)", k, l, na, ba, nb, bb)
			}
			al := func(tr *diffTruth) (x, y, z uint64) {
				for _, d := range tr.Devices {
					if d.Device == dev {
						s := d.Allocator[typ]
						return s.Allocated, s.Free, s.LargestFree
					}
				}
				return 0, 0, 0
			}
			if typ == "SYSTEM_MEMORY" || !withAllocs {
				continue // upstream has no bank manager for it
			}
			xa, ya, za := al(trA)
			xb, yb, zb := al(trB)
			// Per-core (HYBRID) buffer bytes, beside the lockstep numbers.
			pca, pcb := trA.perCore[fmt.Sprintf("%d %s", dev, typ)], trB.perCore[fmt.Sprintf("%d %s", dev, typ)]
			k = fmt.Sprintf("%d %s", dev, strings.ToLower(typ))
			ad, ok := allocs[k]
			delete(allocs, k)
			if changed := xa != xb || ya != yb || za != zb || pca != pcb; changed != ok {
				t.Errorf("allocator %s: in the diff %v, truths %d/%d/%d (per-core %d) -> %d/%d/%d (per-core %d)", k, ok, xa, ya, za, pca, xb, yb, zb, pcb)
				continue
			}
			if ok && (*ad.Allocated.A != xa || *ad.Allocated.B != xb || *ad.Free.A != ya || *ad.Free.B != yb || *ad.LargestFree.A != za || *ad.LargestFree.B != zb ||
				ad.PerCoreBytes.A == nil || *ad.PerCoreBytes.A != pca || ad.PerCoreBytes.B == nil || *ad.PerCoreBytes.B != pcb) {
				t.Errorf("allocator %s: diff %+v, truths %d/%d/%d (per-core %d) -> %d/%d/%d (per-core %d)", k, ad, xa, ya, za, pca, xb, yb, zb, pcb)
			}
		}
	}
	for k, cd := range got {
		t.Errorf("%s in the diff, not in the truths: %+v", k, cd)
	}
	for k, l := range leaks {
		t.Errorf("leaks %s in the diff, not in the truths: %+v", k, l)
	}
	for k := range allocs {
		t.Errorf("allocator %s in the diff only", k)
	}
	return wantGrowth, most
}
