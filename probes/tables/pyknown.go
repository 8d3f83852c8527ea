package tables

// The known Python stacks' table (bpf/pyknown.h): py_sites is an array made
// BPF_F_MMAPABLE, which the tracer maps and writes itself, as the native
// known-stack tables (known.go): a chain's slot is one of the ways of the
// set py_site_set names, written under a sequence count.

import (
	"fmt"
	"structs"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// KnownPyStackFrames is the most frames a known Python stack may have
// (PY_KEY_FRAMES, bpf/python.h).
const KnownPyStackFrames = 64

// PyKeyFrame is a frame of a known Python stack: its code object and
// instruction field, as struct py_frame has them.
type PyKeyFrame struct {
	_           structs.HostLayout
	Code, Instr uint64
}

// pySiteSlot is struct py_site_slot (bpf/pyknown.h), a slot of py_sites.
type pySiteSlot struct {
	_         structs.HostLayout
	Seq       uint32
	Tgid      uint32
	N         uint32
	CodeGen   uint32
	CodeFrees uint64
	Token     uint64
	Frames    [KnownPyStackFrames]PyKeyFrame
}

// pySiteSet is py_site_start, py_site_frame of each frame, then
// py_site_set (bpf/stack_hash.h).
func pySiteSet(tgid, gen uint32, frames []PyKeyFrame, tableBits int) uint32 {
	h := stackMix(stackMix(stackHashMul, uint64(gen)<<32|uint64(tgid)), 1)
	for _, f := range frames {
		h = stackMix(stackMix(h, f.Code), f.Instr)
	}
	return uint32(stackMix(h, uint64(len(frames)))>>(64-tableBits)) &^ (stackWays - 1)
}

// PyKnown is the py_sites table, mapped on first use.
type PyKnown struct {
	mu    sync.Mutex
	m     *ebpf.Map
	mem   []byte
	slots []pySiteSlot
	bits  int
	// ways: the victim and touched slots of pick (only those fields of a
	// Known are used).
	ways Known
}

// NewPyKnown is the table of the map py_sites, mapped at the first Learn.
func NewPyKnown(m *ebpf.Map) *PyKnown { return &PyKnown{m: m} }

func writePySite(s *pySiteSlot, v *pySiteSlot) {
	seq := atomic.AddUint32(&s.Seq, 1) // odd: being written
	s.Tgid, s.N, s.CodeGen, s.CodeFrees, s.Token, s.Frames = v.Tgid, v.N, v.CodeGen, v.CodeFrees, v.Token, v.Frames
	atomic.StoreUint32(&s.Seq, seq+1)
}

// Learn writes the chain of one Python stack of process pid, innermost
// frame first, captured under code generation gen after frees code objects
// of the process had begun their deallocation, with its token. The slot of
// the same chain learnt under another count is taken over.
func (k *PyKnown) Learn(pid, gen uint32, frees uint64, frames []PyKeyFrame, token uint64) error {
	if len(frames) == 0 || len(frames) > KnownPyStackFrames || token == 0 || pid == 0 || gen == 0 {
		return fmt.Errorf("Python stack of %d frames, token %d, pid %d, code generation %d: not one BPF can know",
			len(frames), token, pid, gen)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.slots == nil {
		var err error
		if k.mem, k.slots, k.bits, err = mapTable[pySiteSlot](k.m); err != nil {
			return err
		}
	}
	k.ways.touched = k.ways.touched[:0]
	v := pySiteSlot{Tgid: pid, N: uint32(len(frames)), CodeGen: gen, CodeFrees: frees, Token: token}
	copy(v.Frames[:], frames)
	t := &k.slots[pick(&k.ways, pySiteSet(pid, gen, frames, k.bits),
		func(t *pySiteSlot) bool {
			return t.Tgid == pid && t.CodeGen == gen && t.N == v.N && t.Frames == v.Frames
		},
		func(t *pySiteSlot) bool { return t.Tgid == 0 }, k.slots)]
	if v.Seq = t.Seq; *t != v {
		writePySite(t, &v)
	}
	return nil
}

// Forget empties the slots of process pid.
func (k *PyKnown) Forget(pid uint32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.slots {
		if s := &k.slots[i]; s.Tgid == pid {
			writePySite(s, &pySiteSlot{})
		}
	}
}

// Close unmaps the table. Safe on nil and more than once.
func (k *PyKnown) Close() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var err error
	if k.mem != nil {
		err = unix.Munmap(k.mem)
		k.mem = nil
	}
	k.slots = nil
	return err
}
