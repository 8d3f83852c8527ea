package probes

// The tables the programs read per process, written by the tracer: the
// pid filter and its flags, the CPython registrations, the known stacks
// (the mapped ones held by probes/tables); and the counters the programs
// keep for it (losses, loader drops).

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/ring"
)

// AddPID starts tracing process pid (tgid).
func (t *Tracer) AddPID(pid uint32) error {
	return t.pids.Set(pid, tables.PidTraced)
}

// SetPython registers the CPython interpreter of process pid for Python
// stacks: value is its struct py_proc (pyframes.Process.ProcValue).
func (t *Tracer) SetPython(pid uint32, value []byte) error {
	if err := t.objs.PyProcs.Update(pid, value, ebpf.UpdateAny); err != nil {
		return err
	}
	return t.pids.Set(pid, tables.PidPython)
}

// LearnStack makes a stack of process pid known to the BPF side: the steps
// of its frames, and its chain (ip, the probe's pc, then every return
// address up to the outermost frame, at most tables.KnownStackFrames)
// with token. A later capture whose walk finds the same chain sends only
// the token (STACK_KNOWN). The chain must be fixed by its pcs
// (stacks.UnwindSteps). A stack learnt again costs only the comparison of
// its slots (tables.Known): call it again when a stack made known comes
// copied (another stack took one of its slots).
func (t *Tracer) LearnStack(pid uint32, ip uint64, steps []tables.StackStep, chain []uint64, token uint64) error {
	return t.known.Learn(pid, ip, steps, chain, token)
}

// ForgetStacks clears what LearnStack told of process pid: it ended, or
// its mappings changed (a pc may name other code now).
func (t *Tracer) ForgetStacks(pid uint32) {
	t.known.Forget(pid)
}

// LearnPyStack makes a Python stack of process pid known to the BPF side
// (bpf/pyknown.h): its frames, innermost first, as captured under code
// generation gen (py_stack.code_gen, nonzero) after frees code objects of
// the process had begun their deallocation (py_stack.code_frees). A later
// walk that finds the same frames while no code object was freed since
// sends only token. The caller must hold the description of every code
// object of the stack under the identities that capture gave them.
func (t *Tracer) LearnPyStack(pid, gen uint32, frees uint64, frames []tables.PyKeyFrame, token uint64) error {
	return t.pyKnown.Learn(pid, gen, frees, frames, token)
}

// ForgetPyStacks clears what LearnPyStack told of process pid (it ended).
func (t *Tracer) ForgetPyStacks(pid uint32) {
	t.pyKnown.Forget(pid)
}

// ClearPython forgets the interpreter of process pid (it ended).
func (t *Tracer) ClearPython(pid uint32) {
	t.pids.Clear(pid, tables.PidPython)
	_ = t.objs.PyProcs.Delete(pid)
}

// RemovePID stops tracing process pid.
func (t *Tracer) RemovePID(pid uint32) error {
	t.pids.Clear(pid, tables.PidTraced)
	return nil
}

// Traced reports whether pid is in the BPF pid filter. The exit hook
// clears a process when its last thread exits, so false for a pid that
// was added means the process has ended.
func (t *Tracer) Traced(pid uint32) bool {
	return t.pids.Has(pid, tables.PidTraced)
}

// Reader is the ring buffer's reader. Only one goroutine may read.
func (t *Tracer) Reader() *ring.Ring { return t.rd }

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
