package session

// TT-NN ops (issue #31, docs/probes.md "TT-NN ops"): which op each record
// was made in.
//
// The BPF side keeps each thread's op frames and checks which are still
// live (bpf/ops.h); each record of a kind that carries an op says how many
// are (events.Header.OpFrames), and each op_enter record which op function
// it pushed. This file keeps the frames' names, per (pid, tid): a record
// saying n frames are live cuts the thread's frames to n (the ones above
// have returned, or were left by an exception); an op_enter cuts to n-1
// and pushes its op. From the frames it fills events.OpFields:
//
//   - Op: the innermost top-level op (its Python name), OpDepth the number
//     of top-level ops live;
//   - DeviceOp: the innermost device operation launched inside it (deeper
//     than Op's frame); with no top-level op live on the thread (a launch
//     on a worker thread), the innermost device op alone;
//   - RuntimeID: what a runtime_id record (Program::set_runtime_id) gave
//     DeviceOp's frame (the innermost device-op frame live when it came; a
//     thread with none: its innermost frame), so the records after it in
//     that frame carry it; those before do not (the ledger joins them).
//
// A frame the BPF side counts but whose op_enter never arrived (the ring
// was full) is a gap: it names nothing and is skipped. A thread's names go
// when a record says none is live, and every thread of a process when it
// ends. The TT-NN libraries are found in the traced processes' maps
// (names: ttmetal.IsTTNNName, libttnn*.so), their op tables read off the
// records' goroutine (ttmetal.FindOpsWith), their ops given ids and
// attached from the loop (opLibs below).

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/internal/gcgoal"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// maxOpThreads bounds the threads whose frames are kept at once; a thread
// past it gets no op (counted in opFrames.threadsCut).
const maxOpThreads = 1 << 16

// opInfo is what an op id names.
type opInfo struct {
	name   uint32 // events.OpNames id
	device bool
}

// opFrame is one live frame of a thread.
type opFrame struct {
	name   uint32 // events.OpNames id; 0 with !known
	device bool
	known  bool // its op_enter was read and named a known op
	rid    uint64
	hasRID bool
	// launch: a device frame's launch (opFrames.launches); the frames of
	// one launch (launch<Op> calling the mesh adapter) share it.
	launch uint64
}

// opThread is one thread's live frames, outermost first.
type opThread struct {
	frames [events.OpMaxFrames]opFrame
	n      int
}

// opFrames is the op frames of every traced thread, and what each op id
// names.
type opFrames struct {
	byID    []opInfo // id-1
	threads map[uint64]*opThread
	// Counts of what could not be named: frames counted live whose
	// op_enter was not read (gaps), op_enter records of an id never
	// given (unknownIDs), frames deeper than OpMaxFrames (dropped),
	// threads past maxOpThreads (threadsCut).
	gaps, unknownIDs, dropped, threadsCut uint64
	// launches numbers the launches of device ops; launchEnded is told
	// of each whose last frame is gone (opjoin.go), nil: nobody asks.
	launches    uint64
	launchEnded func(launch uint64)
	// progs: the op of the launch that last gave each program
	// (pid, ProgramImpl*) its runtime id, for the CB layouts and
	// dispatches of that program on a thread where no op is live (a
	// dispatch thread); layoutProg: the program whose layout a thread
	// runs, for its CB records (which name none). At most maxOpProgs.
	progs      map[opProg]events.OpFields
	layoutProg map[uint64]uint64
}

// opProg is a program of a process.
type opProg struct {
	pid  uint32
	impl uint64
}

// maxOpProgs bounds opFrames.progs and layoutProg; past it they start
// again empty (a program cache of more programs than this loses the op
// of its CB records on threads where no op is live until it runs again).
const maxOpProgs = 1 << 16

func threadKey(pid, tid uint32) uint64 { return uint64(pid)<<32 | uint64(tid) }

// register gives each op of tab an id, interning its name, and returns
// the probes to attach.
func (o *opFrames) register(tab *ttmetal.OpTable) []probes.OpPoint {
	points := make([]probes.OpPoint, 0, len(tab.Ops))
	for _, op := range tab.Ops {
		name := events.OpNames.Intern(op.Name)
		if name == 0 {
			continue // the name table is full: the op stays unnamed
		}
		info := opInfo{name: name, device: op.Kind == ttmetal.OpDevice}
		o.byID = append(o.byID, info)
		points = append(points, probes.OpPoint{Addr: op.Addr, Offset: op.Offset, ID: uint32(len(o.byID)), Device: info.device})
	}
	return points
}

// thread returns the frames of (pid, tid), made if make and there is room.
func (o *opFrames) thread(pid, tid uint32, make bool) *opThread {
	k := threadKey(pid, tid)
	if th := o.threads[k]; th != nil || !make {
		return th
	}
	if len(o.threads) >= maxOpThreads {
		o.threadsCut++
		return nil
	}
	if o.threads == nil {
		o.threads = map[uint64]*opThread{}
	}
	th := &opThread{}
	o.threads[k] = th
	return th
}

// cut makes n frames live: the ones above go, and frames never seen
// pushed are gaps.
func (o *opFrames) cut(th *opThread, n int) {
	n = min(n, len(th.frames))
	for ; th.n < n; th.n++ {
		th.frames[th.n] = opFrame{}
		o.gaps++
	}
	for i := th.n - 1; i >= n; i-- {
		// A launch ends with its outermost frame.
		if l := th.frames[i].launch; l != 0 && o.launchEnded != nil && (i == 0 || th.frames[i-1].launch != l) {
			o.launchEnded(l)
		}
	}
	th.n = n
}

// onRecord fills ev.OpFields for a record that says n frames are live on
// its thread (events.OpFramesUnchecked: it did not look).
func (o *opFrames) onRecord(ev *events.Event, n uint8) {
	if n == events.OpFramesUnchecked {
		return
	}
	if th := o.thread(ev.Pid, ev.Tid, n > 0); th != nil {
		o.cut(th, int(n))
		th.fill(&ev.OpFields)
		o.forgetIdle(ev.Pid, ev.Tid, th)
	}
	o.byProgram(ev)
}

// byProgram gives a program's CB layout, its CB records and its dispatch
// made where no op is live the op of the launch that last gave the
// program its runtime id.
func (o *opFrames) byProgram(ev *events.Event) {
	prog := ev.Object
	switch ev.Kind {
	case events.KindCBLayout:
		if len(o.layoutProg) >= maxOpProgs {
			clear(o.layoutProg)
		}
		if o.layoutProg == nil {
			o.layoutProg = map[uint64]uint64{}
		}
		o.layoutProg[threadKey(ev.Pid, ev.Tid)] = prog
	case events.KindCBAlloc:
		prog = o.layoutProg[threadKey(ev.Pid, ev.Tid)]
	case events.KindProgramDispatch:
	default:
		return
	}
	if ev.InOp() || prog == 0 {
		return
	}
	if f, ok := o.progs[opProg{ev.Pid, prog}]; ok {
		ev.OpFields = f
	}
}

// onEnter pushes the op of an op_enter record and fills its OpFields:
// those of the frame it opened.
func (o *opFrames) onEnter(ev *events.Event, w *events.OpEnterWire) {
	n := int(w.Hdr.OpFrames)
	th := o.thread(ev.Pid, ev.Tid, n > 0)
	if th == nil {
		return
	}
	if w.Flags&events.OpFrameDropped != 0 || n == 0 {
		o.dropped++
		o.cut(th, n)
	} else {
		o.cut(th, n-1)
		f := opFrame{device: w.Device != 0}
		if id := int(w.Op); id >= 1 && id <= len(o.byID) {
			f.name, f.device, f.known = o.byID[id-1].name, o.byID[id-1].device, true
		} else {
			o.unknownIDs++
		}
		entered := events.OpEnteredUnknown
		switch {
		case !f.known:
		case !f.device:
			entered = events.OpEnteredOp
		case th.n > 0 && th.frames[th.n-1].known && th.frames[th.n-1].device && th.frames[th.n-1].name == f.name:
			// A further frame of the launch going on: launch<Op>
			// calling the mesh adapter, invoke<Op> calling
			// launch_on_single_device<Op>.
			f.launch, f.rid, f.hasRID = th.frames[th.n-1].launch, th.frames[th.n-1].rid, th.frames[th.n-1].hasRID
			entered = events.OpEnteredLaunchFrame
		default:
			o.launches++
			f.launch = o.launches
			entered = events.OpEnteredLaunch
		}
		th.frames[th.n] = f
		th.n++
		th.fill(&ev.OpFields)
		ev.Entered = entered
		o.forgetIdle(ev.Pid, ev.Tid, th)
		return
	}
	th.fill(&ev.OpFields)
	ev.Entered = events.OpEnteredUnknown
	o.forgetIdle(ev.Pid, ev.Tid, th)
}

// onRuntimeID gives the id of a runtime_id record (ev.RuntimeID) to the
// innermost device-op frame live (a thread with none: its innermost
// frame), and fills the record's op.
func (o *opFrames) onRuntimeID(ev *events.Event, n uint8) {
	if n == events.OpFramesUnchecked {
		return
	}
	th := o.thread(ev.Pid, ev.Tid, n > 0)
	if th == nil {
		return
	}
	o.cut(th, int(n))
	at := -1
	for i := th.n - 1; i >= 0; i-- {
		if f := &th.frames[i]; f.known && (f.device || at < 0) {
			at = i
			if f.device {
				break
			}
		}
	}
	if at >= 0 {
		th.frames[at].rid, th.frames[at].hasRID = ev.RuntimeID, true
		if l := th.frames[at].launch; l != 0 {
			for i := range th.n {
				if th.frames[i].launch == l {
					th.frames[i].rid, th.frames[i].hasRID = ev.RuntimeID, true
				}
			}
		}
	}
	id, has := ev.RuntimeID, ev.HasRuntimeID
	th.fill(&ev.OpFields)
	if ev.Object != 0 && ev.InOp() {
		if len(o.progs) >= maxOpProgs {
			clear(o.progs)
		}
		if o.progs == nil {
			o.progs = map[opProg]events.OpFields{}
		}
		f := ev.OpFields
		f.Launch = 0 // its records made elsewhere wait for nothing
		o.progs[opProg{ev.Pid, ev.Object}] = f
	}
	ev.RuntimeID, ev.HasRuntimeID = id, has // the record's own
	o.forgetIdle(ev.Pid, ev.Tid, th)
}

// forgetIdle drops a thread with no live frame.
func (o *opFrames) forgetIdle(pid, tid uint32, th *opThread) {
	if th.n == 0 {
		delete(o.threads, threadKey(pid, tid))
	}
}

// ended forgets the threads of a process that ended.
func (o *opFrames) ended(pid uint32) {
	for k := range o.threads {
		if uint32(k>>32) == pid {
			delete(o.threads, k)
		}
	}
	for k := range o.layoutProg {
		if uint32(k>>32) == pid {
			delete(o.layoutProg, k)
		}
	}
	for k := range o.progs {
		if k.pid == pid {
			delete(o.progs, k)
		}
	}
}

// fill sets f from the live frames (the package comment says how).
func (th *opThread) fill(f *events.OpFields) {
	*f = events.OpFields{}
	top := -1
	for i := range th.n {
		if fr := &th.frames[i]; fr.known && !fr.device {
			top = i
			f.OpDepth++
		}
	}
	src := -1
	for i := th.n - 1; i > top; i-- {
		if fr := &th.frames[i]; fr.known && fr.device {
			f.DeviceOp = fr.name
			src = i
			break
		}
	}
	if top >= 0 {
		f.Op = th.frames[top].name
		if src < 0 {
			src = top
		}
	}
	if src >= 0 && th.frames[src].hasRID {
		f.RuntimeID, f.HasRuntimeID = th.frames[src].rid, true
	}
	if src >= 0 {
		f.Launch = th.frames[src].launch
	}
}

// ---- the TT-NN libraries ---------------------------------------------

// isTTNNLibrary says whether path is named as a TT-NN library: the Python
// module _ttnn*.so, the C++ ops _ttnncpp.so, or libttnn*.so.
func isTTNNLibrary(path string) bool {
	b := filepath.Base(path)
	return ttmetal.IsTTNNName(path) || strings.HasPrefix(b, "libttnn") && strings.Contains(b, ".so")
}

// opsAttacher is a backend that can probe ops (bpfBackend).
type opsAttacher interface {
	AttachOps(lib *ttmetal.Library, points []probes.OpPoint) (probes.OpsAttached, error)
}

// opLibRead is a TT-NN library whose op table was read.
type opLibRead struct {
	path string
	lib  *ttmetal.Library // nil: err
	tab  *ttmetal.OpTable
	err  error
}

// opLibs finds the TT-NN libraries of the traced processes and has their
// ops probed.
type opLibs struct {
	on     bool
	frames opFrames
	be     opsAttacher // nil: the backend cannot
	log    io.Writer
	tl     *Timeline
	key    func(string) (procfs.FileKey, error)
	seen   map[procfs.FileKey]bool // libraries read or being read
	// Read in the background: done counts the reads waiting in ready,
	// so the loop looks without taking the lock.
	mu    sync.Mutex
	ready []opLibRead
	done  atomic.Int32
	wake  func()
	// probed: op functions attached, over all libraries.
	probed int
}

// scan looks for TT-NN libraries not seen yet among objs (a process's
// shared objects) and reads their op tables together (the Python module
// names, in its typeinfo, the ops another of them defines:
// ttmetal.FindOpsWith). With wait (-p: the process's libraries are all
// probed before tttrace says it is ready, so its first op after is
// named) they are attached before scan returns; otherwise they are read
// in the background and the loop attaches them (takeReady), so a
// process found by --all or a library loaded mid-run does not hold the
// loop while its records wait.
func (l *opLibs) scan(objs []string, wait bool) {
	if !l.on || l.be == nil {
		return
	}
	var batch []string
	for _, o := range objs {
		if isTTNNLibrary(o) {
			batch = append(batch, o)
		}
	}
	batch = l.unseen(batch)
	if len(batch) == 0 {
		return
	}
	if wait {
		for _, r := range readOpTables(batch) {
			l.attach(r)
		}
		return
	}
	go func() {
		reads := readOpTables(batch)
		l.mu.Lock()
		l.ready = append(l.ready, reads...)
		l.mu.Unlock()
		l.done.Add(int32(len(reads)))
		if l.wake != nil {
			l.wake()
		}
	}()
}

// now reads and attaches the TT-NN libraries among paths before it
// returns (the candidates of a command about to start: its first op is
// then seen).
func (l *opLibs) now(paths []string) {
	if !l.on || l.be == nil {
		return
	}
	for _, r := range readOpTables(l.unseen(paths)) {
		l.attach(r)
	}
}

// unseen marks paths seen and returns those that were not (by file, so a
// library reached by two paths is read once).
func (l *opLibs) unseen(paths []string) []string {
	var out []string
	for _, p := range paths {
		k, err := l.key(p)
		if err != nil || l.seen[k] {
			continue
		}
		if l.seen == nil {
			l.seen = map[procfs.FileKey]bool{}
		}
		l.seen[k] = true
		out = append(out, p)
	}
	return out
}

// readOpTables opens each path and reads its op table, with the registered
// operations of all of them. A crafted file's panic refuses that file.
func readOpTables(paths []string) []opLibRead {
	// A library's symbol tables make garbage by the megabyte: collected
	// at the tracer's usual target, thousands of op functions took 70-80
	// collections (seconds) before a command could start.
	defer gcgoal.Relax()()
	out := make([]opLibRead, len(paths))
	regs := make([]*ttmetal.OpRegistrations, len(paths))
	for i, p := range paths {
		out[i].path = p
		func() {
			defer func() {
				if r := recover(); r != nil {
					out[i].err = fmt.Errorf("malformed library (internal error: %v)", r)
				}
			}()
			lib, err := ttmetal.OpenLibrary(p)
			if err != nil {
				out[i].err = err
				return
			}
			out[i].lib = lib
			regs[i], _ = ttmetal.FindOpRegistrations(lib)
		}()
	}
	for i := range out {
		if out[i].lib == nil {
			continue
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					out[i].err = fmt.Errorf("malformed library (internal error: %v)", r)
				}
			}()
			var others []*ttmetal.OpRegistrations
			for j, r := range regs {
				if j != i && r != nil {
					others = append(others, r)
				}
			}
			out[i].tab, out[i].err = ttmetal.FindOpsWith(out[i].lib, others...)
		}()
		if out[i].err != nil {
			out[i].lib.Close()
			out[i].lib = nil
		}
	}
	return out
}

// takeReady attaches the libraries read in the background.
func (l *opLibs) takeReady() {
	if l.done.Load() == 0 {
		return
	}
	l.mu.Lock()
	reads := l.ready
	l.ready = nil
	l.done.Add(-int32(len(reads)))
	l.mu.Unlock()
	for _, r := range reads {
		l.attach(r)
	}
}

// attach gives the ops of one library read ids and probes them.
func (l *opLibs) attach(r opLibRead) {
	if r.lib == nil {
		fmt.Fprintf(l.log, "tttrace: TT-NN ops of %s not probed: %v\n", r.path, r.err)
		return
	}
	defer r.lib.Close()
	if len(r.tab.Ops) == 0 {
		return
	}
	points := l.frames.register(r.tab)
	res, err := l.be.AttachOps(r.lib, points)
	if err != nil {
		fmt.Fprintf(l.log, "tttrace: TT-NN ops of %s not probed: %v\n", r.path, err)
		return
	}
	l.probed += res.Probed
	l.tl.Mark(fmt.Sprintf("%s: %d op functions probed", r.path, res.Probed))
	fmt.Fprintf(l.log, "tttrace: probing the ops of %s (%d top-level, %d device-op launches; %s)\n",
		r.path, r.tab.Count(ttmetal.OpTop), r.tab.Count(ttmetal.OpDevice), strings.Join(r.tab.Forms, ", "))
	if r.tab.Truncated {
		fmt.Fprintf(l.log, "tttrace: note: %s has more than %d op functions: the rest are not probed\n", r.path, ttmetal.MaxOps)
	}
	if n := len(res.Unprobeable) + res.UnprobeableMore; n > 0 {
		fmt.Fprintf(l.log, "tttrace: note: %d op functions of %s cannot be probed (%s): records in them name their caller's op\n",
			n, r.path, strings.Join(res.Unprobeable, "; "))
	}
}

// finish closes what background reads left unattached (the end of
// tracing) and says what could not be named.
func (l *opLibs) finish() {
	l.mu.Lock()
	for _, r := range l.ready {
		if r.lib != nil {
			r.lib.Close()
		}
	}
	l.ready = nil
	l.mu.Unlock()
	f := &l.frames
	if f.gaps+f.unknownIDs+f.dropped+f.threadsCut > 0 {
		fmt.Fprintf(l.log, "tttrace: TT-NN ops: %d frames without their entry (records lost), %d entries of an unknown op, "+
			"%d frames deeper than %d, %d threads past %d: records in those name an outer op or none\n",
			f.gaps, f.unknownIDs, f.dropped, events.OpMaxFrames, f.threadsCut, maxOpThreads)
	}
}

// candidates are the TT-NN libraries beside the TT-Metal candidates (the
// directory of libtt_metal.so and the two above it: a ttnn package's
// build/lib): files a command about to start may load.
func ttnnCandidates(ttmetalCandidates []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range ttmetalCandidates {
		d := filepath.Dir(c)
		for range 3 {
			for _, pat := range []string{"_ttnn*.so*", "libttnn*.so*"} {
				ms, _ := filepath.Glob(filepath.Join(d, pat))
				for _, m := range ms {
					if !seen[m] && isTTNNLibrary(m) && procfs.IsRegular(m) {
						seen[m] = true
						out = append(out, m)
					}
				}
			}
			d = filepath.Dir(d)
		}
	}
	return out
}
