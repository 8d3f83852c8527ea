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
	CounterCB           = Counter(5)
	CounterLiveBuffers  = Counter(6)
	NumCounters         = 7
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

var counterNames = [NumCounters]string{"dram_bytes", "l1_bytes", "system_memory_bytes", "l1_small_bytes", "trace_bytes", "cb_bytes", "live_buffers"}
