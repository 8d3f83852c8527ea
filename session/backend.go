package session

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ring"
	"github.com/tttrace/tttrace/ttmetal"
)

// Backend is the kernel side of tracing: the probes and the ring buffer.
// The runtime calls it from one goroutine, except Wake.
type Backend interface {
	// ProcessEvents attaches the fork and exit hooks.
	ProcessEvents() error
	// Loader probes a dynamic loader's _dl_debug_state in process pid, or
	// in every process (pid 0; BPF then filters).
	Loader(path string, pid int) error
	// Library probes the shared object at path. recognise: first check
	// that it is TT-Metal (LibOther if not, or if it cannot be read;
	// LibGone if the path stopped resolving, its process having ended);
	// otherwise (--lib) an unreadable file is an error. A TT-Metal library
	// tttrace cannot trace is LibRefused with the reason.
	Library(path string, recognise bool) (Verdict, error)
	// Libraries is how many libraries are probed.
	Libraries() int
	// Probes is how many attach points are installed.
	Probes() int
	AddPID(pid uint32) error
	RemovePID(pid uint32) error
	// SetPython registers pid's CPython interpreter for Python stacks
	// (value: pyframes.Process.ProcValue); ClearPython forgets it.
	SetPython(pid uint32, value []byte) error
	ClearPython(pid uint32)
	// AttachCodeDealloc probes the deallocation of code objects at offset
	// off of the open CPython file f (pyframes.Process.CodeDealloc: the
	// offset the file itself gives), once per file: a process of it may
	// then be registered with a code generation
	// (probes.Tracer.AttachCodeDealloc).
	AttachCodeDealloc(f *os.File, off uint64) error
	// LearnStack makes a stack of pid known in the kernel under token
	// (probes.Tracer.LearnStack); ForgetStacks forgets pid's.
	LearnStack(pid uint32, ip uint64, steps []tables.StackStep, chain []uint64, token uint64) error
	ForgetStacks(pid uint32)
	// LearnPyStack makes a Python stack of pid known in the kernel under
	// token (probes.Tracer.LearnPyStack); ForgetPyStacks forgets pid's.
	LearnPyStack(pid, gen uint32, frees uint64, frames []tables.PyKeyFrame, token uint64) error
	ForgetPyStacks(pid uint32)
	// Traced reports whether pid is still in the BPF filter: the kernel
	// takes a process out when its last thread exits.
	Traced(pid uint32) bool
	// Read returns the next record, or ok false when the deadline passed
	// or Wake was called first. The record is valid until the next Read.
	Read(deadline time.Time) (rec []byte, ok bool, err error)
	// Wake makes a blocked Read return. Safe from any goroutine.
	Wake()
	// Lost is how many records the ring buffer could not take, in all
	// and by kind.
	Lost() (probes.Losses, error)
	// LoaderDrops is how many _dl_debug_state calls were over their
	// process's budget in all, and takes the per-process counts made since
	// the last call (probes.Tracer.LoaderDrops).
	LoaderDrops() (total uint64, byPid map[uint32]uint64, err error)
	// Detach removes the probes; records already written stay readable.
	Detach() error
	Close() error
}

// Verdict is what a shared object is to tttrace.
type Verdict uint8

// Verdicts.
const (
	LibOther    Verdict = iota + 1 // not TT-Metal
	LibAttached                    // TT-Metal, probed
	LibRefused                     // TT-Metal, but tttrace cannot read it
	// LibGone: the file could not be opened because the path to it went
	// away (a /proc/PID/root path of a process that ended). Nothing is
	// known of the file itself: the next process that maps it asks again.
	LibGone
)

// Host is the process side: what tttrace learns from /proc and how it
// starts and watches processes.
type Host interface {
	Exists(pid int) error
	// Objects lists the shared objects pid maps (paths valid here) and
	// its dynamic loader.
	Objects(pid int) (objs []string, loader string, err error)
	// Info is pid's command line, parent and namespace pid as of now.
	Info(pid int) devices.ProcessInfo
	// Candidates lists files that may be the TT-Metal library pid (0: the
	// command about to start) will load.
	Candidates(pid int, command []string) []string
	AllPids() []int
	// Key identifies the file at path (device, inode).
	Key(path string) (procfs.FileKey, error)
	// WaitExit returns once pid has ended (at once if it cannot tell).
	WaitExit(pid int)
	// Start starts command held: it runs only once released.
	Start(command []string) (Child, error)
	// Self is tttrace's own pid.
	Self() int
}

// Child is a command started held.
type Child interface {
	Pid() int
	// Release lets it run.
	Release() error
	// Wait returns its exit code, or the signal that killed it.
	Wait() (code, signal int)
	// Abandon ends it before it runs, when it was never released.
	Abandon()
}

// bpfBackend is the Backend of real tracing: probes.Tracer.
type bpfBackend struct {
	t      *probes.Tracer
	cfg    *Config
	rec    []byte // the last record read, reused
	libs   int
	logOut io.Writer
	// mem reads the traced processes' allocators from their memory with
	// the layouts of the libraries probed here (memread.go): not BPF, it
	// only hears of each library attached.
	mem *memReader
	// ahead: libraries analysed while the BPF objects loaded (prefetch.go).
	aheadMu sync.Mutex
	ahead   map[string]*aheadLib
}

func newBPFBackend(cfg *Config) (*bpfBackend, error) {
	// The libraries tracing starts with are analysed meanwhile.
	var ahead map[string]*aheadLib
	switch {
	case cfg.Lib != "":
		ahead = prepareAhead([]string{cfg.Lib}, cfg.Lib, cfg.Analysis)
	case len(cfg.Command) > 0:
		ahead = prepareAhead(procHost{}.Candidates(0, cfg.Command), "", cfg.Analysis)
	}
	var timing func(string)
	if cfg.Timeline != nil {
		timing = cfg.Timeline.Mark
	}
	t, err := probes.Load(probes.Options{RingSize: cfg.RingSize, AllProcesses: cfg.All, FollowChildren: cfg.Follow, SingleUprobes: cfg.SingleUprobes, Stacks: !cfg.NoStacks, KnownStacks: cfg.KnownStacks, CheckKnownStacks: cfg.CheckKnownStacks, Ops: !cfg.NoOps,
		Preload: func() []ttmetal.Program { return aheadPrograms(ahead) }, Timing: timing})
	if err != nil {
		(&bpfBackend{ahead: ahead}).dropAhead()
		if errors.Is(err, probes.ErrPermission) {
			return nil, &Error{ErrPermission, err}
		}
		return nil, &Error{ErrInternal, err}
	}
	return &bpfBackend{t: t, cfg: cfg, logOut: cfg.log(), ahead: ahead, mem: &memReader{debug: cfg.Analysis.Debug}}, nil
}

func (b *bpfBackend) ProcessEvents() error { return b.t.AttachProcessEvents() }
func (b *bpfBackend) Loader(path string, pid int) error {
	return b.t.AttachLoaderTo(path, pid)
}
func (b *bpfBackend) Libraries() int          { return b.libs }
func (b *bpfBackend) Probes() int             { return len(b.t.AttachPoints) }
func (b *bpfBackend) AddPID(pid uint32) error { return b.t.AddPID(pid) }
func (b *bpfBackend) RemovePID(pid uint32) error {
	return b.t.RemovePID(pid)
}
func (b *bpfBackend) Traced(pid uint32) bool { return b.t.Traced(pid) }
func (b *bpfBackend) SetPython(pid uint32, value []byte) error {
	return b.t.SetPython(pid, value)
}
func (b *bpfBackend) ClearPython(pid uint32) { b.t.ClearPython(pid) }
func (b *bpfBackend) AttachCodeDealloc(f *os.File, off uint64) error {
	return b.t.AttachCodeDealloc(f, off)
}
func (b *bpfBackend) LearnStack(pid uint32, ip uint64, steps []tables.StackStep, chain []uint64, token uint64) error {
	return b.t.LearnStack(pid, ip, steps, chain, token)
}
func (b *bpfBackend) ForgetStacks(pid uint32)   { b.t.ForgetStacks(pid) }
func (b *bpfBackend) ForgetPyStacks(pid uint32) { b.t.ForgetPyStacks(pid) }
func (b *bpfBackend) LearnPyStack(pid, gen uint32, frees uint64, frames []tables.PyKeyFrame, token uint64) error {
	return b.t.LearnPyStack(pid, gen, frees, frames, token)
}
func (b *bpfBackend) Wake()                        { _ = b.t.Reader().Flush() }
func (b *bpfBackend) Lost() (probes.Losses, error) { return b.t.Losses() }
func (b *bpfBackend) Detach() error                { return b.t.Detach() }
func (b *bpfBackend) AttachOps(lib *ttmetal.Library, points []probes.OpPoint) (probes.OpsAttached, error) {
	return b.t.AttachOps(lib, points)
}
func (b *bpfBackend) LoaderDrops() (uint64, map[uint32]uint64, error) {
	return b.t.LoaderDrops()
}

// AllocMem makes the backend a MemReader: its memReader's, which reads
// the memory of the processes that map the libraries probed here.
func (b *bpfBackend) AllocMem(pid uint32, budget *ttmetal.AllocBudget) (AllocMem, error) {
	return b.mem.AllocMem(pid, budget)
}
func (b *bpfBackend) Close() error {
	b.dropAhead()
	return b.t.Close()
}

// lateDetacher is a backend whose probes can be detached after the
// summary, by another process (bpfBackend).
type lateDetacher interface {
	// TracesNone: no process can make a record any more.
	TracesNone() bool
	// DetachLater hands the links that are slow to close to a process
	// start starts (startCloser: a holder whose exit closes them, once
	// release lets it go), and closes the others.
	DetachLater(start func(links []*os.File) (release func(), err error)) error
}

func (b *bpfBackend) TracesNone() bool { return b.t.TracesNone() }
func (b *bpfBackend) DetachLater(start func(links []*os.File) (func(), error)) error {
	return b.t.DetachLater(start)
}

func (b *bpfBackend) Read(deadline time.Time) ([]byte, bool, error) {
	rd := b.t.Reader()
	rd.SetDeadline(deadline)
	rec, err := rd.Read(b.rec)
	b.rec = rec
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ring.ErrFlushed) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return rec, true, nil
}

func (b *bpfBackend) Library(path string, recognise bool) (v Verdict, err error) {
	// One library's file is parsed here (any process may map a crafted
	// one): a panic refuses that library with one line, tracing goes on.
	defer func() {
		if r := recover(); r != nil {
			v, err = LibRefused, errorf(ErrUnsupported, "%s: malformed library, refused (internal error: %v)", path, r)
		}
	}()
	lib, prep, v, err := b.prepared(path, recognise)
	if lib == nil {
		return v, err
	}
	handed := false // to the goroutine reading its allocator layouts (track)
	defer func() {
		if !handed {
			lib.Close()
		}
	}()
	if err := b.t.AttachPlan(lib, prep.Symbols, prep.Plan, prep.Layout.Layout); err != nil {
		return LibRefused, errorf(ErrUnsupported, "%w", err)
	}
	b.cfg.Timeline.Mark(path + ": attached")
	b.libs++
	reportPrepared(b.logOut, lib.Path, prep)
	if k, err := procfs.KeyOf(path); err == nil {
		handed = b.mem.track(k, path, lib)
	}
	return LibAttached, nil
}

// prepared opens path and analyses it, or takes what prepareAhead did:
// lib nil means Library returns v, err.
func (b *bpfBackend) prepared(path string, recognise bool) (lib *ttmetal.Library, prep *ttmetal.Prepared, v Verdict, err error) {
	var a libAnalysis
	if ahead, ok := b.takeAhead(path, recognise); ok {
		a = ahead.libAnalysis
		b.cfg.Timeline.Mark(path + ": opened and analysed while BPF loaded")
	} else {
		a = analyse(path, recognise, b.cfg.Analysis, b.cfg.Timeline)
	}
	switch {
	case a.openErr != nil:
		if !recognise {
			return nil, nil, LibRefused, errorf(ErrNoLibrary, "library: %w", a.openErr)
		}
		if errors.Is(a.openErr, os.ErrNotExist) || errors.Is(a.openErr, unix.ESRCH) {
			return nil, nil, LibGone, nil
		}
		return nil, nil, LibOther, nil
	case recognise && !a.isTT:
		a.lib.Close()
		return nil, nil, LibOther, nil
	case a.err != nil:
		a.lib.Close()
		return nil, nil, LibRefused, errorf(ErrUnsupported, "%w", a.err)
	}
	return a.lib, a.prep, 0, nil
}

// procHost is the Host of this machine.
type procHost struct{}

func (procHost) Exists(pid int) error { return procfs.ProcessExists(pid) }
func (procHost) Objects(pid int) ([]string, string, error) {
	return procfs.MappedObjects(pid)
}
func (procHost) Info(pid int) devices.ProcessInfo {
	return devices.ProcessInfo{Command: procfs.Command(pid), Parent: procfs.ParentPid(pid), NsPid: procfs.NsPid(pid)}
}
func (procHost) Candidates(pid int, command []string) []string {
	return ttmetal.CandidateLibraries(pid, command)
}
func (procHost) AllPids() []int                          { return procfs.Pids() }
func (procHost) Key(path string) (procfs.FileKey, error) { return procfs.KeyOf(path) }
func (procHost) Self() int                               { return os.Getpid() }
func (procHost) Start(command []string) (Child, error)   { return startGated(command) }

// WaitExit polls a pidfd of pid.
func (procHost) WaitExit(pid int) {
	// A non-blocking pidfd in Go's poller: waiting costs a goroutine, not
	// an OS thread, however many processes are watched (the service's
	// TasksMax).
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	})
}
