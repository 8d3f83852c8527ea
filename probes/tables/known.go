package tables

// The known-stack tables (bpf/stack.h, "known stacks"): stack_steps and
// stack_sites are arrays made BPF_F_MMAPABLE, which the tracer maps and
// writes itself. A key's slot is one of the ways of the set its hash names,
// the same hash as the programs' (stack_step_set, stack_site_set); a slot
// is written under a sequence count (odd while it is written), so a walk
// never takes a slot half written for a whole one. One writer: the tracer
// (Known.mu).

import (
	"fmt"
	"math/bits"
	"slices"
	"structs"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// KnownStackFrames is the most return addresses a known stack may have
// (STACK_KEY_FRAMES in bpf/wire.h).
const KnownStackFrames = 32

// StackStep is how a stack of a process goes from the frame at PC to its
// caller (struct stack_step_slot in bpf/stack.h, stacks.Step).
type StackStep struct {
	PC                 uint64
	First, End         bool
	CFAFromBP, BPSaved bool
	CFA, RA, BP        int32
}

// stepSlot is struct stack_step_slot (bpf/stack.h), a slot of stack_steps.
type stepSlot struct {
	_       structs.HostLayout
	Seq     uint32
	Tgid    uint32
	Pc      uint64
	Cfa     int32
	Ra      int32
	Bp      int32
	First   uint8
	CfaBp   uint8
	BpSaved uint8
	Pad     uint8
}

// siteSlot is struct stack_site_slot (bpf/stack.h), a slot of stack_sites.
type siteSlot struct {
	_     structs.HostLayout
	Seq   uint32
	Tgid  uint32
	N     uint32
	Pad   uint32
	Ip    uint64
	Token uint64
	Pcs   [KnownStackFrames]uint64
}

// Mirrors of bpf/stack.h's constants: the hash, the ways of a set and the
// outermost frame's return-address rule. The tables' sizes come from the
// maps themselves.
const (
	stackHashMul = 0x9e3779b97f4a7c15
	stackWays    = 2
	stackStepEnd = 0x7fffffff
)

func stackMix(h, v uint64) uint64 { return (h ^ v) * stackHashMul }

// stepSet is stack_step_set: the first slot of the set of (tgid, first,
// pc) in a table of 1<<tableBits slots.
func stepSet(tgid uint32, first bool, pc uint64, tableBits int) uint32 {
	f := uint64(0)
	if first {
		f = 1
	}
	h := stackMix(stackMix(stackHashMul, uint64(tgid)<<1|f), pc)
	return uint32(h>>(64-tableBits)) &^ (stackWays - 1)
}

// siteSet is stack_site_start, each return address of chain, then
// stack_site_set.
func siteSet(tgid uint32, ip uint64, chain []uint64, tableBits int) uint32 {
	h := stackMix(stackMix(stackHashMul, uint64(tgid)), ip)
	for _, pc := range chain {
		h = stackMix(h, pc)
	}
	return uint32(stackMix(h, uint64(len(chain)))>>(64-tableBits)) &^ (stackWays - 1)
}

// Known are the two tables, mapped on first use.
type Known struct {
	mu                 sync.Mutex
	stepMap, siteMap   *ebpf.Map
	stepMem, siteMem   []byte
	steps              []stepSlot
	sites              []siteSlot
	stepBits, siteBits int
	// victim picks the way a full set gives up, in turn; touched are the
	// slots the learn under way wrote, which it does not give up.
	victim  uint32
	touched []uint32
}

// mapTable maps an mmapable array of n slots of T (the map's value size
// must be T's).
func mapTable[T any](m *ebpf.Map) ([]byte, []T, int, error) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := int(m.MaxEntries())
	if m.ValueSize() != uint32(size) || n < stackWays || n&(n-1) != 0 {
		return nil, nil, 0, fmt.Errorf("known-stack table %s: %d slots of %d bytes, want a power of two of %d-byte slots: bpf/ and probes/ disagree, run make generate",
			m.String(), n, m.ValueSize(), size)
	}
	mem, err := unix.Mmap(m.FD(), 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("map the known-stack table: %w", err)
	}
	return mem, unsafe.Slice((*T)(unsafe.Pointer(&mem[0])), n), bits.TrailingZeros(uint(n)), nil
}

// NewKnown are the tables of the maps stack_steps and stack_sites,
// mapped at the first Learn.
func NewKnown(stepMap, siteMap *ebpf.Map) *Known {
	return &Known{stepMap: stepMap, siteMap: siteMap}
}

// open maps the tables if they are not yet.
func (k *Known) open() error {
	if k.steps != nil {
		return nil
	}
	var err error
	if k.stepMem, k.steps, k.stepBits, err = mapTable[stepSlot](k.stepMap); err != nil {
		return err
	}
	if k.siteMem, k.sites, k.siteBits, err = mapTable[siteSlot](k.siteMap); err != nil {
		k.closeLocked()
		return err
	}
	return nil
}

// pick is the slot of the set at first that a key goes to: the one
// holding it, an empty one, or the victim, which is not a slot the learn
// under way took (unless the set has no other: that stack stays unknown).
func pick[T any](k *Known, first uint32, holds, empty func(*T) bool, slots []T) (i uint32) {
	defer func() { k.touched = append(k.touched, i) }()
	for i := first; i < first+stackWays; i++ {
		if holds(&slots[i]) {
			return i
		}
	}
	for i := first; i < first+stackWays; i++ {
		if empty(&slots[i]) {
			return i
		}
	}
	k.victim++
	for w := range uint32(stackWays) {
		if i := first + (k.victim+w)%stackWays; !slices.Contains(k.touched, i) {
			return i
		}
	}
	return first + k.victim%stackWays
}

// writeStep writes v into slot s under its sequence count (v.Seq is
// ignored).
func writeStep(s *stepSlot, v stepSlot) {
	seq := atomic.AddUint32(&s.Seq, 1) // odd: being written
	s.Tgid, s.Pc, s.Cfa, s.Ra, s.Bp = v.Tgid, v.Pc, v.Cfa, v.Ra, v.Bp
	s.First, s.CfaBp, s.BpSaved = v.First, v.CfaBp, v.BpSaved
	atomic.StoreUint32(&s.Seq, seq+1)
}

// writeSite writes v into slot s under its sequence count (v.Seq is
// ignored).
func writeSite(s *siteSlot, v *siteSlot) {
	seq := atomic.AddUint32(&s.Seq, 1)
	s.Tgid, s.N, s.Ip, s.Token, s.Pcs = v.Tgid, v.N, v.Ip, v.Token, v.Pcs
	atomic.StoreUint32(&s.Seq, seq+1)
}

// Learn writes the steps and the chain of one stack of process pid (ip,
// the probe's pc, then every return address up to the outermost frame)
// with its token. A slot that already says the same is not written again.
func (k *Known) Learn(pid uint32, ip uint64, steps []StackStep, chain []uint64, token uint64) error {
	if len(chain) > KnownStackFrames || token == 0 || pid == 0 {
		return fmt.Errorf("stack of %d return addresses, token %d, pid %d: not one BPF can know", len(chain), token, pid)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.open(); err != nil {
		return err
	}
	k.touched = k.touched[:0]
	for _, s := range steps {
		v := stepSlot{Tgid: pid, Pc: s.PC}
		if s.First {
			v.First = 1
		}
		if s.End {
			v.Ra = stackStepEnd
		} else {
			v.Cfa, v.Ra, v.Bp = s.CFA, s.RA, s.BP
			if s.CFAFromBP {
				v.CfaBp = 1
			}
			if s.BPSaved {
				v.BpSaved = 1
			}
		}
		t := &k.steps[pick(k, stepSet(pid, s.First, s.PC, k.stepBits),
			func(t *stepSlot) bool { return t.Tgid == pid && t.Pc == v.Pc && t.First == v.First },
			func(t *stepSlot) bool { return t.Tgid == 0 }, k.steps)]
		if v.Seq = t.Seq; *t != v {
			writeStep(t, v)
		}
	}
	k.touched = k.touched[:0] // another table
	v := siteSlot{Tgid: pid, N: uint32(len(chain)), Ip: ip, Token: token}
	copy(v.Pcs[:], chain)
	t := &k.sites[pick(k, siteSet(pid, ip, chain, k.siteBits),
		func(t *siteSlot) bool { return t.Tgid == pid && t.Ip == ip && t.N == v.N && t.Pcs == v.Pcs },
		func(t *siteSlot) bool { return t.Tgid == 0 }, k.sites)]
	if v.Seq = t.Seq; *t != v {
		writeSite(t, &v)
	}
	return nil
}

// Forget empties the slots of process pid.
func (k *Known) Forget(pid uint32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.steps {
		if s := &k.steps[i]; s.Tgid == pid {
			writeStep(s, stepSlot{})
		}
	}
	for i := range k.sites {
		if s := &k.sites[i]; s.Tgid == pid {
			writeSite(s, &siteSlot{})
		}
	}
}

// Close unmaps the tables. Safe on nil and more than once.
func (k *Known) Close() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closeLocked()
}

func (k *Known) closeLocked() error {
	var err error
	for _, m := range []*[]byte{&k.stepMem, &k.siteMem} {
		if *m != nil {
			if e := unix.Munmap(*m); e != nil && err == nil {
				err = e
			}
			*m = nil
		}
	}
	k.steps, k.sites = nil, nil
	return err
}
