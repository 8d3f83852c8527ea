package main

// tttrace diff end to end, L1 per core: two runs of the replica's cb_cache
// scenario (a program cache, a trace replaying a per-core CB peak, per-core
// buffers, lockstep L1 buffers beside resident CBs), the second with --leak
// (a program's CBs, a per-core buffer and a lockstep L1 buffer kept to the
// end). The diff's l1_busiest_core_bytes, at the end and at its peak, is
// the replicas' truths' L1 per core (their l1_busiest_core and
// peak_l1_busiest_core totals) on every chip, as every other counter is;
// its growth is in growth[] as the truths make it, which --fail-on-growth
// judges; the table shows it (L1/CORE) and the --html page shows its
// numbers, each the --json object's.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

func TestE2EDiffL1PerCore(t *testing.T) {
	bin, replica := setup(t)
	variant := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	a, ta := diffScenario(t, bin, variant, filepath.Join(tmp, "a"), nil, "--scenario", "cb_cache")
	again, _ := diffScenario(t, bin, variant, filepath.Join(tmp, "again"), nil, "--scenario", "cb_cache")
	b, tb := diffScenario(t, bin, variant, filepath.Join(tmp, "b"), nil, "--scenario", "cb_cache", "--leak")
	trA, trB := diffTruths(t, ta, nil), diffTruths(t, tb, nil)

	if r := diffJSON(t, bin, a, again); !r.Same || len(r.Growth) != 0 {
		t.Errorf("two runs of one workload: %+v", r.Processes)
	}
	r := diffJSON(t, bin, a, b)
	if r.Same || len(r.Processes) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	p := &r.Processes[0]
	if p.Status != "changed" || p.Exit != nil || p.Trimmed {
		t.Errorf("process: %+v", p)
	}
	// Every counter, L1 per core among them, as the truths differ.
	wantGrowth, most := checkDiffChips(t, p, trA, trB, true)

	// The truths' L1 per core differs (the leaks stay on their cores): the
	// diff lists it, and each growth of it is gated.
	changed, field := 0, ""
	for i, c := range p.Chips {
		for j, cd := range c.Counters {
			if cd.Counter != "l1_busiest_core_bytes" {
				continue
			}
			changed++
			field = fmt.Sprintf("processes.0.chips.%d.counters.%d.end.b", i, j)
			ea, pa := trA.fig(c.Device, cd.Counter)
			eb, pb := trB.fig(c.Device, cd.Counter)
			t.Logf("chip %d L1 per core: end %d -> %d, peak %d -> %d (truths %d -> %d, %d -> %d)", c.Device, cd.End.A, cd.End.B,
				cd.Peak.A, cd.Peak.B, ea, eb, pa, pb)
		}
	}
	if changed == 0 {
		t.Fatalf("no chip's L1 per core differs in the diff; the truths': %v", wantGrowth)
	}
	gated := 0
	for _, g := range r.Growth {
		if g.Counter == "l1_busiest_core_bytes" {
			gated++
		}
	}
	if gated == 0 {
		t.Errorf("no L1 per core growth among %+v", r.Growth)
	}
	checkGate(t, bin, a, b, most)

	_, text := runDiff(t, bin, a, b)
	if !bytes.Contains(text, []byte(" L1/CORE ")) {
		t.Errorf("the table shows no L1 per core:\n%s", text)
	}
	diffPage(t, bin, a, b, field)
}
