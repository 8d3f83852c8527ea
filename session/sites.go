package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/pyframes"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/stacks"
)

// Allocation sites (docs/stacks.md). An alloc whose stack follows is held,
// with every record after it, until the stack is read and interned
// (heldRecords, held.go); here each process's stacks become its sites.
// Only the site id is kept per buffer; the stack bytes are dropped once
// unwound.

// procStacks is the stack state of one process (one incarnation of a pid).
// A site is a pair of a native stack (interned in tab) and a Python stack
// (interned here, raw: symbolized only when described).
type procStacks struct {
	mods *stacks.Modules // its executable mappings; nil: take a snapshot first
	// modsMiss: why its maps could not be read at the last try (a site
	// without modules says so); 0: they were.
	modsMiss events.SiteMissing
	// walk: the objects of its link map BPF sent at the last consistent
	// state it was read in (linkwalk.go), for when its maps cannot be
	// read; parent: the process it was forked from (0: not known).
	walk   *linkWalk
	parent uint32
	// forker: its parent's stack state at its fork (nil: not known), the
	// incarnation it runs the interpreter of (python.go). forkWalk: walk
	// is its parent's at the fork, until its own link map changes.
	forker   *procStacks
	forkWalk bool
	// inherited: mods are its parent's at its fork (the same mappings
	// until it maps or execs something); dropped if they cannot be read
	// again after a link-map change (it may have exec'ed).
	inherited bool
	// facts memoizes what a native stack says of its site's completeness.
	facts map[stacks.StackID]stackFacts
	// retried: a truncated stack made us retake mods since the last snapshot
	retried bool
	tab     *stacks.Table
	sent    []bool // sent[id]: the site was described to the site sinks

	py *pyframes.Process // its interpreter, nil when none (or unsupported)
	// pyShared: py is its parent's (a fork that ended before it could be
	// read, walked in BPF with its parent's registration): not closed here.
	pyShared bool
	pyAt     uint64 // monotonic ns when py was registered in BPF
	pyInfo   *devices.PythonInfo
	// pyWait: its interpreter's file is being read in the background
	// (pyframes.Prefetch); pythonOf is called again when it is read.
	pyWait  bool
	pyIDs   map[string]uint32 // raw Python stack (frames and flags) -> index+1 in pyRaw
	pyRaw   []pyframes.RawStack
	pyKey   []byte
	siteIDs map[sitePair]uint32 // -> index+1 in sites
	sites   []sitePair
	// evalLo, evalHi: the interpreter's evaluation loop, where its native
	// stacks end (evalStops; 0, 0: no stop). siteNative memoizes the
	// native stack a site with a Python stack is keyed by (siteNativeOf).
	evalLo, evalHi uint64
	siteNative     map[stacks.StackID]stacks.StackID
	// sitePy memoizes the Python stack a site is keyed by (sitePyOf),
	// pyLines the first Python stack (index+1 in pyRaw) of each
	// symbolized one.
	sitePy  map[uint32]uint32
	pyLines map[string]uint32
	// Known stacks: tokens names the native stacks made known to the
	// kernel (LearnStack) by their tokens, learned gives each its token
	// (a stack learnt again keeps it); taught: some are in the kernel's
	// tables, not forgotten since. The process holds its own tokens, so
	// they go with it: nil once it ended (no record of it comes after
	// its end: a record of its pid then is a new process's).
	tokens  map[uint64]stacks.StackID
	learned map[stacks.StackID]uint64
	taught  bool
	// Known Python stacks (bpf/pyknown.h), the same way: pyTokens names
	// the Python stacks (index+1 in pyRaw) made known by their tokens,
	// pyLearned gives each its token; pyTaught: some are in the kernel's
	// table.
	pyTokens  map[uint64]uint32
	pyLearned map[uint32]uint64
	pyTaught  bool
	// codeAgain: when not 0, the monotonic ns from which watchCode is
	// tried again (at its next Python stack): its interpreter was not yet
	// relocated when it was registered (pyframes.ErrNotRelocated).
	codeAgain uint64
}

// sitePair is a site: native stack, Python stack (0: none).
type sitePair struct {
	native stacks.StackID
	py     uint32
}

// allocSites is the runtime's allocation-site work: it holds the records
// behind an alloc until its stack is read (held), interns each process's
// stacks as sites, registers interpreters for Python lines, and describes
// sites to the site sinks and (as each process's devices.SiteSource) to the
// ledger's summaries. The pid incarnations are the ledger's: each process
// in the ledger holds its own procStacks.
type allocSites struct {
	on     bool
	log    io.Writer
	be     Backend
	ledger *devices.Ledger
	held   heldRecords
	bad    func(error) // counts and notes a bad record
	// reborn starts the new process a pid names if its process ended:
	// before a stack record of it is interned (its held alloc meets the
	// new process only when released).
	reborn func(pid uint32)

	cache *stacks.Cache
	procs map[uint32]*procStacks // by pid: the current incarnation's
	walks linkWalks              // link maps being received (linkwalk.go)
	// warmed: the files given to a warm-up (warmFiles); ttMetal says
	// whether a file is a probed TT-Metal library.
	warmed     map[*stacks.File]bool
	earlyTries int // warmEarly's reads of maps (at most 8)
	ttMetal    func(procfs.FileKey) bool
	// pyReady: the pids whose interpreter files a background read
	// finished (pyframes.Prefetch), for the loop's takePyReady; pyReadyN
	// counts them so the loop looks without taking the lock.
	pyMu     sync.Mutex
	pyReady  []uint32
	pyReadyN atomic.Int32
	sinks    []sinks.SiteSink

	// Known stacks (bpf/stack.h): each stack fixed by its pcs is made
	// known to the kernel with a token, and later captures of it come as
	// the token alone. learn: on with Config.KnownStacks.
	learn      bool
	codeGen    uint32 // the last code generation given (watchCode)
	lastToken  uint64 // the last token given (tokens never repeat)
	steps      []stacks.Step
	chain      []uint64
	pSteps     []tables.StackStep
	timeline   *Timeline
	copied     uint64 // stack records with the stack's bytes
	known      uint64 // stack records with a token
	staleKnown uint64 // tokens of a process no longer the pid's
	checked    uint64 // known stacks that came with their copy (CheckKnownStacks)
	wrong      uint64 // of those, copies that unwind to another stack than the token's
	pyKey      []tables.PyKeyFrame
	pySent     uint64 // Python stack records
	pyKnown    uint64 // known Python stacks (a token in the alloc, or with the record)
	pyStale    uint64 // Python tokens no stack of the process has
	pyChecked  uint64 // known Python stacks that came with their record (CheckKnownStacks)
	pyWrong    uint64 // of those, records of another stack than the token's
	pyNoGen    uint64 // Python stacks sent, captured before the code objects' deallocation was probed (watchCode)
	pyUndesc   uint64 // Python stacks sent with a code object its record did not describe (yet)
	pyLearnt   uint64 // Python stacks made known (LearnPyStack), counting each again
}

func newAllocSites(s *session) *allocSites {
	a := &allocSites{
		on:       !s.cfg.NoStacks,
		log:      s.log,
		be:       s.be,
		ledger:   s.ledger,
		held:     newHeldRecords(s.dispatch),
		bad:      s.badRecord,
		reborn:   s.reborn,
		cache:    stacks.NewCache(),
		procs:    map[uint32]*procStacks{},
		learn:    s.cfg.KnownStacks,
		ttMetal:  func(k procfs.FileKey) bool { return s.libKind[k] == LibAttached },
		timeline: s.cfg.Timeline,
	}
	for _, k := range s.sinks {
		if ss, ok := k.(sinks.SiteSink); ok && ss.WantSites() {
			a.sinks = append(a.sinks, ss)
		}
	}
	return a
}

// procStacksOf returns pid's stack state, made on first use.
func (a *allocSites) procStacksOf(pid uint32) *procStacks {
	ps := a.procs[pid]
	if ps == nil {
		ps = &procStacks{tab: stacks.NewTable(), pyIDs: map[string]uint32{}, siteIDs: map[sitePair]uint32{}}
		a.procs[pid] = ps
	}
	return ps
}

// snapshot retakes pid's executable mappings (after a link-map change: a
// library mapped or unmapped) and registers its interpreter, if any, now:
// for a process that waits for tttrace (attached with -p). Stacks already
// interned keep their files.
func (a *allocSites) snapshot(pid uint32) {
	a.snapshotMaps(pid)
	a.pythonOf(pid)
}

// snapshotSoon is snapshot for the records' loop, which must not wait
// for an interpreter's files to be read (pythonSoon).
func (a *allocSites) snapshotSoon(pid uint32) {
	a.snapshotMaps(pid)
	a.pythonSoon(pid)
}

func (a *allocSites) snapshotMaps(pid uint32) {
	if !a.on {
		return
	}
	ps := a.procStacksOf(pid)
	mods, err := a.cache.Snapshot(int(pid))
	if err == nil && mods.Len() == 0 {
		// A process that ended and is not reaped yet lists no maps: the
		// snapshot taken before stays the best one.
		err = errProcessEnded
	}
	if err == nil {
		ps.mods = mods
		a.warmFiles(mods)
		ps.modsMiss = events.SiteComplete
		ps.inherited = false
		ps.retried = false
		// A pc may name other code now (a library unmapped, another
		// mapped at its place): the kernel's known stacks of pid go.
		a.forgetKnown(pid, ps)
		return
	}
	if a.fromWalk(pid, ps) {
		// It ended: its link map as BPF read it last places its stacks.
		return
	}
	ps.modsMiss = events.MissingMapsUnreadable
	if errors.Is(err, errProcessEnded) || errors.Is(err, procfs.ErrNoProcess) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		ps.modsMiss = events.MissingProcessEnded
	}
	if ps.inherited {
		// Its parent's mappings, and it may have exec'ed since.
		ps.mods, ps.inherited = nil, false
	}
}

// warmFiles reads in the background what symbolizing needs of the files
// of mods that nearly every allocation stack runs through: the probed
// TT-Metal library (innermost), the C library (outermost), the C++
// runtime and a CPython interpreter. The first site of a process is
// described (symbolized) on the records' loop before the alloc naming
// it is written, and reading a libc's debug file there took ~200 ms:
// time in which another short process maps TT-Metal, allocates and ends
// before its maps are read. Each file is warmed once, one file at a time.
// Only when a sink wants sites as they come (NDJSON with its events):
// otherwise nothing is described before tracing ends, and a warm-up
// would only hold the files' symbols and DWARF (~20 MB for a libc with
// its debug file) through a run that may never describe a site.
func (a *allocSites) warmFiles(mods *stacks.Modules) {
	if len(a.sinks) == 0 {
		return
	}
	var todo []*stacks.File
	for _, f := range mods.Files() {
		if a.warmed[f] || !a.warmWorthy(f) {
			continue
		}
		if a.warmed == nil {
			a.warmed = map[*stacks.File]bool{}
		}
		a.warmed[f] = true
		todo = append(todo, f)
	}
	if len(todo) == 0 {
		return
	}
	warming.Add(1)
	go func() {
		defer warming.Done()
		warmMu.Lock()
		defer warmMu.Unlock()
		for _, f := range todo {
			f.Warm()
		}
	}()
}

// warmEarly reads the maps of pid, a traced process not using TT-Metal
// (yet), if no file was warmed so far: the first process of a command
// (a shell, pyenv's shim) maps the C library its TT-Metal program will
// map, whose warm-up then starts long before that program's first site.
func (a *allocSites) warmEarly(pid uint32) {
	if a.on && a.warmed == nil && a.earlyTries < 8 {
		a.earlyTries++
		a.snapshotMaps(pid)
	}
}

// warmMu makes warm-ups run one at a time (one CPU at most); warming
// counts those started and not ended (tests wait for them).
var (
	warmMu  sync.Mutex
	warming sync.WaitGroup
)

// warmWorthy: f is in nearly every allocation stack of its process.
func (a *allocSites) warmWorthy(f *stacks.File) bool {
	b := filepath.Base(f.Path)
	switch {
	case isPythonFile(f.Path), strings.HasPrefix(b, "libc.so"), strings.HasPrefix(b, "libstdc++.so"):
		return true
	}
	return a.ttMetal != nil && a.ttMetal(procfs.FileKey{Dev: f.Dev, Ino: f.Inode})
}

// errProcessEnded: a process's maps list nothing (it ended).
var errProcessEnded = errors.New("the process has ended")

// inherit gives child, just forked at ts, its parent's module snapshot:
// the same mappings until its next link-map change, so the stacks of a
// child that allocates and ends before its maps are read are still placed.
func (a *allocSites) inherit(child, parent uint32, ts uint64) {
	if !a.on {
		return
	}
	ps := a.procStacksOf(child)
	ps.parent = parent
	pp := a.procs[parent]
	if pp == nil {
		return
	}
	ps.forker = pp
	if ps.mods == nil && pp.mods != nil {
		ps.mods, ps.inherited = pp.mods, true
	}
	if ps.walk == nil {
		// Its parent's link map as BPF last read it, before the fork (the
		// records are in order): its own until it maps something, for when
		// it ends before its maps are read (fromWalk).
		ps.walk, ps.forkWalk = pp.walk, pp.walk != nil
	}
	if pp.py != nil {
		a.heir(child, ps, pp, ts)
	}
}

// pythonOf registers pid's interpreter for Python stacks, if it has one
// and it was not done yet, reading its files now if need be.
func (a *allocSites) pythonOf(pid uint32) {
	if !a.on {
		return
	}
	ps := a.procStacksOf(pid)
	if ps.py == nil && (ps.pyInfo == nil || ps.pyInfo.Error == "") {
		a.findPython(pid, ps)
	}
}

// pythonSoon is pythonOf for the records' loop. Reading an interpreter's
// files the first time takes hundreds of milliseconds (a libpython with
// DWARF), in which a short program loads TT-Metal, allocates and ends:
// the records of pid behind this one (the load of the library, whose maps
// must be read while pid lives) must not wait for it. So a file not read
// yet is read in the background, and the interpreter registered when it
// is (takePyReady); allocations made before have native frames only.
func (a *allocSites) pythonSoon(pid uint32) {
	if !a.on {
		return
	}
	ps := a.procStacksOf(pid)
	if ps.py != nil || (ps.pyInfo != nil && ps.pyInfo.Error != "") || ps.pyWait {
		return
	}
	if pyframes.Prefetch(int(pid), func() { a.readyPython(pid) }) {
		ps.pyWait = true
		return
	}
	a.findPython(pid, ps)
}

// readyPython: a background read for pid's interpreter ended (called from
// its goroutine).
func (a *allocSites) readyPython(pid uint32) {
	a.pyMu.Lock()
	a.pyReady = append(a.pyReady, pid)
	a.pyMu.Unlock()
	a.pyReadyN.Add(1)
	a.be.Wake()
}

// takePyReady registers the interpreters whose files were read since the
// last call.
func (a *allocSites) takePyReady() {
	if a.pyReadyN.Load() == 0 {
		return
	}
	a.pyMu.Lock()
	pids := a.pyReady
	a.pyReady = nil
	a.pyReadyN.Store(0)
	a.pyMu.Unlock()
	for _, pid := range pids {
		if ps := a.procs[pid]; ps != nil && ps.pyWait {
			ps.pyWait = false
			a.pythonSoon(pid)
		}
	}
}

// findPython registers pid's CPython interpreter, once it has one, for
// Python stacks. An unsupported one is said (summary, log), and gets no
// Python frames rather than wrong ones.
func (a *allocSites) findPython(pid uint32, ps *procStacks) {
	p, err := pyframes.ForProcess(int(pid))
	if errors.Is(err, pyframes.ErrNoInterpreter) || (err != nil && (p == nil || p.Interp == nil)) {
		return // none yet, or the maps could not be read now (an exec under way): look again later
	}
	if p != nil && p.Interp != nil {
		ps.pyInfo = &devices.PythonInfo{Version: p.Interp.Version()}
	} else {
		ps.pyInfo = &devices.PythonInfo{}
	}
	if err == nil {
		var v []byte
		if v, err = p.ProcValue(); err == nil {
			err = a.be.SetPython(pid, v)
		}
	}
	if err != nil {
		ps.pyInfo.Error = err.Error()
		fmt.Fprintf(a.log, "tttrace: pid %d: no Python lines: %v\n", pid, err)
		p.Close()
		return
	}
	if a.watchCode(pid, p) {
		ps.codeAgain = monotonicNow() + codeAgainNs
	}
	ps.pyInfo.Supported = true
	ps.py = p
	ps.pyAt = monotonicNow()
	a.evalStops(pid, ps)
	defer a.heirs(pid, ps)
	if ps.mods == nil {
		// Its maps now, while it surely lives (a program that imports
		// TT-Metal later may end before they are read again), and the
		// files its stacks will run through warmed (warmFiles).
		a.snapshotMaps(pid)
	}
	fmt.Fprintf(a.log, "tttrace: pid %d runs CPython %s: allocation sites get its Python lines\n", pid, ps.pyInfo.Version)
}

// codeAgainNs is how long watchCode waits before asking again a process
// whose interpreter was not yet relocated.
const codeAgainNs = 20_000_000

// watchCode probes the deallocation of pid's code objects, then registers
// its interpreter again under a code generation of its own: the Python
// walk then reads a code object once per incarnation at its address, not
// at every frame (bpf/python.h, py_codes), and its Python stacks can be
// known (bpf/pyknown.h). Where that cannot be done, the registration
// without it stands (each frame's code object is read). again: the
// interpreter was not relocated yet; asked later, it may succeed (a
// process registered as it started used to keep no code generation for
// its whole run: every Python stack sent, none known).
func (a *allocSites) watchCode(pid uint32, p *pyframes.Process) (again bool) {
	file, off, err := p.CodeDealloc()
	if err == nil {
		err = a.be.AttachCodeDealloc(file, off)
		file.Close()
	}
	if err == nil {
		a.codeGen++
		p.CodeGen = a.codeGen
		var v []byte
		if v, err = p.ProcValue(); err == nil {
			err = a.be.SetPython(pid, v)
		}
	}
	if err == nil && a.timeline != nil {
		a.timeline.Mark(fmt.Sprintf("pid %d: code objects' deallocation probed, code generation %d: its Python stacks can be known", pid, p.CodeGen))
	}
	if err != nil {
		p.CodeGen = 0
		again = errors.Is(err, pyframes.ErrNotRelocated)
		if a.timeline != nil {
			a.timeline.Mark(fmt.Sprintf("pid %d: code objects read at every frame: %v", pid, err))
		}
	}
	return again
}

// watchCodeAgain tries watchCode again for pid, whose interpreter was not
// relocated when it was registered, once its time has come. A process
// that sends Python stacks runs relocated code, so it is asked a bounded
// number of times: one read of 8 bytes every codeAgainNs at most.
func (a *allocSites) watchCodeAgain(pid uint32, ps *procStacks) {
	now := monotonicNow()
	if now < ps.codeAgain || ps.pyShared {
		return
	}
	ps.codeAgain = 0
	if a.watchCode(pid, ps.py) {
		ps.codeAgain = now + codeAgainNs
	}
}

// warmPython reads, before the command starts, the interpreter it will
// run if it is a CPython (its executable, and the libpython beside it), so
// that the process is registered for Python stacks without delay.
func warmPython(command []string) {
	if len(command) == 0 {
		return
	}
	exe, err := exec.LookPath(command[0])
	if err != nil {
		return
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return
	}
	if !strings.HasPrefix(filepath.Base(exe), "python") {
		return
	}
	if real := pyenvShim(exe, os.Getenv, ""); real != "" {
		// pyenv's shim runs dozens of processes, then the interpreter,
		// which imports and allocates before a cold read of its files
		// would end (issue #37): read the interpreter it will run.
		exe = real
	}
	pyframes.Warm(exe)
	libs, _ := filepath.Glob(filepath.Join(filepath.Dir(exe), "..", "lib", "libpython3*.so*"))
	for _, l := range libs {
		pyframes.Warm(l)
	}
}

// pyenvShim is the interpreter the pyenv shim at path runs, found as pyenv
// does (without running it): the version from PYENV_VERSION, else the
// nearest .python-version from the working directory up, else
// $PYENV_ROOT/version; the first of its versions (colon-separated) that has
// the program. "" when path is no pyenv shim or that cannot be told.
// getenv and dir (the working directory, "" for the current one) are the
// command's.
func pyenvShim(path string, getenv func(string) string, dir string) string {
	shims := filepath.Dir(path)
	if filepath.Base(shims) != "shims" {
		return ""
	}
	head := make([]byte, 512)
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	n, _ := f.Read(head)
	f.Close()
	if !strings.HasPrefix(string(head[:n]), "#!") || !strings.Contains(string(head[:n]), "pyenv") {
		return ""
	}
	root := getenv("PYENV_ROOT")
	if root == "" {
		root = filepath.Dir(shims)
	}
	versions := getenv("PYENV_VERSION")
	if versions == "" {
		if dir == "" {
			dir, _ = os.Getwd()
		}
		for d := dir; d != ""; {
			if b, err := os.ReadFile(filepath.Join(d, ".python-version")); err == nil {
				versions = strings.Join(strings.Fields(string(b)), ":")
				break
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	if versions == "" {
		b, err := os.ReadFile(filepath.Join(root, "version"))
		if err != nil {
			return ""
		}
		versions = strings.Join(strings.Fields(string(b)), ":")
	}
	prog := filepath.Base(path)
	for _, v := range strings.Split(versions, ":") {
		if v == "" || v == "system" || strings.Contains(v, "/") || strings.HasPrefix(v, ".") {
			continue // the system's python is found on PATH by the caller's own look-up
		}
		cand := filepath.Join(root, "versions", v, "bin", prog)
		if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() {
			if real, err := filepath.EvalSymlinks(cand); err == nil {
				return real
			}
		}
	}
	return ""
}

// onPyCode keeps what a code object said at event time.
func (a *allocSites) onPyCode(raw []byte) {
	w, err := events.DecodePyCode(raw)
	if err != nil {
		a.bad(err)
		return
	}
	a.reborn(w.Hdr.Pid)
	if ps := a.procs[w.Hdr.Pid]; ps != nil && ps.py != nil {
		_ = ps.py.AddCode(&w.Code)
	}
}

// onPyStack interns the Python stack of a held alloc; the native stack
// that follows completes it.
func (a *allocSites) onPyStack(raw []byte) {
	w, err := events.DecodePyStack(raw)
	if err != nil {
		a.bad(err)
		return
	}
	seq, pid := w.Hdr.Seq, w.Hdr.Pid
	a.reborn(pid)
	ps := a.procs[pid]
	if ps == nil || ps.py == nil || a.held.alloc(seq, pid) == nil {
		return // not waiting: its native stack was lost, so is the site
	}
	if ps.codeAgain != 0 {
		a.watchCodeAgain(pid, ps)
	}
	// The identity of a Python stack: its frames as captured, and flags
	// (written into a buffer kept for it: a stack seen before, the common
	// case, allocates nothing).
	st := &w.Stack
	k := binary.LittleEndian.AppendUint32(ps.pyKey[:0], st.Flags)
	for _, f := range st.Frames[:min(int(st.Nframes), len(st.Frames))] {
		k = binary.LittleEndian.AppendUint64(k, f.Code)
		k = binary.LittleEndian.AppendUint64(k, f.Instr)
		k = binary.LittleEndian.AppendUint64(k, f.CodeID)
	}
	ps.pyKey = k
	id := ps.pyIDs[string(k)]
	if id == 0 {
		ps.pyRaw = append(ps.pyRaw, pyframes.NewRawStack(st))
		id = uint32(len(ps.pyRaw))
		ps.pyIDs[string(k)] = id
	}
	a.held.setPython(seq, id)
	if st.Token != 0 {
		// A known stack sent with its frames (CheckKnownStacks): they
		// must be the stack its token names.
		a.pyKnown++
		a.pyChecked++
		if got, ok := ps.pyTokens[st.Token]; !ok || got != id {
			a.pyWrong++
			fmt.Fprintf(a.log, "tttrace: pid %d seq %d: known Python stack %d (token %d) is stack %d\n", pid, seq, got, st.Token, id)
		}
		return
	}
	a.pySent++
	a.learnPython(pid, ps, id, st)
}

// learnPython makes Python stack id of pid, just captured as st, known to
// the kernel (bpf/pyknown.h) when it can be: a complete stack of at most
// tables.KnownPyStackFrames frames, captured where the code objects'
// deallocation is probed (its identities are incarnations), each of its
// code objects described by its record. The next captures of the same
// chain, while no code object of the process is freed, come as its token.
// A stack made known before that comes again lost its slot (or a code
// object was freed since): it is learnt again, under its token.
func (a *allocSites) learnPython(pid uint32, ps *procStacks, id uint32, st *events.PyStack) {
	n := int(st.Nframes)
	if !a.learn {
		return
	}
	if st.CodeGen == 0 || st.CodeGen != ps.py.CodeGen {
		// Captured before the process's registration under its code
		// generation (watchCode), or where there is none: a code
		// object's address does not name it, so no chain of it is
		// exact. A run whose calls all came before that sends every
		// Python stack (docs/python.md).
		a.pyNoGen++
		return
	}
	if st.Flags != 0 || n == 0 || n > tables.KnownPyStackFrames || n > len(st.Frames) {
		return
	}
	raw := ps.pyRaw[id-1]
	if !ps.py.Described(raw.Frames) {
		a.pyUndesc++
		return
	}
	a.pyKey = a.pyKey[:0]
	for _, f := range raw.Frames {
		a.pyKey = append(a.pyKey, tables.PyKeyFrame{Code: f.Code, Instr: f.Instr})
	}
	token, again := ps.pyLearned[id]
	if !again {
		token = a.lastToken + 1
	}
	if err := a.be.LearnPyStack(pid, st.CodeGen, st.CodeFrees, a.pyKey, token); err != nil {
		return // this stack keeps being sent
	}
	ps.pyTaught = true
	a.pyLearnt++
	if again {
		return
	}
	a.lastToken = token
	if ps.pyLearned == nil {
		ps.pyLearned, ps.pyTokens = map[uint32]uint64{}, map[uint64]uint32{}
	}
	ps.pyLearned[id] = token
	ps.pyTokens[token] = id
}

// pyTokenStack is the Python stack (index+1 in pyRaw) the known Python
// stack token of ev's process names, 0 when none does (a token of an
// earlier process with this pid).
func (a *allocSites) pyTokenStack(ps *procStacks, token uint64) uint32 {
	a.pyKnown++
	id, ok := ps.pyTokens[token]
	if !ok {
		a.pyStale++
	}
	return id
}

// site interns the pair (native, py) as a site of ps.
func (ps *procStacks) site(native stacks.StackID, py uint32) uint32 {
	if py != 0 {
		native = ps.siteNativeOf(native)
		py = ps.sitePyOf(py)
	}
	k := sitePair{native, py}
	id := ps.siteIDs[k]
	if id == 0 {
		ps.sites = append(ps.sites, k)
		id = uint32(len(ps.sites))
		ps.siteIDs[k] = id
	}
	return id
}

// siteNativeOf is the native stack a site whose Python stack is known is
// keyed by: native without its last frame where that is the frame of the
// evaluation loop the stack ended at (evalStops). Where in the loop the
// call into C was made says which of its handlers ran the call, not where
// in Python: CPython 3.11+ specializes a call's instruction after it has
// run a few times, and the same call then returns to another handler
// (3.13: generated_cases.c.h:813 for the first calls of a ctypes
// function, :1839 after), so one Python line made two sites. The Python
// stack names the frame. The kernel's chain, and the stack learnt, keep
// the frame: only the site drops it.
func (ps *procStacks) siteNativeOf(id stacks.StackID) stacks.StackID {
	if ps.evalHi == 0 {
		return id
	}
	if v, ok := ps.siteNative[id]; ok {
		return v
	}
	v := id
	if st, ok := ps.tab.Stack(id); ok && len(st.Locs) > 1 {
		if pc := st.Locs[len(st.Locs)-1].PC; pc-1 >= ps.evalLo && pc-1 < ps.evalHi {
			v = ps.tab.Intern(st.Locs[:len(st.Locs)-1], st.Truncated)
		}
	}
	if ps.siteNative == nil {
		ps.siteNative = map[stacks.StackID]stacks.StackID{}
	}
	ps.siteNative[id] = v
	return v
}

// sitePyOf is the Python stack a site is keyed by: the first of those
// with the same frames (file, function, line), where py symbolizes whole.
// A frame's raw identity is its instruction, and CPython 3.11+ rewrites a
// call's instruction once it has run a few times (specialization: 3.11's
// PRECALL then makes the call, not CALL), so one line of Python made two
// sites, the first calls' and the rest's. A stack that does not symbolize
// whole keys its site itself.
func (ps *procStacks) sitePyOf(py uint32) uint32 {
	if ps.py == nil || py == 0 || int(py) > len(ps.pyRaw) {
		return py
	}
	if v, ok := ps.sitePy[py]; ok {
		return v
	}
	v := py
	if st := ps.py.Symbolize(ps.pyRaw[py-1]); st.Err == nil {
		var b strings.Builder
		if st.Truncated {
			b.WriteString("truncated\x00")
		}
		for _, f := range st.Frames {
			fmt.Fprintf(&b, "%s\x00%s\x00%d\x00", f.File, f.Function, f.Line)
		}
		k := b.String()
		if first, ok := ps.pyLines[k]; ok {
			v = first
		} else {
			if ps.pyLines == nil {
				ps.pyLines = map[string]uint32{}
			}
			ps.pyLines[k] = py
		}
	}
	if ps.sitePy == nil {
		ps.sitePy = map[uint32]uint32{}
	}
	ps.sitePy[py] = v
	return v
}

// retire forgets pid's stack state when the ledger is about to retire its
// process for a new one with the same pid (devices.Ledger.NewIncarnation:
// the same condition). The retired process keeps its state as its site
// source; the new one gets its own.
func (a *allocSites) retire(pid uint32) {
	if exited, _, _ := a.ledger.Exited(pid); exited {
		delete(a.procs, pid)
	}
}

// forget drops pid's stack state: its process left the ledger (trimmed).
func (a *allocSites) forget(pid uint32) { delete(a.procs, pid) }

// enter gives the process pid now names in the ledger its stack state as
// its site source.
func (a *allocSites) enter(pid uint32) {
	if a.on {
		a.ledger.SetSites(pid, a.procStacksOf(pid))
	}
}

// ended stops Python stacks of pid, which ended, in the kernel; it returns
// the interpreter to close once the process's summary is made (its
// descriptor may still symbolize its sites), nil when none.
func (a *allocSites) ended(pid uint32) *pyframes.Process {
	ps := a.procs[pid]
	if ps != nil {
		a.forgetKnown(pid, ps)
		ps.tokens, ps.learned = nil, nil
		if ps.pyTaught {
			a.be.ForgetPyStacks(pid)
			ps.pyTaught = false
		}
		ps.pyTokens, ps.pyLearned = nil, nil
	}
	if ps == nil || ps.py == nil {
		return nil
	}
	a.be.ClearPython(pid)
	if ps.pyShared {
		return nil // its parent's, closed with it
	}
	return ps.py
}

// evalStops: pid runs the interpreter ps.py, so its native stacks end at
// their first frame of the interpreter's evaluation loop (stacks.Table
// SetStops, docs/stacks.md): the frames past it are the interpreter's,
// which its Python stack names, and however deep the Python code, the
// native chain stays short enough to be known (bpf/stack.h: at most 32
// return addresses; a pytest run's chains had 68). The stacks the kernel
// learnt without the stop are forgotten, to be learnt again with it.
func (a *allocSites) evalStops(pid uint32, ps *procStacks) {
	lo, hi, ok := ps.py.EvalFrame()
	if !ok {
		return
	}
	ps.evalLo, ps.evalHi = lo, hi
	if ps.tab.SetStops([]stacks.Range{{Lo: lo, Hi: hi}}) {
		a.forgetKnown(pid, ps)
	}
}

// forgetKnown deletes the kernel's known stacks of pid, if it has any.
// Their tokens still name their stacks: records already in the ring may
// carry them, and a stack learnt again takes its token again.
func (a *allocSites) forgetKnown(pid uint32, ps *procStacks) {
	if ps.taught {
		a.be.ForgetStacks(pid)
		ps.taught = false
	}
}

// learnStack makes the stack id of pid, just unwound into a.steps, known
// to the kernel: the next captures of it come as its token. A stack
// learnt before that comes copied again lost a slot of the kernel's
// tables to another stack (probes/tables, known.go): it is learnt again, under
// its token.
func (a *allocSites) learnStack(pid uint32, ps *procStacks, id stacks.StackID, ip uint64) {
	st, ok := ps.tab.Stack(id)
	if !ok || len(st.Locs) == 0 || len(st.Locs)-1 > tables.KnownStackFrames || len(a.steps) != len(st.Locs) {
		return
	}
	a.chain = a.chain[:0]
	for _, l := range st.Locs[1:] {
		a.chain = append(a.chain, l.PC)
	}
	a.pSteps = a.pSteps[:0]
	for _, s := range a.steps {
		a.pSteps = append(a.pSteps, tables.StackStep{PC: s.PC, First: s.First, End: s.End, CFAFromBP: s.CFAFromBP, BPSaved: s.BPSaved, CFA: s.CFA, RA: s.RA, BP: s.BP})
	}
	token, again := ps.learned[id]
	if !again {
		token = a.lastToken + 1
	}
	if err := a.be.LearnStack(pid, ip, a.pSteps, a.chain, token); err != nil {
		return // this stack keeps being copied
	}
	ps.taught = true
	if again {
		return
	}
	a.lastToken = token
	if ps.learned == nil {
		ps.learned, ps.tokens = map[stacks.StackID]uint64{}, map[uint64]stacks.StackID{}
	}
	ps.learned[id] = token
	ps.tokens[token] = id
}

// onToken gives the alloc ev, whose native stack BPF found known
// (StackToken), the site its token names, as onStack does for the record
// of a known stack; its Python stack, if it has one, is known too
// (PyToken: BPF sends the tokens in the alloc only then).
func (a *allocSites) onToken(ev *events.Event) {
	a.reborn(ev.Pid)
	ps := a.procStacksOf(ev.Pid)
	a.known++
	var py uint32
	if ev.PyToken != 0 {
		py = a.pyTokenStack(ps, ev.PyToken)
	}
	if id, ok := ps.tokens[ev.StackToken]; ok {
		ev.Site = ps.site(id, py)
		ev.SiteMissing = ps.pythonMissing(id, py, ev.TsNs)
	} else {
		a.staleKnown++ // of an earlier process with this pid: no site
		ev.SiteMissing = events.MissingStaleToken
	}
	ev.Stack = events.StackNone // resolved
}

// onStack interns a stack record and gives its site to the held alloc of
// the same seq, then releases what no longer waits.
func (a *allocSites) onStack(raw []byte) {
	var rec events.StackRecord
	if err := events.DecodeStack(raw, &rec); err != nil {
		a.bad(err)
		return
	}
	ev := a.held.alloc(rec.Seq, rec.Pid)
	if ev == nil {
		return // its alloc was not held (cannot happen: BPF says so in the alloc)
	}
	a.reborn(rec.Pid)
	ps := a.procStacksOf(rec.Pid)
	if ps.mods == nil || ps.inherited || !inModule(ps.mods, rec.IP) {
		// First stack of the process, or a library mapped without a
		// link-map record (no loader probe): look at the maps now. A
		// child's maps inherited at its fork are used only when its own
		// cannot be read any more (it ended).
		a.retake(rec.Pid, ps)
	}
	py := a.held.takePython(rec.Seq)
	if rec.Flags&events.StackKnown != 0 {
		// A stack made known before: its token names it.
		a.known++
		if known, ok := ps.tokens[rec.Token]; ok {
			ev.Site = ps.site(known, py)
			ev.SiteMissing = ps.pythonMissing(known, py, ev.TsNs)
			if len(rec.Data) > 0 && ps.mods != nil {
				a.checked++
				regs := stacks.Regs{IP: rec.IP, SP: rec.SP, BP: rec.BP}
				if id, _ := ps.tab.Add(ps.mods, regs, rec.Data); id != known {
					a.wrong++
					fmt.Fprintf(a.log, "tttrace: pid %d seq %d: known stack %d unwinds to stack %d\n", rec.Pid, rec.Seq, known, id)
				}
			}
		} else {
			a.staleKnown++ // of an earlier process with this pid: no site
			ev.SiteMissing = events.MissingStaleToken
		}
	} else if ps.mods != nil {
		a.copied++
		regs := stacks.Regs{IP: rec.IP, SP: rec.SP, BP: rec.BP}
		var id stacks.StackID
		var trunc, fixed bool
		id, trunc, a.steps, fixed = ps.tab.AddSteps(ps.mods, regs, rec.Data, a.steps)
		if trunc && !ps.retried {
			// The maps may be stale (a snapshot taken while ld.so was
			// still mapping, or before an exec): look again, once per
			// snapshot.
			a.retake(rec.Pid, ps)
			ps.retried = true
			id, _, a.steps, fixed = ps.tab.AddSteps(ps.mods, regs, rec.Data, a.steps)
		}
		if fixed && a.learn {
			a.learnStack(rec.Pid, ps, id, rec.IP)
		}
		ev.Site = ps.site(id, py)
		ev.SiteMissing = ps.pythonMissing(id, py, ev.TsNs)
		if !inModule(ps.mods, rec.IP) || (ps.factsOf(id).bare && a.staleMaps(rec.Pid, ps)) {
			// A pc in no module of maps that may not be the process's
			// last: the stack could not be placed whole.
			ev.SiteMissing = events.MissingPCNotInMaps
		}
	} else {
		// Its maps were never read: its process ended first (or they
		// cannot be read). The stack cannot be placed in modules.
		ev.SiteMissing = ps.modsMiss
		if ev.SiteMissing == events.SiteComplete {
			ev.SiteMissing = events.MissingMapsUnreadable
		}
	}
	a.held.resolved(ev)
}

// pythonMissing is why the site of native stack id with Python stack py
// (0: none) lacks its Python frames: its native stack runs through a
// CPython interpreter, so the thread ran Python code, yet no frames came
// with it. ts is the alloc's time. SiteComplete when nothing is missing.
func (ps *procStacks) pythonMissing(id stacks.StackID, py uint32, ts uint64) events.SiteMissing {
	if py != 0 && int(py) <= len(ps.pyRaw) && len(ps.pyRaw[py-1].Frames) > 0 {
		return events.SiteComplete
	}
	if !ps.throughPython(id) {
		return events.SiteComplete
	}
	switch {
	case py != 0 || (ps.py != nil && ps.pyAt != 0 && ts >= ps.pyAt):
		return events.MissingPythonStack
	case ps.pyInfo != nil && ps.pyInfo.Error != "":
		return events.MissingPythonUnsupported
	default:
		return events.MissingPythonNotRegistered
	}
}

// stackFacts is what a native stack says of its site's completeness.
type stackFacts struct {
	python bool // a frame in a CPython interpreter (libpython, a python executable)
	bare   bool // a frame in no mapped file (the unwind stopped there)
}

// factsOf is what native stack id says of its site (memoized).
func (ps *procStacks) factsOf(id stacks.StackID) stackFacts {
	if v, ok := ps.facts[id]; ok {
		return v
	}
	st, _ := ps.tab.Stack(id)
	var v stackFacts
	for _, l := range st.Locs {
		v.bare = v.bare || l.File == nil
		v.python = v.python || (l.File != nil && isPythonFile(l.File.Path))
	}
	if ps.facts == nil {
		ps.facts = map[stacks.StackID]stackFacts{}
	}
	ps.facts[id] = v
	return v
}

// throughPython says whether native stack id has a frame in a CPython
// interpreter (libpython, or a python executable).
func (ps *procStacks) throughPython(id stacks.StackID) bool { return ps.factsOf(id).python }

// isPythonFile: path is a CPython interpreter's file (libpython3.x.so,
// python3, python3.11, ...), whose frames run Python code.
func isPythonFile(path string) bool {
	b := filepath.Base(path)
	if strings.HasPrefix(b, "libpython") {
		return true
	}
	rest, ok := strings.CutPrefix(b, "python")
	if !ok {
		return false
	}
	for _, c := range rest {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// staleMaps says whether ps.mods may lack what pid mapped since: the last
// read of its maps failed (it ended), or it has ended since. A pc in no
// module of maps read while the process still runs after it is code in no
// file (JIT), where the unwind stops by design.
func (a *allocSites) staleMaps(pid uint32, ps *procStacks) bool {
	if ps.modsMiss != events.SiteComplete || ps.inherited {
		return true
	}
	// An ended process not yet reaped still has the file, empty.
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return true
	}
	defer f.Close()
	var b [1]byte
	n, _ := f.Read(b[:])
	return n == 0
}

// retake reads pid's maps again for a stack of it (snapshotSoon); a
// child's maps inherited at its fork stay when its own cannot be read (it
// ended), unless a link-map change dropped them (snapshotMaps).
func (a *allocSites) retake(pid uint32, ps *procStacks) {
	inherited, parents := ps.inherited, ps.mods
	a.snapshotSoon(pid)
	if inherited && ps.mods == nil {
		ps.mods, ps.inherited = parents, true
	}
}

func inModule(m *stacks.Modules, pc uint64) bool {
	_, _, ok := m.Lookup(pc)
	return ok
}

// hold keeps ev behind an alloc waiting for its stack (heldRecords.hold);
// it reports false when ev can be handled now. An alloc that names its
// known stack by its token gets its site first.
func (a *allocSites) hold(ev *events.Event) bool {
	switch {
	case ev.Stack == events.StackToken:
		a.onToken(ev)
	case ev.Stack == events.StackFollows && ev.PyToken != 0:
		// Its Python stack is known; its native stack follows.
		a.reborn(ev.Pid)
		if py := a.pyTokenStack(a.procStacksOf(ev.Pid), ev.PyToken); py != 0 {
			a.held.setPython(ev.Seq, py)
		}
	case ev.Stack == events.StackLost && ev.Kind == events.KindAlloc && a.on:
		ev.SiteMissing = events.MissingStackLost
	}
	return a.held.hold(ev)
}

// releaseAll handles every held record, giving up the stacks still
// awaited (heldRecords.releaseAll).
func (a *allocSites) releaseAll() { a.held.releaseAll() }

// announceSite describes ev's site to the site sinks before the first
// record naming it.
func (a *allocSites) announceSite(ev *events.Event) {
	if ev.Site == 0 || len(a.sinks) == 0 {
		return
	}
	ps := a.procs[ev.Pid]
	if ps == nil {
		return
	}
	for int(ev.Site) >= len(ps.sent) {
		ps.sent = append(ps.sent, false)
	}
	if ps.sent[ev.Site] {
		return
	}
	ps.sent[ev.Site] = true
	d, ok := ps.Site(ev.Site)
	if !ok {
		return
	}
	for _, k := range a.sinks {
		k.Site(ev.Pid, &d)
	}
}

// Site describes a site of the process (devices.SiteSource), symbolizing
// it (each pc once per file, cached there).
func (ps *procStacks) Site(id uint32) (devices.Site, bool) {
	if id == 0 || int(id) > len(ps.sites) {
		return devices.Site{}, false
	}
	pair := ps.sites[id-1]
	stk, ok := ps.tab.Stack(pair.native)
	if !ok {
		return devices.Site{}, false
	}
	frames := stacks.Symbolize(stk.Locs)
	d := devices.Site{Site: id, Native: make([]devices.NativeFrame, len(frames)), Python: []devices.PyFrame{}, Truncated: stk.Truncated}
	for i, f := range frames {
		d.Native[i] = devices.NativeFrame{PC: f.PC, Module: f.Module, Function: f.Function, Offset: f.Offset, File: f.File, Line: f.Line}
	}
	if pair.py != 0 && ps.py != nil {
		st := ps.py.Symbolize(ps.pyRaw[pair.py-1])
		for _, f := range st.Frames {
			d.Python = append(d.Python, devices.PyFrame{Function: f.Function, File: f.File, Line: f.Line})
		}
		d.Truncated = d.Truncated || st.Truncated
	}
	return d, true
}

// Python is the process's interpreter (devices.SiteSource), nil when it
// has none.
func (ps *procStacks) Python() *devices.PythonInfo { return ps.pyInfo }
