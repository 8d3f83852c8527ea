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

// Totals are one chip's current counters, indexed by Counter: what a
// counter track or a gauge shows.
type Totals [NumCounters]uint64

// Counter indexes Totals.
type Counter int

// The counters of a chip, each named after its summary field
// (Counter.String). The first five equal events.BufferType values.
const (
	CounterDRAM         = Counter(events.DRAM)
	CounterL1           = Counter(events.L1)
	CounterSystemMemory = Counter(events.SystemMemory)
	CounterL1Small      = Counter(events.L1Small)
	CounterTrace        = Counter(events.Trace)
	CounterCB           = Counter(5)
	CounterLiveBuffers  = Counter(6)
	NumCounters         = 7
)

// String is the counter's summary field name ("dram_bytes", ...).
func (c Counter) String() string {
	if c >= 0 && int(c) < NumCounters {
		return counterNames[c]
	}
	return "counter(?)"
}

// Observer is told of every change of a chip's totals: after each applied
// event, once per chip the event changed (a mesh buffer changes every chip
// of its mesh), with the event's time. t is valid only during the call.
// Calling it allocates nothing.
type Observer func(pid uint32, chip int32, tsNs uint64, t *Totals)

// maxSize bounds a plausible buffer or CB size (1 TiB). Larger values can
// only come from a wrong layout or a bad read.
const maxSize = 1 << 40

// maxHeld bounds what one process may hold at once, all chips together,
// each buffer and CB counted once (1 PiB, far beyond any host's device
// memory): a hostile or broken process making 2^24 buffers of 1 TiB would
// otherwise wrap a chip's uint64 total. Every chip and mesh total of the
// process is at most this, so a sum over 2^13 processes cannot wrap either
// (sums over more saturate: SatAdd).
const maxHeld = 1 << 50

// SatAdd is a+b, or the largest uint64 when that would wrap: for sums of
// totals over processes, which the per-process bound cannot bound.
func SatAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

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
	hooks   hooks
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
		l.hooks.notify = o.Notices.Notice
	}
	l.hooks.warn = o.L1Warn
	l.hooks.maxChips = o.MaxChips
	if o.MemReads {
		l.hooks.wantMem = func(w MemWant) { l.memWants = append(l.memWants, w) }
	}
	l.setRetention(o.KeepEnded, o.KeepEndedTotals)
	return l
}

// ProcessInfo is what the tracer knows about a process besides its events.
type ProcessInfo struct {
	Command string // command line, for people
	Parent  uint32 // parent pid (0: unknown)
	NsPid   uint32 // pid inside its pid namespace (0: unknown or the same)
	// AttachedMidRun: the tracer attached after the library was already in
	// use, so buffers allocated before that are unknown (their frees are
	// counted as unknown_frees) and peaks are lower bounds.
	AttachedMidRun bool
	// Placement: the host and the ranks of the process.
	Placement Placement
	// Chips: the physical chips behind its chip ids.
	Chips ChipMap
	// LateLibrary: the process's TT-Metal library was probed only after it
	// had mapped it (--all: no process had mapped it before; -p: not a
	// candidate): its calls before are missed, the ledger is incomplete.
	LateLibrary bool
}

// SetProcessInfo records what the tracer knows of pid. It also makes the
// process appear in the summary even if it produced no event.
func (l *Ledger) SetProcessInfo(pid uint32, info ProcessInfo) {
	l.proc(pid).info = info
}

// SiteSource describes the allocation sites of one process (one
// incarnation of its pid): the runtime holds the stacks behind the site ids
// of its events. A summary of the process describes with it the sites its
// leaks and l1_clashes name.
type SiteSource interface {
	// Site describes site id; false for one it does not know.
	Site(id uint32) (Site, bool)
	// Python is the process's CPython interpreter, nil when it has none.
	Python() *PythonInfo
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

// DefaultMaxChips is how many distinct chips a process may touch unless
// Options.MaxChips says otherwise: far more than any host has (a Galaxy is
// 32), few enough that a process making up chip ids cannot blow up the
// ledger or the series of an exporter.
const DefaultMaxChips = 256

func (l *Ledger) proc(pid uint32) *proc {
	if l.last != nil && l.lastPid == pid {
		return l.last
	}
	p := l.procs[pid]
	if p == nil {
		p = newProc(pid)
		p.observed = l.observe != nil
		p.sitesOn = l.sites
		p.allocObserved = l.allocObserve != nil
		p.hooks = &l.hooks
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
		l.processEnded(p)
	}
	if len(p.l1dirty) > 0 {
		p.headrooms(&l.hooks, e)
	}
	if len(p.dirty) > 0 {
		p.notify(l.observe, e.TsNs)
	}
	if len(p.adirty) > 0 {
		p.allocNotify(l.allocObserve, e.TsNs)
	}
}
