package main

import (
	"strings"
	"testing"
)

// l1CoreBytes is an n150 (Wormhole) worker core's L1, the replica's
// default shape.
const l1CoreBytes = 1464 * 1024

// TestE2ECBResident: circular buffers as the chip holds them, against the
// replica's per-core residency (scenario cb_cache: 320 cached programs
// laid out from the same L1 base, each dispatched, cache hits, the same CB
// index at two sizes on disjoint core groups, a trace replaying a big
// program's per-core peak, a mesh program): cb_bytes is the busiest core's
// resident bytes, cb_resident_total_bytes their sum over cores,
// cb_registered_bytes the sum over programs holding CBs, each with its
// peak, exactly the truth's, on a run whose registered sum is several
// times L1 while every core stays under it; every dispatch's CBs known.
func TestE2ECBResident(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "python", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O3-dwarf-zstd", mode: "cmd", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			sum, tr := trace(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			var registered, resident uint64
			for _, d := range tr.Devices {
				registered = max(registered, d.Peaks["cb_registered_bytes"])
				resident = max(resident, d.Peaks["cb_bytes"])
			}
			if registered < 3*l1CoreBytes || resident == 0 || resident >= l1CoreBytes {
				t.Fatalf("truth: registered peak %d, resident peak %d: the scenario does not show a program cache over L1 with cores under it", registered, resident)
			}
			for _, p := range sum.Processes {
				if p.Pid != tr.Pid {
					continue
				}
				if p.Stats.ProgramDispatches == 0 || p.Stats.DispatchesUnknown != 0 {
					t.Errorf("program_dispatches %d, dispatches_unknown %d", p.Stats.ProgramDispatches, p.Stats.DispatchesUnknown)
				}
				for _, d := range p.Devices {
					if d.CBBytes > 0 && d.CBBusiestCore == nil {
						t.Errorf("chip %d: %d CB bytes resident but no busiest core", d.Device, d.CBBytes)
					}
				}
			}
		})
	}
}
