// Package devices keeps tttrace's device-memory ledger: per traced process,
// per chip, per buffer type, following TT-Metal's lifecycle rules (see
// docs/architecture.md, "What the numbers mean").
//
// The ledger consumes events.Event values in ring-buffer order and never
// looks at anything else: it is pure Go, deterministic (the same stream
// gives the same Summary) and must not panic on any input. Totals are
// unsigned and are only ever decremented by what was added for the same
// object. They cannot wrap because what a process holds is bounded: every
// buffer or CB it counts adds its size once to the process's held bytes,
// which may not pass maxHeld (a buffer or CB that would pass it is an
// implausible_total anomaly, not counted), and any chip or mesh total is a
// sum of a subset of those objects. The tests' Check (check_test.go)
// verifies both.
//
// A Ledger is not safe for concurrent use: the caller serializes Apply,
// Summary and the accessors.
package devices

import (
	"sort"

	"github.com/tttrace/tttrace/events"
)

// Ledger is the per-process device-memory ledger. The zero value is not
// usable; call NewLedger.
type Ledger struct {
	procs map[uint32]*proc
	// retired are exited processes whose pid was reused (NewIncarnation):
	// still reported, no longer addressable by pid.
	retired []*proc
	lastPid uint32
	last    *proc
	lost    uint64 // records the ring buffer could not take
	events  uint64
	lastTs  uint64 // the latest event time applied
	observe Observer
	set     settings
	// memWants: bank managers to read from memory (TakeMemWants).
	memWants []MemWant
	sites    bool // Options.SiteUsage
	// allocObserve hears of allocator state changes (allocator.go).
	allocObserve AllocObserver
	ret          retention
}

// Options configure a Ledger for its whole life. The zero value is a
// ledger that tells no one anything, with the default bounds.
type Options struct {
	// Notices hears of every notice (notice.go) as it is made; nil: none.
	Notices NoticeSink
	// L1Warn is the headroom under which a chip gets an l1_headroom
	// notice (--l1-warn); 0: never.
	L1Warn uint64
	// MaxChips bounds the distinct chips of each process (--max-chips;
	// 0 or less: DefaultMaxChips). An event on a chip past the bound is a
	// too_many_chips anomaly and counts nothing.
	MaxChips int
	// MemReads makes a chip whose allocator was made before tttrace
	// attached ask for its bank managers to be read from memory
	// (TakeMemWants, InstallMem) when a request names one.
	MemReads bool
	// Observer hears of every change of a chip's totals; nil: none.
	Observer Observer
	// AllocObserver hears of every change of a chip's allocator state;
	// nil: none.
	AllocObserver AllocObserver
	// SiteUsage turns per-site accounting on (ProcessSummary.SiteUsage,
	// siteuse.go).
	SiteUsage bool
	// KeepEnded is how many ended processes are kept in full
	// (--keep-ended), KeepEndedTotals how many more as totals only
	// (retention.go); 0 or less: the defaults.
	KeepEnded, KeepEndedTotals int
}

// NewLedger returns an empty ledger configured by o.
func NewLedger(o Options) *Ledger {
	l := &Ledger{
		procs:        make(map[uint32]*proc),
		observe:      o.Observer,
		allocObserve: o.AllocObserver,
		sites:        o.SiteUsage,
	}
	if o.Notices != nil {
		l.set.notify = o.Notices.Notice
	}
	l.set.warn = o.L1Warn
	l.set.maxChips = o.MaxChips
	if o.MemReads {
		l.set.wantMem = func(w MemWant) { l.memWants = append(l.memWants, w) }
	}
	l.ret = newRetention(o.KeepEnded, o.KeepEndedTotals)
	return l
}

// SetProcessInfo records what the tracer knows of pid. It also makes the
// process appear in the summary even if it produced no event.
func (l *Ledger) SetProcessInfo(pid uint32, info ProcessInfo) {
	l.proc(pid).info = info
}

// SetSites gives pid's current process (the incarnation events for pid go
// to now) its site source; it stays with that process when a new
// incarnation takes the pid. It also makes the process appear in the
// summary, as SetProcessInfo does.
func (l *Ledger) SetSites(pid uint32, src SiteSource) {
	l.proc(pid).sites = src
}

// Processes returns the pids the ledger knows, sorted.
func (l *Ledger) Processes() []uint32 {
	pids := make([]uint32, 0, len(l.procs))
	for pid := range l.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	return pids
}

// NewIncarnation says pid now names a new process: the kernel reused the pid
// of one that exited. The exited one stays in the summary; events for pid
// go to a new, empty ledger. It does nothing if pid is unknown or has not
// exited (then it is still the same process).
func (l *Ledger) NewIncarnation(pid uint32) {
	p := l.procs[pid]
	if p == nil || !p.exited {
		return
	}
	l.retired = append(l.retired, p)
	delete(l.procs, pid)
	if l.lastPid == pid {
		l.last = nil
	}
}

// Events returns how many events have been applied.
func (l *Ledger) Events() uint64 { return l.events }

// LostEvents returns how many records are known to have been lost so far.
func (l *Ledger) LostEvents() uint64 { return l.lost }

// Exited reports whether pid is known to have ended, and how.
func (l *Ledger) Exited(pid uint32) (exited bool, code, signal int) {
	p := l.procs[pid]
	if p == nil {
		return false, 0, 0
	}
	return p.exited, p.exitCode, p.exitSignal
}

func (l *Ledger) proc(pid uint32) *proc {
	if l.last != nil && l.lastPid == pid {
		return l.last
	}
	p := l.procs[pid]
	if p == nil {
		p = newProc(pid, &l.set)
		p.observed = l.observe != nil
		p.sitesOn = l.sites
		p.allocs.allocObserved = l.allocObserve != nil
		l.procs[pid] = p
	}
	l.last, l.lastPid = p, pid
	return p
}

// Apply folds one event into the ledger. Events must come in ring-buffer
// order. Apply never panics and never fails: what it cannot make sense of
// is counted as an anomaly of the event's process.
func (l *Ledger) Apply(e *events.Event) {
	if e == nil {
		return
	}
	l.events++
	if e.Kind == events.KindLost {
		// LostBefore is the number lost; the record belongs to no process.
		l.lost += e.LostBefore
		return
	}
	l.lost += e.LostBefore
	if e.TsNs > l.lastTs {
		l.lastTs = e.TsNs
	}
	p := l.proc(e.Pid)
	wasExited := p.exited
	p.apply(e)
	if p.exited && !wasExited {
		l.ret.processEnded(p)
	}
	if len(p.l1.l1dirty) > 0 {
		p.l1.headrooms(&l.set, e)
	}
	if len(p.dirty) > 0 {
		p.notify(l.observe, e.TsNs)
	}
	if len(p.allocs.adirty) > 0 {
		p.allocs.allocNotify(l.allocObserve, e.TsNs)
	}
}
