package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Rows 7: what the allocator's view (issue 22) costs per allocation. The
// burst's allocations each go through BankManager::allocate_buffer (the
// replica's flat chips have bank managers), so with the allocator's probes
// every allocation pays one more probe hit (its alloc_request) than without
// them; the out-of-memory probe never fires on the success path. Each round
// runs, in rotating order: untraced, tttrace --no-stacks with and without
// the allocator's probes (hidden --no-allocator-probes), and the floor of
// each plan (count-only uprobes at the same sites, benchtool -floor-lib,
// with -floor-no-allocator for the second). Stacks are off so that the
// difference is the probe's, not the stack's.

const (
	allocOn       = "tttrace --json -o /dev/null --no-stacks"
	allocOff      = "tttrace --json -o /dev/null --no-stacks --no-allocator-probes"
	allocFloorOn  = floorMode
	allocFloorOff = floorMode + ", allocator sites left out"
)

func runAllocatorCost(c *config) []costRun {
	ms := []mode{
		{"untraced", runUntraced},
		{allocOn, func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "-o", "/dev/null", "--no-stacks"}, false)
		}},
		{allocOff, func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "-o", "/dev/null", "--no-stacks", "--no-allocator-probes"}, false)
		}},
		{allocFloorOn, func(c *config, r int) costRun { return runFloorWith(c) }},
		{allocFloorOff, func(c *config, r int) costRun { return runFloorWith(c, "-floor-no-allocator") }},
	}
	return runRounds(c, "allocator", 60, ms)
}

// allocatorProgs are the programs of the allocator's probes (ttmetal).
var allocatorProgs = map[string]bool{"initialize_allocator": true, "bank_manager_vec": true, "bank_manager_map": true,
	"bank_manager_allocate": true, "bank_manager_allocate_noid": true, "bank_manager_oom": true}

// runFloorWith is runFloor with extra floor flags; Counted is the hits of
// the allocator's sites.
func runFloorWith(c *config, flags ...string) costRun {
	r, p := runBurst("floor: ", c.self, append(append([]string{}, flags...), c.floorArgs(false)...)...)
	if p == nil {
		return r
	}
	var n int64
	for _, m := range countRe.FindAllStringSubmatch(p.stdout.String(), -1) {
		if allocatorProgs[m[1]] {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			n += v
		}
	}
	r.Counted = n
	return r
}

func (r *results) allocatorRows(c *config) []row {
	if len(r.Allocator) == 0 {
		return nil
	}
	secs, bad := byModeOf(r.Allocator)
	// Half the burst's events are allocations: per allocation (and its
	// free) is twice the added cost per event.
	n := float64(c.events) / 2
	u := median(values(secs["untraced"]))
	added := func(mode string) float64 { return (median(values(secs[mode])) - u) / n * 1e6 }
	timing := func(mode string) string {
		v := values(secs[mode])
		lo, hi := minMax(v)
		s := fmt.Sprintf("%.2f s (%.2f-%.2f, %d runs)", median(v), lo, hi, len(v))
		if len(bad[mode]) > 0 {
			s += fmt.Sprintf("; %d failed: %s", len(bad[mode]), strings.Join(bad[mode], "; "))
		}
		// Each round's added cost over its untraced run.
		var a []float64
		for round, x := range secs[mode] {
			if uu, ok := secs["untraced"][round]; ok && mode != "untraced" {
				a = append(a, (x-uu)/n*1e6)
			}
		}
		return s + spreadFlag(a)
	}
	for _, m := range []string{"untraced", allocOn, allocOff, allocFloorOn, allocFloorOff} {
		if len(secs[m]) == 0 {
			return []row{{"7", "allocator's view, per allocation", "no successful run of " + m + ": " + strings.Join(bad[m], "; "), "", "**no**"}}
		}
	}
	on, off, fon, foff := added(allocOn), added(allocOff), added(allocFloorOn), added(allocFloorOff)
	// Hits of the allocator's sites per allocation, counted by the floor
	// (the bank managers' making adds a handful per run).
	var hits int64 = -1
	for _, x := range r.Allocator {
		if x.Mode == allocFloorOn && x.Err == "" && x.Counted > hits {
			hits = x.Counted
		}
	}
	perAlloc := float64(hits) / n
	return []row{
		{"7", "floor per allocation (and its free), with the allocator's sites / without them (" + filepath.Base(c.replica) + ")",
			fmt.Sprintf("%s / %s; added **%.2f µs / %.2f µs**", timing(allocFloorOn), timing(allocFloorOff), fon, foff), "(reference)", ""},
		{"7", "tttrace per allocation (and its free), --no-stacks: with the allocator's probes (default) / without (--no-allocator-probes)",
			fmt.Sprintf("%s / %s; added **%.2f µs = %.2fx its floor / %.2f µs = %.2fx its floor**; the allocator's view: %.2f µs per allocation, %.4f hits of its sites per allocation (floor's count)",
				timing(allocOn), timing(allocOff), on, on/fon, off, off/foff, on-off, perAlloc),
			"at most one more probe hit per allocation", yesNo(hits >= 0 && perAlloc <= 1.001)},
	}
}
