package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes"
)

// Version is tttrace's version, set at build time.
var Version = "dev"

// exitError carries the exit status an error deserves.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

// Main parses args, runs tttrace and returns its exit status. Errors are
// printed once, on stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "doctor" {
		return Doctor(args[1:], stdout, stderr)
	}
	f, err := Parse(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %v\n", err)
		return ExitUsage
	}
	if f.ShowHelp {
		return ExitOK
	}
	if f.ShowVer {
		fmt.Fprintf(stdout, "tttrace %s\n", Version)
		return ExitOK
	}
	ctx, stop := stopOnSignals(f, stderr)
	defer stop()
	code, err := Run(ctx, f, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return ExitError
	}
	return code
}

// stopOnSignals returns a context cancelled by SIGTERM, or by SIGINT. With
// -- CMD a first SIGINT (Ctrl-C, which the command receives too) keeps
// tracing while the command winds down, freeing what it frees; a second
// one stops at once.
func stopOnSignals(f *Flags, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		interrupts := 0
		for sig := range ch {
			if sig == os.Interrupt && len(f.Command) > 0 && interrupts == 0 {
				interrupts++
				fmt.Fprintf(stderr, "tttrace: interrupted: tracing until %s exits (Ctrl-C again to stop now)\n", f.Command[0])
				continue
			}
			cancel()
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// session is one tracing run.
type session struct {
	f      *Flags
	stderr io.Writer
	out    *bufio.Writer
	tracer *probes.Tracer
	ledger *devices.Ledger

	procs   map[uint32]*procState // traced processes not yet ended
	ended   map[uint32]bool       // traced processes that ended (a pid seen again is a new process: reborn)
	exits   chan exitNote
	libKind map[probes.FileKey]libVerdict // what each shared object seen is
	loaders map[loaderKey]bool            // dynamic loaders probed
	child   *gatedChild
	live    *liveView
	anyLib  bool // some process mapped a TT-Metal library
	timeout chan struct{}

	jsonBuf       []byte
	decodeErrors  uint64
	followedQuiet int // followed processes that ended without using TT-Metal
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
}

type libVerdict uint8

const (
	libOther    libVerdict = iota + 1 // not TT-Metal
	libAttached                       // TT-Metal, probed
	libRefused                        // TT-Metal, but tttrace cannot read it
)

type exitNote struct {
	pid          uint32
	code, signal int
	known        bool // code/signal are the real ones (from wait)
}

// Run traces as f says and returns the exit status.
func Run(ctx context.Context, f *Flags, stdout, stderr io.Writer) (int, error) {
	if os.Geteuid() != 0 {
		return 0, fail(ExitPermission, "%v", probes.ErrPermission)
	}
	for _, pid := range f.PIDs {
		if err := probes.ProcessExists(pid); err != nil {
			return 0, fail(ExitNoProcess, "-p %d: no such process", pid)
		}
	}
	out := stdout
	if f.Output != "" {
		of, err := os.Create(f.Output)
		if err != nil {
			return 0, fail(ExitError, "output: %w", err)
		}
		defer of.Close()
		out = of
	}
	tracer, err := probes.Load(probes.Options{RingSize: f.ringBytes, AllProcesses: f.All, FollowChildren: f.Follow, SingleUprobes: f.NoMulti})
	if err != nil {
		if errors.Is(err, probes.ErrPermission) {
			return 0, fail(ExitPermission, "%w", err)
		}
		return 0, fail(ExitError, "%w", err)
	}
	defer tracer.Close()
	s := &session{
		f:       f,
		stderr:  stderr,
		out:     bufio.NewWriterSize(out, 1<<20),
		tracer:  tracer,
		ledger:  devices.NewLedger(),
		procs:   map[uint32]*procState{},
		ended:   map[uint32]bool{},
		exits:   make(chan exitNote, 256),
		libKind: map[probes.FileKey]libVerdict{},
		loaders: map[loaderKey]bool{},
		timeout: make(chan struct{}, 1),
		live:    newLiveView(f, stderr),
	}
	defer s.out.Flush()
	if err := s.setup(ctx); err != nil {
		return 0, err
	}
	defer func() {
		if s.child != nil {
			s.child.abandon()
		}
	}()
	interrupted, err := s.loop(ctx)
	if err != nil {
		return 0, err
	}
	sum, err := s.finish()
	if err != nil {
		return 0, err
	}
	status := ExitOK
	if s.child != nil && !interrupted {
		if _, code, sig := s.ledger.Exited(uint32(s.child.pid())); sig != 0 {
			status = 128 + sig
		} else {
			status = code
		}
	}
	if len(f.PIDs) > 0 && !s.anyLib {
		fmt.Fprintf(stderr, "tttrace: no traced process loaded libtt_metal.so\n")
		if status == ExitOK {
			status = ExitNoLibrary
		}
	}
	if sum.LostEvents > 0 {
		fmt.Fprintf(stderr, "tttrace: %d events lost: the ledger is incomplete (try a larger --ring-size)\n", sum.LostEvents)
		if status == ExitOK {
			status = ExitLost
		}
	}
	return status, nil
}

// setup attaches everything and starts or adopts the traced processes, in
// an order that lets no TT-Metal call of theirs slip through: processes are
// in the BPF filter and libraries probed before the command runs.
func (s *session) setup(ctx context.Context) error {
	f := s.f
	if err := s.tracer.AttachProcessEvents(); err != nil {
		return fail(ExitError, "%w", err)
	}
	if s.loaderEverywhere() {
		if err := s.attachLoader(defaultLoader, 0); err != nil {
			fmt.Fprintf(s.stderr, "tttrace: note: %v: libraries loaded later are found only if they are candidates\n", err)
		}
	}
	if f.Lib != "" {
		if _, err := os.Stat(f.Lib); err != nil {
			return fail(ExitNoLibrary, "--lib: %w", err)
		}
		if err := s.attachLibrary(f.Lib, true); err != nil {
			return err
		}
	}
	switch {
	case len(f.Command) > 0:
		if f.Lib == "" {
			s.attachCandidates(probes.CandidateLibraries(0, f.Command))
		}
		child, err := startGated(f.Command)
		if err != nil {
			return err
		}
		s.child = child
		if !s.loaderEverywhere() {
			if err := s.attachLoader(defaultLoader, child.pid()); err != nil {
				fmt.Fprintf(s.stderr, "tttrace: note: %v: libraries loaded later are found only if they are candidates\n", err)
			}
		}
		s.track(uint32(child.pid()), devices.ProcessInfo{Command: joinArgs(f.Command), Parent: uint32(os.Getpid())}, true)
	case f.All:
		for _, pid := range probes.AllPids() {
			if pid != os.Getpid() {
				s.adopt(pid, false)
			}
		}
	default:
		for _, pid := range f.PIDs {
			if err := s.adopt(pid, true); err != nil {
				return err
			}
		}
	}
	names := "no TT-Metal library yet"
	if n := len(s.tracer.Sites); n > 0 {
		names = fmt.Sprintf("%d probes", n)
	}
	fmt.Fprintf(s.stderr, "tttrace: tracing (%s)\n", names)
	if f.ReadyFile != "" {
		if err := os.WriteFile(f.ReadyFile, []byte("ready\n"), 0o644); err != nil {
			return fail(ExitError, "ready file: %w", err)
		}
	}
	if s.child != nil {
		if err := s.child.release(); err != nil {
			return err
		}
		go func(c *gatedChild) {
			code, sig := c.wait()
			s.exits <- exitNote{pid: uint32(c.pid()), code: code, signal: sig, known: true}
			_ = s.tracer.Reader().Flush()
		}(s.child)
	}
	if f.Wait > 0 && len(f.PIDs) > 0 {
		time.AfterFunc(f.Wait, func() {
			s.timeout <- struct{}{}
			_ = s.tracer.Reader().Flush()
		})
	}
	return nil
}

// adopt starts tracing a running process. For -p (explicit) a library it
// maps that tttrace cannot read is an error; with --all only TT-Metal
// processes are adopted.
func (s *session) adopt(pid int, explicit bool) error {
	objs, loader, err := probes.MappedObjects(pid)
	if err != nil {
		if explicit {
			return fail(ExitNoProcess, "-p %d: %v", pid, err)
		}
		return nil
	}
	if loader != "" {
		only := pid
		if s.loaderEverywhere() {
			only = 0
		}
		if err := s.attachLoader(loader, only); err != nil && explicit {
			fmt.Fprintf(s.stderr, "tttrace: note: pid %d: %v\n", pid, err)
		}
	}
	found := false
	for _, o := range objs {
		v, err := s.classify(o, explicit)
		if err != nil {
			return err
		}
		found = found || v == libAttached
	}
	if !explicit && !found {
		return nil
	}
	if !found {
		// Not loaded yet: probe the files it would load, and hear of the
		// load through ld.so otherwise.
		if s.f.Lib == "" {
			s.attachCandidates(probes.CandidateLibraries(pid, nil))
		}
		fmt.Fprintf(s.stderr, "tttrace: pid %d has not loaded libtt_metal.so yet: waiting for it\n", pid)
	}
	st := s.track(uint32(pid), devices.ProcessInfo{
		Command:        probes.Cmdline(pid),
		Parent:         probes.ParentPid(pid),
		NsPid:          probes.NsPid(pid),
		AttachedMidRun: found,
	}, true)
	st.hasLib = found
	s.anyLib = s.anyLib || found
	return nil
}

// classify says whether the shared object at path is TT-Metal and probes it
// if so. strict turns an unreadable TT-Metal library into an error.
func (s *session) classify(path string, strict bool) (libVerdict, error) {
	key, err := probes.KeyOf(path)
	if err != nil {
		return libOther, nil
	}
	if v, ok := s.libKind[key]; ok {
		return v, nil
	}
	lib, err := probes.OpenLibrary(path)
	if err != nil {
		s.libKind[key] = libOther
		return libOther, nil
	}
	defer lib.Close()
	if !probes.IsTTMetal(lib) {
		s.libKind[key] = libOther
		return libOther, nil
	}
	err = s.attachOpened(lib, key, strict)
	return s.libKind[key], err
}

// attachLibrary probes the TT-Metal library at path. strict: errors are
// returned (with their exit status); otherwise they are printed and the
// library is left alone.
func (s *session) attachLibrary(path string, strict bool) error {
	key, err := probes.KeyOf(path)
	if err != nil {
		return fail(ExitNoLibrary, "%s: %w", path, err)
	}
	lib, err := probes.OpenLibrary(path)
	if err != nil {
		s.libKind[key] = libRefused
		return fail(ExitNoLibrary, "library: %w", err)
	}
	defer lib.Close()
	return s.attachOpened(lib, key, strict)
}

// attachOpened probes lib (file key) and records the verdict.
func (s *session) attachOpened(lib *probes.Library, key probes.FileKey, strict bool) error {
	err := func() error {
		prep, err := prepareLibrary(lib, s.f.Layout, s.f.Probes)
		if err != nil {
			return err
		}
		if err := s.tracer.AttachPlan(lib, prep.syms, prep.plan, prep.layout.Layout); err != nil {
			return fail(ExitUnsupported, "%w", err)
		}
		prep.report(s.stderr, lib.Path)
		return nil
	}()
	if err != nil {
		s.libKind[key] = libRefused
		if strict {
			return err
		}
		fmt.Fprintf(s.stderr, "tttrace: not probing %s: %v\n", lib.Path, err)
		return nil
	}
	s.libKind[key] = libAttached
	return nil
}

// attachCandidates probes every candidate that is a TT-Metal library.
func (s *session) attachCandidates(paths []string) {
	for _, p := range paths {
		_, _ = s.classify(p, false)
	}
}

// defaultLoader is the dynamic loader of x86-64 programs.
const defaultLoader = "/lib64/ld-linux-x86-64.so.2"

// loaderKey is a dynamic loader probed for one process (pid 0: for all).
type loaderKey struct {
	file probes.FileKey
	pid  int
}

// loaderEverywhere says whether the loader probe must fire in every process
// (filtered in BPF) rather than only in the traced ones. Its breakpoint
// costs every process on the machine a trap at start-up and at each
// dlopen, so it is limited to the processes known up front (-p, and -- CMD
// with --follow=false). --all must hear processes it does not know yet;
// with --follow (the default of -- CMD) a child is added to the BPF filter
// when it forks, but the consumer reads the fork record later, and a child
// that execs and dlopens before would go unheard by a per-process probe
// added only then.
func (s *session) loaderEverywhere() bool {
	return s.f.All || s.f.Follow
}

// attachLoader probes a dynamic loader's _dl_debug_state (once per file and
// pid) for process pid, or for every process (pid 0).
func (s *session) attachLoader(path string, pid int) error {
	file, err := probes.KeyOf(path)
	if err != nil {
		return err
	}
	key := loaderKey{file, pid}
	if s.loaders[key] || s.loaders[loaderKey{file, 0}] {
		return nil
	}
	if err := s.tracer.AttachLoaderTo(path, pid); err != nil {
		return err
	}
	s.loaders[key] = true
	return nil
}

// track adds pid to the BPF filter, and to the report when explicit.
func (s *session) track(pid uint32, info devices.ProcessInfo, explicit bool) *procState {
	if err := s.tracer.AddPID(pid); err != nil {
		fmt.Fprintf(s.stderr, "tttrace: trace pid %d: %v\n", pid, err)
	}
	st := &procState{info: info}
	s.procs[pid] = st
	if explicit {
		s.enter(pid, st)
	}
	if s.child == nil || uint32(s.child.pid()) != pid {
		go s.watchPID(int(pid))
	}
	return st
}

// enter puts a traced process in the ledger and the report.
func (s *session) enter(pid uint32, st *procState) {
	st.inLedger = true
	s.ledger.SetProcessInfo(pid, st.info)
}

// watchPID reports the end of a process that is not our child.
func (s *session) watchPID(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		unix.Close(fd)
	}
	s.exits <- exitNote{pid: uint32(pid)}
	_ = s.tracer.Reader().Flush()
}

// loop reads the ring buffer until every traced process has ended (or, with
// --all, until ctx is cancelled). interrupted says ctx ended it. Ends of
// processes, signals and --wait are looked at every tick even while
// records keep coming.
func (s *session) loop(ctx context.Context) (interrupted bool, err error) {
	rd := s.tracer.Reader()
	var rec ringbuf.Record
	const tick = 100 * time.Millisecond
	deadline := time.Now().Add(tick)
	rd.SetDeadline(deadline)
	for n := uint(1); ; n++ {
		err := rd.ReadInto(&rec)
		if err == nil {
			s.handle(rec.RawSample)
			if n%1024 != 0 || (ctx.Err() == nil && len(s.exits) == 0 && time.Now().Before(deadline)) {
				continue
			}
		} else if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, ringbuf.ErrFlushed) {
			return true, fail(ExitError, "ring buffer: %w", err)
		}
		s.reapExits()
		select {
		case <-s.timeout:
			for pid, st := range s.procs {
				if !st.hasLib {
					return false, fail(ExitNoLibrary, "pid %d did not load libtt_metal.so within --wait %s", pid, s.f.Wait)
				}
			}
		default:
		}
		if len(s.procs) == 0 && !s.f.All {
			return false, nil
		}
		if ctx.Err() != nil {
			return true, nil
		}
		s.live.draw(s.ledger, s.procs)
		deadline = time.Now().Add(tick)
		rd.SetDeadline(deadline)
	}
}

// drain reads every record already in the ring buffer.
func (s *session) drain() {
	rd := s.tracer.Reader()
	var rec ringbuf.Record
	rd.SetDeadline(time.Now())
	for {
		if err := rd.ReadInto(&rec); err != nil {
			return
		}
		s.handle(rec.RawSample)
	}
}

// reapExits applies the ends of processes reported so far. A process's
// records were all committed before it ended, so after a drain that starts
// after the report none of them is still in the ring.
func (s *session) reapExits() {
	var notes []exitNote
	for {
		select {
		case n := <-s.exits:
			notes = append(notes, n)
			continue
		default:
		}
		break
	}
	if len(notes) == 0 {
		return
	}
	s.drain()
	for _, n := range notes {
		st := s.procs[n.pid]
		if st == nil {
			continue
		}
		if !n.known {
			n.code, n.signal = -1, 0
			if st.mainStatus != nil {
				ws := unix.WaitStatus(*st.mainStatus)
				if ws.Signaled() {
					n.code, n.signal = -1, int(ws.Signal())
				} else {
					n.code = ws.ExitStatus()
				}
			}
		}
		_ = s.tracer.RemovePID(n.pid)
		delete(s.procs, n.pid)
		s.ended[n.pid] = true
		if !st.inLedger {
			s.followedQuiet++
			continue
		}
		ev := events.Event{Kind: events.KindProcessExit, Pid: n.pid, TsNs: monotonicNow(), ExitCode: n.code, ExitSignal: n.signal, Chip: -1}
		s.emit(&ev)
		if len(s.procs) > 0 || s.f.All {
			s.reportProcess(n.pid)
		}
	}
}

// reportProcess writes the final report of one ended process while others
// are still traced: a process_summary line with --json, a report otherwise.
func (s *session) reportProcess(pid uint32) {
	sum := s.ledger.Summary()
	for _, p := range sum.Processes {
		if p.Pid != pid {
			continue
		}
		if s.f.JSON {
			b, err := json.Marshal(struct {
				Type string `json:"type"`
				devices.ProcessSummary
			}{"process_summary", p})
			if err == nil {
				s.out.Write(b)
				s.out.WriteByte('\n')
				_ = s.out.Flush()
			}
			return
		}
		one := sum
		one.Processes = []devices.ProcessSummary{p}
		s.live.erase()
		_ = devices.WriteReport(s.out, &one)
		_ = s.out.Flush()
	}
}

func (s *session) handle(raw []byte) {
	var ev events.Event
	if err := events.Decode(raw, &ev); err != nil {
		s.decodeErrors++
		if s.decodeErrors <= 10 {
			fmt.Fprintf(s.stderr, "tttrace: bad record: %v\n", err)
		}
		return
	}
	switch ev.Kind {
	case events.KindLinkMap:
		s.onLinkMap(ev.Pid)
		return
	case events.KindMainExit:
		if st := s.procs[ev.Pid]; st != nil {
			ws := uint32(ev.Address)
			st.mainStatus = &ws
		}
		return
	case events.KindFork:
		if s.procs[ev.Pid] != nil {
			return
		}
		s.reborn(ev.Pid)
		parent := uint32(ev.Object)
		info := devices.ProcessInfo{Parent: parent, NsPid: probes.NsPid(int(ev.Pid)), Command: probes.Cmdline(int(ev.Pid))}
		st := s.track(ev.Pid, info, false)
		if ps := s.procs[parent]; ps != nil {
			// A fork inherits the parent's mappings.
			st.hasLib = ps.hasLib
		}
	default:
		if s.f.All && s.procs[ev.Pid] == nil {
			// --all: a process whose link-map record came too late to
			// adopt it (it may have ended already): track it now.
			s.reborn(ev.Pid)
			s.track(ev.Pid, devices.ProcessInfo{Command: probes.Cmdline(int(ev.Pid)), Parent: probes.ParentPid(int(ev.Pid)), NsPid: probes.NsPid(int(ev.Pid))}, true)
		}
		if st := s.procs[ev.Pid]; st != nil && !st.inLedger {
			// A followed child's first TT-Metal call: it joins the report,
			// under the command it has now (it may have exec'ed).
			if c := probes.Cmdline(int(ev.Pid)); c != "" {
				st.info.Command = c
			}
			s.enter(ev.Pid, st)
		}
	}
	s.emit(&ev)
}

// reborn handles a pid seen again after its process ended: every record of
// the ended process was drained before its end was applied, so this is a
// new process the kernel gave the same pid.
func (s *session) reborn(pid uint32) {
	if s.ended[pid] {
		delete(s.ended, pid)
		s.ledger.NewIncarnation(pid)
	}
}

// onLinkMap looks for a TT-Metal library newly mapped in pid.
func (s *session) onLinkMap(pid uint32) {
	st := s.procs[pid]
	if st == nil {
		if !s.f.All {
			return
		}
		// --all: a process we have not met.
		s.reborn(pid)
		_ = s.adopt(int(pid), false)
		if st = s.procs[pid]; st != nil {
			st.info.AttachedMidRun = false
			s.enter(pid, st)
			s.checkLate(pid, st)
		}
		return
	}
	if st.hasLib {
		return
	}
	s.checkLate(pid, st)
}

// checkLate finds pid's TT-Metal library after a link-map change; if it had
// to be attached only now, calls made before are unseen: say so.
func (s *session) checkLate(pid uint32, st *procState) {
	objs, _, err := probes.MappedObjects(int(pid))
	if err != nil {
		return
	}
	for _, o := range objs {
		key, err := probes.KeyOf(o)
		if err != nil {
			continue
		}
		_, known := s.libKind[key]
		v, _ := s.classify(o, false)
		if v != libAttached {
			continue
		}
		st.hasLib = true
		s.anyLib = true
		if !known {
			st.info.AttachedMidRun = true
			s.enter(pid, st)
			fmt.Fprintf(s.stderr, "tttrace: pid %d loaded %s, which was not probed in advance: "+
				"calls made before it was attached are not seen (give --lib to trace it from the start)\n", pid, o)
		}
	}
}

func (s *session) emit(ev *events.Event) {
	if ev.Kind != events.KindFork {
		s.ledger.Apply(ev)
	}
	if s.f.JSON && !s.f.NoEvents {
		s.jsonBuf = events.AppendJSON(s.jsonBuf[:0], ev)
		_, _ = s.out.Write(s.jsonBuf)
	}
}

// finish drains what is left, accounts losses no record reported, and
// writes the summary.
func (s *session) finish() (*devices.Summary, error) {
	s.live.erase()
	// Detach first: under a sustained burst a drain would chase the
	// producer. What the probes committed before is still in the ring.
	if err := s.tracer.Detach(); err != nil {
		fmt.Fprintf(s.stderr, "tttrace: detach: %v\n", err)
	}
	s.drain()
	if s.followedQuiet > 0 {
		fmt.Fprintf(s.stderr, "tttrace: %d followed process(es) ended without using TT-Metal (not in the report)\n", s.followedQuiet)
	}
	total, err := s.tracer.LostTotal()
	if err != nil {
		return nil, fail(ExitError, "%w", err)
	}
	if inBand := s.ledger.LostEvents(); total > inBand {
		ev := events.Event{Kind: events.KindLost, TsNs: monotonicNow(), LostBefore: total - inBand, Chip: -1}
		s.emit(&ev)
	}
	sum := s.ledger.Summary()
	if s.f.JSON {
		b, err := json.Marshal(sum)
		if err != nil {
			return nil, fail(ExitError, "encode summary: %w", err)
		}
		s.out.Write(b)
		s.out.WriteByte('\n')
	} else if err := devices.WriteReport(s.out, &sum); err != nil {
		return nil, fail(ExitError, "write report: %w", err)
	}
	if err := s.out.Flush(); err != nil {
		return nil, fail(ExitError, "write output: %w", err)
	}
	return &sum, nil
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
