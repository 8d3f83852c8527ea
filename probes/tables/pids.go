package tables

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

// PidFlag is a flag of enum pid_flag (bpf/tttrace.h), as the byte of a
// process holds it.
type PidFlag uint8

// The flags the tracer sets, and PidHeir, which only the programs set.
const (
	// PidTraced: the process is traced (AddPID, or a followed fork).
	PidTraced PidFlag = 1
	// PidPython: it runs a registered CPython (py_procs).
	PidPython PidFlag = 2
	// PidHeir: forked by a traced process not registered then, it may
	// take its parent's registration later (bpf/pyheir.h).
	PidHeir PidFlag = 8
)

// pidBytes is the size of struct pid_table: a byte for every pid up to
// the kernel's limit (PID_MAX_LIMIT).
const pidBytes = 1 << 22

// Pids is the mapped array.
type Pids struct {
	mem   []byte
	words []uint32
}

// MapPids maps traced_pids, the array of one struct pid_table.
func MapPids(m *ebpf.Map) (*Pids, error) {
	size := pidBytes
	if m.MaxEntries() != 1 || int(m.ValueSize()) != size {
		return nil, fmt.Errorf("traced_pids: %d entries of %d bytes, want one of %d: bpf/ and probes/ disagree, run make generate", m.MaxEntries(), m.ValueSize(), size)
	}
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the BPF pid table: %w", err)
	}
	return &Pids{mem: mem, words: unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), size/4)}, nil
}

// word is the word holding pid's byte, and the byte's shift in it; nil
// for a pid past the table (none: the table covers the kernel's limit).
func (p *Pids) word(pid uint32) (*uint32, uint) {
	if int(pid/4) >= len(p.words) {
		return nil, 0
	}
	return &p.words[pid/4], uint(pid%4) * 8
}

// Set sets flag f of pid; a pid past the table is an error.
func (p *Pids) Set(pid uint32, f PidFlag) error {
	w, sh := p.word(pid)
	if w == nil {
		return fmt.Errorf("pid %d past the BPF pid table (%d pids)", pid, len(p.words)*4)
	}
	atomic.OrUint32(w, uint32(f)<<sh)
	return nil
}

// Clear clears flag f of pid.
func (p *Pids) Clear(pid uint32, f PidFlag) {
	if w, sh := p.word(pid); w != nil {
		atomic.AndUint32(w, ^(uint32(f) << sh))
	}
}

// Has says whether pid has flag f.
func (p *Pids) Has(pid uint32, f PidFlag) bool {
	w, sh := p.word(pid)
	return w != nil && PidFlag(atomic.LoadUint32(w)>>sh)&f != 0
}

// AnyTraced says whether some process is traced.
func (p *Pids) AnyTraced() bool {
	const traced = uint32(PidTraced) * 0x01010101
	for i := range p.words {
		if atomic.LoadUint32(&p.words[i])&traced != 0 {
			return true
		}
	}
	return false
}

// Close unmaps the array. Safe on nil and more than once.
func (p *Pids) Close() error {
	if p == nil || p.mem == nil {
		return nil
	}
	err := unix.Munmap(p.mem)
	p.mem, p.words = nil, nil
	return err
}
