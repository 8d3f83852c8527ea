package probes

import (
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/tttrace/tttrace/internal/gcgoal"
	"github.com/tttrace/tttrace/ttmetal"
	"golang.org/x/sys/unix"
)

// DefaultRingSize is the ring buffer's default size: 64 MiB holds ~700k
// records, a burst of well over a second at the rates TT-Metal allocates,
// or ~2,000 allocations with their stacks (stacks may take half of it).
// The kernel allocates all of it when the map is made (locked kernel
// memory, not the tracer's RSS); the tracer maps a window of ~2 MiB of it
// (Ring).
const DefaultRingSize = 64 << 20

// ErrPermission is returned when the kernel refuses to load BPF programs.
var ErrPermission = errors.New("loading BPF programs needs root (or CAP_BPF and CAP_PERFMON)")

// Options configure the BPF side.
type Options struct {
	// RingSize in bytes: a power of two and a multiple of the page size.
	RingSize int
	// AllProcesses traces every process that runs the library instead of
	// only the PIDs added with AddPID.
	AllProcesses bool
	// FollowChildren adds the processes a traced process forks.
	FollowChildren bool
	// SingleUprobes attaches one classic uprobe per attach point even where
	// the kernel has uprobe_multi links: the fallback for kernels before
	// 6.6, forced (tests, comparisons).
	SingleUprobes bool
	// Stacks copies the user stack of every allocation into the ring after
	// its record (an EV_STACK record, docs/stacks.md).
	Stacks bool
	// KnownStacks walks each stack's copy for a stack made known with
	// LearnStack, and sends only its token when found (bpf/stack.h).
	KnownStacks bool
	// CheckKnownStacks sends the copy of a known stack with its token
	// (bpf/stack.h), so that user space can check the one against the
	// other.
	CheckKnownStacks bool
	// Preload, if set, names programs a plan known ahead will need
	// (AttachPlan): they are loaded with the process programs, one round
	// of loaders for both. It may wait for that plan. A program of it that
	// fails to load is left for AttachPlan to report.
	Preload func() []ttmetal.Program
}

// Tracer owns the loaded BPF objects, their links and the ring reader.
type Tracer struct {
	objs tttraceObjects // the maps and variables (programs: progs)
	spec *ebpf.CollectionSpec
	coll *ebpf.Collection     // the maps and variables not in objs
	maps map[string]*ebpf.Map // every map, by name
	// kernelTypes: the kernel's BTF, which every load relocates against
	// (nil: none found; each load then looks for itself).
	kernelTypes *btf.Spec
	// progMu guards progs, the programs loaded so far.
	progMu sync.Mutex
	progs  map[ttmetal.Program]*ebpf.Program
	links  []link.Link
	rd     *Ring
	// Sites lists the points attached, over all libraries.
	AttachPoints []ttmetal.AttachPoint
	// libs are the attached libraries, by index (the cookie's top bits).
	libs []attachedLib
	// multi: the uprobe programs are loaded as uprobe.multi and attached
	// with one uprobe_multi link per program and library; otherwise with
	// one classic uprobe link per attach point.
	multi bool
	// all: every process is traced (Options.AllProcesses).
	all bool
	// dlMu and dlSeen: the per-process loader drops as last read
	// (LoaderDrops).
	dlMu   sync.Mutex
	dlSeen map[uint32]uint64
	// known: the known-stack tables, mapped at the first LearnStack.
	known knownTables
	// pids: the programs' per-process flags (traced, Python), mapped.
	pids *pidTable
	// pyMu and pyDealloc: the CPython files whose code-object deallocation
	// is probed (AttachCodeDealloc).
	pyMu      sync.Mutex
	pyDealloc map[fileKey]uint64
}

type attachedLib struct {
	path string
	info os.FileInfo
}

// maxLibs is MAX_LIBS in bpf/tttrace.bpf.c.
const maxLibs = 256

// cookieAddrBits is how many low bits of a BPF cookie hold the attach
// point's address; the library index is above them.
const cookieAddrBits = 48

// Load verifies and loads the BPF programs, with the run's knobs (pid
// filter, following children, stacks, the ring's wakeup threshold) set as
// constants. Layouts are not constants: each library's goes to the lib_info
// map when AttachPlan attaches it, so one loaded program serves every
// library.
func Load(opts Options) (*Tracer, error) {
	if opts.RingSize == 0 {
		opts.RingSize = DefaultRingSize
	}
	if opts.RingSize < os.Getpagesize() || opts.RingSize&(opts.RingSize-1) != 0 {
		return nil, fmt.Errorf("ring size %d: must be a power of two of at least %d bytes", opts.RingSize, os.Getpagesize())
	}
	if os.Geteuid() != 0 {
		return nil, ErrPermission
	}
	defer gcgoal.Relax()()
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raise RLIMIT_MEMLOCK: %w", err)
	}
	// The kernel's BTF is parsed once, beside the object, and every load
	// relocates against the same copy of it: the types a relocation
	// needs are decoded once (task_struct and what it refers to: 15-30
	// ms), not once per loader. Without it (no kernel BTF) each load
	// finds out for itself.
	var kernelBTF sync.WaitGroup
	var kernelTypes *btf.Spec
	kernelBTF.Go(func() { kernelTypes, _ = btf.LoadKernelSpec() })
	spec, err := loadTttrace()
	kernelBTF.Wait()
	if err != nil {
		return nil, fmt.Errorf("read embedded BPF objects: %w", err)
	}
	filter, follow := uint8(1), uint8(0)
	if opts.AllProcesses {
		filter = 0
	}
	if opts.FollowChildren {
		follow = 1
	}
	stacks := uint8(0)
	if opts.Stacks {
		stacks = 1
	}
	consts := map[string]any{
		"filter_pids":        filter,
		"follow_children":    follow,
		"capture_stacks":     stacks,
		"known_stacks":       map[bool]uint8{false: 0, true: 1}[opts.KnownStacks],
		"check_known_stacks": map[bool]uint8{false: 0, true: 1}[opts.CheckKnownStacks],
		"wakeup_bytes":       uint64(opts.RingSize / 64),
	}
	for name, v := range consts {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("BPF object has no variable %q: bpf/ and probes/ disagree, run make generate", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	spec.Maps["events"].MaxEntries = uint32(opts.RingSize)
	// The programs are declared uprobe.multi; a kernel without the link
	// type gets them as classic uprobes (the attach type is fixed at load).
	multi := !opts.SingleUprobes && HaveUprobeMulti() == nil
	if !multi {
		for _, p := range spec.Programs {
			if p.AttachType == ebpf.AttachTraceUprobeMulti {
				p.AttachType = ebpf.AttachNone
			}
		}
	}

	if kernelAtLeast(6, 1) {
		for _, n := range growingMaps {
			if m := spec.Maps[n]; m != nil && m.Type == ebpf.Hash {
				m.Flags |= unix.BPF_F_NO_PREALLOC
			}
		}
	}

	// The maps and globals first, shared by every program; the programs
	// of libraries are loaded when a plan needs them (programsFor): the
	// verifier's time is most of a run's fixed cost, and a library gets
	// one plan (docs/bench.md, rows 6). So are the maps only some plans'
	// programs use (planMaps).
	t := &Tracer{multi: multi, all: opts.AllProcesses, spec: spec, kernelTypes: kernelTypes, progs: map[ttmetal.Program]*ebpf.Program{}}
	coll, err := createMaps(spec, func(n string) bool { return !slices.Contains(planMaps, n) })
	if err != nil {
		return nil, err
	}
	t.coll, t.maps = coll, maps.Clone(coll.Maps)
	if err := assignMaps(&t.objs.tttraceMaps, coll.Maps); err != nil {
		t.Close()
		return nil, err
	}
	t.known.stepMap, t.known.siteMap = t.objs.StackSteps, t.objs.StackSites
	if t.pids, err = mapPidTable(t.objs.TracedPids); err != nil {
		t.Close()
		return nil, err
	}
	if err := coll.Assign(&t.objs.tttraceVariables); err != nil {
		t.Close()
		return nil, fmt.Errorf("load BPF variables: %w", err)
	}
	own := []ttmetal.Program{progProcessFork, progProcessExit, progDlDebugState}
	names := own
	if opts.Preload != nil {
		names = append(slices.Clone(own), opts.Preload()...)
	}
	if _, err := t.programsFor(names); err != nil {
		// A preloaded program's failure is its plan's to report; the
		// tracer's own must load.
		if _, err := t.programsFor(own); err != nil {
			t.Close()
			return nil, err
		}
	}
	rd, err := NewRing(t.objs.Events.FD(), opts.RingSize)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.rd = rd
	if err := t.shareAwakeFlag(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// shareAwakeFlag maps the globals' .bss (mmapable since Linux 5.5, before
// BPF rings) and gives the ring reader its reader_awake flag: without it,
// the programs would wake the reader once and never again.
func (t *Tracer) shareAwakeFlag() error {
	bss, v := t.maps[".bss"], t.spec.Variables["reader_awake"]
	if bss == nil || v == nil {
		return fmt.Errorf("BPF object has no reader_awake in .bss: bpf/ and probes/ disagree, run make generate")
	}
	off := v.Offset()
	if off%4 != 0 || off+4 > uint64(bss.ValueSize()) {
		return fmt.Errorf("reader_awake at %d of a .bss of %d bytes", off, bss.ValueSize())
	}
	mem, err := unix.Mmap(bss.FD(), 0, int(bss.ValueSize()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the BPF globals (.bss): %w", err)
	}
	t.rd.setAwakeMem(mem, off)
	return nil
}

// The programs the tracer attaches itself (not through a plan).
const (
	progProcessFork  ttmetal.Program = "process_fork"
	progProcessExit  ttmetal.Program = "process_exit"
	progDlDebugState ttmetal.Program = "dl_debug_state"
	// progPyCodeDealloc: the deallocation of CPython code objects
	// (AttachCodeDealloc), loaded when first attached.
	progPyCodeDealloc ttmetal.Program = "py_code_dealloc"
)

// planMaps are the maps that only programs of some plans use and user
// space never reads or writes: each is made with the first program that
// needs it (programsFor), so a run that never loads such a program does
// not pay for it. lc_calls (the lifecycle plan's pending calls): a
// preallocated LRU map of 64k entries, ~13 ms of the kernel's time.
var planMaps = []string{"lc_calls"}

// growingMaps are the hash maps made without preallocated entries where
// the kernel allows that in tracing programs (Linux 6.1: BPF's memory
// allocator; before, such a map in a tracing program is refused or makes
// the kernel warn). A preallocated hash map of 16k entries takes the
// kernel ~10 ms to make. A map is here only if a failed insert cannot
// lose an event silently: py_procs is written by user space only, which
// sees the error; a dl_drops entry that cannot be made is counted in
// dl_dropped.
var growingMaps = []string{"py_procs", "dl_drops"}

// createMaps creates the maps of spec that want says to: the global
// variables' sections in one collection, the others at the same time (a
// preallocated hash map of 64k entries takes the kernel ~10 ms to make).
func createMaps(spec *ebpf.CollectionSpec, want func(name string) bool) (*ebpf.Collection, error) {
	vars := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	var names []string
	for n, m := range spec.Maps {
		switch {
		case strings.HasPrefix(n, "."):
			vars.Maps[n] = m
		case want(n):
			names = append(names, n)
		}
	}
	made, err := newMaps(spec, names)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(vars)
	if err != nil {
		for _, m := range made {
			m.Close()
		}
		return nil, loadError("create BPF maps", err)
	}
	maps.Copy(coll.Maps, made)
	return coll, nil
}

// newMaps creates the maps names of spec, at the same time.
func newMaps(spec *ebpf.CollectionSpec, names []string) (map[string]*ebpf.Map, error) {
	made := make([]*ebpf.Map, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { made[i], errs[i] = ebpf.NewMap(spec.Maps[n]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range made {
			m.Close()
		}
		return nil, loadError("create BPF maps", err)
	}
	out := make(map[string]*ebpf.Map, len(names))
	for i, n := range names {
		out[n] = made[i]
	}
	return out, nil
}

// assignMaps sets each field of dst (the generated struct of maps) to the
// map of its name in ms. A map of planMaps may be missing (made later);
// any other missing map means bpf/ and probes/ disagree.
func assignMaps(dst *tttraceMaps, ms map[string]*ebpf.Map) error {
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		m := ms[name]
		if m == nil && !slices.Contains(planMaps, name) {
			return fmt.Errorf("BPF object has no map %q: bpf/ and probes/ disagree, run make generate", name)
		}
		if m != nil {
			v.Field(i).Set(reflect.ValueOf(m))
		}
	}
	return nil
}

// mapsUsedBy are the names of the maps the programs names refer to.
func (t *Tracer) mapsUsedBy(names []ttmetal.Program) []string {
	var out []string
	for _, n := range names {
		for _, ins := range t.spec.Programs[string(n)].Instructions {
			if r := ins.Reference(); r != "" && t.spec.Maps[r] != nil && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// loadError names a refusal by the kernel as such.
func loadError(what string, err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w: %v", ErrPermission, err)
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("BPF verifier rejected the programs: %+v", ve)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// programsFor loads the programs names that are not loaded yet, at the
// same time (the verifier's work on each is independent), against the
// maps loaded by Load, and returns every program loaded so far. A program
// the object does not have is nil in the result.
func (t *Tracer) programsFor(names []ttmetal.Program) (map[ttmetal.Program]*ebpf.Program, error) {
	t.progMu.Lock()
	defer t.progMu.Unlock()
	defer gcgoal.Relax()()
	var todo []ttmetal.Program
	for _, n := range names {
		if t.progs[n] != nil || slices.Contains(todo, n) || t.spec.Programs[string(n)] == nil {
			continue
		}
		todo = append(todo, n)
	}
	// The plan maps these programs use that are not made yet, before
	// them: every loader below must get the same map.
	var missing []string
	for _, n := range t.mapsUsedBy(todo) {
		if t.maps[n] == nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		made, err := newMaps(t.spec, missing)
		if err != nil {
			return nil, err
		}
		maps.Copy(t.maps, made)
		if err := assignMaps(&t.objs.tttraceMaps, t.maps); err != nil {
			return nil, err
		}
	}
	// Only maps already made: a loader given a map spec without its map
	// would make its own.
	known := map[string]*ebpf.MapSpec{}
	for n := range t.maps {
		known[n] = t.spec.Maps[n]
	}
	// One loader per CPU, each with its share of the programs: a loader
	// indexes the kernel's BTF once for all of its programs (~20 ms), and
	// the verifier's work on different programs runs in parallel.
	groups := min(runtime.NumCPU(), len(todo))
	loaded := make([]*ebpf.Program, len(todo))
	errs := make([]error, groups)
	var wg sync.WaitGroup
	for g := range groups {
		wg.Go(func() {
			one := &ebpf.CollectionSpec{
				Maps:      known,
				Programs:  map[string]*ebpf.ProgramSpec{},
				Types:     t.spec.Types,
				ByteOrder: t.spec.ByteOrder,
			}
			for i := g; i < len(todo); i += groups {
				one.Programs[string(todo[i])] = t.spec.Programs[string(todo[i])]
			}
			c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{
				MapReplacements: t.maps,
				Programs:        ebpf.ProgramOptions{KernelTypes: t.kernelTypes},
			})
			if err != nil {
				errs[g] = loadError("load BPF programs", err)
				return
			}
			for i := g; i < len(todo); i += groups {
				loaded[i] = c.DetachProgram(string(todo[i]))
			}
			c.Close()
		})
	}
	wg.Wait()
	for i, n := range todo {
		if loaded[i] != nil {
			t.progs[n] = loaded[i]
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return maps.Clone(t.progs), nil
}

// loadAll loads every program of the object (tests).
func (t *Tracer) loadAll() (map[ttmetal.Program]*ebpf.Program, error) {
	var all []ttmetal.Program
	for n := range t.spec.Programs {
		all = append(all, ttmetal.Program(n))
	}
	return t.programsFor(all)
}

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
	var addr uint64
	err = lib.ScanSymbols([]string{"_dl_debug_state"}, func(s ttmetal.Symbol) {
		if s.Name == "_dl_debug_state" && s.Type == elf.STT_FUNC {
			addr = s.Value
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
	var l link.Link
	if t.multi {
		only := uint32(pid)
		if !multiPidFilterWholeProcess() {
			only = 0
		}
		l, err = exe.UprobeMulti(nil, t.progs[progDlDebugState], &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: only})
	} else {
		l, err = exe.Uprobe("", t.progs[progDlDebugState], &link.UprobeOptions{Address: off, PID: pid})
	}
	if err != nil {
		return fmt.Errorf("attach to %s _dl_debug_state: %w", ldso, err)
	}
	t.links = append(t.links, l)
	return nil
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

// AddPID starts tracing process pid (tgid).
func (t *Tracer) AddPID(pid uint32) error {
	return t.pids.set(pid, pidTraced)
}

// SetPython registers the CPython interpreter of process pid for Python
// stacks: value is its struct py_proc (pyframes.Process.ProcValue).
func (t *Tracer) SetPython(pid uint32, value []byte) error {
	if err := t.objs.PyProcs.Update(pid, value, ebpf.UpdateAny); err != nil {
		return err
	}
	return t.pids.set(pid, pidPython)
}

// KnownStackFrames is the most return addresses a known stack may have
// (STACK_KEY_FRAMES in bpf/wire.h).
const KnownStackFrames = len(tttraceStackSiteSlot{}.Pcs)

// StackStep is how a stack of a process goes from the frame at PC to its
// caller (struct stack_step_slot in bpf/stack.h, stacks.Step).
type StackStep struct {
	PC                 uint64
	First, End         bool
	CFAFromBP, BPSaved bool
	CFA, RA, BP        int32
}

// LearnStack makes a stack of process pid known to the BPF side: the steps
// of its frames, and its chain (ip, the probe's pc, then every return
// address up to the outermost frame) with token. A later capture whose
// walk finds the same chain sends only the token (STACK_KNOWN). The
// chain must be fixed by its pcs (stacks.UnwindSteps). A stack learnt
// again costs only the comparison of its slots (known.go): call it again
// when a stack made known comes copied (another stack took one of its
// slots).
func (t *Tracer) LearnStack(pid uint32, ip uint64, steps []StackStep, chain []uint64, token uint64) error {
	return t.known.learn(pid, ip, steps, chain, token)
}

// ForgetStacks clears what LearnStack told of process pid: it ended, or
// its mappings changed (a pc may name other code now).
func (t *Tracer) ForgetStacks(pid uint32) {
	t.known.forget(pid)
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

// ClearPython forgets the interpreter of process pid (it ended).
func (t *Tracer) ClearPython(pid uint32) {
	t.pids.clear(pid, pidPython)
	_ = t.objs.PyProcs.Delete(pid)
}

// RemovePID stops tracing process pid.
func (t *Tracer) RemovePID(pid uint32) error {
	t.pids.clear(pid, pidTraced)
	return nil
}

// Traced reports whether pid is in the BPF pid filter. The exit hook
// clears a process when its last thread exits, so false for a pid that
// was added means the process has ended.
func (t *Tracer) Traced(pid uint32) bool {
	return t.pids.has(pid, pidTraced)
}

// Reader is the ring buffer's reader. Only one goroutine may read.
func (t *Tracer) Reader() *Ring { return t.rd }

// Losses are the records the ring buffer could not take, summed over the
// CPUs.
type Losses struct {
	// Events: the ledger's records (struct event calls and process
	// records, and the allocator's alloc_request and alloc_capacity
	// records); the sum of their kinds in ByKind.
	Events uint64
	// ByKind: records not delivered, by kind (events.Kind): the kinds
	// summed in Events, and the records that describe an alloc (stack,
	// Python stack, code object).
	ByKind [64]uint64
}

// Losses sums the loss counters of every CPU.
func (t *Tracer) Losses() (Losses, error) {
	var per []tttraceLostCounter
	var l Losses
	if err := t.objs.Lost.Lookup(uint32(0), &per); err != nil {
		return l, fmt.Errorf("read lost counters: %w", err)
	}
	for _, c := range per {
		l.Events += c.Total
		for k, n := range c.Kinds {
			l.ByKind[k] += n
		}
	}
	return l, nil
}

// LostTotal sums the failed reservations of the ledger's records (Events)
// of every CPU.
func (t *Tracer) LostTotal() (uint64, error) {
	l, err := t.Losses()
	return l.Events, err
}

// LoaderDrops reads how many _dl_debug_state calls were over their
// process's budget (bpf/tttrace.bpf.c, dl_allow) in all, and the
// per-process counts made since the last call. BPF's per-process counts
// only grow: the ones last read are kept here, and an entry is deleted
// only once its process has ended (no thread left to count in it), so no
// drop is lost to a delete racing with an increment. A drop made after the
// total was read may already be in byPid; one whose process had no room in
// the map is only in total.
func (t *Tracer) LoaderDrops() (total uint64, byPid map[uint32]uint64, err error) {
	t.dlMu.Lock()
	defer t.dlMu.Unlock()
	if err := t.objs.DlDropped.Get(&total); err != nil {
		return 0, nil, fmt.Errorf("read dl_dropped: %w", err)
	}
	if t.dlSeen == nil {
		t.dlSeen = map[uint32]uint64{}
	}
	var (
		pid  uint32
		n    uint64
		seen = map[uint32]uint64{}
	)
	byPid = map[uint32]uint64{}
	it := t.objs.DlDrops.Iterate()
	for it.Next(&pid, &n) {
		seen[pid] = n
	}
	if err := it.Err(); err != nil {
		return total, byPid, fmt.Errorf("read dl_drops: %w", err)
	}
	for pid, n := range seen {
		ended := processEnded(pid)
		if ended {
			// The last count, taken with the delete: nothing adds to it
			// any more.
			if err := t.objs.DlDrops.LookupAndDelete(&pid, &n); err != nil {
				n = seen[pid]
			}
		}
		if last := t.dlSeen[pid]; n > last {
			byPid[pid] = n - last
		}
		if ended {
			delete(t.dlSeen, pid)
		} else {
			t.dlSeen[pid] = n
		}
	}
	return total, byPid, nil
}

// processEnded: no process pid is left (kill(pid, 0) finds none). pid is
// the kernel's process id as BPF sees it (tttrace runs in the initial pid
// namespace).
func processEnded(pid uint32) bool {
	return pid != 0 && unix.Kill(int(pid), 0) == unix.ESRCH
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
	return !t.pids.anyTraced()
}

// DetachLater hands the uprobe_multi links to another process, which
// closes them (or exits): closing such a link waits for RCU grace periods
// (~25 ms for all of them together, more on a loaded machine), which this
// process then does not wait for, nor does whoever waits for it. start
// gets a duplicate of each link's descriptor and must return only once
// that process holds them; the tracer then drops its own references,
// which releases nothing while the other process holds them. The other
// links are closed here (all of them when none is a uprobe_multi link,
// without calling start). The probes fire until that process is done: a
// caller hands them off only when no record can matter any more (the
// summary written). If start fails, nothing changed.
func (t *Tracer) DetachLater(start func(links []*os.File) error) error {
	if t == nil || len(t.links) == 0 {
		return nil
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
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
	if err := start(files); err != nil {
		return err
	}
	return t.Detach()
}

// Close detaches and releases everything. Safe on nil and more than once.
func (t *Tracer) Close() error {
	if t == nil {
		return nil
	}
	errs := []error{t.Detach()}
	// t.rd stays: goroutines that outlive the session may still Flush
	// it (the session's Wake); a closed Ring refuses that with
	// os.ErrClosed, and closing it again does nothing.
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
	}
	for n, p := range t.progs {
		errs = append(errs, p.Close())
		delete(t.progs, n)
	}
	errs = append(errs, t.known.close(), t.pids.close(), t.objs.Close())
	if t.coll != nil {
		t.coll.Close() // the maps not in objs (.rodata, .bss)
		t.coll, t.maps = nil, nil
	}
	return errors.Join(errs...)
}
