package session

import (
	"errors"
	"fmt"
	"io"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// The ledger's allocators read from a traced process's memory (a chip
// whose allocator was made before tttrace attached; devices/allocstate.go,
// docs/ttmetal.md §9): the open chips' bank managers at attach (readRoot)
// and each manager the ledger asks for (readAllocators), on the records'
// goroutine, every process within one budget for its life (memBudget).
// How a process's memory is read is its MemReader's (memread.go).

// memReads reads the ledger's allocators from traced processes' memory:
// the session's ledger, log, backend and processes, which it reads and
// the ledger it fills.
type memReads struct {
	ledger *devices.Ledger
	log    io.Writer
	be     Backend
	procs  map[uint32]*procState // the session's (never replaced)
	// sys: the host's /sys ("" for /sys); board: its motherboard's name
	// (chipuid.go).
	sys   string
	board hostBoard
}

// MemReader is a Backend that can read a traced process's allocators from
// its memory.
type MemReader interface {
	// AllocMem opens pid's memory to read its allocators, every read
	// charged to b (ttmetal.AllocBudget).
	AllocMem(pid uint32, b *ttmetal.AllocBudget) (AllocMem, error)
}

// AllocMem is one process's memory opened to read its allocators.
type AllocMem interface {
	// ReadDevices finds the process's open chips and their bank managers
	// from its own root of its devices (ttmetal.ReadDevices).
	ReadDevices() ([]ttmetal.MemDevice, error)
	// ReadBankManager reads the bank manager at ptr; a free list several
	// managers share is read from the process once (ttmetal.MemWalk).
	ReadBankManager(ptr uint64) (*ttmetal.MemBankManager, error)
	Close() error
}

// memBudget is what reading one process's allocators may still take
// (ttmetal.AllocBudget: the bytes and reads of its memory, the blocks of
// the lists the ledger holds), over all its chips and its whole life in
// tttrace. Once a read goes over it, over says why, and nothing more is
// read from that process: its allocators read from memory are refused
// with that one reason.
type memBudget struct {
	b    ttmetal.AllocBudget
	set  bool
	over string
}

// budget is the process's budget, full at its first use.
func (m *memBudget) budget() *ttmetal.AllocBudget {
	if !m.set {
		m.b, m.set = ttmetal.DefaultAllocBudget(), true
	}
	return &m.b
}

// overBudget says why reading pid's allocators went over its budget (err
// wraps procfs.ErrMemBudget), in words for people, and marks it so.
func (mr *memReads) overBudget(pid uint32, st *procState, err error) string {
	if st.mem.over == "" {
		st.mem.over = fmt.Sprintf("reading the process's allocators from its memory would take more than tttrace allows one process "+
			"(%d MiB in %d reads of its memory, %d blocks of free lists, across its chips): not read (%v)",
			ttmetal.AllocBudgetBytes>>20, ttmetal.AllocBudgetReads, ttmetal.AllocBudgetBlocks, err)
		fmt.Fprintf(mr.log, "tttrace: pid %d: %s\n", pid, st.mem.over)
	}
	return st.mem.over
}

// openAllocMem opens pid's memory to read its allocators within its
// budget, or says why not.
func (mr *memReads) openAllocMem(pid uint32) (AllocMem, *procState, error) {
	r, ok := mr.be.(MemReader)
	if !ok {
		return nil, nil, errors.New("this backend reads no process memory")
	}
	st := mr.procs[pid]
	if st == nil {
		return nil, nil, fmt.Errorf("pid %d is not traced", pid)
	}
	if st.mem.over != "" {
		return nil, st, errors.New(st.mem.over)
	}
	am, err := r.AllocMem(pid, st.mem.budget())
	return am, st, err
}

// readAllocators reads the bank managers the ledger asks for, at once:
// the process goes on changing them (the ledger folds in the records
// around the read by their times).
func (mr *memReads) readAllocators() {
	for _, w := range mr.ledger.TakeMemWants() {
		am, st, err := mr.openAllocMem(w.Pid)
		if err != nil {
			mr.ledger.InstallMem(w, nil, err)
			continue
		}
		from := monotonicNow()
		m, err := am.ReadBankManager(w.Manager)
		to := monotonicNow()
		am.Close()
		if errors.Is(err, procfs.ErrMemBudget) {
			err = errors.New(mr.overBudget(w.Pid, st, err))
		}
		mr.installMem(w, m, err, from, to)
	}
}

// installMem hands the ledger bank manager m read between from and to (or
// why it could not be read).
func (mr *memReads) installMem(w devices.MemWant, m *ttmetal.MemBankManager, err error, from, to uint64) {
	if err != nil {
		fmt.Fprintf(mr.log, "tttrace: pid %d chip %d %s: allocator not read from memory: %v\n", w.Pid, w.Chip, w.Type, err)
		mr.ledger.InstallMem(w, nil, err)
		return
	}
	mr.ledger.InstallMem(w, &devices.MemManager{BufferType: m.BufferType, Banks: m.Banks, Alignment: m.Alignment, AddressLimit: m.AddressLimit,
		BankSize: m.BankSize, Offset: m.Offset, BlockAlign: m.BlockAlign, Blocks: m.Blocks, FromNs: from, ToNs: to}, nil)
}

// readRoot finds, at attach, the chips pid opened before tttrace attached
// and reads their bank managers, so a chip that allocates nothing after
// the attach has its allocator's state too (docs/ttmetal.md §9, "Finding
// the allocators at attach"). Its probes are attached already: every later
// change has a record, folded in by time around each read. Where the root
// cannot be walked, every chip without a view says why.
//
// What a process can make this cost is bounded: the chips past
// --max-chips are not read at all, everything read is charged to the
// process's budget (memBudget), and a free list several chips share is
// read once. Nothing is installed until every manager is read: a process
// over its budget has no allocator read from memory, and one reason.
func (mr *memReads) readRoot(pid uint32) {
	if _, ok := mr.be.(MemReader); !ok {
		return
	}
	am, st, err := mr.openAllocMem(pid)
	if err != nil {
		if st != nil && st.mem.over != "" {
			mr.ledger.SetRootWhy(pid, st.mem.over)
			return
		}
		fmt.Fprintf(mr.log, "tttrace: pid %d: its open chips' allocators not read at attach: %v\n", pid, err)
		mr.ledger.SetRootWhy(pid, err.Error())
		return
	}
	defer am.Close()
	devs, err := am.ReadDevices()
	if err != nil {
		if errors.Is(err, procfs.ErrMemBudget) {
			mr.ledger.SetRootWhy(pid, mr.overBudget(pid, st, err))
			return
		}
		fmt.Fprintf(mr.log, "tttrace: pid %d: its open chips' allocators not read at attach: %v\n", pid, err)
		mr.ledger.SetRootWhy(pid, err.Error())
		return
	}
	chips := make([]int32, len(devs))
	for i, d := range devs {
		chips[i] = d.Chip
	}
	admit := mr.ledger.MemChips(pid, chips)
	type found struct {
		chip     int32
		ptr      uint64
		m        *ttmetal.MemBankManager
		from, to uint64
	}
	var got []found
	failed, firstErr, past := 0, "", 0
	for i, d := range devs {
		if !admit[i] {
			past++
			continue
		}
		for _, ptr := range d.Managers {
			from := monotonicNow()
			m, err := am.ReadBankManager(ptr)
			to := monotonicNow()
			if errors.Is(err, procfs.ErrMemBudget) {
				mr.ledger.SetRootWhy(pid, mr.overBudget(pid, st, err))
				return
			}
			if err != nil {
				// One line for the first (a missing layout fails them all alike).
				if failed++; failed == 1 {
					firstErr = fmt.Sprintf("bank manager %#x: %v", ptr, err)
					fmt.Fprintf(mr.log, "tttrace: pid %d chip %d: bank manager %#x not read from memory: %v\n", pid, d.Chip, ptr, err)
				}
				continue
			}
			if m.BufferType < 0 || m.BufferType >= int32(events.NumBufferTypes) {
				fmt.Fprintf(mr.log, "tttrace: pid %d chip %d: bank manager %#x holds buffer type %d\n", pid, d.Chip, ptr, m.BufferType)
				continue
			}
			got = append(got, found{chip: d.Chip, ptr: ptr, m: m, from: from, to: to})
		}
	}
	for _, f := range got {
		if w, ok := mr.ledger.FoundMem(pid, f.chip, events.BufferType(f.m.BufferType), f.ptr); ok {
			mr.installMem(w, f.m, nil, f.from, f.to)
		}
	}
	if past > 0 {
		fmt.Fprintf(mr.log, "tttrace: pid %d: %d open chip(s) past --max-chips: their allocators not read\n", pid, past)
	}
	if failed > 1 {
		fmt.Fprintf(mr.log, "tttrace: pid %d: %d more bank managers not read from memory\n", pid, failed-1)
	}
	if failed > 0 {
		mr.ledger.SetRootWhy(pid, firstErr)
	}
}
