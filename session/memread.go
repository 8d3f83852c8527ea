package session

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// memReader is the MemReader of real tracing: it reads a traced process's
// allocators from its memory (/proc/PID/mem through procfs.Mem, every
// read charged to the process's budget) with the layouts of the TT-Metal
// library the process maps, read from the library's DWARF once. None of
// it is BPF: bpfBackend only hands it each library it probes (track).
type memReader struct {
	debug elfx.Debug // where the libraries' separate debug files are looked for
	// attached: the probed libraries by file, for ReadBankManager and
	// ReadDevices; parse: a turn at reading one's DWARF.
	attached map[procfs.FileKey]*probedLib
	parse    chan struct{}
}

// probedLib is a probed library, for reading its processes' allocators:
// g_instances' link-time address and slots (or why none), from the symbols
// read at attach, and both allocator layouts, read from its DWARF once per
// library on a goroutine started at attach (track): a library's
// DWARF takes long to read, and the records' loop waits for it only when
// a process's allocators are first read, if it is not read by then.
type probedLib struct {
	path        string
	addr, slots uint64
	symErr      error
	ready       chan struct{} // closed once layouts is set
	layouts     ttmetal.AllocatorLayouts
}

// allocatorLayouts reads a library's allocator layouts (a variable for
// the tests, which count the reads).
var allocatorLayouts = ttmetal.AllocatorLayoutsFromDWARF

// track records lib, just probed at path, and starts reading its
// allocator layouts in the background; the goroutine owns lib and closes
// it. It reports false, and leaves lib to the caller, for a file tracked
// already. The reads take turns (r.parse): one library's DWARF in memory
// at a time.
func (r *memReader) track(k procfs.FileKey, path string, lib *ttmetal.Library) bool {
	if _, ok := r.attached[k]; ok {
		return false
	}
	p := &probedLib{path: path, ready: make(chan struct{})}
	p.addr, p.slots, p.symErr = ttmetal.RootSymbol(lib)
	if r.attached == nil {
		r.attached = map[procfs.FileKey]*probedLib{}
		r.parse = make(chan struct{}, 1)
	}
	r.attached[k] = p
	dbg, parse := r.debug, r.parse
	go func() {
		defer lib.Close()
		parse <- struct{}{}
		p.layouts = allocatorLayouts(lib, dbg)
		<-parse
		close(p.ready)
	}()
	return true
}

// allocLayouts are p's allocator layouts, waiting for their read if it
// is still going on.
func (p *probedLib) allocLayouts() *ttmetal.AllocatorLayouts {
	<-p.ready
	return &p.layouts
}

// AllocMem opens pid's memory to read its allocators with the layouts of
// the TT-Metal library pid maps (from its DWARF, read once), within budget.
func (r *memReader) AllocMem(pid uint32, budget *ttmetal.AllocBudget) (AllocMem, error) {
	p, err := r.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	mem, err := procfs.OpenMem(int(pid), &budget.Mem)
	if err != nil {
		return nil, err
	}
	return &procAllocMem{mem: mem, walk: ttmetal.NewMemWalk(mem, &budget.Blocks), lib: p,
		bias: func() (uint64, error) { return loadBias(int(pid), p.path) }}, nil
}

// procAllocMem is a process's memory opened to read its allocators with
// its library's layouts.
type procAllocMem struct {
	mem  *procfs.Mem
	walk *ttmetal.MemWalk
	lib  *probedLib
	// bias is what the process added to the library's link-time addresses.
	bias func() (uint64, error)
}

// ReadBankManager reads the bank manager at ptr, with the layout of the
// library's DWARF.
func (a *procAllocMem) ReadBankManager(ptr uint64) (*ttmetal.MemBankManager, error) {
	ls := a.lib.allocLayouts()
	if ls.BankManagerErr != nil {
		return nil, fmt.Errorf("no layout of BankManager: %w", ls.BankManagerErr)
	}
	return a.walk.ReadBankManager(ptr, ls.BankManager)
}

// ReadDevices walks the process's root of its open chips, with the layout
// of the library (from its symbols and DWARF, read once) and its load bias
// in the process. A process with no MetalContext yet has no open chip: no
// DWARF is needed to say so, and none is waited for.
func (a *procAllocMem) ReadDevices() ([]ttmetal.MemDevice, error) {
	p := a.lib
	if p.symErr != nil {
		return nil, p.symErr
	}
	bias, err := a.bias()
	if err != nil {
		return nil, err
	}
	if found, err := ttmetal.AnyContext(a.mem, p.addr+bias, p.slots); err != nil || !found {
		return nil, err
	}
	ls := p.allocLayouts()
	if ls.RootErr != nil {
		return nil, ls.RootErr
	}
	return ttmetal.ReadDevices(a.mem, ls.Root.Contexts+bias, ls.Root)
}

func (a *procAllocMem) Close() error { return a.mem.Close() }

// ChipUIDs reads pid's open Devices with their unique ids (the layouts of
// its library, never waited for), the chip counters files it maps and its
// cluster descriptors (chipuid.go), every read of its memory charged to b.
func (r *memReader) ChipUIDs(pid uint32, b *procfs.MemBudget) (ChipRead, error) {
	p, err := r.libraryOf(int(pid))
	if err != nil {
		return ChipRead{}, err
	}
	if p.symErr != nil {
		return ChipRead{}, p.symErr
	}
	select {
	case <-p.ready:
	default:
		return ChipRead{}, ErrLayoutsPending
	}
	ls := &p.layouts
	if ls.RootErr != nil {
		return ChipRead{}, ls.RootErr
	}
	if ls.Root.UID == nil {
		return ChipRead{}, ls.Root.UIDErr
	}
	bias, err := loadBias(int(pid), p.path)
	if err != nil {
		return ChipRead{}, err
	}
	mem, err := procfs.OpenMem(int(pid), b)
	if err != nil {
		return ChipRead{}, err
	}
	defer mem.Close()
	var cr ChipRead
	cr.Devices, err = ttmetal.ReadDevices(mem, ls.Root.Contexts+bias, ls.Root)
	if err != nil {
		return ChipRead{}, err
	}
	cr.SHM, err = procfs.SHMChips(int(pid))
	if err != nil {
		return ChipRead{}, err
	}
	// The descriptors' failure costs the chips their places, not their
	// unique ids; over the budget, the whole read is refused.
	cr.Descs, cr.DescErr = ttmetal.ReadClusterDescriptors(mem, ls.Root.Contexts+bias, ls.Root)
	if errors.Is(cr.DescErr, procfs.ErrMemBudget) {
		return ChipRead{}, cr.DescErr
	}
	return cr, nil
}

// loadBias is what pid added to the link-time addresses of the library at
// path: the start of its mapping of the file's first loadable segment,
// less that segment's page-aligned address.
func loadBias(pid int, path string) (uint64, error) {
	want, err := procfs.KeyOf(path)
	if err != nil {
		return 0, err
	}
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		return 0, err
	}
	defer lib.Close()
	var first *elf.Prog
	for _, p := range lib.ELF().Progs {
		if p.Type == elf.PT_LOAD {
			first = p
			break
		}
	}
	if first == nil {
		return 0, fmt.Errorf("%s has no loadable segment", path)
	}
	const page = 4096
	maps, err := procfs.Maps(pid)
	if err != nil {
		return 0, err
	}
	keys := map[string]procfs.FileKey{}
	for _, m := range maps {
		if !m.File() || m.Deleted() || m.Offset != first.Off&^(page-1) {
			continue
		}
		k, ok := keys[m.Path]
		if !ok {
			k, _ = procfs.KeyOf(procfs.Path(pid, m.Path))
			keys[m.Path] = k
		}
		if k == want && m.Start >= first.Vaddr&^(page-1) {
			return m.Start - first.Vaddr&^(page-1), nil
		}
	}
	return 0, fmt.Errorf("pid %d maps no loadable segment of %s", pid, path)
}

// libraryOf is a probed library that pid maps.
func (r *memReader) libraryOf(pid int) (*probedLib, error) {
	objs, _, err := procfs.MappedObjects(pid)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		k, err := procfs.KeyOf(o)
		if err != nil {
			continue
		}
		if p, ok := r.attached[k]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pid %d maps none of the %d probed libraries", pid, len(r.attached))
}
