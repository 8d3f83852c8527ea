package session

import (
	"errors"
	"fmt"
	"os"

	allocmodel "github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/ttmetal"
)

// MemReader is a Backend that can read a TT-Metal bank manager from a
// traced process's memory (a chip whose allocator was made before tttrace
// attached; devices/allocmem.go).
type MemReader interface {
	ReadBankManager(pid uint32, ptr uint64) (*ttmetal.MemBankManager, error)
}

// readAllocators reads the bank managers the ledger asks for, at once:
// the process goes on changing them (the ledger folds in the records
// around the read by their times).
func (s *session) readAllocators() {
	for _, w := range s.ledger.TakeMemWants() {
		r, ok := s.be.(MemReader)
		if !ok {
			s.ledger.InstallMem(w, nil, errors.New("this backend reads no process memory"))
			continue
		}
		from := monotonicNow()
		m, err := r.ReadBankManager(w.Pid, w.Manager)
		to := monotonicNow()
		if err != nil {
			fmt.Fprintf(s.log, "tttrace: pid %d chip %d %s: allocator not read from memory: %v\n", w.Pid, w.Chip, w.Type, err)
			s.ledger.InstallMem(w, nil, err)
			continue
		}
		mm := &devices.MemManager{BufferType: m.BufferType, Banks: m.Banks, Alignment: m.Alignment, AddressLimit: m.AddressLimit,
			BankSize: m.BankSize, Offset: m.Offset, BlockAlign: m.BlockAlign, FromNs: from, ToNs: to}
		mm.Blocks = make([]allocmodel.Block, len(m.Blocks))
		for i, b := range m.Blocks {
			mm.Blocks[i] = allocmodel.Block{Addr: b.Addr, Size: b.Size, Allocated: b.Allocated}
		}
		s.ledger.InstallMem(w, mm, nil)
	}
}

// bmLayout is a library's bank manager layout, or why there is none.
type bmLayout struct {
	l   *ttmetal.BankManagerLayout
	err error
}

// ReadBankManager reads the bank manager at ptr in process pid, with the
// layout of the TT-Metal library pid maps (from its DWARF, read once).
func (b *bpfBackend) ReadBankManager(pid uint32, ptr uint64) (*ttmetal.MemBankManager, error) {
	path, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	bl, ok := b.bmLayouts[path]
	if !ok {
		bl = &bmLayout{}
		lib, err := ttmetal.OpenLibrary(path)
		if err != nil {
			bl.err = err
		} else {
			bl.l, bl.err = ttmetal.BankManagerLayoutFromDWARF(lib, b.cfg.Analysis.Debug)
			lib.Close()
		}
		if b.bmLayouts == nil {
			b.bmLayouts = map[string]*bmLayout{}
		}
		b.bmLayouts[path] = bl
	}
	if bl.err != nil {
		return nil, fmt.Errorf("no layout of BankManager: %w", bl.err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	return ttmetal.ReadBankManager(mem, ptr, bl.l)
}

// libraryOf is the path of a probed library that pid maps.
func (b *bpfBackend) libraryOf(pid int) (string, error) {
	objs, _, err := probes.MappedObjects(pid)
	if err != nil {
		return "", err
	}
	for _, o := range objs {
		k, err := probes.KeyOf(o)
		if err != nil {
			continue
		}
		if p, ok := b.attached[k]; ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d maps none of the %d probed libraries", pid, len(b.attached))
}
