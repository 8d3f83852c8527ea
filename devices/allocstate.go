package devices

import (
	"fmt"
	"math/bits"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// The allocator's view, its state: per chip (or mesh) and buffer type a
// model of TT-Metal's bank manager, the requests waiting for their
// allocs, and the shapes the view is reported in. The rules that keep it
// are allocator.go's.

// allocTypes are the buffer types with a bank manager, in report order.
var allocTypes = [...]events.BufferType{events.DRAM, events.L1, events.L1Small, events.Trace}

// allocKeys are their keys in the summary's "allocator" object.
var allocKeys = [events.NumBufferTypes]string{events.DRAM: "dram", events.L1: "l1", events.L1Small: "l1_small", events.Trace: "trace"}

// maxFailures caps the alloc_failed records kept per process (all are
// counted and sent to the notify function).
const maxFailures = 100

// maxGroups bounds the allocators made outside a chip's (a MeshDevice's,
// a sub-device's) a process holds at once: each is a few KB of models,
// and a hostile process can make them without end (issue #32). A mesh's
// goes when it closes; past the bound the oldest not tied to a live mesh
// goes, or, when every one is, the new one is refused (both counted, and
// too_many_allocators anomalies).
const maxGroups = 256

// maxHolders caps the buffers and sites an alloc_failed names.
const (
	maxHolders     = 10
	maxHolderSites = 5
)

// typeAlloc is one bank manager of one chip.
type typeAlloc struct {
	ptr uint64       // BankManager*
	cfg alloc.Config // BlockAlign 0 until the chip's DRAM manager gives it
	m   *alloc.Manager
	// why is set when the state is no longer exact: the numbers are then
	// not reported.
	why string
	// Per-core (HYBRID) allocations, not accounted per bank.
	perCore, perCoreBytes uint64
	failures              uint64
	dirty                 bool // in proc.adirty
	// mem: read from the process's memory (MemManager), nil: from probes.
	mem *memState
	// pc: its per-core (HYBRID) lists, once one was asked (percore.go).
	pc *perCoreLists
}

// exact reports whether the model holds the allocator's state.
func (ta *typeAlloc) exact() bool { return ta != nil && ta.m != nil && ta.why == "" }

// lose marks the state inexact, keeping the first reason.
func (ta *typeAlloc) lose(why string) {
	if ta.why == "" {
		ta.why = why
	}
}

// chipAlloc is one chip's allocator, or a mesh's: its bank managers by
// buffer type.
type chipAlloc struct {
	types [events.NumBufferTypes]*typeAlloc
	// A mesh's allocator: mesh is set once a mesh buffer was allocated
	// through it (its MeshDevice*, and its index in proc.meshes).
	mesh    bool
	meshPtr uint64
	meshIdx uint32
	// dropped: an allocator made outside a chip's that the process no
	// longer holds (dropGroup): its managers are forgotten.
	dropped bool
	// blockAlign: the free lists' alignment, the DRAM manager's alignment
	// (upstream gives every free list the HAL's DRAM alignment).
	blockAlign uint64
}

// mgrRef is what a BankManager* stands for.
type mgrRef struct {
	chip int32 // -1: not tied to a chip
	typ  events.BufferType
	grp  *chipAlloc   // a manager made outside a chip's allocator (a mesh's)
	cfg  alloc.Config // BlockAlign unset
}

// allocReq is a thread's allocate_buffer call waiting for its alloc. It
// lives in its thread (thread.reqBuf), made again by each request: a
// request that succeeds, the common case, costs no allocation, and the
// explanation of one whose numbers are unknown is written only when it
// fails (explain).
type allocReq struct {
	e    events.Event // the request
	need alloc.Need
	// The state at the request, for the failure: valid when exact. The
	// cause is read from it when the failure is reported.
	exact bool
	st    alloc.Statistics
	bank  uint64
	chip  int32
	typ   events.BufferType
	grp   *chipAlloc // the mesh allocator whose manager got the request
	// Why the state is unknown: why, or the explanation named by whyOf,
	// written by explain.
	why   string
	whyOf reqWhy
	// thrown: its out-of-memory path was seen (alloc_oom); site: the
	// stack of that moment, else the request's own (none is taken today).
	thrown bool
	site   uint32
	// unknownMgr: the bank manager was not seen made.
	unknownMgr bool
	// A per-core request (percore.go): its core; pc, the earlier cores of
	// its buffer (their requests, on this thread right before it);
	// pcRoom, its core's numbers at the request, valid with pcExact.
	core    pcCore
	pc      []pcCore
	pcRoom  alloc.Statistics
	pcExact bool
}

// AllocObserver is told of every change of a chip's allocator state for a
// type: after each applied event, once per chip and type it changed. st is
// nil when the state is not exact. Valid only during the call.
type AllocObserver func(pid uint32, chip int32, tsNs uint64, typ events.BufferType, banks uint32, st *alloc.Statistics)

// firstPtr is the first of g's bank managers (its DRAM one, as made).
func (g *chipAlloc) firstPtr() uint64 {
	for _, t := range allocTypes {
		if ta := g.types[t]; ta != nil {
			return ta.ptr
		}
	}
	return 0
}

func allocatable(t events.BufferType) bool {
	return t.Valid() && t != events.SystemMemory
}

// buildAllocs makes the models of allocator ca's managers once the free
// lists' alignment is known.
func buildAllocs(ca *chipAlloc) {
	if ca.blockAlign == 0 {
		return
	}
	for _, t := range allocTypes {
		ta := ca.types[t]
		if ta == nil || ta.m != nil || ta.why != "" {
			continue
		}
		ta.cfg.BlockAlign = ca.blockAlign
		m, err := alloc.New(ta.cfg)
		if err != nil {
			ta.lose(fmt.Sprintf("bank manager %#x: %v", ta.ptr, err))
			continue
		}
		ta.m = m
	}
}

// exactFrom sets r's numbers from ta, the model of its bank manager (of
// the chip r.chip, or of the mesh allocator r.grp), or why they are
// unknown.
func (r *allocReq) exactFrom(ta *typeAlloc) {
	e := &r.e
	switch {
	case ta == nil || ta.ptr != e.Object:
		r.whyOf = whyNotOwners
	case !ta.exact():
		r.why = ta.why
		if ta.m == nil && ta.why == "" {
			r.why = "the allocator's DRAM bank manager was not seen made (no free-list alignment)"
		}
	default:
		r.need = ta.m.Need(alloc.Request{Size: e.Size, PageSize: e.PageSize, Shards: e.Shards, BottomUp: e.BottomUp})
		// The statistics now: other threads may change the list before
		// this request is known to have failed.
		r.exact, r.st, r.bank = true, ta.m.Stats(), ta.cfg.BankSize
	}
}

// reqWhy names the explanation of a request's unknown numbers that
// explain writes from the request alone.
type reqWhy uint8

const (
	whyNone reqWhy = iota
	whyUnknownManager
	whyNoChip
	whyNotOwners // the manager is no longer its chip's (or mesh's)
)

// explain is why r's numbers are unknown.
func (r *allocReq) explain() string {
	switch r.whyOf {
	case whyUnknownManager:
		return fmt.Sprintf("tttrace did not see bank manager %#x made", r.e.Object)
	case whyNoChip:
		return fmt.Sprintf("bank manager %#x belongs to no known chip", r.e.Object)
	case whyNotOwners:
		owner := "the mesh's"
		if r.grp == nil {
			owner = fmt.Sprintf("chip %d's", r.chip)
		}
		return fmt.Sprintf("bank manager %#x is no longer %s", r.e.Object, owner)
	}
	return r.why
}

// perCoreNext reports whether request e is the next core's call of the
// per-core allocation prev belongs to: both per-core (a non-zero allocator
// id) on the same bank manager, prev not seen throwing.
func perCoreNext(prev *allocReq, e *events.Event) bool {
	return !prev.thrown && prev.e.AllocatorID != 0 && e.AllocatorID != 0 && prev.e.Object == e.Object
}

// typeOf is c's manager of type t, or nil.
func (ca *chipAlloc) typeOf(t events.BufferType) *typeAlloc {
	if ca == nil || !allocatable(t) {
		return nil
	}
	return ca.types[t]
}

// AllocatorType is one bank manager in the summary: the "allocator"
// object's entries.
type AllocatorType struct {
	Banks            uint32  `json:"banks"`
	BankSize         uint64  `json:"bank_size"`
	Alignment        uint64  `json:"alignment"`
	Base             uint64  `json:"base"`
	TotalAllocatable uint64  `json:"total_allocatable_size_bytes"`
	TotalAllocated   *uint64 `json:"total_allocated_bytes"`
	TotalFree        *uint64 `json:"total_free_bytes"`
	LargestFree      *uint64 `json:"largest_free_block_bytes"`
	Source           string  `json:"source"` // "probe" or "memory"
	// Why the three numbers above are null.
	Why string `json:"why,omitempty"`
	// Per-core (HYBRID) L1 buffers live, not accounted per bank.
	PerCoreBuffers uint64 `json:"per_core_buffers"`
	PerCoreBytes   uint64 `json:"per_core_bytes"`
	Failures       uint64 `json:"alloc_failures"`
}

// Stats returns the statistics when they are known.
func (a *AllocatorType) Stats() (alloc.Statistics, bool) {
	if a == nil || a.TotalAllocated == nil {
		return alloc.Statistics{}, false
	}
	return alloc.Statistics{TotalAllocatable: a.TotalAllocatable, TotalAllocated: *a.TotalAllocated,
		TotalFree: *a.TotalFree, LargestFreeBlock: *a.LargestFree}, true
}

// Allocator is one chip's allocator view, keyed as the summary's
// "allocator" object. A type the chip's allocator was not seen making is
// nil.
type Allocator struct {
	DRAM    *AllocatorType `json:"dram"`
	L1      *AllocatorType `json:"l1"`
	L1Small *AllocatorType `json:"l1_small"`
	Trace   *AllocatorType `json:"trace"`
}

// Type returns the entry of buffer type t (nil: none).
func (a *Allocator) Type(t events.BufferType) *AllocatorType {
	if a == nil {
		return nil
	}
	switch t {
	case events.DRAM:
		return a.DRAM
	case events.L1:
		return a.L1
	case events.L1Small:
		return a.L1Small
	case events.Trace:
		return a.Trace
	}
	return nil
}

// SatMul is a*b, saturating at the largest uint64 (a chip's bytes are
// banks x per-bank bytes).
func SatMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

// AllocatorTypes are the buffer types of Allocator's entries, in order.
func AllocatorTypes() []events.BufferType { return allocTypes[:] }

// AllocatorKey is the summary key of buffer type t ("dram", ...).
func AllocatorKey(t events.BufferType) string {
	if t.Valid() {
		return allocKeys[t]
	}
	return ""
}

// view is ta's entry in an "allocator" object.
func (ta *typeAlloc) view() *AllocatorType {
	at := &AllocatorType{Banks: ta.cfg.Banks, BankSize: ta.cfg.BankSize, Alignment: ta.cfg.Alignment, Base: ta.cfg.Offset,
		TotalAllocatable: ta.cfg.BankSize, Source: ta.source(), PerCoreBuffers: ta.perCore, PerCoreBytes: ta.perCoreBytes, Failures: ta.failures}
	switch {
	case ta.exact():
		st := ta.m.Stats()
		at.TotalAllocated, at.TotalFree, at.LargestFree = &st.TotalAllocated, &st.TotalFree, &st.LargestFreeBlock
	case ta.why != "":
		at.Why = ta.why
	default:
		at.Why = "the allocator's DRAM bank manager was not seen made (no free-list alignment)"
	}
	return at
}

// MeshAllocator is a MeshDevice's own allocator: an entry of a process's
// "meshes" in the summary.
type MeshAllocator struct {
	MeshDevice string  `json:"mesh_device"` // MeshDevice*, hex
	Chips      []int32 `json:"chips"`       // its chips, in the order learned
	// Allocator: as a chip's, counting the mesh's buffers (once, per bank);
	// null with AllocatorWhy when unknown.
	Allocator    *Allocator `json:"allocator"`
	AllocatorWhy string     `json:"allocator_why,omitempty"`
}

// set stores the entry of buffer type t.
func (a *Allocator) set(t events.BufferType, at *AllocatorType) {
	switch t {
	case events.DRAM:
		a.DRAM = at
	case events.L1:
		a.L1 = at
	case events.L1Small:
		a.L1Small = at
	case events.Trace:
		a.Trace = at
	}
}

// source is the summary's "source" of a type's view.
func (ta *typeAlloc) source() string {
	if ta.mem != nil {
		return "memory"
	}
	return "probe"
}

// ChipAllocator is one chip's allocator view now, for live views.
type ChipAllocator struct {
	Device    int32
	Allocator *Allocator // nil: Why
	Why       string
}

// Allocators read from the traced process's memory (allocator.go
// wantMem, queries.go FoundMem and InstallMem) ("source": "memory"):
// a chip whose bank managers were made before tttrace attached. At the
// attach, the session finds the open chips' managers from the process's
// root of its devices (ttmetal.ReadDevices) and registers each with
// FoundMem; otherwise the first BankManager::allocate_buffer request on a
// manager tttrace did not see made, once its alloc names the chip and
// type, makes a MemWant. Either way the session reads that manager from
// the process (ttmetal.ReadBankManager) and hands the result to
// InstallMem, with the monotonic times [From, To] between which it read.
//
// The read races with the process, which goes on. Every allocator change
// has a record whose time brackets it: an allocation changes the free list
// before its alloc record (track_allocate), a free after its free record
// (track_deallocate). So records are folded into a list read from memory
// by their time: an alloc before From-memGuard is in it already; a free
// before From-memGuard is too (the allocator frees right after the
// record); anything later is applied, and within memGuard of the read it
// is applied only if the list does not show it done already. What does
// not check out makes the type's numbers unknown, with why.

// memGuard is how far around a read a record is not known to be in it or
// not: far more than the few instructions between a record and the
// allocator's change, far less than the pause of a process between two
// allocations that matters.
const memGuard = 2_000_000 // ns

// MemWant asks for a bank manager to be read from a process's memory.
type MemWant struct {
	Pid     uint32
	Chip    int32
	Type    events.BufferType
	Manager uint64 // BankManager*
}

// MemManager is a bank manager read from memory (ttmetal.MemBankManager
// with the read's times).
type MemManager struct {
	BufferType   int32
	Banks        uint32
	Alignment    uint64
	AddressLimit uint64
	BankSize     uint64
	Offset       uint64
	BlockAlign   uint64
	Blocks       []alloc.Block
	// FromNs, ToNs: CLOCK_MONOTONIC when the read began and ended.
	FromNs, ToNs uint64
}

// memState is what a type's view read from memory keeps.
type memState struct {
	from, to uint64 // 0 while the read is pending
}

// memPlace applies an alloc at ts to a list read from memory; it reports
// whether to place it as for a probed list.
func (ta *typeAlloc) memPlace(ts, addr, span uint64) bool {
	if ta.mem == nil {
		return true
	}
	switch {
	case ts+memGuard < ta.mem.from:
		return false // in the list read
	case ts <= ta.mem.to+memGuard:
		return !ta.m.Holds(addr, span)
	}
	return true
}

// memFree applies a free at ts to a list read from memory; it reports
// whether to free it as for a probed list (false: done here).
func (ta *typeAlloc) memFree(ts, addr uint64) bool {
	if ta.mem == nil {
		return true
	}
	switch {
	case ts+memGuard < ta.mem.from:
		return false
	case ts <= ta.mem.to+memGuard:
		ta.m.Free(addr) // if the list read still holds it
		return false
	}
	return true
}
