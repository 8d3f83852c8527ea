package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// A process's memory (/proc/PID/mem) is the most hostile thing tttrace
// reads: its data structures are the process's to craft (a free list of a
// million slots, a root of 4096 devices, every chip pointing at one list).
// Mem is the one bounded reader of it: every read is charged to a budget
// before anything is read or allocated, and a read that does not fit is
// refused with ErrMemBudget. A reader that builds something from what it
// read (ttmetal's free lists) bounds that on top.

// MemBudget is what may still be read through the Mems charging it: Bytes
// in all, in at most Reads reads (each a system call: a crafted structure
// of small pieces costs time, not bytes). The zero budget reads nothing.
type MemBudget struct {
	Bytes, Reads int64
}

// ErrMemBudget is returned for a read past its budget.
var ErrMemBudget = errors.New("over the budget for reading a process's memory")

// take charges one read of n bytes.
func (b *MemBudget) take(n int64) error {
	if n < 0 || n > b.Bytes || b.Reads <= 0 {
		return fmt.Errorf("%w: %d more bytes in one read, with %d bytes and %d reads left", ErrMemBudget, n, b.Bytes, b.Reads)
	}
	b.Bytes -= n
	b.Reads--
	return nil
}

// Mem reads a process's memory at virtual addresses, each read charged to
// its budget. It is an io.ReaderAt.
type Mem struct {
	r      io.ReaderAt
	f      *os.File // nil for NewMem
	budget *MemBudget
}

// OpenMem opens pid's memory for reading within b.
func OpenMem(pid int, b *MemBudget) (*Mem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	return &Mem{r: f, f: f, budget: b}, nil
}

// NewMem reads r (a process's memory, or a fake of it) within b.
func NewMem(r io.ReaderAt, b *MemBudget) *Mem { return &Mem{r: r, budget: b} }

// ReadAt reads len(p) bytes at address off once the budget allows it.
func (m *Mem) ReadAt(p []byte, off int64) (int, error) {
	if err := m.budget.take(int64(len(p))); err != nil {
		return 0, err
	}
	return m.r.ReadAt(p, off)
}

// Budget is what m may still read.
func (m *Mem) Budget() MemBudget { return *m.budget }

// Close closes the process's memory (nothing for NewMem).
func (m *Mem) Close() error {
	if m.f == nil {
		return nil
	}
	return m.f.Close()
}
