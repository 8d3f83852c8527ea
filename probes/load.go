package probes

// Loading: the BPF object's maps at once, each program when a plan first
// needs it (or ahead, Options.Preload), all against one copy of the
// kernel's BTF; the ring's reader; closing it all.

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/internal/gcgoal"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/ring"
	"github.com/tttrace/tttrace/ttmetal"
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
	// Ops keeps the TT-NN op frames of each thread (bpf/ops.h) and says
	// in each record that carries an op how many are live; AttachOps puts
	// the op probes on a TT-NN library.
	Ops bool
	// Preload, if set, names programs a plan known ahead will need
	// (AttachPlan): they are loaded with the process programs, one round
	// of loaders for both. It may wait for that plan. A program of it that
	// fails to load is left for AttachPlan to report.
	Preload func() []ttmetal.Program
	// Timing, if set, hears when each step of Load ends (the kernel's
	// BTF, the object, the maps, each loader's programs, the ring), from
	// the goroutine that did it: --timing's timeline (docs/bench.md,
	// rows 6).
	Timing func(step string)
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
	timing func(step string) // Options.Timing, never nil
	links  []link.Link
	rd     *ring.Ring
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
	known *tables.Known
	// pyKnown: the known Python stacks' table, mapped at the first
	// LearnPyStack.
	pyKnown *tables.PyKnown
	// pids: the programs' per-process flags (traced, Python), mapped.
	pids *tables.Pids
	// pyMu and pyDealloc: the CPython files whose code-object deallocation
	// is probed (AttachCodeDealloc).
	pyMu      sync.Mutex
	pyDealloc map[fileKey]uint64
	// opsMu and opsFiles: the TT-NN libraries whose ops are probed
	// (AttachOps).
	opsMu    sync.Mutex
	opsFiles []os.FileInfo
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
	mark := opts.Timing
	if mark == nil {
		mark = func(string) {}
	}
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
	kernelBTF.Go(func() {
		kernelTypes, _ = btf.LoadKernelSpec()
		mark("BPF: kernel BTF parsed")
	})
	spec, err := loadTttrace()
	mark("BPF: object parsed")
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
		"ops_on":             map[bool]uint8{false: 0, true: 1}[opts.Ops],
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
	t := &Tracer{multi: multi, all: opts.AllProcesses, spec: spec, kernelTypes: kernelTypes, progs: map[ttmetal.Program]*ebpf.Program{}, timing: mark}
	coll, err := createMaps(spec, func(n string) bool { return !slices.Contains(planMaps, n) })
	if err != nil {
		return nil, err
	}
	mark("BPF: maps created")
	t.coll, t.maps = coll, maps.Clone(coll.Maps)
	if err := assignMaps(&t.objs.tttraceMaps, coll.Maps); err != nil {
		t.Close()
		return nil, err
	}
	t.known = tables.NewKnown(t.objs.StackSteps, t.objs.StackSites)
	t.pyKnown = tables.NewPyKnown(t.objs.PySites)
	if t.pids, err = tables.MapPids(t.objs.TracedPids); err != nil {
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
	rd, err := ring.New(t.objs.Events.FD(), opts.RingSize)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.rd = rd
	if err := t.shareAwakeFlag(); err != nil {
		t.Close()
		return nil, err
	}
	mark("BPF: ring mapped")
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
	t.rd.SetAwakeMem(mem, off)
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
			var names []string
			for i := g; i < len(todo); i += groups {
				loaded[i] = c.DetachProgram(string(todo[i]))
				names = append(names, string(todo[i]))
			}
			c.Close()
			t.timing(fmt.Sprintf("BPF: loader %d of %d: %s verified and loaded", g+1, groups, strings.Join(names, ", ")))
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
	errs = append(errs, t.known.Close(), t.pyKnown.Close(), t.pids.Close(), t.objs.Close())
	if t.coll != nil {
		t.coll.Close() // the maps not in objs (.rodata, .bss)
		t.coll, t.maps = nil, nil
	}
	return errors.Join(errs...)
}
