package main

// tttrace diff end to end, windows and TT-NN ops: two runs of a replica
// scenario with a known change, whose diff names exactly what the replica's
// truths say changed and nothing else.
//
//   - windows: the windows scenario, marked "warmup" and "steady" by
//     `tttrace mark`, then again with --spike (one more 32 KiB DRAM buffer
//     in window 1, freed there): window 1's peaks and memory_stats differ
//     as the truths' windows do, the spike's statement appears as a site by
//     its line, no chip counter differs (the run's peak is window 0's), and
//     --fail-on-growth judges the window's peak alone. Each run's report
//     replays byte for byte (windows included).
//   - ops: the TT-NN ops scenario, then with --leak: the ops rows that
//     differ are those the truths' rows differ in, with their figures;
//     chips, leaks and the mesh's allocator as the truths say.
//
// In both, the --html comparison page shows the changes in Chromium, every
// number the --json object's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks/diff"
)

// diffScenario runs ttwork's scenario under tttrace in dir, with relative
// paths (two runs with the same arguments have the same command line): the
// report to report.txt, the NDJSON saved to run.ndjson, the truth to
// truth.json. With marks, tttrace mark starts window N named marks[N-1] at
// the workload's N-th window point (--window-file). The workload holds
// until tttrace has read its allocations (stacks need it alive). It
// returns the NDJSON's path and the truth.
func diffScenario(t *testing.T, bin, variant, dir string, marks []string, work ...string) (string, []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, truthPath := filepath.Join(dir, "run.ndjson"), filepath.Join(dir, "truth.json")
	done := make(chan struct{})
	defer close(done)
	go releaseHold(filepath.Join(dir, "hold"), truthPath, out, done)
	args := []string{"-o", "report.txt", "--save", "run.ndjson", "--lib", filepath.Join(variant, "libtt_metal.so"), "--",
		filepath.Join(variant, "ttwork"), "--truth", "truth.json", "--hold-file", "hold"}
	if len(marks) > 0 {
		args = append(args, "--window-file", "win")
	}
	args = append(args, work...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Whatever happens, the workload does not wait forever.
	defer func() {
		for n := range marks {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("win.%d", n+1)), nil, 0o644)
		}
	}()
	for i, name := range marks {
		n := i + 1
		re := regexp.MustCompile(fmt.Sprintf(`window %d pid \d+`, n))
		waitFor(t, func() bool { return re.MatchString(log.String()) }, fmt.Sprintf("the workload at window %d", n))
		if o, err := exec.Command(bin, "mark", fmt.Sprint(cmd.Process.Pid), name).CombinedOutput(); err != nil {
			t.Fatalf("tttrace mark: %v\n%s", err, o)
		}
		waitFor(t, func() bool {
			return strings.Contains(log.String(), fmt.Sprintf("tttrace: window %d (%s) started", n, name))
		}, fmt.Sprintf("tttrace to start window %d", n))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("win.%d", n)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, log.String())
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	return out, b
}

// diffTruths decodes a truth as diffTruth (chips, allocators, leaks) and
// into extra.
func diffTruths(t *testing.T, b []byte, extra any) *diffTruth {
	t.Helper()
	var tr diffTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	tr.readL1(t, b)
	if extra != nil {
		if err := json.Unmarshal(b, extra); err != nil {
			t.Fatal(err)
		}
	}
	return &tr
}

// diffJSON runs tttrace diff a b --json and decodes it.
func diffJSON(t *testing.T, bin, a, b string) *diff.Result {
	t.Helper()
	code, out := runDiff(t, bin, a, b, "--json")
	var r diff.Result
	if err := json.Unmarshal(out, &r); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	return &r
}

// checkSitesSum checks that p's site changes, summed per chip and type,
// are the truths' changes of that type's bytes at the end and at the peak.
func checkSitesSum(t *testing.T, p *diff.ProcessDiff, trA, trB *diffTruth) {
	t.Helper()
	type sum struct{ inuse, peak int64 }
	sums := map[string]*sum{}
	for _, s := range p.Sites {
		k := fmt.Sprintf("%d %s", s.Device, s.Type)
		if sums[k] == nil {
			sums[k] = &sum{}
		}
		sums[k].inuse += int64(s.B.InUseBytes) - int64(s.A.InUseBytes)
		sums[k].peak += int64(s.B.PeakBytes) - int64(s.A.PeakBytes)
	}
	names := map[string]string{"DRAM": "dram_bytes", "L1": "l1_bytes", "L1_SMALL": "l1_small_bytes", "TRACE": "trace_bytes", "SYSTEM_MEMORY": "system_memory_bytes"}
	chips := map[int32]bool{}
	for _, tr := range []*diffTruth{trA, trB} {
		for _, d := range tr.Devices {
			chips[d.Device] = true
		}
	}
	for dev := range chips {
		for typ, name := range names {
			ea, pa := trA.fig(dev, name)
			eb, pb := trB.fig(dev, name)
			k := fmt.Sprintf("%d %s", dev, typ)
			sm := sums[k]
			delete(sums, k)
			if sm == nil {
				sm = &sum{}
			}
			if sm.inuse != int64(eb)-int64(ea) || sm.peak != int64(pb)-int64(pa) {
				t.Errorf("sites of %s: in use %+d, at the peak %+d; truths: end %+d, peak %+d", k, sm.inuse, sm.peak, int64(eb)-int64(ea), int64(pb)-int64(pa))
			}
		}
	}
	for k, sm := range sums {
		t.Errorf("sites of %s, a chip no truth has: %+v", k, sm)
	}
}

// checkGate checks --fail-on-growth just at and just under the most growth.
func checkGate(t *testing.T, bin, a, b string, most uint64) {
	t.Helper()
	if most == 0 {
		t.Fatal("no growth to gate on")
	}
	for _, c := range []struct {
		limit string
		code  int
	}{{fmt.Sprint(most), 0}, {fmt.Sprint(most - 1), 13}} {
		if code, _ := runDiff(t, bin, a, b, "--fail-on-growth", c.limit); code != c.code {
			t.Errorf("--fail-on-growth %s: exit %d, want %d", c.limit, code, c.code)
		}
	}
}

func TestE2EDiffWindows(t *testing.T) {
	bin, replica := setup(t)
	variant := filepath.Join(replica, "gcc-O3-dwarf-zstd") // DWARF: the spike's site has its line
	tmp := t.TempDir()
	marks := []string{"warmup", "steady"}
	type winTruths struct {
		Windows []windowTruth `json:"windows"`
	}
	var wA, wB winTruths
	a, ta := diffScenario(t, bin, variant, filepath.Join(tmp, "a"), marks, "--scenario", "windows")
	again, _ := diffScenario(t, bin, variant, filepath.Join(tmp, "again"), marks, "--scenario", "windows")
	b, tb := diffScenario(t, bin, variant, filepath.Join(tmp, "b"), marks, "--scenario", "windows", "--spike")
	trA, trB := diffTruths(t, ta, &wA), diffTruths(t, tb, &wB)
	if len(wA.Windows) != 3 || len(wB.Windows) != 3 {
		t.Fatalf("truth windows: %+v %+v", wA, wB)
	}

	// Each run's report replays byte for byte, its windows included.
	for _, run := range []string{a, b} {
		replayed := filepath.Join(filepath.Dir(run), "replayed.txt")
		if code := runTool(t, bin, "report", run, "-o", replayed); code != 0 {
			t.Fatalf("tttrace report: exit %d", code)
		}
		live := filepath.Join(filepath.Dir(run), "report.txt")
		sameBytes(t, "the report of "+run, live, replayed)
		if txt, _ := os.ReadFile(live); !bytes.Contains(txt, []byte("    window 1 (warmup, ")) {
			t.Errorf("the report names no window:\n%s", txt)
		}
	}

	// Two runs of one workload with the same marks: the same.
	if r := diffJSON(t, bin, a, again); !r.Same || len(r.Growth) != 0 {
		t.Errorf("two runs of one workload: %+v", r.Processes)
	}

	r := diffJSON(t, bin, a, b)
	if r.Same || len(r.Processes) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	p := &r.Processes[0]
	if p.Status != "changed" || p.Exit != nil || p.Counts != nil || len(p.Records) != 0 || len(p.Meshes) != 0 || len(p.Ops) != 0 || p.Trimmed ||
		p.WindowsDropped != nil {
		t.Errorf("process: %+v", p)
	}
	wantGrowth, _ := checkDiffChips(t, p, trA, trB, true)
	checkSitesSum(t, p, trA, trB)

	// The sites: the spike's statement appeared, allocating 32 KiB once and
	// holding nothing at the end or at the chip's peak; nothing else.
	line := sourceLine(t, "BufferPtr spike = Buffer::create(a, 32 << 10")
	if len(p.Sites) != 1 {
		t.Errorf("sites: %+v", p.Sites)
	}
	for _, s := range p.Sites {
		if s.Status != "appeared" || s.Device != 92 || s.Type != "DRAM" || s.B != (diff.SiteFig{AllocBytes: 32 << 10, AllocObjects: 1}) ||
			siteLineIn(s.Site, "scenario_windows") != line {
			t.Errorf("site %+v at %+v; want the spike's, ttwork.cpp:%d", s, s.Site, line)
		}
	}

	// The windows: exactly the peaks and memory_stats the truths' windows
	// differ in, with their values.
	want := map[string][2]uint64{} // "window chip counter" -> A, B
	wantStats := map[string][4]uint64{}
	var most uint64
	for i := range wA.Windows {
		ta, tb := &wA.Windows[i], &wB.Windows[i]
		if ta.Name != tb.Name || (i > 0 && ta.Name != marks[i-1]) {
			t.Fatalf("truth window %d: %q / %q", i, ta.Name, tb.Name)
		}
		peaks := func(tw *windowTruth, dev int32) (map[string]uint64, map[string]uint64) {
			for _, d := range tw.Devices {
				if d.Device == dev {
					return d.Peaks, d.Levels
				}
			}
			return nil, nil
		}
		devs := map[int32]bool{}
		for _, tw := range []*windowTruth{ta, tb} {
			for _, d := range tw.Devices {
				devs[d.Device] = true
			}
		}
		for dev := range devs {
			pa, la := peaks(ta, dev)
			pb, lb := peaks(tb, dev)
			// The truths' windows have no L1 per core: the spike is a DRAM
			// buffer, and no window's l1_busiest_core_bytes may differ.
			for _, name := range diffCounters {
				if pa[name] != pb[name] {
					want[fmt.Sprintf("%d %d %s", i, dev, name)] = [2]uint64{pa[name], pb[name]}
					if pb[name] > pa[name] && name != "live_buffers" && name != "cb_registered_bytes" && name != "cb_resident_total_bytes" {
						wantGrowth[fmt.Sprintf("%d %s window_peak %d", dev, name, i)] = pb[name] - pa[name]
						most = max(most, pb[name]-pa[name])
					}
				}
			}
			for typ, name := range memStatsTypes {
				if pa[name] != pb[name] || la[name] != lb[name] {
					wantStats[fmt.Sprintf("%d %d %s", i, dev, typ)] = [4]uint64{la[name], lb[name], pa[name], pb[name]}
				}
			}
		}
	}
	got := map[string][2]uint64{}
	gotStats := map[string][4]uint64{}
	for _, w := range p.Windows {
		if w.Status != "changed" || w.IndexA == nil || w.IndexB == nil || *w.IndexA != *w.IndexB || w.NameB != "" {
			t.Errorf("window %+v", w)
			continue
		}
		for _, c := range w.Chips {
			for _, pk := range c.Peaks {
				got[fmt.Sprintf("%d %d %s", *w.IndexA, c.Device, pk.Counter)] = [2]uint64{pk.Peak.A, pk.Peak.B}
				if pk.PeakAtA == nil || pk.PeakAtB == nil {
					t.Errorf("window %d chip %d %s: no time", *w.IndexA, c.Device, pk.Counter)
				}
			}
			for _, m := range c.MemoryStats {
				if m.BytesInUse.A == nil || m.BytesInUse.B == nil || m.PeakBytesInUse.A == nil || m.PeakBytesInUse.B == nil ||
					!optSame(m.BytesLimit) || !optSame(m.LargestFreeBlockBytes) {
					t.Errorf("window %d chip %d memory_stats %+v: the allocator's numbers changed or in use unknown", *w.IndexA, c.Device, m)
					continue
				}
				gotStats[fmt.Sprintf("%d %d %s", *w.IndexA, c.Device, m.Type)] = [4]uint64{*m.BytesInUse.A, *m.BytesInUse.B, *m.PeakBytesInUse.A, *m.PeakBytesInUse.B}
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
		t.Errorf("windows' peaks:\n  diff   %v\n  truths %v", got, want)
	}
	if fmt.Sprint(gotStats) != fmt.Sprint(wantStats) || len(wantStats) == 0 {
		t.Errorf("windows' memory_stats (in use A, B, peak A, B):\n  diff   %v\n  truths %v", gotStats, wantStats)
	}

	// Growth: the window's peak alone (the chips' counters are the same).
	gotGrowth := map[string]uint64{}
	for _, g := range r.Growth {
		k := fmt.Sprintf("%d %s %s", g.Device, g.Counter, g.At)
		if g.Window != nil {
			k += fmt.Sprintf(" %d", g.Window.Index)
			if g.Window.Name != marks[g.Window.Index-1] {
				t.Errorf("growth in window %+v", g.Window)
			}
		}
		gotGrowth[k] = g.Bytes
	}
	if fmt.Sprint(gotGrowth) != fmt.Sprint(wantGrowth) {
		t.Errorf("growth %v, truths %v", gotGrowth, wantGrowth)
	}
	checkGate(t, bin, a, b, most)

	// The table names the window and the statement.
	_, text := runDiff(t, bin, a, b)
	for _, s := range []string{"  windows (peaks in the window; memory_stats at its end):\n", "    window 1 (warmup) (index A 1, B 1)\n",
		"at the peak of window 1 (warmup)", fmt.Sprintf("ttwork.cpp:%d)", line)} {
		if !bytes.Contains(text, []byte(s)) {
			t.Errorf("the table lacks %q:\n%s", s, text)
		}
	}
	diffPage(t, bin, a, b, "processes.0.windows.0.chips.0.peaks.0.peak.b", "processes.0.windows.0.chips.0.memory_stats.0.peak_bytes_in_use.b")
	t.Logf("%d window peak(s) and %d memory_stats changed as the truths say; growth %v", len(want), len(wantStats), gotGrowth)
}

func TestE2EDiffOps(t *testing.T) {
	bin, replica := setup(t)
	variant := filepath.Join(replica, "gcc-O2") // TT-NN 2026
	if _, err := os.Stat(filepath.Join(variant, "_ttnn.so")); err != nil {
		t.Fatalf("gcc-O2 has no TT-NN stand-in: %v (make replica)", err)
	}
	tmp := t.TempDir()
	type opsTruth struct {
		Ops []devices.OpRow `json:"ops"`
	}
	var oA, oB opsTruth
	a, ta := diffScenario(t, bin, variant, filepath.Join(tmp, "a"), nil, "--scenario", "ops")
	again, _ := diffScenario(t, bin, variant, filepath.Join(tmp, "again"), nil, "--scenario", "ops")
	b, tb := diffScenario(t, bin, variant, filepath.Join(tmp, "b"), nil, "--scenario", "ops", "--leak")
	trA, trB := diffTruths(t, ta, &oA), diffTruths(t, tb, &oB)
	if len(oA.Ops) == 0 {
		t.Fatal("the truth has no ops rows")
	}

	if r := diffJSON(t, bin, a, again); !r.Same {
		t.Errorf("two runs of one workload: %+v", r.Processes)
	}
	r := diffJSON(t, bin, a, b)
	if len(r.Processes) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	p := &r.Processes[0]
	if p.Status != "changed" || p.Exit != nil || p.Counts != nil || len(p.Records) != 0 || len(p.Windows) != 0 || p.OpsDropped != nil {
		t.Errorf("process: %+v", p)
	}
	// The chips' own allocators held nothing in either run (the scenario's
	// buffers are its 1x1 mesh's; A closed the chip, whose truth then has
	// no allocator): not compared with the truths, and no change. The mesh
	// B left open appeared, with its allocator's numbers as its truth's.
	wantGrowth, most := checkDiffChips(t, p, trA, trB, false)
	checkSitesSum(t, p, trA, trB)
	for _, c := range p.Chips {
		if len(c.Allocator) != 0 {
			t.Errorf("chip %d: allocator %+v", c.Device, c.Allocator)
		}
	}
	var meshes struct {
		Meshes []struct {
			Chips     []int32 `json:"chips"`
			Allocator map[string]struct {
				Allocated   uint64 `json:"total_allocated_bytes"`
				Free        uint64 `json:"total_free_bytes"`
				LargestFree uint64 `json:"largest_free_block_bytes"`
			} `json:"allocator"`
		} `json:"meshes"`
	}
	if err := json.Unmarshal(tb, &meshes); err != nil || len(meshes.Meshes) != 1 {
		t.Fatalf("truth B meshes: %v %s", err, tb)
	}
	if tm := meshes.Meshes[0]; len(p.Meshes) != 1 || p.Meshes[0].Status != "appeared" || fmt.Sprint(p.Meshes[0].Chips) != fmt.Sprint(tm.Chips) ||
		len(p.Meshes[0].Allocator) != len(tm.Allocator) {
		t.Errorf("meshes %+v; truth B %+v", p.Meshes, tm)
	} else {
		for _, ad := range p.Meshes[0].Allocator {
			w := tm.Allocator[strings.ToUpper(ad.Type)]
			if ad.Allocated.A != nil || *ad.Allocated.B != w.Allocated || *ad.Free.B != w.Free || *ad.LargestFree.B != w.LargestFree {
				t.Errorf("mesh allocator %s: %+v; truth %+v", ad.Type, ad, w)
			}
		}
	}

	// The ops rows: exactly those the truths' rows differ in.
	fig := func(r *devices.OpRow) diff.OpFig {
		return diff.OpFig{Calls: r.Calls, Allocs: r.Allocs, Bytes: r.Bytes, PeakDRAM: r.PeakDRAM, PeakL1: r.PeakL1, CBBytes: r.CBBytes,
			AllocFailures: r.AllocFailures, LeakedBuffers: r.LeakedBuffers, LeakedBytes: r.LeakedBytes}
	}
	rows := func(rs []devices.OpRow) map[diff.OpKey]diff.OpFig {
		m := map[diff.OpKey]diff.OpFig{}
		for i := range rs {
			m[diff.OpKey{Name: rs[i].Name, DeviceOp: rs[i].DeviceOp}] = fig(&rs[i])
		}
		return m
	}
	ra, rb := rows(oA.Ops), rows(oB.Ops)
	var want, got []string
	for k, fa := range ra {
		if fb, ok := rb[k]; !ok || fb != fa {
			want = append(want, fmt.Sprintf("%s > %s: %+v -> %+v", k.Name, k.DeviceOp, fa, rb[k]))
		}
	}
	for k, fb := range rb {
		if _, ok := ra[k]; !ok {
			want = append(want, fmt.Sprintf("%s > %s: %+v -> %+v", k.Name, k.DeviceOp, diff.OpFig{}, fb))
		}
	}
	for _, o := range p.Ops {
		got = append(got, fmt.Sprintf("%s > %s: %+v -> %+v", o.Name, o.DeviceOp, o.A, o.B))
		if o.Status != "grew" {
			t.Errorf("op %s > %s: %s; --leak only keeps buffers", o.Name, o.DeviceOp, o.Status)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
		t.Errorf("ops rows:\n  diff:\n    %s\n  truths:\n    %s", strings.Join(got, "\n    "), strings.Join(want, "\n    "))
	}

	gotGrowth := map[string]uint64{}
	for _, g := range r.Growth {
		gotGrowth[fmt.Sprintf("%d %s %s", g.Device, g.Counter, g.At)] = g.Bytes
	}
	if fmt.Sprint(gotGrowth) != fmt.Sprint(wantGrowth) {
		t.Errorf("growth %v, truths %v", gotGrowth, wantGrowth)
	}
	checkGate(t, bin, a, b, most)

	_, text := runDiff(t, bin, a, b)
	if !bytes.Contains(text, []byte("  TT-NN ops (by op and device op):\n")) || !bytes.Contains(text, []byte("ttnn.matmul > ")) {
		t.Errorf("the table names no op:\n%s", text)
	}
	diffPage(t, bin, a, b, "processes.0.ops.0.b.leaked_bytes", "processes.0.ops.0.a.leaked_buffers")
	t.Logf("%d ops rows changed as the truths say", len(want))
}

// diffPage opens tttrace diff a b --html in Chromium: no console error or
// request, every number the --json object's, and the fields named shown.
func diffPage(t *testing.T, bin, a, b string, fields ...string) {
	t.Run("html", func(t *testing.T) {
		browser := chromium(t)
		dir := t.TempDir()
		page, js := filepath.Join(dir, "diff.html"), filepath.Join(dir, "diff.json")
		if code := runTool(t, bin, "diff", a, b, "--json", "-o", js, "--html", page); code != 0 {
			t.Fatalf("tttrace diff --html: exit %d", code)
		}
		bp := openPage(t, browser, page)
		for _, e := range bp.Errors {
			t.Errorf("the diff page in the browser: %s", e)
		}
		seen := checkDOM(t, bp.Numbers, lastLine(t, js))
		for _, f := range fields {
			if seen[f] == 0 {
				t.Errorf("the diff page shows no %s", f)
			}
		}
	})
}

// siteLineIn is the line of a site's frame in fn (0: none).
func siteLineIn(s *diff.SiteRef, fn string) int {
	if s == nil {
		return 0
	}
	for _, f := range s.Native {
		if strings.Contains(f.Function, fn) && strings.HasSuffix(f.File, "ttwork.cpp") {
			return f.Line
		}
	}
	return 0
}

// optSame says o is the same in both runs.
func optSame(o diff.OptNum) bool {
	return (o.A == nil) == (o.B == nil) && (o.A == nil || *o.A == *o.B)
}
