package probes

// The programs' per-process flags (traced_pids in bpf/tttrace.bpf.c): one
// byte per possible tgid in an mmapable array, which the tracer maps and
// changes with atomic operations on the byte's 32-bit word (the programs
// store whole bytes: the fork hook a followed child's, the exit hook an
// ended process's; the close probes OR PID_DEV_CLOSED into the word, as
// the tracer does, when a process's device closes: bpf/devcache.h).

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

const (
	pidTraced = uint8(tttracePidFlagPID_TRACED)
	pidPython = uint8(tttracePidFlagPID_PYTHON)
)

// pidTable is the mapped array.
type pidTable struct {
	mem   []byte
	words []uint32
}

func mapPidTable(m *ebpf.Map) (*pidTable, error) {
	size := int(unsafe.Sizeof(tttracePidTable{}))
	if m.MaxEntries() != 1 || int(m.ValueSize()) != size {
		return nil, fmt.Errorf("traced_pids: %d entries of %d bytes, want one of %d: bpf/ and probes/ disagree, run make generate", m.MaxEntries(), m.ValueSize(), size)
	}
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the BPF pid table: %w", err)
	}
	return &pidTable{mem: mem, words: unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), size/4)}, nil
}

// word is the word holding pid's byte, and the byte's shift in it; nil
// for a pid past the table (none: the table covers the kernel's limit).
func (p *pidTable) word(pid uint32) (*uint32, uint) {
	if int(pid/4) >= len(p.words) {
		return nil, 0
	}
	return &p.words[pid/4], uint(pid%4) * 8
}

func (p *pidTable) set(pid uint32, f uint8) error {
	w, sh := p.word(pid)
	if w == nil {
		return fmt.Errorf("pid %d past the BPF pid table (%d pids)", pid, len(p.words)*4)
	}
	atomic.OrUint32(w, uint32(f)<<sh)
	return nil
}

func (p *pidTable) clear(pid uint32, f uint8) {
	if w, sh := p.word(pid); w != nil {
		atomic.AndUint32(w, ^(uint32(f) << sh))
	}
}

func (p *pidTable) has(pid uint32, f uint8) bool {
	w, sh := p.word(pid)
	return w != nil && uint8(atomic.LoadUint32(w)>>sh)&f != 0
}

// anyTraced says whether some process is traced.
func (p *pidTable) anyTraced() bool {
	const traced = uint32(pidTraced) * 0x01010101
	for i := range p.words {
		if atomic.LoadUint32(&p.words[i])&traced != 0 {
			return true
		}
	}
	return false
}

func (p *pidTable) close() error {
	if p == nil || p.mem == nil {
		return nil
	}
	err := unix.Munmap(p.mem)
	p.mem, p.words = nil, nil
	return err
}
