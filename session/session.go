// Package session is tttrace's runtime: it attaches the probes, starts or
// adopts the traced processes, follows their lifecycle, reads the ring
// buffer, decodes each record (package events), folds it into the ledger
// (package devices) and hands everything to the outputs (package sinks).
// It knows nothing of flags or exit statuses: Run returns a Result or a
// typed *Error, and cmd/tttrace maps them.
//
// The kernel side (Backend) and the process side (Host) are interfaces, so
// the runtime is tested without BPF from synthetic record streams.
package session

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	allocmodel "github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/ttmetal"
)

// Config says what to trace. Exactly one of PIDs, Command and All is set.
type Config struct {
	PIDs    []int    // trace these running processes
	Command []string // start this command, traced from its first instruction
	All     bool     // every process that uses TT-Metal, now or later
	Follow  bool     // also trace the processes the traced ones fork

	Lib string // the library to probe ("": find it)
	// Analysis says how each library is analysed: a layout file, where
	// separate debug files are, the probe plan, the probes' placement.
	Analysis ttmetal.Options
	// RingSize is the ring buffer's size in bytes (0: the default).
	RingSize int
	// Wait: with PIDs, fail when a process has not loaded the library
	// after this long (0: wait until it exits).
	Wait time.Duration
	// L1Warn: a chip whose L1 headroom drops under this many bytes gets an
	// l1_headroom record (0: never).
	L1Warn uint64
	// NoStacks: no allocation stacks (no sites in the report).
	NoStacks bool
	// NoOps: no TT-NN op probes; records carry no op (ops.go).
	NoOps bool
	// KnownStacks: each stack fixed by its pcs is made known to the
	// kernel, which then sends a token instead of the copy
	// (bpf/stack.h; tttrace turns it on unless --known-stacks=false).
	KnownStacks bool
	// CheckKnownStacks: a known stack comes with its copy too, which is
	// unwound and compared with the stack its token names; the counts
	// are said on the log at the end (tests of the known stacks).
	CheckKnownStacks bool
	// MaxChips bounds the distinct chips of each process (0: the ledger's
	// default); events on chips past it are too_many_chips anomalies.
	MaxChips int
	// SiteUsage: the ledger keeps per-site accounting
	// (devices.ProcessSummary.SiteUsage) for memory profiles.
	SiteUsage bool
	// Host names this machine on every process (--host).
	Host string
	// DevRoot (tests only): a directory whose dev/tenstorrent and sys are
	// read instead of each process's /dev/tenstorrent and the host's /sys
	// ("": the real ones).
	DevRoot string
	// Pods names the Kubernetes pods and containers of the traced
	// processes (nil: their pod UIDs and container IDs only; pods.go).
	Pods PodNames
	// Snapshots: each value received asks every sinks.Snapshotter for the
	// state as of now; tracing goes on (nil: never).
	Snapshots <-chan struct{}
	// Marks: each value received starts a window where its time falls in
	// the stream (marks.go; nil: never).
	Marks <-chan MarkRequest
	// KeepEnded: ended processes kept in full (their leak lists, sites,
	// anomalies); KeepEndedTotals: older ones kept as totals only; older
	// still are summed in the summary's dropped_processes. 0: the ledger's
	// defaults.
	KeepEnded, KeepEndedTotals int
	// SingleUprobes attaches classic uprobes even where the kernel has
	// uprobe_multi links (tests of the fallback).
	SingleUprobes bool
	// ReadyFile is created once the probes are attached.
	ReadyFile string
	// Log receives notes and warnings for people (nil: discarded).
	Log io.Writer
	// Timeline, if not nil, hears when each step of start-up and teardown
	// ends (--timing).
	Timeline *Timeline
}

func (c *Config) log() io.Writer {
	if c.Log == nil {
		return io.Discard
	}
	return c.Log
}

// Result is how tracing ended.
type Result struct {
	Summary devices.Summary
	// Interrupted: ctx ended tracing before the traced processes did.
	Interrupted bool
	// Command: with Config.Command, how it ended (nil when interrupted).
	Command *ExitStatus
	// NoLibrary: with Config.PIDs, no traced process loaded TT-Metal.
	NoLibrary bool
}

// ExitStatus is how a process ended: Code, or killed by Signal (non-zero).
type ExitStatus struct{ Code, Signal int }

// tick is how often the runtime looks at process ends, ctx and the sinks'
// Tick, also while records keep coming.
const tick = 100 * time.Millisecond

// Run traces as cfg says, feeding sinks, until the traced processes have
// ended (or ctx is done). Errors are *Error.
func Run(ctx context.Context, cfg Config, out []sinks.Sink) (*Result, error) {
	// Every sink is closed once, whatever happens: by run, or here when
	// tracing cannot start.
	closeAll := func(err error) (*Result, error) {
		for _, k := range out {
			_ = k.Close()
		}
		return nil, err
	}
	if os.Geteuid() != 0 {
		return closeAll(&Error{ErrPermission, probes.ErrPermission})
	}
	host := procHost{}
	for _, pid := range cfg.PIDs {
		if err := host.Exists(pid); err != nil {
			return closeAll(errorf(ErrNoProcess, "-p %d: no such process", pid))
		}
	}
	// The command starts now, held at its gate until everything is in
	// place: its start (tttrace's own start-up, then the exec) overlaps
	// the verifier's work.
	var child Child
	if len(cfg.Command) > 0 {
		if !cfg.NoStacks {
			warmPython(cfg.Command)
		}
		c, err := host.Start(cfg.Command)
		if err != nil {
			return closeAll(err)
		}
		child = c
		cfg.Timeline.Mark("command started (held)")
	}
	be, err := newBPFBackend(&cfg)
	if err != nil {
		if child != nil {
			child.Abandon()
		}
		return closeAll(err)
	}
	cfg.Timeline.Mark("BPF maps and process programs loaded, ring mapped")
	defer func() {
		_ = be.Close()
		cfg.Timeline.Mark("BPF objects closed")
	}()
	return runStarted(ctx, cfg, be, host, out, child)
}

// session is one tracing run.
type session struct {
	cfg    Config
	log    io.Writer
	be     Backend
	host   Host
	sinks  []sinks.Sink
	ledger *devices.Ledger
	mem    memReads  // allocators read from processes' memory (allocread.go)
	facts  procFacts // chips held, pods (chipheld.go, pods.go)

	procs   map[uint32]*procState // traced processes not yet ended
	ended   map[uint32]bool       // traced processes that ended (a pid seen again is a new process)
	exits   chan exitNote
	libKind map[procfs.FileKey]Verdict // what each shared object seen is
	loaders map[loaderKey]bool         // dynamic loaders probed
	ends    []exitNote                 // ends learned by the reading goroutine, applied by reapExits
	child   Child
	anyLib  bool // some process mapped a TT-Metal library
	timeout chan struct{}

	sites *allocSites // allocation sites
	ops   opLibs      // TT-NN ops: the libraries, each thread's op frames (ops.go)
	join  opJoin      // records waiting for their launch's runtime id (opjoin.go)
	dl    loaderDrops // _dl_debug_state calls over their budget
	// ev is the record handle decodes, valid until the next one.
	ev events.Event

	layoutSaid    bool // the first layout anomaly was told on the log
	attached      int  // TT-Metal libraries probed so far
	decodeErrors  uint64
	followedQuiet int  // followed processes that ended without using TT-Metal
	detachLate    bool // the probes are detached after the summary (finish)

	// marks: windows asked for, waiting for their place in the stream
	// (marks.go).
	marks []MarkRequest
}

// procState is what the session tracks of a traced process.
type procState struct {
	info       devices.ProcessInfo
	hasLib     bool    // a TT-Metal library is mapped in it
	mainStatus *uint32 // wait status of its main thread, from BPF
	// inLedger: the process is in the report. Explicit targets always are;
	// followed children only once they use TT-Metal, so a command run
	// through wrapper scripts is not buried under processes that never did.
	inLedger bool
	watched  bool // a pidfd watches its end
	ending   bool // its end is queued in session.ends
	// mem: what reading its allocators from its memory may still take
	// (allocread.go).
	mem memBudget
	// held: the devices its chip ids name that it was seen holding open
	// (chipheld.go).
	held chipsHeld
	// uids: reading its chips' unique ids from its memory (chipuid.go).
	uids chipUIDs
}

type exitNote struct {
	pid          uint32
	code, signal int
	known        bool // code/signal are the real ones (from wait)
}

func run(ctx context.Context, cfg Config, be Backend, host Host, out []sinks.Sink) (res *Result, err error) {
	return runStarted(ctx, cfg, be, host, out, nil)
}

// runStarted is run with cfg.Command already started (held at its gate),
// or not (nil: setup starts it).
func runStarted(ctx context.Context, cfg Config, be Backend, host Host, out []sinks.Sink, child Child) (res *Result, err error) {
	s := newSession(cfg, be, host, out, child)
	// After the sinks are closed (the defer below runs first): the
	// probes of a run that ended by itself go to a holder whose exit
	// closes them (closer.go), so that tttrace's exit does not wait for
	// the kernel's grace periods.
	defer func() {
		if !s.detachLate {
			return
		}
		if err := s.be.(lateDetacher).DetachLater(startCloser); err != nil {
			cfg.Timeline.Mark(fmt.Sprintf("probes not handed to a holder (%v)", err))
			return
		}
		cfg.Timeline.Mark("probes detached (uprobe_multi links: by a holder)")
	}()
	defer func() {
		for _, k := range out {
			if cerr := k.Close(); cerr != nil && err == nil {
				err = errorf(ErrInternal, "write output: %w", cerr)
			}
		}
	}()
	// A command never released (setup failed) exits without running.
	defer func() {
		if s.child != nil {
			s.child.Abandon()
		}
	}()
	if err := s.setup(); err != nil {
		return nil, err
	}
	cfg.Timeline.Mark("set up: the command runs")
	interrupted, err := s.loop(ctx)
	if err != nil {
		return nil, err
	}
	cfg.Timeline.Mark("traced processes ended")
	sum, err := s.finish(interrupted)
	if err != nil {
		return nil, err
	}
	cfg.Timeline.Mark("ring drained, summary written")
	res = &Result{Summary: sum, Interrupted: interrupted}
	if s.child != nil && !interrupted {
		_, code, sig := s.ledger.Exited(uint32(s.child.Pid()))
		res.Command = &ExitStatus{Code: code, Signal: sig}
	}
	res.NoLibrary = len(cfg.PIDs) > 0 && !s.anyLib
	return res, nil
}

// newSession makes the state of one run: its ledger, with the sinks
// registered as its observers, and its allocation sites.
func newSession(cfg Config, be Backend, host Host, out []sinks.Sink, child Child) *session {
	s := &session{
		child:   child,
		cfg:     cfg,
		log:     cfg.log(),
		be:      be,
		host:    host,
		sinks:   out,
		procs:   map[uint32]*procState{},
		ended:   map[uint32]bool{},
		exits:   make(chan exitNote, 256),
		libKind: map[procfs.FileKey]Verdict{},
		loaders: map[loaderKey]bool{},
		timeout: make(chan struct{}, 1),
	}
	_, readsMem := be.(MemReader)
	s.ledger = devices.NewLedger(devices.Options{
		Notices:         s.notices(),
		L1Warn:          cfg.L1Warn,
		MaxChips:        cfg.MaxChips,
		MemReads:        readsMem,
		Observer:        s.chipObserver(),
		AllocObserver:   s.allocObserver(),
		SiteUsage:       cfg.SiteUsage,
		KeepEnded:       cfg.KeepEnded,
		KeepEndedTotals: cfg.KeepEndedTotals,
	})
	s.mem = memReads{ledger: s.ledger, log: s.log, be: s.be, procs: s.procs}
	if cfg.DevRoot != "" {
		s.mem.sys = cfg.DevRoot + "/sys"
	}
	s.facts = procFacts{ledger: s.ledger, procs: s.procs, pods: cfg.Pods}
	s.sites = newAllocSites(s)
	oa, _ := be.(opsAttacher)
	s.ops = opLibs{on: !cfg.NoOps, be: oa, log: s.log, tl: cfg.Timeline,
		key: func(p string) (procfs.FileKey, error) { return s.host.Key(p) }, wake: func() { s.be.Wake() }}
	s.join.emit = func(ev *events.Event) {
		s.apply(ev)
		s.sites.announceSite(ev)
		s.send(ev)
	}
	s.ops.frames.launchEnded = s.join.launchEnded
	run := sinks.NewRun(cfg.L1Warn, cfg.MaxChips, cfg.KeepEnded, cfg.KeepEndedTotals)
	for _, k := range s.sinks {
		if rs, ok := k.(sinks.RunSink); ok {
			if err := rs.Run(&run); err != nil {
				fmt.Fprintf(s.log, "tttrace: the run line: %v\n", err)
			}
		}
	}
	return s
}

// notices hands the ledger's notices to the log's notes for people
// (sinks.NoticeLog) and to every sink that wants them, in that order.
func (s *session) notices() devices.NoticeSink {
	fan := noticeFan{sinks.NewNoticeLog(s.log)}
	for _, k := range s.sinks {
		if n, ok := k.(sinks.NoticeSink); ok {
			fan = append(fan, n)
		}
	}
	return fan
}

// noticeFan hands each notice to every sink in it.
type noticeFan []sinks.NoticeSink

func (f noticeFan) Notice(n *devices.Notice) {
	for _, k := range f {
		k.Notice(n)
	}
}

// allocObserver is the sinks that follow allocator states, as the
// ledger's observer of them (nil: none does).
func (s *session) allocObserver() devices.AllocObserver {
	var aobs []sinks.AllocObserver
	for _, k := range s.sinks {
		if o, ok := k.(sinks.AllocObserver); ok {
			aobs = append(aobs, o)
		}
	}
	if len(aobs) == 0 {
		return nil
	}
	return func(pid uint32, chip int32, ts uint64, typ events.BufferType, banks uint32, st *allocmodel.Statistics) {
		for _, o := range aobs {
			o.AllocState(pid, chip, ts, typ, banks, st)
		}
	}
}

// chipObserver is the sinks that follow chip totals, as the ledger's
// observer (nil: none does).
func (s *session) chipObserver() devices.Observer {
	var obs []sinks.ChipObserver
	for _, k := range s.sinks {
		if o, ok := k.(sinks.ChipObserver); ok {
			obs = append(obs, o)
		}
	}
	if len(obs) == 0 {
		return nil
	}
	return func(pid uint32, chip int32, ts uint64, t *devices.Totals) {
		for _, o := range obs {
			o.ChipTotals(pid, chip, ts, t)
		}
	}
}

// setup attaches everything and starts or adopts the traced processes, in
// an order that lets no TT-Metal call of theirs slip through: processes are
// in the BPF filter and libraries probed before the command runs.
func (s *session) setup() error {
	cfg := &s.cfg
	if err := s.be.ProcessEvents(); err != nil {
		return errorf(ErrInternal, "%w", err)
	}
	cfg.Timeline.Mark("process events attached")
	if s.loaderEverywhere() {
		if err := s.attachLoader(defaultLoader, 0); err != nil {
			fmt.Fprintf(s.log, "tttrace: note: %v: libraries loaded later are found only if they are candidates\n", err)
		}
	}
	if cfg.Lib != "" {
		if _, err := s.host.Key(cfg.Lib); err != nil {
			return errorf(ErrNoLibrary, "--lib: %w", err)
		}
		if err := s.attachLibrary(cfg.Lib); err != nil {
			return err
		}
		cfg.Timeline.Mark("--lib probed")
	}
	switch {
	case len(cfg.Command) > 0:
		if cfg.Lib == "" {
			cands := s.host.Candidates(0, cfg.Command)
			s.attachCandidates(cands)
			s.ops.now(ttnnCandidates(cands))
		} else {
			s.ops.now(ttnnCandidates([]string{cfg.Lib}))
		}
		if s.child == nil {
			if s.sites.on {
				warmPython(cfg.Command)
			}
			child, err := s.host.Start(cfg.Command)
			if err != nil {
				return err
			}
			s.child = child
		}
		child := s.child
		if !s.loaderEverywhere() {
			if err := s.attachLoader(defaultLoader, child.Pid()); err != nil {
				fmt.Fprintf(s.log, "tttrace: note: %v: libraries loaded later are found only if they are candidates\n", err)
			}
		}
		s.track(uint32(child.Pid()), devices.ProcessInfo{Command: strings.Join(cfg.Command, " "), Parent: uint32(s.host.Self())}, true, true)
	case cfg.All:
		for _, pid := range s.host.AllPids() {
			if pid != s.host.Self() {
				_ = s.adopt(pid, false, true)
			}
		}
	default:
		for _, pid := range cfg.PIDs {
			if err := s.adopt(pid, true, true); err != nil {
				return err
			}
		}
	}
	names := "no TT-Metal library yet"
	if n := s.be.Probes(); n > 0 {
		names = fmt.Sprintf("%d probes", n)
	}
	fmt.Fprintf(s.log, "tttrace: tracing (%s)\n", names)
	if cfg.ReadyFile != "" {
		if err := writeReady(cfg.ReadyFile); err != nil {
			return errorf(ErrInternal, "ready file: %w", err)
		}
	}
	if s.child != nil {
		if err := s.child.Release(); err != nil {
			return err
		}
		go func(c Child) {
			code, sig := c.Wait()
			s.exits <- exitNote{pid: uint32(c.Pid()), code: code, signal: sig, known: true}
			s.be.Wake()
		}(s.child)
	}
	if cfg.Wait > 0 && len(cfg.PIDs) > 0 {
		time.AfterFunc(cfg.Wait, func() {
			s.timeout <- struct{}{}
			s.be.Wake()
		})
	}
	return nil
}

// loop reads the ring buffer until every traced process has ended (or, with
// All, until ctx is done). interrupted says ctx ended it. Ends of
// processes, ctx and Wait are looked at every tick even while records keep
// coming.
func (s *session) loop(ctx context.Context) (interrupted bool, err error) {
	deadline := time.Now().Add(tick)
	for n := uint(1); ; n++ {
		rec, ok, err := s.be.Read(deadline)
		if err != nil {
			return true, errorf(ErrInternal, "ring buffer: %w", err)
		}
		if ok {
			s.handle(rec)
		}
		// An interpreter read in the background is registered at once: the
		// allocations that follow get their Python lines.
		s.sites.takePyReady()
		s.ops.takeReady()
		if ok && (n%1024 != 0 || (ctx.Err() == nil && len(s.exits) == 0 && len(s.ends) == 0 && time.Now().Before(deadline))) {
			continue
		}
		s.checkGone()
		s.reapExits()
		select {
		case <-s.timeout:
			for pid, st := range s.procs {
				if !st.hasLib {
					return false, errorf(ErrNoLibrary, "pid %d did not load libtt_metal.so within --wait %s", pid, s.cfg.Wait)
				}
			}
		default:
		}
		if len(s.procs) == 0 && !s.cfg.All {
			return false, nil
		}
		if ctx.Err() != nil {
			return true, nil
		}
		s.settle(!ok)
		s.takeMarks(!ok)
		select {
		case <-s.cfg.Snapshots:
			s.takeSnapshot()
		default:
		}
		s.takeLoaderDrops(true)
		s.tick()
		deadline = time.Now().Add(tick)
	}
}

// settleAfter is how long a CB layout must have been quiet for its clash
// check to run without a further event of its thread: far longer than the
// gap between two CBs of one layout (a tight loop in TT-Metal).
const settleAfter = 50 * time.Millisecond

// settle runs the clash checks of layouts quiet for settleAfter, so an
// l1_clash is reported within a tick or so even when the program makes no
// further TT-Metal call on that thread. idle: the ring was found empty, so
// nothing older than now is still unread; else only the time of the
// latest event applied is safe to measure from.
func (s *session) settle(idle bool) {
	ref := s.ledger.LastTs()
	if idle {
		ref = monotonicNow()
	}
	if ref > uint64(settleAfter) {
		s.ledger.FlushBefore(ref - uint64(settleAfter))
	}
}

// tick hands the sinks the current state.
func (s *session) tick() {
	s.join.tick()
	s.facts.checkHeld()
	s.mem.checkUIDs(time.Now())
	s.facts.checkPods()
	v := sinks.View{Now: time.Now(), Ledger: s.ledger, Libraries: s.be.Libraries()}
	for pid, st := range s.procs {
		if st.inLedger {
			v.Procs = append(v.Procs, sinks.Proc{Pid: pid, Command: st.info.Command, Placement: st.info.Placement})
			if !st.hasLib {
				v.Waiting++
			}
		}
	}
	sort.Slice(v.Procs, func(i, j int) bool { return v.Procs[i].Pid < v.Procs[j].Pid })
	for _, k := range s.sinks {
		k.Tick(&v)
	}
}

// drain reads every record already in the ring buffer.
func (s *session) drain() {
	now := time.Now()
	for {
		rec, ok, err := s.be.Read(now)
		if err != nil || !ok {
			return
		}
		s.handle(rec)
	}
}

// handle dispatches one raw record on its kind (events.Peek checks the
// kind and the length of its struct).
func (s *session) handle(raw []byte) {
	h, err := events.Peek(raw)
	if err != nil {
		s.badRecord(err)
		return
	}
	if len(s.marks) > 0 {
		s.marksBefore(h.TsNs)
	}
	switch h.Kind {
	case events.KindStack:
		s.sites.onStack(raw)
		return
	case events.KindPyStack:
		s.sites.onPyStack(raw)
		return
	case events.KindPyCode:
		s.sites.onPyCode(raw)
		return
	case events.KindLinkObject:
		s.sites.onLinkObject(raw)
		return
	}
	// The session's one Event: nothing keeps its pointer past the call
	// (the sinks' contract; hold copies it), so no record allocates one.
	ev := &s.ev
	switch h.Kind {
	case events.KindAllocCapacity, events.KindAllocRequest:
		err = events.DecodeAllocator(raw, ev)
	case events.KindTrace:
		err = events.DecodeTrace(raw, ev)
	case events.KindOpEnter:
		var w *events.OpEnterWire
		if w, err = events.DecodeOpEnter(raw, ev); err == nil {
			s.ops.frames.onEnter(ev, w)
		}
	case events.KindRuntimeID:
		if err = events.DecodeRuntimeID(raw, ev); err == nil {
			s.ops.frames.onRuntimeID(ev, h.OpFrames)
			s.join.runtimeID(ev.Launch, ev.RuntimeID)
		}
	default:
		err = events.Decode(raw, ev)
	}
	if err != nil {
		s.badRecord(err)
		return
	}
	if h.Kind != events.KindOpEnter && h.Kind != events.KindRuntimeID {
		s.ops.frames.onRecord(ev, h.OpFrames)
	}
	if s.sites.hold(ev) {
		return
	}
	s.dispatch(ev)
}

func (s *session) badRecord(err error) {
	s.decodeErrors++
	if s.decodeErrors <= 10 {
		fmt.Fprintf(s.log, "tttrace: bad record: %v\n", err)
	}
}

// dispatch handles one decoded record, in stream order.
func (s *session) dispatch(ev *events.Event) {
	switch ev.Kind {
	case events.KindLinkMap:
		s.onLinkMap(ev.Pid)
		return
	case events.KindMainExit:
		if st := s.procs[ev.Pid]; st != nil {
			ws := ev.WaitStatus
			st.mainStatus = &ws
		}
		return
	case events.KindGroupExit:
		if st := s.procs[ev.Pid]; st != nil && !st.ending && !s.isChild(ev.Pid) {
			// Every record of the process came before this one.
			st.ending = true
			s.ends = append(s.ends, exitNote{pid: ev.Pid})
		}
		return
	case events.KindFork:
		s.onFork(ev)
	default:
		s.onCall(ev)
	}
	s.emit(ev)
}

// emit applies ev to the ledger (fork records are not the ledger's) and
// hands it to the sinks, once the runtime id of the launch it was made in
// is known (opjoin.go). A replay (replay.go) does the same, with the
// sites of its file.
func (s *session) emit(ev *events.Event) {
	if !s.join.hold(ev) {
		s.join.emit(ev)
	}
}

// apply folds ev into the ledger, which hands its notices to the sinks.
func (s *session) apply(ev *events.Event) {
	if ev.Kind != events.KindFork {
		s.ledger.Apply(ev)
		s.mem.readAllocators()
		if s.ledger.LayoutAnomalies() != 0 && !s.layoutSaid {
			s.layoutSaid = true
			fmt.Fprintf(s.log, "tttrace: pid %d: a %s with an impossible buffer type or size: the layout tttrace reads Buffer with does not fit this library, "+
				"so its numbers cannot be trusted (tttrace exits 12; see tttrace doctor, or give the right --layout)\n", ev.Pid, ev.Kind)
		}
	}
}

// send hands ev to every sink.
func (s *session) send(ev *events.Event) {
	for _, k := range s.sinks {
		k.Event(ev)
	}
}

// finish drains what is left, accounts losses no record reported, and
// hands the summary to the sinks.
func (s *session) finish(interrupted bool) (devices.Summary, error) {
	// Detach first: under a sustained burst a drain would chase the
	// producer. What the probes committed before is still in the ring.
	// Unless no process can make a record any more (every traced process
	// ended, none other traced): then the probes are detached after the
	// summary, by another process (runStarted, closer.go).
	ld, ok := s.be.(lateDetacher)
	s.detachLate = ok && !interrupted && !s.cfg.All && ld.TracesNone()
	if !s.detachLate {
		if err := s.be.Detach(); err != nil {
			fmt.Fprintf(s.log, "tttrace: detach: %v\n", err)
		}
		s.cfg.Timeline.Mark("probes detached")
	}
	s.drain()
	s.takeMarks(true)
	s.sites.releaseAll()
	s.ops.finish()
	if a := s.sites; a.on && s.cfg.Timeline != nil {
		s.cfg.Timeline.Mark(fmt.Sprintf("stacks: %d copied, %d known (%d of an earlier process)", a.copied, a.known, a.staleKnown))
	}
	if a := s.sites; a.on && s.cfg.Timeline != nil {
		s.cfg.Timeline.Mark(fmt.Sprintf("Python stacks: %d sent (%d before the code objects' deallocation was probed, %d not yet described, %d learnt), %d known (%d of an earlier process)",
			a.pySent, a.pyNoGen, a.pyUndesc, a.pyLearnt, a.pyKnown, a.pyStale))
	}
	if a := s.sites; a.on && s.cfg.CheckKnownStacks {
		fmt.Fprintf(s.log, "tttrace: known stacks checked: %d copied, %d known, %d checked, %d wrong\n", a.copied, a.known, a.checked, a.wrong)
		fmt.Fprintf(s.log, "tttrace: known Python stacks checked: %d sent, %d known, %d checked, %d wrong; sent: %d captured before the code objects' deallocation was probed, %d with a code object not yet described, %d learnt\n",
			a.pySent, a.pyKnown, a.pyChecked, a.pyWrong, a.pyNoGen, a.pyUndesc, a.pyLearnt)
	}
	if s.followedQuiet > 0 {
		fmt.Fprintf(s.log, "tttrace: %d followed process(es) ended without using TT-Metal (not in the report)\n", s.followedQuiet)
	}
	losses, err := s.be.Lost()
	if err != nil {
		return devices.Summary{}, errorf(ErrInternal, "%w", err)
	}
	total := losses.Events
	// Records still waiting for their launch's id: none will come.
	s.join.giveUp()
	// Clash checks still waiting for a layout's end: the threads did
	// nothing since (TT-Metal's check threw, or tracing stopped).
	s.ledger.Flush()
	if inBand := s.ledger.LostEvents(); total > inBand {
		ev := events.Event{Kind: events.KindLost, TsNs: monotonicNow(), LostBefore: total - inBand, Chip: -1}
		s.emit(&ev)
	}
	// The leak lists stay in the ledger, which no longer changes: the
	// sinks stream them (a million leaks are ~140 MB as a list).
	sum := s.ledger.SummaryStreamed()
	sum.LostRecords = map[string]uint64{}
	for k, n := range losses.ByKind {
		if n > 0 {
			sum.LostRecords[events.Kind(k).String()] = n
		}
	}
	s.addLoaderDrops(&sum)
	for _, k := range s.sinks {
		if err := k.Summary(&sum); err != nil {
			return sum, errorf(ErrInternal, "write summary: %w", err)
		}
	}
	return sum, nil
}

// takeSnapshot hands the Snapshotter sinks the ledger's state as of now: every
// record read so far applied.
func (s *session) takeSnapshot() {
	sum := s.ledger.Summary()
	stamp := time.Now().UTC().Format("20060102T150405.000Z")
	var wrote []string
	for _, k := range s.sinks {
		sn, ok := k.(sinks.Snapshotter)
		if !ok {
			continue
		}
		names, err := sn.Snapshot(&sum, stamp)
		wrote = append(wrote, names...)
		if err != nil {
			fmt.Fprintf(s.log, "tttrace: snapshot: %v\n", err)
		}
	}
	if len(wrote) == 0 {
		fmt.Fprintf(s.log, "tttrace: snapshot %s: no output takes snapshots\n", stamp)
		return
	}
	fmt.Fprintf(s.log, "tttrace: snapshot %s written: %s\n", stamp, strings.Join(wrote, ", "))
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
