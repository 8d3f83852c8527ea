package sinks

// The compact live frame, drawn when the full one (a block of lines per
// chip) is taller than the terminal: a Galaxy's 32 chips, or a few chips
// on a laptop's terminal. It is the header, a line saying what follows,
// the columns' names, then one line per chip of every process, the most
// pressed first, as many as fit; a last line counts the chips left out
// and their processes. A chip is shown whole or not at all.
//
// A chip's pressure is how near it is to a limit: the highest of its
// bytes in use per buffer type (DRAM, L1, L1_SMALL, TRACE: what its
// buffers' size_ sum to, mesh buffers included) over that type's capacity
// (the chip's allocator: banks x bank size), and its busiest core's L1
// (buffers + resident CBs) over a core's L1. A chip with failed
// allocations or whose CBs clash with its L1 buffers (now or before)
// comes first whatever its pressure; then the highest pressure, then the
// most bytes in use, then pid and chip id.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// compactFixed is the lines of a compact frame besides its chips: the
// header's two, what follows, the columns' names.
const compactFixed = 4

// compactChip is one chip of one process in the compact frame.
type compactChip struct {
	pid      uint32
	d        devices.DeviceSummary
	failures uint64
	clash    string  // "CLASH" (now), "CLASHED" (before), or ""
	pressure float64 // the highest use over capacity; 0 when none is known
	used     uint64  // bytes in use, every type and the CBs
}

// compactChips are the chips of view's processes, the most pressed first.
func compactChips(view *View) []compactChip {
	var out []compactChip
	for _, p := range view.Procs {
		for _, d := range view.Ledger.Devices(p.Pid) {
			out = append(out, newCompactChip(p.Pid, d))
		}
	}
	slices.SortStableFunc(out, func(a, b compactChip) int {
		af, bf := a.failures > 0 || a.clash != "", b.failures > 0 || b.clash != ""
		if af != bf {
			if af {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.pressure, a.pressure); c != 0 {
			return c
		}
		if c := cmp.Compare(b.used, a.used); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pid, b.pid); c != 0 {
			return c
		}
		return cmp.Compare(a.d.Device, b.d.Device)
	})
	return out
}

func newCompactChip(pid uint32, d devices.DeviceSummary) compactChip {
	c := compactChip{pid: pid, d: d}
	cur, _ := totalsOf(&d)
	for _, k := range []devices.Counter{devices.CounterDRAM, devices.CounterL1, devices.CounterL1Small,
		devices.CounterTrace, devices.CounterSystemMemory, devices.CounterCB} {
		c.used += cur[k]
	}
	for _, t := range devices.AllocatorTypes() {
		if f, ok := useOf(&d, t); ok {
			c.pressure = max(c.pressure, f)
		}
		if at := d.Allocator.Type(t); at != nil {
			c.failures += at.Failures
		}
	}
	if f, ok := coreUse(d.L1BusiestCore); ok {
		c.pressure = max(c.pressure, f)
	}
	switch {
	case d.L1Headroom != nil && *d.L1Headroom < 0:
		c.clash = "CLASH"
	case d.MinL1Headroom != nil && d.MinL1Headroom.Value < 0:
		c.clash = "CLASHED"
	}
	return c
}

// useOf is the chip's bytes of buffer type t over that type's capacity
// (banks x bank size), when its allocator shows the capacity.
func useOf(d *devices.DeviceSummary, t events.BufferType) (float64, bool) {
	at := d.Allocator.Type(t)
	if at == nil {
		return 0, false
	}
	capacity := devices.SatMul(uint64(at.Banks), at.BankSize)
	if capacity == 0 {
		return 0, false
	}
	var n uint64
	switch t {
	case events.DRAM:
		n = d.DRAMBytes
	case events.L1:
		n = d.L1Bytes
	case events.L1Small:
		n = d.L1SmallBytes
	case events.Trace:
		n = d.TraceBytes
	}
	return float64(n) / float64(capacity), true
}

// coreUse is the busiest core's L1 in use over a core's L1, when known.
func coreUse(c *devices.L1Core) (float64, bool) {
	if c == nil || c.L1Size == nil || *c.L1Size == 0 {
		return 0, false
	}
	return float64(c.TotalBytes) / float64(*c.L1Size), true
}

// compactCells are c's columns after its pid and chip: DRAM and L1 in
// use and their share of the capacity, the busiest core's L1 (buffers +
// resident CBs) and its share of a core's L1 (≤: an upper bound; ?: spans
// unknown), the CBs resident on the busiest core; and its flags: failed
// allocations, clashes, closed.
func compactCells(c *compactChip) (cells [7]string, flags string) {
	pct := func(f float64, ok bool) string {
		if !ok {
			return "-"
		}
		if f >= 0.9995 {
			return fmt.Sprintf("%.0f%%", 100*f) // within the column
		}
		return fmt.Sprintf("%.1f%%", 100*f)
	}
	core, corePct := "-", "-"
	if b := c.d.L1BusiestCore; b != nil {
		switch {
		case b.TotalBytes == 0 && b.SpansUnknown > 0:
			core = "?"
		case b.UpperBound:
			core = "≤" + human(b.TotalBytes)
		default:
			core = human(b.TotalBytes)
		}
		corePct = pct(coreUse(b))
	}
	cells = [7]string{human(c.d.DRAMBytes), pct(useOf(&c.d, events.DRAM)), human(c.d.L1Bytes), pct(useOf(&c.d, events.L1)),
		core, corePct, human(c.d.CBBytes)}
	var f []string
	if c.failures > 0 {
		f = append(f, fmt.Sprintf("%d FAILED", c.failures))
	}
	if c.clash != "" {
		f = append(f, c.clash)
	}
	if c.d.Closed {
		f = append(f, "closed")
	}
	return cells, strings.Join(f, " ")
}

// compactLine lays out one line of the compact table: the flags' column
// (flagsWidth wide; none when 0) after the chip, so that no width cuts it.
func compactLine(pid, chip, flags string, flagsWidth int, cells [7]string) string {
	s := fmt.Sprintf("%7s %4s", pid, chip)
	if flagsWidth > 0 {
		s += fmt.Sprintf("  %-*s", flagsWidth, flags)
	}
	return s + fmt.Sprintf("  %9s %5s  %9s %5s  %9s %5s  %9s", cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6])
}

// compactFrame is the compact frame of at most rows lines (rows > 0)
// under head, the full frame's header.
func compactFrame(view *View, head []string, width, rows int) []string {
	chips := compactChips(view)
	lines := append([]string(nil), head...)
	shown := len(chips)
	if compactFixed+shown > rows {
		shown = rows - compactFixed - 1 // the last line counts those left out
	}
	switch {
	case len(chips) == 0:
		// Processes without device memory, more than the rows: counted
		// in the header.
		lines = append(lines, "no device memory yet")
		return clipAll(lines[:min(len(lines), rows)], width)
	case shown < 1:
		// Too few rows for one chip: the first line and the count, as fit.
		lines = append(lines[:1], moreChips(chips, "")+": too few rows to show one")
		return clipAll(lines[:min(len(lines), rows)], width)
	}
	procs := len(view.Procs)
	lines = append(lines, fmt.Sprintf("%d chip%s of %d process%s, the most pressed first (use%%: of the capacity; a taller terminal shows each in full)",
		len(chips), plural(len(chips), "", "s"), procs, plural(procs, "", "es")))
	cells := make([][7]string, shown)
	flags := make([]string, shown)
	fw := 0
	for i := range cells {
		cells[i], flags[i] = compactCells(&chips[i])
		fw = max(fw, utf8.RuneCountInString(flags[i]))
	}
	if fw > 0 {
		fw = max(fw, len("flags"))
	}
	lines = append(lines, compactLine("pid", "chip", "flags", fw, [7]string{"DRAM", "use%", "L1", "use%", "L1/core", "use%", "CB"}))
	for i := range cells {
		lines = append(lines, strings.TrimRight(compactLine(strconv.FormatUint(uint64(chips[i].pid), 10), strconv.Itoa(int(chips[i].d.Device)),
			flags[i], fw, cells[i]), " "))
	}
	if shown < len(chips) {
		lines = append(lines, moreChips(chips[shown:], "more "))
	}
	return clipAll(lines, width)
}

// moreChips counts chips left out: "… N more chips (M processes)", M
// counting their processes.
func moreChips(chips []compactChip, more string) string {
	pids := map[uint32]bool{}
	for _, c := range chips {
		pids[c.pid] = true
	}
	return fmt.Sprintf("… %d %schip%s (%d process%s)", len(chips), more, plural(len(chips), "", "s"), len(pids), plural(len(pids), "", "es"))
}

func clipAll(lines []string, width int) []string {
	for i := range lines {
		lines[i] = clip(lines[i], width)
	}
	return lines
}
