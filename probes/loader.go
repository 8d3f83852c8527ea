package probes

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// DefaultRingSize is the ring buffer's default size: 64 MiB holds ~700k
// records, a burst of well over a second at the rates TT-Metal allocates.
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
}

// Tracer owns the loaded BPF objects, their links and the ring reader.
type Tracer struct {
	objs  tttraceObjects
	links []link.Link
	rd    *ringbuf.Reader
	// Sites lists the sites attached, over all libraries.
	Sites []Site
	// libs are the attached libraries, by index (the cookie's top bits).
	libs []attachedLib
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

// Load verifies and loads the BPF programs with the layout injected as
// constants.
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
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raise RLIMIT_MEMLOCK: %w", err)
	}
	spec, err := loadTttrace()
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
	consts := map[string]any{
		"filter_pids":     filter,
		"follow_children": follow,
		"wakeup_bytes":    uint64(opts.RingSize / 64),
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

	t := &Tracer{}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %v", ErrPermission, err)
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("BPF verifier rejected the programs: %+v", ve)
		}
		return nil, fmt.Errorf("load BPF objects: %w", err)
	}
	rd, err := ringbuf.NewReader(t.objs.Events)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.rd = rd
	return t, nil
}

// programs maps attach-table program names to the loaded programs.
func (t *Tracer) programs() map[string]*ebpf.Program {
	o := &t.objs.tttracePrograms
	return map[string]*ebpf.Program{
		"track_allocate":              o.TrackAllocate,
		"track_deallocate":            o.TrackDeallocate,
		"track_allocate_cb":           o.TrackAllocateCb,
		"track_deallocate_cb":         o.TrackDeallocateCb,
		"buffer_create_view":          o.BufferCreateView,
		"mark_as_deallocated":         o.MarkAsDeallocated,
		"allocate_circular_buffers":   o.AllocateCircularBuffers,
		"deallocate_circular_buffers": o.DeallocateCircularBuffers,
		"program_destroy":             o.ProgramDestroy,
		"device_close":                o.DeviceClose,
		"mesh_device_close":           o.MeshDeviceClose,
		progAllocEnter:                o.LcAllocEnter,
		progAllocExit:                 o.LcAllocExit,
		progCreateEnter:               o.LcCreateEnter,
		progCreateExit:                o.LcCreateExit,
		progFree:                      o.LcFree,
		progFreeOwned:                 o.LcFreeOwned,
		progDestroyTeardown:           o.ProgramDestroyTeardown,
		progFreeDispose:               o.LcFreeDispose,
	}
}

// Attached reports whether the file at path is already probed.
func (t *Tracer) Attached(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	for _, l := range t.libs {
		if os.SameFile(l.info, st) {
			return true
		}
	}
	return false
}

// AttachPlan installs a uprobe on every site of plan in lib, reading
// objects with layout. The probes are attached to the file's inode, so they
// fire in every process that maps it, including ones that map it later. On
// failure nothing stays attached. Attaching a file already attached does
// nothing.
func (t *Tracer) AttachPlan(lib *Library, syms *Symbols, plan *Plan, layout Layout) error {
	sites, disposeOffset := plan.Sites, plan.DisposeOffset
	st, err := os.Stat(lib.Path)
	if err != nil {
		return err
	}
	if t.Attached(lib.Path) {
		return nil
	}
	if len(t.libs) >= maxLibs {
		return fmt.Errorf("%s: already probing %d libraries, the most tttrace can", lib.Path, maxLibs)
	}
	idx := uint32(len(t.libs))
	info := tttraceLibInfo{
		VtableDevice: syms.VtableDevice,
		VtableMesh:   syms.VtableMesh,
		BufImplPtr:   layout.BufferImplPtr,
		BufDevice:    layout.Device,
		BufSize:      layout.Size,
		BufType:      layout.Type,
		BufOwnsData:  layout.OwnsData,
		BufStatus:    layout.Status,
		BufHooked:    layout.Hooked,
		BufAddress:   layout.Address,
		BufPageSize:  layout.PageSize,
		DevId:        layout.DeviceID,
	}
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
	exe, err := link.OpenExecutable(lib.Path)
	if err != nil {
		return fmt.Errorf("open %s: %w", lib.Path, err)
	}
	progs := t.programs()
	var links []link.Link
	var attached []Site
	for _, s := range sites {
		if err := CheckProbeable(lib, s.Addr); err != nil {
			closeLinks(links)
			return fmt.Errorf("%s (%s): %w", s.Function, s.Symbol, err)
		}
		prog := progs[s.Program]
		if prog == nil {
			closeLinks(links)
			return fmt.Errorf("no BPF program %q", s.Program)
		}
		if s.Addr>>cookieAddrBits != 0 {
			closeLinks(links)
			return fmt.Errorf("%s at %#x: address does not fit a cookie", s.Symbol, s.Addr)
		}
		// ip - (low bits of the cookie) is the library's load bias in
		// whichever process hits the probe; the top bits say which library.
		cookie := uint64(idx)<<cookieAddrBits | s.Addr
		l, err := exe.Uprobe("", prog, &link.UprobeOptions{Address: s.Offset, Cookie: cookie})
		if err != nil {
			closeLinks(links)
			return fmt.Errorf("attach uprobe to %s (%s at %#x): %w", s.Function, s.Symbol, s.Addr, err)
		}
		links = append(links, l)
		attached = append(attached, s)
	}
	t.links = append(t.links, links...)
	t.Sites = append(t.Sites, attached...)
	t.libs = append(t.libs, attachedLib{path: lib.Path, info: st})
	return nil
}

// AttachLoader probes the dynamic loader's _dl_debug_state, which ld.so
// calls after every change of a process's link map: the tracer hears of each
// dlopen and can attach to a TT-Metal library the moment it is mapped.
func (t *Tracer) AttachLoader(ldso string) error {
	lib, err := OpenLibrary(ldso)
	if err != nil {
		return err
	}
	defer lib.Close()
	var addr uint64
	err = lib.ScanSymbols([]string{"_dl_debug_state"}, func(s Symbol) {
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
	l, err := exe.Uprobe("", t.objs.DlDebugState, &link.UprobeOptions{Address: off})
	if err != nil {
		return fmt.Errorf("attach to %s _dl_debug_state: %w", ldso, err)
	}
	t.links = append(t.links, l)
	return nil
}

// AttachProcessEvents follows forks (when FollowChildren) and reports how
// traced processes end.
func (t *Tracer) AttachProcessEvents() error {
	for _, p := range []*ebpf.Program{t.objs.ProcessFork, t.objs.ProcessExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		t.links = append(t.links, l)
	}
	return nil
}

func closeLinks(links []link.Link) error {
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// AddPID starts tracing process pid (tgid).
func (t *Tracer) AddPID(pid uint32) error {
	return t.objs.TracedPids.Update(pid, uint8(1), ebpf.UpdateAny)
}

// RemovePID stops tracing process pid.
func (t *Tracer) RemovePID(pid uint32) error {
	err := t.objs.TracedPids.Delete(pid)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Traced reports whether pid is in the BPF pid filter. The exit hook
// deletes a process when its last thread exits, so false for a pid that was
// added means the process has ended.
func (t *Tracer) Traced(pid uint32) bool {
	var v uint8
	return t.objs.TracedPids.Lookup(pid, &v) == nil
}

// Reader is the ring buffer's reader. Only one goroutine may read.
func (t *Tracer) Reader() *ringbuf.Reader { return t.rd }

// LostTotal sums the failed reservations of every CPU.
func (t *Tracer) LostTotal() (uint64, error) {
	var per []tttraceLostCounter
	if err := t.objs.Lost.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read lost counters: %w", err)
	}
	var n uint64
	for _, c := range per {
		n += c.Total
	}
	return n, nil
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

// Close detaches and releases everything. Safe on nil and more than once.
func (t *Tracer) Close() error {
	if t == nil {
		return nil
	}
	errs := []error{t.Detach()}
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
		t.rd = nil
	}
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
