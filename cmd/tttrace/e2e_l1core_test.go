package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// TestE2EL1PerCore: L1 per core (l1_busiest_core, peak_l1_busiest_core)
// against the replica's truth, scenario cb_cache (a program cache whose
// registered CBs are several times L1, a trace replaying a per-core peak,
// a mesh program, a HYBRID chip with per-core buffers and, beside them,
// resident CBs on other cores, lockstep L1 buffers beside CBs), `--` and
// python. The replica keeps L1 per core at every step (each reservation
// and release, per-core buffer, dispatch, replay and close) as the summary
// defines it, and what the busiest core really holds (it knows each bank's
// core): on every chip, now and at the peak, the core, bank, buffer and CB
// bytes and upper_bound are the truth's, the total too where it is not an
// upper bound, and at least what the busiest core really holds where it is.
// A per-core request refused on its first core (chip 93, bank 0) is an
// alloc_failed with that core's allocator, bank, numbers and cause as the
// replica's two lists give them.
func TestE2EL1PerCore(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "python", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			sum, tr := trace(t, r)
			for _, d := range checkL1PerCore(t, sum, tr, nil) {
				t.Error(d)
			}
			for _, d := range checkPerCoreFailures(t, sum, tr) {
				t.Error(d)
			}
		})
	}
}

// checkPerCoreFailures compares tttrace's alloc_failed records of per-core
// (HYBRID, allocator_id != 0) requests with the replica's failures of
// them, in order: the allocator and its bank, the span, and the core's own
// numbers and cause (its bank seen through the lockstep list and its own,
// which the truth computes from the replica's two lists; not the lockstep
// list's statistics TT-Metal's message prints).
func checkPerCoreFailures(t *testing.T, sum *devices.Summary, tr *truth) (diffs []string) {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var ft struct {
		Failures []struct {
			Device      int32           `json:"device"`
			Span        uint64          `json:"span"`
			Cause       string          `json:"cause"`
			AllocatorID uint32          `json:"allocator_id"`
			Bank        uint32          `json:"bank"`
			Before      allocTruthStats `json:"before"`
			Core        allocTruthStats `json:"core"`
		} `json:"alloc_failures"`
	}
	if err := json.Unmarshal(b, &ft); err != nil {
		t.Fatalf("truth: %v", err)
	}
	var want []int
	for i, f := range ft.Failures {
		if f.AllocatorID != 0 {
			want = append(want, i)
		}
	}
	if len(want) == 0 {
		t.Fatal("truth: no failed per-core request: the test proves nothing")
	}
	var got []devices.AllocFailure
	for _, p := range sum.Processes {
		if p.Pid != tr.Pid {
			continue
		}
		for _, f := range p.AllocFailures {
			if f.AllocatorID != nil && *f.AllocatorID != 0 {
				got = append(got, f)
			}
		}
	}
	if len(got) != len(want) {
		return []string{fmt.Sprintf("%d failed per-core requests, the replica failed %d", len(got), len(want))}
	}
	u := func(p *uint64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	for k, i := range want {
		w, g := ft.Failures[i], got[k]
		if w.Core == w.Before {
			t.Fatalf("truth: failure %d: the core's numbers are the lockstep list's: the test proves nothing", i)
		}
		label := fmt.Sprintf("per-core failure %d (chip %d, allocator %d)", k, w.Device, w.AllocatorID)
		if g.Device == nil || *g.Device != w.Device {
			diffs = append(diffs, fmt.Sprintf("%s: device %v", label, g.Device))
		}
		if *g.AllocatorID != w.AllocatorID {
			diffs = append(diffs, fmt.Sprintf("%s: allocator_id %d", label, *g.AllocatorID))
		}
		if g.Bank == nil || *g.Bank != w.Bank {
			diffs = append(diffs, fmt.Sprintf("%s: bank %v, want %d", label, g.Bank, w.Bank))
		}
		for _, c := range []struct {
			key  string
			got  *uint64
			want uint64
		}{
			{"span", g.Span, w.Span},
			{"total_allocated_bytes", g.TotalAllocated, w.Core.Allocated},
			{"total_free_bytes", g.TotalFree, w.Core.Free},
			{"largest_free_block_bytes", g.LargestFree, w.Core.LargestBlock},
		} {
			if c.got == nil || *c.got != c.want {
				diffs = append(diffs, fmt.Sprintf("%s: %s = %v, want %d (why: %q)", label, c.key, u(c.got), c.want, g.Why))
			}
		}
		if g.Cause != w.Cause {
			diffs = append(diffs, fmt.Sprintf("%s: cause %q, want %q (why: %q)", label, g.Cause, w.Cause, g.Why))
		}
	}
	return diffs
}

// TestE2EL1PerCoreAll: the same with tttrace --all, the workload started
// after tttrace (the library probed through --lib before it runs). As the
// other --all tests, it sees every process on the machine: its workload is
// found by pid, and it is not to be run beside other replica workloads.
func TestE2EL1PerCoreAll(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	ready, out, truthPath := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	tt, tout := start(t, bin, "--all", "--json", "-o", out, "--ready-file", ready, "--lib", filepath.Join(dir, "libtt_metal.so"))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "cb_cache", "--leak", "--truth", truthPath)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Contains(b, []byte(`"process_summary"`)) || strings.Contains(tout.String(), "exited")
	}, "process report")
	tt.Process.Signal(syscall.SIGINT)
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	tr := readTruth(t, truthPath)
	tr.path = truthPath
	for _, d := range checkL1PerCore(t, lastSummary(t, out), tr, nil) {
		t.Error(d)
	}
}

// lateTruth is the replica's record of the dispatches since the attach
// point: which program's CBs were laid out before it (a cached program),
// and each chip's residency right after (the truth's busiest core and the
// sum over cores).
type lateTruth struct {
	Dispatches []struct {
		Program             *string `json:"program"`
		ReplayTrace         int32   `json:"replay_trace"`
		LaidOutBeforeAttach bool    `json:"laid_out_before_attach"`
		Chips               []struct {
			Device        int32  `json:"device"`
			MaxCoreBytes  uint64 `json:"max_core_bytes"`
			ResidentBytes uint64 `json:"resident_bytes"`
		} `json:"chips"`
	} `json:"cb_dispatches"`
	Residency []struct {
		Device       int32  `json:"device"`
		MaxCoreBytes uint64 `json:"max_core_bytes"`
	} `json:"cb_residency"`
}

// TestE2EL1PerCoreLateAttach: tttrace -p attached to a process whose
// program cache is warm (scenario cb_cache --cache-before-go: its 320
// programs laid out and dispatched, their CBs resident on every core of
// chip 90, before the attach; after it, 40 cache hits, new programs, a
// trace replayed, other chips, and 3 cache hits at the end). tttrace never
// sees a cached program laid out, and a dispatch does not say which CBs
// it writes: each dispatch of a program laid out before the attach is
// counted (dispatches_unknown, exactly the truth's) and makes nothing
// resident, so a core holds what tttrace last saw dispatched there. On
// each chip cb_bytes and cb_resident_total_bytes are the truth's right
// after the chip's last dispatch or replay of a program laid out since the
// attach (on chip 90 not what it holds at the end: the test fails if the
// truth says they are the same), cb_registered_bytes the programs laid out
// since, the peaks the truth's since the attach (the largest states are
// ones tttrace saw here), and L1 per core on the other chips as
// TestE2EL1PerCore checks it.
func TestE2EL1PerCoreLateAttach(t *testing.T) {
	for _, c := range []struct {
		variant string
		// l1Size: a chip opened before the attach has its L1 size (its
		// allocator read from memory at the attach, which needs DWARF).
		l1Size bool
	}{{"gcc-O2", false}, {"gcc-O3-dwarf-zstd", true}} {
		t.Run(c.variant, func(t *testing.T) {
			r := run{variant: c.variant, mode: "pid", scenario: "cb_cache", args: []string{"--leak", "--cache-before-go"}}
			sum, tr := trace(t, r)
			checkLateAttach(t, sum, tr, c.l1Size)
		})
	}
}

// checkLateAttach is TestE2EL1PerCoreLateAttach's comparison of one run.
func checkLateAttach(t *testing.T, sum *devices.Summary, tr *truth, l1Size bool) {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var lt lateTruth
	if err := json.Unmarshal(b, &lt); err != nil {
		t.Fatalf("truth: %v", err)
	}
	var p *devices.ProcessSummary
	for i := range sum.Processes {
		if sum.Processes[i].Pid == tr.Pid {
			p = &sum.Processes[i]
		}
	}
	if p == nil {
		t.Fatalf("no process %d in the summary", tr.Pid)
	}
	if !p.AttachedMidRun {
		t.Error("attached_mid_run false for a process attached after its programs were cached")
	}
	// What tttrace can know of each chip's residency: the truth after the
	// chip's last dispatch or replay whose CBs it saw laid out. A chip a
	// cached program was dispatched on was opened before the attach.
	type state struct{ max, total uint64 }
	known := map[int32]state{}
	late := &l1Late{cb: map[int32]uint64{}, noL1Size: map[int32]bool{}}
	var dispatches, unknown uint64
	for _, d := range lt.Dispatches {
		if d.ReplayTrace < 0 {
			dispatches++
		}
		for _, c := range d.Chips {
			if d.LaidOutBeforeAttach {
				late.noL1Size[c.Device] = !l1Size
			} else {
				known[c.Device] = state{c.MaxCoreBytes, c.ResidentBytes}
			}
		}
		if d.LaidOutBeforeAttach {
			unknown++
		}
	}
	if st := p.Stats; st.ProgramDispatches != dispatches || st.DispatchesUnknown != unknown {
		t.Errorf("program_dispatches %d, dispatches_unknown %d; the truth: %d dispatches, %d of programs laid out before the attach",
			st.ProgramDispatches, st.DispatchesUnknown, dispatches, unknown)
	}
	for _, r := range lt.Residency {
		if k := known[r.Device]; k.max != r.MaxCoreBytes {
			late.cb[r.Device] = k.max
		}
	}
	if unknown < 40 || len(late.cb) == 0 || len(late.noL1Size) == 0 {
		t.Fatalf("truth: %d dispatches of cached programs, %d chips whose cores hold other than tttrace can know: not cb_cache --cache-before-go", unknown, len(late.cb))
	}
	got := map[int32]*devices.DeviceSummary{}
	for i := range p.Devices {
		got[p.Devices[i].Device] = &p.Devices[i]
	}
	for _, w := range tr.Devices {
		g := got[w.Device]
		if g == nil {
			if w.Peaks["cb_registered_bytes"] > 0 || known[w.Device].max > 0 {
				t.Errorf("chip %d: not in the summary", w.Device)
			}
			continue
		}
		k := known[w.Device]
		for _, c := range []struct {
			name      string
			got, want uint64
		}{
			{"cb_bytes", g.CBBytes, k.max},
			{"cb_resident_total_bytes", g.CBResidentTotalBytes, k.total},
			{"cb_registered_bytes", g.CBRegisteredBytes, w.CBRegisteredBytes},
			{"peak cb_bytes", g.Peaks.CBBytes.Value, w.Peaks["cb_bytes"]},
			{"peak cb_resident_total_bytes", g.Peaks.CBResidentTotalBytes.Value, w.Peaks["cb_resident_total_bytes"]},
			{"peak cb_registered_bytes", g.Peaks.CBRegisteredBytes.Value, w.Peaks["cb_registered_bytes"]},
		} {
			if c.got != c.want {
				t.Errorf("chip %d: %s %d, the truth %d", w.Device, c.name, c.got, c.want)
			}
		}
	}
	for _, d := range checkL1PerCore(t, sum, tr, late) {
		t.Error(d)
	}
}

// l1Late is what a tracer attached late can know of some chips: on a
// chip of cb, the busiest core's resident CBs are those it gives (not what
// the chip holds now), at a core the truth does not name; a chip of
// noL1Size has no l1_size (its allocator was made before the attach and
// not read from memory).
type l1Late struct {
	cb       map[int32]uint64
	noL1Size map[int32]bool
}

// l1CoreTruth is the replica's L1 per core of a chip at one moment
// (README "Ground truth", l1_busiest_core), as the summary defines it,
// with what the busiest core really holds (the replica knows each bank's
// core): at the peak, the most any core held.
type l1CoreTruth struct {
	Core           *[2]uint16 `json:"core"`
	Bank           *uint32    `json:"bank"`
	L1BufferBytes  uint64     `json:"l1_buffer_bytes"`
	CBBytes        uint64     `json:"cb_bytes"`
	TotalBytes     uint64     `json:"total_bytes"`
	UpperBound     bool       `json:"upper_bound"`
	RealTotalBytes uint64     `json:"real_total_bytes"`
}

// checkL1PerCore lists how the summary's L1 per core differs from truth tr
// (late: what a late tracer can know instead, or nil): on every n150 chip,
// l1_busiest_core and peak_l1_busiest_core are the truth's, field for
// field: core, bank, l1_buffer_bytes, cb_bytes, upper_bound, and the total
// where it is not an upper bound; where it is, the total is at least what
// the busiest core really holds. The core's L1 size is an n150 core's.
func checkL1PerCore(t *testing.T, sum *devices.Summary, tr *truth, late *l1Late) (diffs []string) {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var lt struct {
		Devices []struct {
			Device int32        `json:"device"`
			Shape  string       `json:"shape"`
			Now    *l1CoreTruth `json:"l1_busiest_core"`
			Peak   *l1CoreTruth `json:"peak_l1_busiest_core"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &lt); err != nil {
		t.Fatalf("truth: %v", err)
	}
	var p *devices.ProcessSummary
	for i := range sum.Processes {
		if sum.Processes[i].Pid == tr.Pid {
			p = &sum.Processes[i]
		}
	}
	if p == nil {
		t.Fatalf("no process %d in the summary", tr.Pid)
	}
	got := map[int32]*devices.DeviceSummary{}
	for i := range p.Devices {
		got[p.Devices[i].Device] = &p.Devices[i]
	}
	show := func(c *[2]uint16) string {
		if c == nil {
			return "null"
		}
		return fmt.Sprint(*c)
	}
	bank := func(b *uint32) string {
		if b == nil {
			return "none"
		}
		return fmt.Sprint(*b)
	}
	// same lists how g differs from w (stale: only its CB bytes, known, are
	// what a late tracer can know; its core is not the truth's).
	same := func(chip int32, what string, g *devices.L1Core, w *l1CoreTruth, stale *uint64) (diffs []string) {
		say := func(f string, a ...any) {
			diffs = append(diffs, fmt.Sprintf("chip %d %s: ", chip, what)+fmt.Sprintf(f, a...))
		}
		switch {
		case w == nil && g == nil:
			return nil
		case w == nil:
			say("%+v, the truth holds nothing", *g)
			return
		case g == nil:
			say("none, the truth %+v", *w)
			return
		}
		if g.TotalBytes != g.L1BufferBytes+g.CBBytes {
			say("total %d is not l1_buffer_bytes %d + cb_bytes %d", g.TotalBytes, g.L1BufferBytes, g.CBBytes)
		}
		if stale != nil {
			if g.CBBytes != *stale || (g.CBBytes > 0) != (g.Core != nil) || g.L1BufferBytes != w.L1BufferBytes {
				say("cb_bytes %d at %s, l1_buffer_bytes %d; a late tracer can know %d B of CBs, %d B of buffers", g.CBBytes, show(g.Core), g.L1BufferBytes, *stale, w.L1BufferBytes)
			}
			return
		}
		if show(g.Core) != show(w.Core) || bank(g.Bank) != bank(w.Bank) || g.L1BufferBytes != w.L1BufferBytes || g.CBBytes != w.CBBytes || g.UpperBound != w.UpperBound {
			say("core %s bank %s l1_buffer_bytes %d cb_bytes %d upper_bound %v; the truth core %s bank %s l1_buffer_bytes %d cb_bytes %d upper_bound %v",
				show(g.Core), bank(g.Bank), g.L1BufferBytes, g.CBBytes, g.UpperBound, show(w.Core), bank(w.Bank), w.L1BufferBytes, w.CBBytes, w.UpperBound)
		}
		switch {
		case !w.UpperBound && (g.TotalBytes != w.TotalBytes || w.TotalBytes != w.RealTotalBytes):
			say("total %d, the truth %d (its busiest core really holds %d)", g.TotalBytes, w.TotalBytes, w.RealTotalBytes)
		case w.UpperBound && g.TotalBytes < w.RealTotalBytes:
			say("total %d, an upper bound below the %d B the busiest core really holds", g.TotalBytes, w.RealTotalBytes)
		}
		return diffs
	}
	checked, perCore, upper := 0, 0, 0
	for _, w := range lt.Devices {
		if w.Shape != "n150" {
			continue
		}
		d := got[w.Device]
		if d == nil {
			if w.Now != nil || w.Peak != nil {
				diffs = append(diffs, fmt.Sprintf("chip %d: not in the summary", w.Device))
			}
			continue
		}
		if w.Now == nil && w.Peak == nil {
			continue
		}
		checked++
		var stale *uint64
		noSize := false
		if late != nil {
			if k, ok := late.cb[w.Device]; ok {
				stale = &k
			}
			noSize = late.noL1Size[w.Device]
		}
		diffs = append(diffs, same(w.Device, "l1_busiest_core", d.L1BusiestCore, w.Now, stale)...)
		diffs = append(diffs, same(w.Device, "peak_l1_busiest_core", d.PeakL1BusiestCore, w.Peak, nil)...)
		for _, x := range []*l1CoreTruth{w.Now, w.Peak} {
			if x != nil && x.Bank != nil {
				perCore++
			}
			if x != nil && x.UpperBound {
				upper++
			}
		}
		if now := d.L1BusiestCore; now != nil {
			switch {
			case noSize && now.L1Size != nil:
				diffs = append(diffs, fmt.Sprintf("chip %d: l1_size %d of an allocator made before the attach and not read", w.Device, *now.L1Size))
			case !noSize && (now.L1Size == nil || *now.L1Size != l1CoreBytes):
				diffs = append(diffs, fmt.Sprintf("chip %d: l1_size %v, an n150 core has %d", w.Device, now.L1Size, l1CoreBytes))
			}
		}
		if pk := d.PeakL1BusiestCore; pk != nil && !pk.UpperBound && pk.TotalBytes > l1CoreBytes {
			diffs = append(diffs, fmt.Sprintf("chip %d: peak %d above a core's L1 on a run that did not fail", w.Device, pk.TotalBytes))
		}
	}
	if checked < 3 || perCore == 0 || upper == 0 {
		t.Fatalf("truth: %d chips holding L1, %d moments with per-core buffers, %d with an upper bound: not the cb_cache scenario", checked, perCore, upper)
	}
	return append(diffs, checkClashRanges(t, p, tr)...)
}

// clashTruth is a clash the replica threw for, with its core ranges.
type clashTruth struct {
	Program     string `json:"program"`
	Device      int32  `json:"device"`
	CBRegionEnd uint64 `json:"cb_region_end"`
	Lowest      uint64 `json:"lowest_l1_address"`
	PerCore     bool   `json:"per_core"`
	CoreRanges  []struct {
		Range       [4]uint16 `json:"range"`
		CBRegionEnd uint64    `json:"cb_region_end"`
		Lowest      uint64    `json:"lowest_l1_address"`
	} `json:"core_ranges"`
}

// checkClashRanges: every clash the replica threw for resting on lockstep
// buffers is a certain l1_clash of tttrace with the same ranges, each with
// its region end and (no per-core buffer on the chip) the exact headroom
// on its cores; every one resting on a per-core buffer of a core of the
// range is a possible one naming that range; no certain clash is one the
// replica did not throw for.
func checkClashRanges(t *testing.T, p *devices.ProcessSummary, tr *truth) (diffs []string) {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var ct struct {
		Clashes []clashTruth `json:"l1_clashes"`
	}
	if err := json.Unmarshal(b, &ct); err != nil {
		t.Fatalf("truth: %v", err)
	}
	rangesOf := func(n *devices.Notice) string {
		var out []string
		for _, r := range n.CoreRanges {
			h := "-"
			if r.Headroom != nil {
				h = fmt.Sprint(*r.Headroom)
			}
			out = append(out, fmt.Sprintf("%v end %d %s headroom %s", r.Range, r.CBRegionEnd, r.Clash, h))
		}
		return strings.Join(out, "; ")
	}
	certain := map[string]*devices.Notice{}
	for i := range p.L1Clashes {
		n := &p.L1Clashes[i]
		certain[fmt.Sprintf("%d %s", n.Chip, n.Program)] = n
	}
	possible := map[string]*devices.Notice{}
	for i := range p.L1ClashesPossible {
		n := &p.L1ClashesPossible[i]
		possible[fmt.Sprintf("%d %s", n.Chip, n.Program)] = n
	}
	kinds := map[bool]int{}
	for _, c := range ct.Clashes {
		key := fmt.Sprintf("%d %s", c.Device, c.Program)
		kinds[c.PerCore]++
		if !c.PerCore {
			n := certain[key]
			delete(certain, key)
			var want []string
			for _, r := range c.CoreRanges {
				want = append(want, fmt.Sprintf("%v end %d certain headroom %d", r.Range, r.CBRegionEnd, int64(r.Lowest)-int64(r.CBRegionEnd)))
			}
			switch {
			case n == nil:
				diffs = append(diffs, fmt.Sprintf("chip %d program %s: the replica threw, no certain l1_clash", c.Device, c.Program))
			case n.Clash != devices.ClashCertain || n.CBRegionEnd != c.CBRegionEnd || n.LowestL1Address != c.Lowest || rangesOf(n) != strings.Join(want, "; "):
				diffs = append(diffs, fmt.Sprintf("chip %d program %s: l1_clash %s end %d lowest %d ranges [%s], the truth end %d lowest %d ranges [%s]",
					c.Device, c.Program, n.Clash, n.CBRegionEnd, n.LowestL1Address, rangesOf(n), c.CBRegionEnd, c.Lowest, strings.Join(want, "; ")))
			}
			continue
		}
		n := possible[key]
		if n == nil {
			diffs = append(diffs, fmt.Sprintf("chip %d program %s: the replica threw for a per-core buffer, no possible l1_clash", c.Device, c.Program))
			continue
		}
		for _, r := range c.CoreRanges {
			if !slices.ContainsFunc(n.CoreRanges, func(x devices.ClashRange) bool {
				return x.Range == r.Range && x.CBRegionEnd == r.CBRegionEnd && x.Clash == devices.ClashPossible && x.Headroom == nil
			}) || !slices.ContainsFunc(n.PerCoreBlocks, func(b devices.L1Buffer) bool { return b.Address == r.Lowest && b.PerCore }) {
				diffs = append(diffs, fmt.Sprintf("chip %d program %s: possible l1_clash ranges [%s] blocks %d, the truth's range %v end %d on a per-core block at %d",
					c.Device, c.Program, rangesOf(n), len(n.PerCoreBlocks), r.Range, r.CBRegionEnd, r.Lowest))
			}
		}
	}
	for k := range certain {
		diffs = append(diffs, fmt.Sprintf("%s: a certain l1_clash the replica did not throw for", k))
	}
	if kinds[false] == 0 || kinds[true] == 0 || len(p.L1ClashesPossible) <= kinds[true] {
		t.Fatalf("truth: %d lockstep clashes, %d per-core ones, %d possible records: the scenario shows no clash per range, or none the replica did not throw for", kinds[false], kinds[true], len(p.L1ClashesPossible))
	}
	return diffs
}
