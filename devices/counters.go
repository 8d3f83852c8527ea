package devices

import "github.com/tttrace/tttrace/events"

// What the ledger counts per chip, and the bounds that keep every count
// from wrapping.

// Totals are one chip's current counters, indexed by Counter: what a
// counter track or a gauge shows.
type Totals [NumCounters]uint64

// Counter indexes Totals.
type Counter int

// The counters of a chip, each named after its summary field
// (Counter.String). The first five equal events.BufferType values.
const (
	CounterDRAM         = Counter(events.DRAM)
	CounterL1           = Counter(events.L1)
	CounterSystemMemory = Counter(events.SystemMemory)
	CounterL1Small      = Counter(events.L1Small)
	CounterTrace        = Counter(events.Trace)
	// CounterCB: the CB bytes resident on the chip's busiest core (the
	// program last dispatched on each core: resident.go).
	CounterCB          = Counter(5)
	CounterLiveBuffers = Counter(6)
	// CounterCBRegistered: the per-core sizes of the CBs of every program
	// holding CBs on the chip, summed (what cb_bytes meant before CBs were
	// resident per core); CounterCBResidentTotal: the resident CB bytes
	// summed over the chip's cores (TT-Metal's get_total_cb_allocated).
	CounterCBRegistered    = Counter(7)
	CounterCBResidentTotal = Counter(8)
	// CounterL1Core: L1 per core, the chip's busiest core's total
	// (l1_busiest_core.total_bytes: lockstep L1 and L1_SMALL spans per
	// bank, the busiest bank's per-core spans, the busiest core's resident
	// CBs; l1core.go), set as each event's L1 side settles; its peak is
	// peak_l1_busiest_core's total.
	CounterL1Core = Counter(9)
	NumCounters   = 10
)

// String is the counter's summary field name ("dram_bytes", ...).
func (c Counter) String() string {
	if c >= 0 && int(c) < NumCounters {
		return counterNames[c]
	}
	return "counter(?)"
}

// Observer is told of every change of a chip's totals: after each applied
// event, once per chip the event changed (a mesh buffer changes every chip
// of its mesh), with the event's time. t is valid only during the call.
// Calling it allocates nothing.
type Observer func(pid uint32, chip int32, tsNs uint64, t *Totals)

// maxSize bounds a plausible buffer or CB size (1 TiB). Larger values can
// only come from a wrong layout or a bad read.
const maxSize = 1 << 40

// maxHeld bounds what one process may hold at once, all chips together,
// each buffer and CB counted once (1 PiB, far beyond any host's device
// memory): a hostile or broken process making 2^24 buffers of 1 TiB would
// otherwise wrap a chip's uint64 total. Every chip and mesh total of the
// process is at most this, so a sum over 2^13 processes cannot wrap either
// (sums over more saturate: SatAdd).
const maxHeld = 1 << 50

// SatAdd is a+b, or the largest uint64 when that would wrap: for sums of
// totals over processes, which the per-process bound cannot bound.
func SatAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

var counterNames = [NumCounters]string{"dram_bytes", "l1_bytes", "system_memory_bytes", "l1_small_bytes", "trace_bytes",
	"cb_bytes", "live_buffers", "cb_registered_bytes", "cb_resident_total_bytes", "l1_busiest_core_bytes"}

// Stats counts what the ledger saw and deliberately did not count.
type Stats struct {
	Events            uint64 `json:"events"`
	Allocs            uint64 `json:"allocs"`      // track_allocate events
	MeshAllocs        uint64 `json:"mesh_allocs"` // of which on a MeshDevice
	HookedAllocs      uint64 `json:"hooked_allocs"`
	ZeroSizeAllocs    uint64 `json:"zero_size_allocs"`
	NonOwningAllocs   uint64 `json:"non_owning_allocs"`
	Frees             uint64 `json:"frees"` // track_deallocate events
	HookedFrees       uint64 `json:"hooked_frees"`
	FreesAfterRelease uint64 `json:"frees_after_release"` // of buffers a close or mark had released
	Views             uint64 `json:"views"`
	MeshChipsLearned  uint64 `json:"mesh_chips_learned"`
	MarkDeallocated   uint64 `json:"mark_deallocated"`
	// MarkedHeld: live buffers marked deallocated, which stay counted
	// because the allocator keeps their memory until their chip closes.
	MarkedHeld uint64 `json:"marked_held"`
	// ReleasedByMark: marked buffers released since, by their chip's close.
	ReleasedByMark   uint64 `json:"released_by_mark"`
	ReleasedByClose  uint64 `json:"released_by_close"` // buffers released by a device or mesh close
	DeviceCloses     uint64 `json:"device_closes"`
	MeshCloses       uint64 `json:"mesh_closes"`
	CBLayouts        uint64 `json:"cb_layouts"`
	CBAllocs         uint64 `json:"cb_allocs"`
	GlobalCBs        uint64 `json:"global_cbs"`   // not counted: backed by an L1 buffer
	CBRelayouts      uint64 `json:"cb_relayouts"` // groups replaced by a new layout
	CBTeardowns      uint64 `json:"cb_teardowns"`
	CBFrees          uint64 `json:"cb_frees"`
	CBFreesUnknown   uint64 `json:"cb_frees_unknown"` // nothing held for that program and target
	CBGroupsReleased uint64 `json:"cb_groups_released"`
	ProgramDestroys  uint64 `json:"program_destroys"`
	// ProgramDispatches: generate_dispatch_commands records;
	// DispatchesUnknown: those whose program's CBs (or their core ranges)
	// tttrace does not know, which made nothing resident.
	ProgramDispatches uint64 `json:"program_dispatches"`
	DispatchesUnknown uint64 `json:"dispatches_unknown"`
	// L1Clashes: CB layouts whose region passed the lowest live L1 buffer
	// of a chip (one per chip); L1HeadroomWarnings: drops of a chip's
	// headroom under --l1-warn.
	L1Clashes          uint64 `json:"l1_clashes"`
	L1HeadroomWarnings uint64 `json:"l1_headroom_warnings"`
	// L1ClashesPossible: CB layouts whose region passed no lockstep L1
	// buffer of a chip but a per-core buffer's block on some bank, whose
	// core is not known (l1_clash with clash "possible"; not in
	// l1_clashes).
	L1ClashesPossible uint64 `json:"l1_clashes_possible"`
	// The allocator's records: bank managers made, allocate_buffer calls,
	// those that failed (alloc_failed) and the out-of-memory paths seen
	// taken (alloc_oom records).
	AllocCapacities uint64 `json:"alloc_capacities"`
	AllocRequests   uint64 `json:"alloc_requests"`
	AllocFailures   uint64 `json:"alloc_failures"`
	AllocOOMs       uint64 `json:"alloc_ooms"`
	// Allocators made outside a chip's (a MeshDevice's) past the 256 a
	// process may hold (too_many_allocators anomalies): AllocatorsDropped,
	// the oldest tied to no mesh, dropped to make room; BankManagersRefused,
	// bank managers made when every one held was a live mesh's, not kept.
	// Requests on their managers are on managers not seen made.
	AllocatorsDropped   uint64 `json:"allocators_dropped"`
	BankManagersRefused uint64 `json:"bank_managers_refused"`
	// Per-core (HYBRID) buffers allocated; of them, those whose cores'
	// addresses the ledger could not check (their lists unknown), and
	// those whose cores got different addresses (per_core_address_divergence).
	PerCoreBuffers     uint64 `json:"per_core_buffers"`
	PerCoreUnchecked   uint64 `json:"per_core_unchecked"`
	PerCoreDivergences uint64 `json:"per_core_divergences"`
}

// Peak is a high-water mark and the time (CLOCK_MONOTONIC ns) it was first reached.
type Peak struct {
	Value uint64 `json:"value"`
	TsNs  uint64 `json:"ts_ns"`
}

// Peaks holds the high-water mark of each DeviceSummary total.
type Peaks struct {
	DRAMBytes            Peak `json:"dram_bytes"`
	L1Bytes              Peak `json:"l1_bytes"`
	L1SmallBytes         Peak `json:"l1_small_bytes"`
	TraceBytes           Peak `json:"trace_bytes"`
	SystemMemoryBytes    Peak `json:"system_memory_bytes"`
	CBBytes              Peak `json:"cb_bytes"`
	LiveBuffers          Peak `json:"live_buffers"`
	CBRegisteredBytes    Peak `json:"cb_registered_bytes"`
	CBResidentTotalBytes Peak `json:"cb_resident_total_bytes"`
}
