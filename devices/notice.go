package devices

import (
	"encoding/json"
	"fmt"
)

// Notices: the records the ledger derives from the events, the moment it
// draws them (docs/architecture.md, "Derived records: notices"). Each is
// made during the Apply (or Flush, FlushBefore) that makes it true and
// handed at once to the one NoticeSink of Options.Notices; the ledger
// keeps the first ones per process for its summary as well.
//
// A Notice is one of three record families, each made by its rule's file:
// the L1 ones (l1_clash, l1_headroom: the fields of Notice itself, l1.go),
// alloc_failed (Notice.AllocFailed, allocator.go) and the Metal trace ones
// (Notice.Trace, trace.go). A new kind is a NoticeKind with its name
// below, its record (a pointer field of Notice, written by MarshalJSON),
// the rule that makes it, and its text for people in package sinks
// (sinks.NoticeLog); the runtime only hands notices on.

// NoticeKind says what a Notice is about; its name is the NDJSON "type".
type NoticeKind uint8

const (
	// NoticeL1Clash: a program's CB region on a chip ends above the lowest
	// live L1 buffer there; TT-Metal is about to throw for it.
	NoticeL1Clash NoticeKind = iota + 1
	// NoticeL1Headroom: a chip's L1 headroom dropped under the warning threshold.
	NoticeL1Headroom
	// NoticeAllocFailed: a BankManager::allocate_buffer call threw (Out
	// of Memory); Notice.AllocFailed says all.
	NoticeAllocFailed
	// The Metal trace records (trace.go); Notice.Trace says all.
	NoticeTraceHazard
	NoticeTraceReplayInvalid
	NoticeTraceRegionHazard
	NoticeTraceCaptureAlloc
	// NoticePerCoreDivergence: a per-core buffer whose cores got different
	// addresses (percore.go); Notice.PerCore says all.
	NoticePerCoreDivergence
)

// noticeNames are the kinds' NDJSON types.
var noticeNames = [...]string{
	NoticeL1Clash:            "l1_clash",
	NoticeL1Headroom:         "l1_headroom",
	NoticeAllocFailed:        "alloc_failed",
	NoticeTraceHazard:        "trace_hazard",
	NoticeTraceReplayInvalid: "trace_replay_invalid",
	NoticeTraceRegionHazard:  "trace_region_hazard",
	NoticeTraceCaptureAlloc:  "trace_capture_alloc",
	NoticePerCoreDivergence:  "per_core_address_divergence",
}

func (k NoticeKind) String() string {
	if int(k) < len(noticeNames) && noticeNames[k] != "" {
		return noticeNames[k]
	}
	return "notice(?)"
}

// MarshalText makes the kind its NDJSON "type".
func (k NoticeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads an NDJSON "type".
func (k *NoticeKind) UnmarshalText(b []byte) error {
	for c, name := range noticeNames {
		if name != "" && string(b) == name {
			*k = NoticeKind(c)
			return nil
		}
	}
	return fmt.Errorf("notice type %q", b)
}

// NoticeSink hears of every notice as the ledger makes it (Options.Notices).
// n is valid only during the call.
type NoticeSink interface {
	Notice(n *Notice)
}

// NoticeFunc is a function as a NoticeSink.
type NoticeFunc func(n *Notice)

// Notice calls f(n).
func (f NoticeFunc) Notice(n *Notice) { f(n) }

// Notice is a record the ledger derives from the events. It marshals with
// encoding/json to its NDJSON line (docs/ndjson.md). Seq, TsNs and Tid are
// those of the event that made it: for a clash, the program's last CB
// allocation on the chip before TT-Metal's check. The fields up to
// L1BuffersBytes are the record of l1_clash and l1_headroom; the other
// kinds carry theirs behind a pointer.
type Notice struct {
	Type NoticeKind `json:"type"`
	Seq  uint64     `json:"seq"`
	TsNs uint64     `json:"ts_ns"`
	Pid  uint32     `json:"pid"`
	Tid  uint32     `json:"tid"`
	Chip int32      `json:"device"`
	// Program is the ProgramImpl* whose CBs clash (l1_clash), hex.
	Program string `json:"program,omitempty"`
	// CBRegionEnd: the highest CB end (l1_clash: of Program; l1_headroom:
	// of every program holding CBs on the chip).
	CBRegionEnd uint64 `json:"cb_region_end"`
	// LowestL1Address: the lowest live L1 buffer on the chip.
	LowestL1Address uint64 `json:"lowest_l1_address"`
	// Headroom = LowestL1Address - CBRegionEnd (negative: overlap).
	Headroom int64 `json:"headroom"`
	// WarnBytes: the --l1-warn threshold (l1_headroom).
	WarnBytes uint64 `json:"warn_bytes,omitempty"`
	// Lowest is the lowest live L1 buffer.
	Lowest L1Buffer `json:"lowest_l1_buffer"`
	// L1Buffers (l1_clash): the live L1 buffers on the chip that start
	// below CBRegionEnd, by address; at most 32, L1BuffersCount and
	// L1BuffersBytes count them all.
	L1Buffers      []L1Buffer `json:"l1_buffers,omitempty"`
	L1BuffersCount int        `json:"l1_buffers_count,omitempty"`
	L1BuffersBytes uint64     `json:"l1_buffers_bytes,omitempty"`
	// Clash (l1_clash): "certain" when a lockstep L1 buffer (on every
	// core) is below the region, "possible" when only per-core buffers
	// are, on banks whose cores are not known (docs/ttmetal.md §12).
	Clash string `json:"clash,omitempty"`
	// CoreRanges (l1_clash): the program's CB core ranges (upstream's one
	// CB allocator per unique range) whose own region end passes an L1
	// buffer, at most 32 (CoreRangesCount counts them); absent when a CB
	// of the program has no known core ranges.
	CoreRanges      []ClashRange `json:"core_ranges,omitempty"`
	CoreRangesCount int          `json:"core_ranges_count,omitempty"`
	// PerCoreBlocks (l1_clash): the per-core buffers' blocks, one per bank,
	// starting below CBRegionEnd at an address tttrace knows, by address,
	// at most 32 (PerCoreBlocksCount counts them).
	PerCoreBlocks      []L1Buffer `json:"per_core_blocks,omitempty"`
	PerCoreBlocksCount int        `json:"per_core_blocks_count,omitempty"`

	// AllocFailed is the record of an alloc_failed notice (its line is
	// this record alone); Chip is -1 when the allocator is no chip's.
	AllocFailed *AllocFailure `json:"-"`
	// Trace is the record of a trace notice (its line is this record alone).
	Trace *TraceNote `json:"-"`
	// PerCore is the record of a per_core_address_divergence (its line is
	// this record alone).
	PerCore *PerCoreDivergence `json:"-"`
}

// MarshalJSON writes the notice's NDJSON line: an alloc_failed or a trace
// notice is its record, the others the fields above.
func (n *Notice) MarshalJSON() ([]byte, error) {
	if n.Type == NoticeAllocFailed && n.AllocFailed != nil {
		return json.Marshal(n.AllocFailed)
	}
	if n.Trace != nil {
		return json.Marshal(n.Trace)
	}
	if n.PerCore != nil {
		return json.Marshal(n.PerCore)
	}
	type plain Notice
	return json.Marshal((*plain)(n))
}

// AllocFailure is an alloc_failed record: a BankManager::allocate_buffer
// call that threw. It marshals with encoding/json to its NDJSON line
// (docs/ndjson.md); field names are a public interface.
type AllocFailure struct {
	Type string `json:"type"` // "alloc_failed"
	Pid  uint32 `json:"pid"`
	Tid  uint32 `json:"tid"`
	Seq  uint64 `json:"seq"` // of the request
	TsNs uint64 `json:"ts_ns"`
	// Op: the TT-NN op the request was made in; absent outside one.
	Op *OpRef `json:"op,omitempty"`
	// DeviceKind is "chip" (Device: the chip whose allocator refused),
	// "mesh" (MeshDevice: the mesh whose own allocator refused, MeshChips
	// its chips then) or "none" (its bank manager is tied to no known chip
	// or mesh).
	DeviceKind string  `json:"device_kind"`
	Device     *int32  `json:"device,omitempty"`
	MeshDevice string  `json:"mesh_device,omitempty"`
	MeshChips  []int32 `json:"mesh_chips,omitempty"`
	// Physical: the physical chip behind Device (for host-wide counters;
	// the summary's devices carry it in NDJSON).
	Physical   ChipIdentity `json:"-"`
	Manager    string       `json:"manager"` // BankManager*, hex
	BufferType string       `json:"buffer_type"`
	// The request: the aligned size and page size the allocator got.
	Size      uint64 `json:"size"`
	PageSize  uint64 `json:"page_size"`
	BottomUp  bool   `json:"bottom_up"`
	NumShards uint32 `json:"num_shards,omitempty"`
	// A per-core (HYBRID) request: AllocatorID (its list: bank + 1) and
	// Bank (the core's L1 bank); CoresBefore: the buffer's cores asked
	// (and given) before this one. The statistics and cause are then that
	// core's: its list seen through the lockstep list it depends on.
	AllocatorID *uint32 `json:"allocator_id,omitempty"`
	Bank        *uint32 `json:"bank,omitempty"`
	CoresBefore int     `json:"cores_before,omitempty"`
	// Banks the pages spread over, and what each needs (upstream's
	// size_per_bank); Span: that rounded to the free list's blocks.
	Banks       uint32  `json:"banks"`
	SizePerBank uint64  `json:"size_per_bank"`
	Span        *uint64 `json:"span,omitempty"`
	BankSize    uint64  `json:"bank_size"`
	// The allocator's statistics at the request (per bank), what
	// TT-Metal's message gives; null when not known (Why).
	TotalAllocated *uint64 `json:"total_allocated_bytes"`
	TotalFree      *uint64 `json:"total_free_bytes"`
	LargestFree    *uint64 `json:"largest_free_block_bytes"`
	// BufferType is "unknown" when the bank manager was not seen made.
	// Cause: exhausted, fragmented, larger_than_bank (below_address_limit
	// never in 2025-2026 builds); "" with Why when the state is unknown.
	Cause string `json:"cause,omitempty"`
	Why   string `json:"why,omitempty"`
	// Site: where the allocation was asked for: the stack taken on
	// allocate_buffer's out-of-memory path (alloc_oom), Python frames
	// included; absent without stacks or when that path was not seen.
	Site uint32 `json:"site,omitempty"`
	// Thrown: the out-of-memory path was seen (alloc_oom); false when the
	// failure is known only because no alloc followed the request.
	Thrown bool `json:"thrown"`
	// Holders: the largest live buffers of that allocator and type (by
	// span per bank): a chip's own buffers, or the mesh's buffers for a
	// mesh; at most 10; HoldersCount and HoldersBytes count them all.
	Holders      []Holder     `json:"holders"`
	HoldersCount int          `json:"holders_count"`
	HoldersBytes uint64       `json:"holders_bytes"`
	HolderSites  []HolderSite `json:"holder_sites"`
}

// Holder is a live buffer that fills the chip and type of a failure.
type Holder struct {
	Buffer     string  `json:"buffer"`
	Address    uint64  `json:"address"`
	Size       uint64  `json:"size"`
	Span       *uint64 `json:"span,omitempty"` // per bank; absent when unknown
	Mesh       bool    `json:"mesh"`
	MeshDevice string  `json:"mesh_device,omitempty"`
	Tid        uint32  `json:"tid"`
	Seq        uint64  `json:"seq"`
	TsNs       uint64  `json:"ts_ns"`
	Site       uint32  `json:"site,omitempty"`
}

// HolderSite sums the holders of one allocation site.
type HolderSite struct {
	Site      uint32 `json:"site"`
	Buffers   uint64 `json:"buffers"`
	Bytes     uint64 `json:"bytes"`      // their sizes
	SpanBytes uint64 `json:"span_bytes"` // their spans per bank
}

// L1Buffer names a live L1 buffer by what the ledger knows of it.
type L1Buffer struct {
	Buffer     string `json:"buffer"` // Buffer*, hex
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	Mesh       bool   `json:"mesh"` // the backing buffer of a mesh buffer
	MeshDevice string `json:"mesh_device,omitempty"`
	Tid        uint32 `json:"tid"` // allocating thread
	Seq        uint64 `json:"seq"` // of the alloc event
	TsNs       uint64 `json:"ts_ns"`
	// Site is where it was allocated (the process's sites); absent when
	// unknown (stacks off, or the stack was lost).
	Site uint32 `json:"site,omitempty"`
	// PerCore: a per-core (HYBRID) buffer's block on one bank: Bank, its
	// Address there and the Span its list reserves (0: not known).
	PerCore bool    `json:"per_core,omitempty"`
	Bank    *uint32 `json:"bank,omitempty"`
	Span    uint64  `json:"span,omitempty"`
}

// ClashRange is one core range of an l1_clash: a unique core range of the
// program's CBs, its own CB region end, and whether it clashes for certain
// (a lockstep L1 buffer is below the end) or possibly (only per-core
// buffers are). Headroom: the lowest lockstep L1 address minus the end,
// the same on every core of the range, present only when exact (no
// per-core buffer is known below the lockstep one, none has cores at
// addresses tttrace does not know).
type ClashRange struct {
	Range       [4]uint16 `json:"range"` // [x0, y0, x1, y1], inclusive, logical
	CBRegionEnd uint64    `json:"cb_region_end"`
	Clash       string    `json:"clash"`
	Headroom    *int64    `json:"headroom,omitempty"`
}

// Clash kinds (Notice.Clash, ClashRange.Clash).
const (
	ClashCertain  = "certain"
	ClashPossible = "possible"
)

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }

// TraceBuffer names a buffer in a trace record.
type TraceBuffer struct {
	Buffer     string `json:"buffer"` // Buffer*, hex
	BufferType string `json:"buffer_type"`
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	Span       uint64 `json:"span"` // per bank (the size when the allocator's span is unknown)
	Mesh       bool   `json:"mesh"` // a mesh buffer (its backing buffer)
	Tid        uint32 `json:"tid"`
	Seq        uint64 `json:"seq"` // of its alloc
	TsNs       uint64 `json:"ts_ns"`
	// Site is where it was allocated (the process's sites); absent when unknown.
	Site uint32 `json:"site,omitempty"`
}

// TraceNote is a trace_hazard, trace_replay_invalid, trace_region_hazard or
// trace_capture_alloc record (docs/ndjson.md). Seq, TsNs and Tid are those
// of the event that made it (the replay; the alloc).
type TraceNote struct {
	Type NoticeKind `json:"type"`
	Seq  uint64     `json:"seq"`
	TsNs uint64     `json:"ts_ns"`
	Pid  uint32     `json:"pid"`
	Tid  uint32     `json:"tid"`
	// Device is the chip it is about (the lowest where the ranges meet);
	// -1 when no chip of a mesh trace is known.
	Device int32 `json:"device"`
	// MeshDevice is the MeshDevice* of a mesh trace, hex.
	MeshDevice string `json:"mesh_device,omitempty"`
	// Trace is the trace id (absent while a one-argument begin_mesh_trace's
	// capture has not ended); CQ its command queue.
	Trace *uint32 `json:"trace,omitempty"`
	CQ    uint8   `json:"cq"`
	// Replay (trace_hazard, trace_replay_invalid): which replay of the
	// trace, from 1 (invalid ones are not counted: 0).
	Replay uint64 `json:"replay,omitempty"`
	// Reason (trace_replay_invalid): released, device_closed or capturing.
	Reason string `json:"reason,omitempty"`
	// Buffer: the buffer in danger (trace_hazard), the trace buffer placed
	// (trace_region_hazard), the buffer allocated (trace_capture_alloc).
	Buffer *TraceBuffer `json:"buffer,omitempty"`
	// Captured (trace_hazard): the buffer of the capture it overlaps.
	Captured *TraceBuffer `json:"captured,omitempty"`
	// OtherTrace, HighWaterMark (trace_region_hazard): the live trace whose
	// DRAM high-water mark (per bank) the trace buffer is under.
	OtherTrace    *uint32 `json:"other_trace,omitempty"`
	HighWaterMark uint64  `json:"high_water_mark,omitempty"`
}

// Headroom is one chip's L1 headroom now (HasHeadroom false: the chip has
// no live L1 buffer or no CBs, so nothing can clash).
type Headroom struct {
	Device          int32
	HasHeadroom     bool
	Headroom        int64
	LowestL1Address uint64
	CBRegionEnd     uint64
}

// MinHeadroom is the lowest headroom a chip had, and when it first had it.
type MinHeadroom struct {
	Value           int64  `json:"value"`
	TsNs            uint64 `json:"ts_ns"`
	LowestL1Address uint64 `json:"lowest_l1_address"`
	CBRegionEnd     uint64 `json:"cb_region_end"`
}
