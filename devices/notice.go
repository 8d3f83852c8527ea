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

	// AllocFailed is the record of an alloc_failed notice (its line is
	// this record alone); Chip is -1 when the allocator is no chip's.
	AllocFailed *AllocFailure `json:"-"`
	// Trace is the record of a trace notice (its line is this record alone).
	Trace *TraceNote `json:"-"`
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
	type plain Notice
	return json.Marshal((*plain)(n))
}
