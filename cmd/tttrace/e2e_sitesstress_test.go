package main

// Issue #37: every allocation keeps its site, also in processes that end
// or map libraries fast. The attribution scenarios run many times in a row
// under CPU load, with nothing holding the process for tttrace (no
// --hold-file, no waiting for the interpreter's registration): the replica
// loaded by Python through ctypes after start (a late import), behind
// pyenv's shim and without it, and in forked workers that end as soon as
// they are done, also forked right after the parent's import, and before
// tttrace registered their parent's interpreter. Every leak must have its Python line and its native stack
// placed in modules, or say why not (site_missing): a leak with neither
// fails the test. How many runs needed site_missing is logged; the claim
// that sites are exact holds only when it is 0 (TTTRACE_SITES_EXACT=1
// makes it a failure otherwise).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
)

func TestE2ESitesStress(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	script := filepath.Join(dir, "ttwork.py")
	runs := stressRuns(t, 3)
	type scenario struct {
		name string
		argv []string // the command after --
		// procs: the processes whose leaks are checked (the workers, or
		// the one interpreter).
		procs int
	}
	var cases []scenario
	shim, _ := exec.LookPath("python3") // pyenv's shim when pyenv is set up
	cases = append(cases,
		scenario{"late-import", []string{shim, script, "--scenario", "basic", "--leak"}, 1},
		scenario{"fork-workers", []string{shim, script, "--workers", "2", "--scenario", "basic", "--leak"}, 2},
		// A tight fork after the first import: the workers allocate at
		// once and end, often before tttrace has read their fork.
		scenario{"fork-tight", []string{shim, script, "--workers", "4", "--load-first", "--scenario", "basic", "--leak"}, 4},
		// The same with an interpreter tttrace could not read before it
		// started (run through env): its workers are forked before it is
		// registered, and map nothing after (no link-map record of
		// theirs); they allocate once it is.
		scenario{"fork-cold", []string{"env", shim, script, "--workers", "4", "--load-first", "--worker-delay", "1", "--scenario", "basic", "--leak"}, 4})
	if _, err := os.Stat("/usr/bin/python3"); err == nil && shim != "/usr/bin/python3" {
		cases = append(cases, scenario{"no-shim", []string{"/usr/bin/python3", script, "--scenario", "basic", "--leak"}, 1})
	}

	loadCPUs(t)

	missingRuns := map[string]int{}
	reasons := map[string]uint64{}
	start := time.Now()
	for _, c := range cases {
		for i := range runs {
			tmp := t.TempDir()
			out := filepath.Join(tmp, "out.ndjson")
			argv := append(append([]string{}, c.argv...), "--truth", filepath.Join(tmp, "truth.json"))
			args := append([]string{"--json", "-o", out, "--lib", lib, "--"}, argv...)
			cmd := exec.Command(bin, args...)
			var log syncBuffer
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s run %d: tttrace %s: %v\n%s", c.name, i, strings.Join(args, " "), err, log.String())
			}
			sum := lastSummary(t, out)
			checked, missing := 0, false
			for pi := range sum.Processes {
				p := &sum.Processes[pi]
				if len(p.Leaks) == 0 {
					continue
				}
				checked++
				for _, d := range leakSitesExactOrMarked(p) {
					t.Errorf("%s run %d: pid %d: %s", c.name, i, p.Pid, d)
				}
				for r, n := range p.SitesMissing {
					reasons[r] += n
					missing = true
				}
			}
			if checked != c.procs {
				t.Errorf("%s run %d: %d process(es) with leaks, want %d\n%s", c.name, i, checked, c.procs, log.String())
			}
			if missing {
				missingRuns[c.name]++
			}
		}
	}
	total := 0
	for _, c := range cases {
		t.Logf("%s: %d of %d runs needed site_missing", c.name, missingRuns[c.name], runs)
		total += missingRuns[c.name]
	}
	t.Logf("%d runs in %v (load: %d spinning goroutines); site_missing reasons: %v",
		runs*len(cases), time.Since(start).Round(time.Millisecond), runtime.NumCPU(), reasons)
	if total > 0 && os.Getenv("TTTRACE_SITES_EXACT") == "1" {
		t.Errorf("%d run(s) needed site_missing: sites are not exact", total)
	}
}

// leakSitesExactOrMarked lists the leaks of p that have neither a site with
// its native stack placed in modules and its Python line, nor a
// site_missing reason: the silent misses issue #37 forbids.
// stressRuns is how many times a stress test runs each case: def, or
// TTTRACE_STRESS_RUNS.
func stressRuns(t *testing.T, def int) int {
	t.Helper()
	s := os.Getenv("TTTRACE_STRESS_RUNS")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("TTTRACE_STRESS_RUNS=%q", s)
	}
	return n
}

// loadCPUs keeps every CPU busy with a spinning goroutine until the test
// ends: the load under which the stress tests run.
func loadCPUs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; ctx.Err() == nil; x++ {
				for range 1 << 16 {
					x ^= x << 1
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func leakSitesExactOrMarked(p *devices.ProcessSummary) []string {
	sites := map[uint32]*devices.Site{}
	for i := range p.Sites {
		sites[p.Sites[i].Site] = &p.Sites[i]
	}
	var bad []string
	var missing uint64
	for _, lk := range p.Leaks {
		if lk.SiteMissing != "" {
			missing++
			continue
		}
		s := sites[lk.Site]
		switch {
		case lk.Site == 0:
			bad = append(bad, fmt.Sprintf("leak seq %d (%d bytes) has no site and no site_missing", lk.Seq, lk.Size))
		case s == nil:
			bad = append(bad, fmt.Sprintf("leak seq %d: site %d is not described", lk.Seq, lk.Site))
		case len(s.Native) == 0 || s.Native[0].Module == "":
			bad = append(bad, fmt.Sprintf("leak seq %d: site %d not placed in modules and no site_missing:\n%s", lk.Seq, lk.Site, describe(s)))
		case len(s.Python) == 0:
			bad = append(bad, fmt.Sprintf("leak seq %d: site %d has no Python line and no site_missing:\n%s", lk.Seq, lk.Site, describe(s)))
		}
	}
	var counted uint64
	for _, n := range p.SitesMissing {
		counted += n
	}
	if counted < missing {
		bad = append(bad, fmt.Sprintf("%d leak(s) say site_missing, sites_missing counts %d allocation(s)", missing, counted))
	}
	return bad
}
