package main

// Fixed costs (issue #13 item 1, issue #11 item 6): how long tttrace takes
// to trace a command that does nothing (load, attach, detach: mostly the
// kernel's grace periods when the uprobe links close), and what a running
// tttrace costs every other process that starts on the machine (the
// breakpoint on ld.so's _dl_debug_state).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes"
)

// fixedRun is one measured run: a `tttrace -- /bin/true` (one duration), or
// a series of /bin/true starts under one tttrace session (or none).
type fixedRun struct {
	Kind  string    `json:"kind"` // "tttrace" | "start"
	Mode  string    `json:"mode"`
	Round int       `json:"round"`
	Secs  []float64 `json:"secs"`
	// Hits: runs of tttrace's uprobe programs during the starts (kernel
	// BPF statistics): the loader probe firing in processes it was not
	// limited to. -1: not known.
	Hits int64 `json:"hits"`
	// Linger (tttrace runs): seconds from tttrace's exit until the
	// machine's uprobe_multi links were back to the bench's start
	// (settle.go): how long its probes stayed in the library after it.
	Linger []float64 `json:"linger,omitempty"`
	Err    string    `json:"err,omitempty"`
}

const (
	fixedMulti  = "uprobe_multi links (default)"
	fixedSingle = "classic uprobes (--no-uprobe-multi)"
	startNone   = "untraced"
	startPid    = "tttrace -p PID running (loader probe limited to PID)"
	startAll    = "tttrace --all running (loader probe in every process)"
)

// tttraceTrue times `tttrace --lib LIB -- /bin/true`, start to exit, and
// how long its probes stayed after its exit (-1: longer than settleLimit).
// It starts once the last run's probes are gone.
func tttraceTrue(c *config, flags ...string) (secs, linger float64, errs string) {
	settleBefore("fixed")
	args := append(append([]string{"--json", "--no-events", "-o", os.DevNull}, flags...),
		"--lib", filepath.Join(c.replica, "libtt_metal.so"), "--", "/bin/true")
	p, err := startProc(nil, c.tttrace, args...)
	if err != nil {
		return 0, 0, err.Error()
	}
	code, d := p.wait()
	if code != 0 {
		return 0, 0, fmt.Sprintf("tttrace exit %d: %s", code, lastLine(p.stderr.String()))
	}
	left, ok := settle()
	if !ok {
		return d.Seconds(), -1, ""
	}
	return d.Seconds(), left.Seconds(), ""
}

// startTimes starts /bin/true n times, one after the other, and returns
// each one's time from fork to reaped exit.
func startTimes(n int) ([]float64, error) {
	v := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			return v, err
		}
		v = append(v, time.Since(t0).Seconds())
	}
	return v, nil
}

// startUnder measures n starts of /bin/true while a tttrace session of the
// given mode runs (none for untraced).
func startUnder(c *config, mode string, n int) fixedRun {
	r := fixedRun{Kind: "start", Mode: mode, Hits: -1}
	if mode == startNone {
		v, err := startTimes(n)
		r.Secs = v
		if err != nil {
			r.Err = err.Error()
		}
		return r
	}
	ready := filepath.Join(c.work, "fixed-ready")
	_ = os.Remove(ready)
	args := []string{"--json", "--no-events", "-o", os.DevNull, "--ready-file", ready}
	var held *exec.Cmd
	if mode == startPid {
		// A process that never loads TT-Metal: tttrace waits for it with
		// its loader probe in place.
		held = exec.Command("sleep", "3600")
		if err := held.Start(); err != nil {
			r.Err = err.Error()
			return r
		}
		defer func() { _ = held.Process.Kill(); _ = held.Wait() }()
		args = append(args, "-p", strconv.Itoa(held.Process.Pid))
	} else {
		args = append(args, "--all")
	}
	p, err := startProc(nil, c.tttrace, args...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	if !waitFile(ready, 30*time.Second) {
		r.Err = "no ready file: " + lastLine(p.stderr.String())
		_ = p.cmd.Process.Kill()
		p.wait()
		return r
	}
	before, ok1 := sampleProgs(p.cmd.Process.Pid)
	v, err := startTimes(n)
	after, ok2 := sampleProgs(p.cmd.Process.Pid)
	r.Secs = v
	if err != nil {
		r.Err = err.Error()
	}
	if ok1 && ok2 {
		r.Hits = int64(after.runs - before.runs)
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	p.wait()
	return r
}

// runFixed interleaves the fixed-cost measurements in rounds whose order
// alternates: per round, 5 `tttrace -- /bin/true` of each mechanism and
// 1000/rounds process starts in each mode.
func runFixed(c *config) []fixedRun {
	var out []fixedRun
	// Program run counts; they cost the hits a little, the same in every
	// traced mode.
	if stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		defer stats.Close()
	} else {
		logf("fixed: BPF statistics unavailable (no probe hit counts): %v", err)
	}
	starts := 1000 / c.rounds
	if starts < 100 {
		starts = 100
	}
	for round := 0; round < c.rounds; round++ {
		mechs := []string{fixedMulti, fixedSingle}
		modes := []string{startNone, startPid, startAll}
		if round%2 == 1 {
			mechs[0], mechs[1] = mechs[1], mechs[0]
			modes[0], modes[2] = modes[2], modes[0]
		}
		for _, m := range mechs {
			r := fixedRun{Kind: "tttrace", Mode: m, Round: round}
			var flags []string
			if m == fixedSingle {
				flags = []string{"--no-uprobe-multi"}
			}
			for i := 0; i < 5; i++ {
				s, left, err := tttraceTrue(c, flags...)
				if err != "" {
					r.Err = err
					continue
				}
				r.Secs = append(r.Secs, s)
				r.Linger = append(r.Linger, left)
			}
			logf("fixed round %d/%d: tttrace -- /bin/true, %s: median %.3f s%s", round+1, c.rounds, m, median(r.Secs), errSuffix(r.Err))
			out = append(out, r)
		}
		for _, m := range modes {
			r := startUnder(c, m, starts)
			r.Round = round
			logf("fixed round %d/%d: /bin/true start, %s: median %.0f µs over %d, %d probe hits%s", round+1, c.rounds, m, median(r.Secs)*1e6, len(r.Secs), r.Hits, errSuffix(r.Err))
			out = append(out, r)
		}
	}
	return out
}

func (r *results) fixedRows() []row {
	if len(r.Fixed) == 0 {
		return nil
	}
	all := map[string][]float64{}
	errs := map[string][]string{}
	hits, hitStarts := map[string]int64{}, map[string]int{}
	for _, x := range r.Fixed {
		if x.Hits >= 0 {
			hits[x.Mode] += x.Hits
			hitStarts[x.Mode] += len(x.Secs)
		}
		all[x.Kind+"/"+x.Mode] = append(all[x.Kind+"/"+x.Mode], x.Secs...)
		if x.Err != "" {
			errs[x.Kind+"/"+x.Mode] = append(errs[x.Kind+"/"+x.Mode], x.Err)
		}
	}
	failed := func(k string) string {
		if len(errs[k]) == 0 {
			return ""
		}
		return fmt.Sprintf("; %d failed: %s", len(errs[k]), errs[k][0])
	}
	var rows []row
	multiNote := ""
	if err := probes.HaveUprobeMulti(); err != nil {
		multiNote = " (this kernel has none: classic uprobes were used)"
	}
	// Each round's median of its runs, for the rounds' spread.
	rounds := map[string]map[int][]float64{}
	for _, x := range r.Fixed {
		k := x.Kind + "/" + x.Mode
		if rounds[k] == nil {
			rounds[k] = map[int][]float64{}
		}
		rounds[k][x.Round] = append(rounds[k][x.Round], x.Secs...)
	}
	roundMedians := func(k string) []float64 {
		var v []float64
		for _, s := range rounds[k] {
			v = append(v, median(s))
		}
		return v
	}
	for _, m := range []string{fixedMulti, fixedSingle} {
		k := "tttrace/" + m
		v := all[k]
		lo, hi := minMax(v)
		meas := fmt.Sprintf("**%.3f s** median (%.3f-%.3f, %d runs)", median(v), lo, hi, len(v)) + failed(k) + spreadFlag(roundMedians(k))
		// Issue #33: the median and the worst run.
		goal, met := "≤ 0.2 s median, ≤ 0.3 s worst", yesNo(len(v) > 0 && median(v) <= 0.2 && hi <= 0.3)
		fig := "`tttrace --lib LIB -- /bin/true`, start to exit, " + m
		if m == fixedSingle {
			goal, met = "(fallback, Linux < 6.6)", ""
		} else {
			fig += multiNote
		}
		rows = append(rows, row{"6", fig, meas, goal, met})
		if m == fixedMulti {
			if lr := lingerRow(r.Fixed); lr != nil {
				rows = append(rows, *lr)
			}
		}
	}
	base := all["start/"+startNone]
	b := median(base)
	q := func(v []float64, p float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		if len(s) == 0 {
			return 0
		}
		return s[int(p*float64(len(s)-1))]
	}
	for _, m := range []string{startNone, startPid, startAll} {
		k := "start/" + m
		v := all[k]
		meas := fmt.Sprintf("%.0f µs median (p10 %.0f, p90 %.0f µs; %d starts)", median(v)*1e6, q(v, 0.1)*1e6, q(v, 0.9)*1e6, len(v))
		goal, met := "", ""
		if m != startNone {
			meas += fmt.Sprintf("; **%+.0f µs** per start vs untraced", (median(v)-b)*1e6)
			if hitStarts[m] > 0 {
				// Every process the probe is on counts, not only these.
				meas += fmt.Sprintf("; tttrace's uprobe programs ran %d times during the %d starts", hits[m], hitStarts[m])
			}
		}
		if m == startPid {
			goal, met = "no probe hit in other processes", yesNo(hitStarts[m] > 0 && hits[m] == 0)
		}
		rows = append(rows, row{"6", "process start cost: `/bin/true` fork to exit, " + m, meas + failed(k) + spreadFlag(roundMedians(k)), goal, met})
	}
	return rows
}

// lingerRow: how long the probes of `tttrace -- /bin/true` (uprobe_multi
// links) stayed in the library after tttrace exited, trapping in any
// process that called there.
func lingerRow(runs []fixedRun) *row {
	var v []float64
	over := 0
	for _, x := range runs {
		if x.Kind != "tttrace" || x.Mode != fixedMulti {
			continue
		}
		for _, l := range x.Linger {
			if l < 0 {
				over++
				continue
			}
			v = append(v, l)
		}
	}
	if len(v)+over == 0 {
		return nil
	}
	lo, hi := minMax(v)
	meas := fmt.Sprintf("**%.3f s** median (%.3f-%.3f, %d runs)", median(v), lo, hi, len(v))
	if over > 0 {
		meas += fmt.Sprintf("; %d runs' probes stayed more than %v", over, settleLimit)
	}
	return &row{"6", "`tttrace --lib LIB -- /bin/true`, uprobe_multi links: its probes still in the library after it exited (closed by its link holder), from its exit until the machine's uprobe_multi links were back to the bench's start",
		meas, "(measured)", ""}
}
