package probes

// Attaching: the plan's uprobes on a TT-Metal library's file, the
// dynamic loader's and the process events' hooks, the code-object
// deallocation probe of a CPython file, and their detaching. Every probe
// is on a file's inode (it fires in every process that maps it); the BPF
// side keeps only traced processes.

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/ttmetal"
)

// AttachPlan installs a uprobe on every attach point of plan in lib, reading
// objects with layout: one uprobe_multi link per program, or one classic
// uprobe per attach point where the kernel has no such links. The probes are
// attached to the file's inode, so they fire in every process that maps it,
// including ones that map it later. On failure nothing stays attached.
// Attaching a file already attached does nothing.
func (t *Tracer) AttachPlan(lib *ttmetal.Library, syms *ttmetal.Symbols, plan *ttmetal.Plan, layout ttmetal.Layout) error {
	points, disposeOffset := plan.AttachPoints, plan.DisposeOffset
	st, err := lib.Stat()
	if err != nil {
		return err
	}
	for _, l := range t.libs {
		if os.SameFile(l.info, st) {
			return nil
		}
	}
	if len(t.libs) >= maxLibs {
		return fmt.Errorf("%s: already probing %d libraries, the most tttrace can", lib.Path, maxLibs)
	}
	idx := uint32(len(t.libs))
	info := libInfo(layout, syms)
	if err := t.objs.Libs.Update(idx, &info, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("record library %s: %w", lib.Path, err)
	}
	lc := tttraceLcInfo{Allocated: 0xff, DisposeOffset: disposeOffset}
	if layout.Allocated >= 0 && layout.Allocated < 0xff {
		lc.Allocated = uint8(layout.Allocated)
	}
	if err := t.objs.LcLibs.Update(idx, &lc, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("record library %s: %w", lib.Path, err)
	}
	var need []ttmetal.Program
	for _, s := range points {
		need = append(need, s.Program)
	}
	progs, err := t.programsFor(need)
	if err != nil {
		return err
	}
	// Every attach point is checked before any is attached: a uprobe_multi
	// link is all-or-nothing, and a library half probed is worse than none.
	for _, s := range points {
		if err := ttmetal.CheckProbeable(lib, s.Addr); err != nil {
			return fmt.Errorf("%s (%s): %w", s.Function, s.Symbol, err)
		}
		if progs[s.Program] == nil {
			return fmt.Errorf("no BPF program %q", s.Program)
		}
		if s.Addr>>cookieAddrBits != 0 {
			return fmt.Errorf("%s at %#x: address does not fit a cookie", s.Symbol, s.Addr)
		}
	}
	// The kernel keeps the path it was given (bpftool shows it): the
	// library's own while that still names the file that was read, the
	// descriptor's once it does not (its process ended).
	pinned := lib.Pinned()
	path := pinned
	if now, err := os.Stat(lib.Path); err == nil && os.SameFile(now, st) {
		path = lib.Path
	}
	links, err := t.attachFile(path, points, progs, idx)
	if err != nil && path != pinned && errors.Is(err, os.ErrNotExist) {
		links, err = t.attachFile(pinned, points, progs, idx)
	}
	if err != nil {
		return err
	}
	t.links = append(t.links, links...)
	t.AttachPoints = append(t.AttachPoints, points...)
	t.libs = append(t.libs, attachedLib{path: lib.Path, info: st})
	return nil
}

// attachFile attaches the programs of points to the library at path.
func (t *Tracer) attachFile(path string, points []ttmetal.AttachPoint, progs map[ttmetal.Program]*ebpf.Program, idx uint32) ([]link.Link, error) {
	exe, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return t.attachPoints(exe, points, progs, idx)
}

// attachPoints attaches the programs of points in the library exe (index idx
// in the libs map): one uprobe_multi link per program, or one classic uprobe
// per attach point. The cookie of each attach point holds idx in its top bits and
// the point's static address below: ip - (low bits of the cookie) is the
// library's load bias in whichever process hits the probe. On failure
// nothing stays attached.
func (t *Tracer) attachPoints(exe *link.Executable, points []ttmetal.AttachPoint, progs map[ttmetal.Program]*ebpf.Program, idx uint32) ([]link.Link, error) {
	cookie := func(s ttmetal.AttachPoint) uint64 { return uint64(idx)<<cookieAddrBits | s.Addr }
	var links []link.Link
	if !t.multi {
		for _, s := range points {
			l, err := exe.Uprobe("", progs[s.Program], &link.UprobeOptions{Address: s.Offset, Cookie: cookie(s)})
			if err != nil {
				closeLinks(links)
				return nil, fmt.Errorf("attach uprobe to %s (%s at %#x): %w", s.Function, s.Symbol, s.Addr, err)
			}
			links = append(links, l)
		}
		return links, nil
	}
	var order []ttmetal.Program
	byProg := map[ttmetal.Program]*link.UprobeMultiOptions{}
	for _, s := range points {
		o := byProg[s.Program]
		if o == nil {
			o = &link.UprobeMultiOptions{}
			byProg[s.Program] = o
			order = append(order, s.Program)
		}
		o.Addresses = append(o.Addresses, s.Offset)
		o.Cookies = append(o.Cookies, cookie(s))
	}
	for _, name := range order {
		o := byProg[name]
		l, err := exe.UprobeMulti(nil, progs[name], o)
		if err != nil {
			closeLinks(links)
			var where []string
			for _, s := range points {
				if s.Program == name {
					where = append(where, fmt.Sprintf("%s at %#x", s.Symbol, s.Addr))
				}
			}
			return nil, fmt.Errorf("attach %s to %s with a uprobe_multi link: %w", name, strings.Join(where, ", "), err)
		}
		links = append(links, l)
	}
	return links, nil
}

// AttachLoader probes the dynamic loader's _dl_debug_state, which ld.so
// calls after every change of a process's link map: the tracer hears of each
// dlopen and can attach to a TT-Metal library the moment it is mapped. The
// probe is on the file: every process started with that loader traps there.
// With stacks, each call that finds the link map consistent first sends its
// objects (events.LinkObject), found through ld.so's _r_debug.
func (t *Tracer) AttachLoader(ldso string) error {
	return t.AttachLoaderTo(ldso, 0)
}

// AttachLoaderTo is AttachLoader for one process: pid's threads hit the
// probe (also after it execs, if its main thread does), no other process
// traps there. pid 0 means every process. The filter is on the process the
// pid names now: its children are not covered. On kernels whose
// uprobe_multi pid filter may be the one that passes only the main thread
// (before 6.10), a uprobe_multi probe is put in every process instead
// (the BPF side still keeps only traced processes).
func (t *Tracer) AttachLoaderTo(ldso string, pid int) error {
	lib, err := ttmetal.OpenLibrary(ldso)
	if err != nil {
		return err
	}
	defer lib.Close()
	var addr, rdebug uint64
	err = lib.ScanSymbols([]string{"_dl_debug_state", "_r_debug"}, func(s ttmetal.Symbol) {
		switch {
		case s.Name == "_dl_debug_state" && s.Type == elf.STT_FUNC:
			addr = s.Value
		case s.Name == "_r_debug" && s.Type == elf.STT_OBJECT:
			rdebug = s.Value
		}
	})
	if err != nil {
		return err
	}
	if addr == 0 {
		return fmt.Errorf("%s has no _dl_debug_state", ldso)
	}
	off, err := lib.FileOffset(addr)
	if err != nil {
		return err
	}
	exe, err := link.OpenExecutable(ldso)
	if err != nil {
		return err
	}
	cookie := loaderCookie(addr, rdebug)
	var l link.Link
	if t.multi {
		only := uint32(pid)
		if !multiPidFilterWholeProcess() {
			only = 0
		}
		l, err = exe.UprobeMulti(nil, t.progs[progDlDebugState], &link.UprobeMultiOptions{Addresses: []uint64{off}, Cookies: []uint64{cookie}, PID: only})
	} else {
		l, err = exe.Uprobe("", t.progs[progDlDebugState], &link.UprobeOptions{Address: off, Cookie: cookie, PID: pid})
	}
	if err != nil {
		return fmt.Errorf("attach to %s _dl_debug_state: %w", ldso, err)
	}
	t.links = append(t.links, l)
	return nil
}

// loaderCookie is the cookie of the probe on _dl_debug_state (at ELF
// address state): the distance from it to ld.so's _r_debug (at rdebug), as
// bpf/linkmap.h finds r_debug in the process (the probe's address plus
// the cookie, modulo 2^64); 0 when ld.so has no _r_debug: the link map is
// then not sent.
func loaderCookie(state, rdebug uint64) uint64 {
	if rdebug == 0 || rdebug == state {
		return 0
	}
	return rdebug - state
}

// AttachProcessEvents follows forks (when FollowChildren) and reports how
// traced processes end.
func (t *Tracer) AttachProcessEvents() error {
	for _, p := range []*ebpf.Program{t.progs[progProcessFork], t.progs[progProcessExit]} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		t.links = append(t.links, l)
	}
	return nil
}

// closeLinks closes links at the same time. Closing a uprobe link waits
// for RCU grace periods; links closed together share them: 11 uprobe_multi
// links close in ~25 ms together and ~270 ms one after the other (classic
// uprobes: ~0.6 s and ~1 s, serialized in the kernel).
func closeLinks(links []link.Link) error {
	errs := make([]error, len(links))
	sem := make(chan struct{}, 64) // threads blocked in close at once
	var wg sync.WaitGroup
	for i, l := range links {
		sem <- struct{}{}
		wg.Go(func() {
			errs[i] = l.Close()
			<-sem
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// UsesUprobeMulti says whether the uprobes are attached with uprobe_multi
// links (one per program and library) rather than one classic uprobe per
// attach point.
func (t *Tracer) UsesUprobeMulti() bool { return t.multi }

var (
	uprobeMultiOnce sync.Once
	uprobeMultiErr  error
)

// HaveUprobeMulti says whether the kernel has uprobe_multi links (Linux
// 6.6), nil if so. It asks for a link on a process that cannot exist:
// a kernel with the link type checks the program and the file, then
// refuses the pid (ESRCH) without placing a probe; cilium/ebpf turns the
// refusal of a kernel without it into ErrNotSupported.
func HaveUprobeMulti() error {
	uprobeMultiOnce.Do(func() { uprobeMultiErr = probeUprobeMulti() })
	return uprobeMultiErr
}

// multiPidFilterWholeProcess says whether a uprobe_multi link limited to a
// pid fires in all the process's threads. Linux 6.6 to 6.9 ran the program
// only in the thread whose id is the pid, the main thread (fixed in 6.10 by
// "bpf: fix multi-uprobe PID filtering logic", backported to some stable
// kernels only, which the release does not tell).
func multiPidFilterWholeProcess() bool { return kernelAtLeast(6, 10) }

// kernelAtLeast says whether the running kernel's release is major.minor
// or later (false if it cannot tell).
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func probeUprobeMulti() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		AttachType:   ebpf.AttachTraceUprobeMulti,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "Dual BSD/GPL",
	})
	if err != nil {
		return fmt.Errorf("load a uprobe.multi program: %w", err)
	}
	defer prog.Close()
	// Any ELF file will do; this one exists even if it was replaced on
	// disk since it started.
	exe, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return err
	}
	// Above PID_MAX_LIMIT (4M): no process has it.
	const noPid = 1 << 30
	l, err := exe.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{1}, PID: noPid})
	switch {
	case err == nil:
		l.Close()
		return errors.New("uprobe_multi link on a pid that does not exist was accepted")
	case errors.Is(err, os.ErrNotExist):
		return nil
	}
	return fmt.Errorf("uprobe_multi links: %w", err)
}

// MaxCodeDeallocFiles bounds the CPython files whose code-object
// deallocation a Tracer probes: each is a uprobe in every process that
// runs the file, traced or not.
const MaxCodeDeallocFiles = 32

// AttachCodeDealloc puts the code-object deallocation probe (bpf/python.h,
// py_codes) at offset off of the open CPython file f, once per file (the
// programs keep only registered Python processes): the probe goes on the
// very file f is, named through this process's descriptor, never on
// whatever a path names by then. off is where the file itself says code
// objects are deallocated (pyframes.Process.CodeDealloc), so one file has
// one offset; another is refused, as is a file past
// MaxCodeDeallocFiles. A process's interpreter may be registered with a
// code generation (SetPython, pyframes) only once this has succeeded for
// its file.
func (t *Tracer) AttachCodeDealloc(f *os.File, off uint64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino}
	t.pyMu.Lock()
	defer t.pyMu.Unlock()
	if at, ok := t.pyDealloc[key]; ok {
		if at != off {
			return fmt.Errorf("%s: code objects' deallocation probed at %#x already, not moved to %#x", f.Name(), at, off)
		}
		return nil
	}
	if len(t.pyDealloc) >= MaxCodeDeallocFiles {
		return fmt.Errorf("%s: the code objects' deallocation is probed in %d CPython files already, the most tttrace probes", f.Name(), MaxCodeDeallocFiles)
	}
	progs, err := t.programsFor([]ttmetal.Program{progPyCodeDealloc})
	if err != nil {
		return err
	}
	prog := progs[progPyCodeDealloc]
	if prog == nil {
		return fmt.Errorf("BPF object has no program %s: bpf/ and probes/ disagree, run make generate", progPyCodeDealloc)
	}
	// The kernel resolves the path when it attaches: /proc/self/fd/N is
	// the file held open, whatever its name names now.
	path := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	exe, err := link.OpenExecutable(path)
	if err != nil {
		return err
	}
	var l link.Link
	if t.multi {
		l, err = exe.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}})
	} else {
		l, err = exe.Uprobe("", prog, &link.UprobeOptions{Address: off})
	}
	if err != nil {
		return fmt.Errorf("attach to the code objects' deallocation in %s: %w", f.Name(), err)
	}
	t.links = append(t.links, l)
	if t.pyDealloc == nil {
		t.pyDealloc = map[fileKey]uint64{}
	}
	t.pyDealloc[key] = off
	return nil
}

// fileKey names a file by its identity.
type fileKey struct {
	dev, ino uint64
}

// Detach removes every uprobe; the ring buffer stays readable.
func (t *Tracer) Detach() error {
	if t == nil {
		return nil
	}
	err := closeLinks(t.links)
	t.links = nil
	return err
}

// TracesNone says whether no process can make a record any more: only
// the processes in traced_pids can (not under AllProcesses), and it is
// empty.
func (t *Tracer) TracesNone() bool {
	if t == nil || t.all {
		return false
	}
	return !t.pids.AnyTraced()
}

// DetachLater hands the uprobe_multi links to another process, which
// closes them (or exits): closing such a link waits for RCU grace periods
// (~25 ms for all of them together, more on a loaded machine), which this
// process then does not wait for, nor does whoever waits for it. start
// gets a duplicate of each link's descriptor and must return only once
// that process holds them, with release, which lets it go; the tracer
// drops all its own references (the links and the duplicates) and only
// then calls release: whichever reference goes last pays the grace
// periods, one link after the other, so the holder must not end before
// (a holder that ended at once cost 1.5-2 s in one run of five, 25 links
// closed here one by one). The other links are closed here (all of them
// when none is a uprobe_multi link, without calling start). The probes
// fire until that process is done: a caller hands them off only when no
// record can matter any more (the summary written). If start fails,
// nothing changed.
func (t *Tracer) DetachLater(start func(links []*os.File) (release func(), err error)) error {
	if t == nil || len(t.links) == 0 {
		return nil
	}
	var files []*os.File
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
		files = nil
	}
	defer closeFiles()
	for _, l := range t.links {
		fl, ok := l.(interface{ FD() int })
		if !ok {
			continue
		}
		if info, err := l.Info(); err != nil || info.Type != link.UprobeMultiType {
			continue
		}
		fd, err := unix.FcntlInt(uintptr(fl.FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("duplicate a link: %w", err)
		}
		files = append(files, os.NewFile(uintptr(fd), "bpf-link"))
	}
	if len(files) == 0 {
		return t.Detach() // classic uprobes (the fallback): closed here
	}
	release, err := start(files)
	if err != nil {
		return err
	}
	err = t.Detach()
	closeFiles()
	release()
	return err
}
