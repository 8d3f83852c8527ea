package devices

// The windows' state (tttrace mark): the ledger's current mark, each
// chip's peaks in its process's window, a process's windows, and the
// shapes they are reported in; window.go keeps them.

// Bounds: a process keeps at most MaxWindows ended windows (the oldest
// go, counted in windows_dropped); a mark's name is cut to MaxMarkName
// bytes.
const (
	MaxWindows  = 64
	MaxMarkName = 256
)

// Mark is a mark as the ledger took it: the window it starts, its name and
// time. It marshals to the NDJSON "window" line.
type Mark struct {
	Type  string `json:"type"` // "window"
	Index int    `json:"index"`
	Name  string `json:"name"`
	TsNs  uint64 `json:"ts_ns"`
}

// markLog is the ledger's current mark (Index 0: none yet).
type markLog struct{ cur Mark }

// winChip is a chip's peaks in its process's current window, from the
// level it had at the mark that started it.
type winChip struct{ peak, peakTs Totals }

// rise notes that counter i is now v (nil: the chip has no window state).
func (w *winChip) rise(i Counter, v, ts uint64) {
	if w != nil && v > w.peak[i] {
		w.peak[i], w.peakTs[i] = v, ts
	}
}

// procWindows is a process's windows.
type procWindows struct {
	seen    bool     // a mark found the process: cur is its window's mark
	cur     Mark     // the mark its current window began with
	ended   []Window // oldest first
	dropped uint64
}

// Window is one window of a process: the summary's "windows".
type Window struct {
	Index int    `json:"index"` // 0: from the start of tracing
	Name  string `json:"name"`
	// StartTsNs: its mark's time (0: window 0); EndTsNs: the next mark's,
	// null for the current window.
	StartTsNs uint64         `json:"start_ts_ns"`
	EndTsNs   *uint64        `json:"end_ts_ns"`
	Devices   []WindowDevice `json:"devices"` // by chip id
}

// WindowDevice is one chip in a window.
type WindowDevice struct {
	Device int32 `json:"device"`
	// Peaks: each counter's peak in the window (by its summary name:
	// dram_bytes, ...), with the time it was first reached.
	Peaks map[string]Peak `json:"peaks"`
	// MemoryStats: per allocator type (dram, l1, l1_small, trace) that has
	// held something in the window or has an allocator view.
	MemoryStats map[string]MemoryStats `json:"memory_stats"`
}

// MemoryStats is one buffer type of a chip in the shape of PJRT/JAX
// memory_stats: bytes_in_use (the type's bytes on the chip at the
// window's end, or now), peak_bytes_in_use (their peak in the window),
// and from the chip's allocator then (absent without its view):
// bytes_limit (banks x allocatable bytes per bank) and
// largest_free_block_bytes (banks x the largest free block per bank: the
// largest lockstep buffer that fits).
type MemoryStats struct {
	BytesInUse            uint64  `json:"bytes_in_use"`
	PeakBytesInUse        uint64  `json:"peak_bytes_in_use"`
	BytesLimit            *uint64 `json:"bytes_limit,omitempty"`
	LargestFreeBlockBytes *uint64 `json:"largest_free_block_bytes,omitempty"`
}
