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

// residencyTruth is the replica's per-core CB residency at the end
// (README "Ground truth", cb_residency), and each chip's per-core
// buffers per bank (per_core_banks).
type residencyTruth struct {
	Devices []struct {
		Device       int32 `json:"device"`
		PerCoreBanks []struct {
			Bank   uint32     `json:"bank"`
			Core   *[2]uint16 `json:"core"`
			Bytes  uint64     `json:"bytes"`
			Lowest uint64     `json:"lowest"`
		} `json:"per_core_banks"`
	} `json:"devices"`
	Residency []struct {
		Device       int32  `json:"device"`
		MaxCoreBytes uint64 `json:"max_core_bytes"`
		Cores        []struct {
			X     uint16 `json:"x"`
			Y     uint16 `json:"y"`
			Bytes uint64 `json:"bytes"`
		} `json:"cores"`
	} `json:"cb_residency"`
}

// banksOf is chip's per_core_banks.
func (rt *residencyTruth) banksOf(chip int32) []struct {
	Bank   uint32     `json:"bank"`
	Core   *[2]uint16 `json:"core"`
	Bytes  uint64     `json:"bytes"`
	Lowest uint64     `json:"lowest"`
} {
	for _, d := range rt.Devices {
		if d.Device == chip {
			return d.PerCoreBanks
		}
	}
	return nil
}

// TestE2EL1PerCore: L1 per core (l1_busiest_core, peak_l1_busiest_core)
// against the replica's truth, scenario cb_cache (a program cache whose
// registered CBs are several times L1, a trace replaying a per-core peak,
// a mesh program, a HYBRID chip with per-core buffers), `--` and python:
// on each chip, the busiest core's L1 buffers are the lockstep L1 and
// L1_SMALL spans per bank the replica's allocators hold (get_statistics'
// total_allocated of each, per bank) plus, on a chip with per-core
// buffers, those of its busiest bank; its CBs are the most any core of
// the truth's residency holds, at one of the cores holding that much; the
// core's L1 size is an n150 core's; the peak is the truth's resident CB
// peak on chips without L1 buffers, and never below now.
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
		})
	}
}

// TestE2EL1PerCoreAll: the same with tttrace --all, the workload started
// after tttrace (the library probed through --lib before it runs). Not to
// be run beside other people's work: --all sees every process on the
// machine (TTTRACE_E2E_ALL=1 runs it).
func TestE2EL1PerCoreAll(t *testing.T) {
	if os.Getenv("TTTRACE_E2E_ALL") == "" {
		t.Skip("--all sees every process on the machine: set TTTRACE_E2E_ALL=1 on a machine of your own")
	}
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

// checkL1PerCore lists how the summary's L1 per core differs from truth tr
// (late: what a late tracer can know instead, or nil).
func checkL1PerCore(t *testing.T, sum *devices.Summary, tr *truth, late *l1Late) (diffs []string) {
	t.Helper()
	at := readAllocTruthAny(t, tr.path)
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var rt residencyTruth
	if err := json.Unmarshal(b, &rt); err != nil {
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
	peaksOf := map[int32]uint64{}
	for _, d := range tr.Devices {
		peaksOf[d.Device] = d.Peaks["cb_bytes"]
	}
	checked, perCoreChips := 0, 0
	for _, ad := range at.Devices {
		if ad.Shape != "n150" {
			continue
		}
		d := got[ad.Device]
		if d == nil {
			diffs = append(diffs, fmt.Sprintf("chip %d: not in the summary", ad.Device))
			continue
		}
		lock := ad.Allocator["L1"].Allocated + ad.Allocator["L1_SMALL"].Allocated
		perCore := ad.Allocator["L1"].PerCoreBuffers > 0
		var cb uint64
		var cores [][2]uint16
		for _, r := range rt.Residency {
			if r.Device != ad.Device {
				continue
			}
			cb = r.MaxCoreBytes
			for _, c := range r.Cores {
				if c.Bytes == cb {
					cores = append(cores, [2]uint16{c.X, c.Y})
				}
			}
		}
		var stale, noSize bool
		if late != nil {
			var known uint64
			known, stale = late.cb[ad.Device]
			if stale {
				cb, cores = known, nil
			}
			noSize = late.noL1Size[ad.Device]
		}
		now := d.L1BusiestCore
		if lock == 0 && cb == 0 && !perCore {
			if now != nil && now.TotalBytes != 0 {
				diffs = append(diffs, fmt.Sprintf("chip %d: l1_busiest_core holds %d, the truth nothing", ad.Device, now.TotalBytes))
			}
			continue
		}
		checked++
		switch {
		case now == nil:
			diffs = append(diffs, fmt.Sprintf("chip %d: no l1_busiest_core; the truth holds %d B of lockstep spans per bank and %d B of CBs on its busiest core", ad.Device, lock, cb))
			continue
		case now.CBBytes != cb:
			diffs = append(diffs, fmt.Sprintf("chip %d: l1_busiest_core cb_bytes %d, truth %d", ad.Device, now.CBBytes, cb))
		case cb > 0 && (now.Core == nil || !stale && !slices.Contains(cores, *now.Core)):
			diffs = append(diffs, fmt.Sprintf("chip %d: l1_busiest_core core %v, not one of the truth's busiest %v", ad.Device, now.Core, cores))
		case noSize && now.L1Size != nil:
			diffs = append(diffs, fmt.Sprintf("chip %d: l1_size %d of an allocator made before the attach and not read", ad.Device, *now.L1Size))
		case !noSize && (now.L1Size == nil || *now.L1Size != l1CoreBytes):
			diffs = append(diffs, fmt.Sprintf("chip %d: l1_size %v, an n150 core has %d", ad.Device, now.L1Size, l1CoreBytes))
		}
		if perCore {
			// The busiest bank's per-core spans (the lowest bank among
			// ties) come on top of the lockstep spans, and it is named.
			perCoreChips++
			var most uint64
			var banks []uint32
			for _, pb := range rt.banksOf(ad.Device) {
				if pb.Bytes > most {
					most, banks = pb.Bytes, nil
				}
				if pb.Bytes == most {
					banks = append(banks, pb.Bank)
				}
			}
			if now.L1BufferBytes != lock+most || now.Bank == nil || len(banks) == 0 || *now.Bank != slices.Min(banks) {
				diffs = append(diffs, fmt.Sprintf("chip %d: l1_buffer_bytes %d with bank %v; the truth: %d B of lockstep spans and %d B of per-core spans on banks %v", ad.Device, now.L1BufferBytes, now.Bank, lock, most, banks))
			}
		} else if now.L1BufferBytes != lock || now.Bank != nil {
			diffs = append(diffs, fmt.Sprintf("chip %d: l1_buffer_bytes %d (bank %v), the truth's lockstep spans per bank %d", ad.Device, now.L1BufferBytes, now.Bank, lock))
		}
		if now.TotalBytes != now.L1BufferBytes+now.CBBytes || now.SpansUnknown != 0 {
			diffs = append(diffs, fmt.Sprintf("chip %d: total %d, spans unknown %d: %+v", ad.Device, now.TotalBytes, now.SpansUnknown, now))
		}
		pk := d.PeakL1BusiestCore
		switch {
		case pk == nil || pk.TotalBytes < now.TotalBytes:
			diffs = append(diffs, fmt.Sprintf("chip %d: peak_l1_busiest_core %+v below now", ad.Device, pk))
		case lock == 0 && !perCore && (pk.TotalBytes != peaksOf[ad.Device] || pk.CBBytes != pk.TotalBytes):
			diffs = append(diffs, fmt.Sprintf("chip %d: peak total %d (CBs %d), the truth's resident CB peak %d", ad.Device, pk.TotalBytes, pk.CBBytes, peaksOf[ad.Device]))
		}
		if pk != nil && pk.TotalBytes > l1CoreBytes {
			diffs = append(diffs, fmt.Sprintf("chip %d: peak %d above a core's L1 on a run that did not fail", ad.Device, pk.TotalBytes))
		}
	}
	if checked < 3 || perCoreChips == 0 {
		t.Fatalf("truth: %d chips holding L1, %d with per-core buffers: not the cb_cache scenario", checked, perCoreChips)
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
