package devices

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// Retention of ended processes. A service (--all) meets processes for as
// long as it runs; keeping each ended one in full (its buffer table, leak
// list, anomalies) grew tttrace without bound (600 short processes: +128
// MB, never returned). So the ledger keeps the last keepEnded ended
// processes in full; older ones are trimmed to their totals and counters
// (a ProcessSummary without its lists, what was dropped counted in
// Trimmed), and past keepTotals trimmed ones the oldest are folded into
// the summary's DroppedProcesses counts. What a report or an exit status
// needs from them (leak counts and bytes, anomalies, events) survives
// both steps.

// Defaults of Options.KeepEnded and Options.KeepEndedTotals.
const (
	DefaultKeepEnded       = 100
	DefaultKeepEndedTotals = 10000
	// keptLeakSites: the leak sites a trimmed process keeps (most bytes
	// first).
	keptLeakSites = 10
	// TrimmedCommandBytes: the bytes of its command line a trimmed
	// process keeps (a command line may be 4 MiB: 10,000 trimmed ones
	// held 40 GB); a longer one is cut there, at a character's start,
	// and marked (cutCommand).
	TrimmedCommandBytes = 4096
)

// Trimmed says what a trimmed ended process no longer has: its lists,
// beyond their counts.
type Trimmed struct {
	Leaks         uint64 `json:"leaks"`          // entries of leaks (still summed in leak_groups)
	UnplacedLeaks uint64 `json:"unplaced_leaks"` // entries of unplaced_leaks
	UnplacedBytes uint64 `json:"unplaced_bytes"` // their bytes
	Sites         uint64 `json:"sites"`          // entries of sites
	LeakSites     uint64 `json:"leak_sites"`     // entries of leak_sites past the first 10
	Anomalies     uint64 `json:"anomalies"`      // entries of anomalies (still counted in anomaly_counts)
	L1Clashes     uint64 `json:"l1_clashes"`     // entries of l1_clashes (still counted in stats)
	AllocFailures uint64 `json:"alloc_failures"` // entries of alloc_failures (still counted in stats)
	TraceRecords  uint64 `json:"trace_records"`  // entries of the traces lists (still counted there)
	// SiteUsage: rows of per-site accounting dropped (a --pprof profile
	// lacks the process).
	SiteUsage uint64 `json:"site_usage"`
	// CommandBytes: the bytes cut from the end of its command line (kept
	// up to TrimmedCommandBytes); 0: it is whole.
	CommandBytes uint64 `json:"command_bytes"`
}

// DroppedProcesses sums the ended processes folded away entirely.
type DroppedProcesses struct {
	Processes   uint64 `json:"processes"`
	Events      uint64 `json:"events"`
	Leaks       uint64 `json:"leaks"`        // leak entries, placed and unplaced
	LeakedBytes uint64 `json:"leaked_bytes"` // their bytes
	Anomalies   uint64 `json:"anomalies"`
	LateLibrary uint64 `json:"late_library"` // processes among them with late_library
	// TraceProblems: their trace hazards, invalid replays and region
	// hazards (what --fail-on-trace-hazard fails for).
	TraceProblems uint64 `json:"trace_problems"`
}

// retention is the ledger's retention state.
type retention struct {
	keepEnded, keepTotals int
	set                   bool
	ended                 []*proc          // in full, in the order they ended
	trimmed               []ProcessSummary // in the order they ended
	trimmedHead           int              // trimmed[:trimmedHead] are folded (reused lazily)
	dropped               DroppedProcesses
}

// setRetention sets how many ended processes are kept in full (keepEnded)
// and how many more as totals only (keepTotals); 0 or less: the defaults.
func (l *Ledger) setRetention(keepEnded, keepTotals int) {
	if keepEnded <= 0 {
		keepEnded = DefaultKeepEnded
	}
	if keepTotals <= 0 {
		keepTotals = DefaultKeepEndedTotals
	}
	l.ret.keepEnded, l.ret.keepTotals, l.ret.set = keepEnded, keepTotals, true
}

func (l *Ledger) limits() (keepEnded, keepTotals int) {
	if !l.ret.set {
		return DefaultKeepEnded, DefaultKeepEndedTotals
	}
	return l.ret.keepEnded, l.ret.keepTotals
}

// TrimmedProcess is an ended process Trim took out of the ledger's full
// keeping: its pid, and whether it was the pid's current incarnation (not
// one retired by NewIncarnation).
type TrimmedProcess struct {
	Pid     uint32
	Current bool
}

// Trim trims the ended processes past the retention limits, oldest first,
// and returns them. Call it after an ended process has been reported (its
// ProcessSummary handed out). A trimmed process's summary is made (sites
// described by its SiteSource) before its lists go: its first ten
// leak_sites survive, and its site source is released.
func (l *Ledger) Trim() []TrimmedProcess {
	keepEnded, keepTotals := l.limits()
	var out []TrimmedProcess
	for len(l.ret.ended) > keepEnded {
		p := l.ret.ended[0]
		l.ret.ended[0] = nil
		l.ret.ended = l.ret.ended[1:]
		t := TrimmedProcess{Pid: p.pid}
		if l.procs[p.pid] == p {
			t.Current = true
			delete(l.procs, p.pid)
			if l.last == p {
				l.last = nil
			}
		} else {
			for i, r := range l.retired {
				if r == p {
					// slices.Delete clears the slot it frees: a copy of p
					// left past the end would keep it.
					l.retired = slices.Delete(l.retired, i, i+1)
					break
				}
			}
		}
		ps := p.summary() // its lists are only counted: left in p, which trim lets go
		ps.trim()
		l.ret.trimmed = append(l.ret.trimmed, ps)
		out = append(out, t)
	}
	for len(l.ret.trimmed)-l.ret.trimmedHead > keepTotals {
		l.ret.dropped.add(&l.ret.trimmed[l.ret.trimmedHead])
		l.ret.trimmed[l.ret.trimmedHead] = ProcessSummary{}
		l.ret.trimmedHead++
	}
	if h := l.ret.trimmedHead; h > 64 && h > len(l.ret.trimmed)/2 {
		l.ret.trimmed = append([]ProcessSummary(nil), l.ret.trimmed[h:]...)
		l.ret.trimmedHead = 0
	}
	return out
}

// processEnded notes that p exited, for Trim.
func (l *Ledger) processEnded(p *proc) {
	l.ret.ended = append(l.ret.ended, p)
}

// trim drops ps's lists, counting them in Trimmed.
func (ps *ProcessSummary) trim() {
	t := &Trimmed{
		Leaks:     uint64(ps.LeakCount()),
		Sites:     uint64(len(ps.Sites)),
		Anomalies: uint64(len(ps.Anomalies)),
		L1Clashes: uint64(len(ps.L1Clashes)),

		AllocFailures: uint64(len(ps.AllocFailures)),
		SiteUsage:     uint64(len(ps.SiteUsage)),
	}
	for lk := range ps.AllUnplacedLeaks() {
		t.UnplacedLeaks++
		t.UnplacedBytes = SatAdd(t.UnplacedBytes, lk.Size)
	}
	if n := len(ps.LeakSites); n > keptLeakSites {
		t.LeakSites = uint64(n - keptLeakSites)
		ps.LeakSites = append([]LeakSite(nil), ps.LeakSites[:keptLeakSites]...)
	}
	ps.Leaks, ps.UnplacedLeaks, ps.Sites, ps.Anomalies, ps.L1Clashes = []Leak{}, []Leak{}, []Site{}, []Anomaly{}, []Notice{}
	ps.AllocFailures, ps.SiteUsage = []AllocFailure{}, nil
	if tr := ps.Traces; tr != nil {
		t.TraceRecords = uint64(len(tr.Hazards) + len(tr.InvalidReplays) + len(tr.RegionHazards) + len(tr.CaptureAllocs))
		tr.Hazards, tr.InvalidReplays, tr.RegionHazards, tr.CaptureAllocs = []TraceNote{}, []TraceNote{}, []TraceNote{}, []TraceNote{}
	}
	ps.leaks = nil
	ps.Command, t.CommandBytes = cutCommand(ps.Command)
	ps.Trimmed = t
}

// cutCommand keeps the first TrimmedCommandBytes bytes of a command line
// (fewer, to end on a whole character), in a string of its own (a part of
// the original would keep all of it), with a marker saying how many bytes
// were cut; it returns that count too.
func cutCommand(cmd string) (string, uint64) {
	if len(cmd) <= TrimmedCommandBytes {
		return cmd, 0
	}
	n := TrimmedCommandBytes
	for n > 0 && !utf8.RuneStart(cmd[n]) {
		n--
	}
	cut := uint64(len(cmd) - n)
	return fmt.Sprintf("%s... [%d bytes cut]", cmd[:n], cut), cut
}

func (d *DroppedProcesses) add(ps *ProcessSummary) {
	d.Processes++
	if ps.LateLibrary {
		d.LateLibrary++
	}
	d.Events = SatAdd(d.Events, ps.Stats.Events)
	for _, g := range ps.LeakGroups {
		d.Leaks = SatAdd(d.Leaks, g.Count)
		d.LeakedBytes = SatAdd(d.LeakedBytes, g.Bytes)
	}
	if t := ps.Trimmed; t != nil {
		d.Leaks = SatAdd(d.Leaks, t.UnplacedLeaks)
		d.LeakedBytes = SatAdd(d.LeakedBytes, t.UnplacedBytes)
	}
	for _, n := range ps.AnomalyCounts {
		d.Anomalies = SatAdd(d.Anomalies, n)
	}
	d.TraceProblems = SatAdd(d.TraceProblems, ps.Traces.Problems())
}
