package sinks

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tttrace/tttrace/devices"
)

// Live redraws the traced processes' device memory in place on a
// terminal, every interval, until a report replaces it: a header (events,
// losses, libraries probed, processes and how many still wait for the
// library), then per process and chip one bar per memory type in use,
// the CB row saying what it counts (the CBs resident on the chip's busiest
// core, named, and the sum over the programs holding CBs when that
// differs), the chip's L1 headroom while it has both L1 buffers and CBs,
// and its
// allocator per type (used / capacity, percentage, largest free block:
// the nvidia-smi view), the
// bar's full length being that type's peak on the chip (TT-Metal's
// capacities are not in the events, so the peak is the scale), and with
// more than one process a total of them all per physical chip (a chip
// whose identity is not known stays its process's own).
//
// Each frame is one write: the cursor goes back to the frame's first line
// and every line is rewritten and cleared to its end, so nothing blinks.
// Lines never exceed the terminal's width, nor the frame its height (the
// cursor cannot go back above the screen's top: a taller frame would
// scroll and leave copies of itself behind): when the full frame does not
// fit, the compact one (live_compact.go) draws a line per chip, the most
// pressed first, as many as fit. Register it before the sink
// that writes reports to the same terminal: it erases itself when a
// process ends and at the summary.
type Live struct {
	Base
	mu    sync.Mutex // the terminal: the frame and the log lines (Log)
	w     io.Writer
	every time.Duration
	size  func() (cols, rows int) // the terminal's size now
	last  time.Time
	lines int // lines of the last frame
	buf   bytes.Buffer
}

// NewLive draws on w (a terminal) every interval; size returns the
// terminal's current size, asked at each frame: its width in columns and
// its height in rows, 0 when not known (no limit on the frame's height).
// A nil size is 80 columns, rows not known.
func NewLive(w io.Writer, every time.Duration, size func() (cols, rows int)) *Live {
	if size == nil {
		size = func() (int, int) { return 80, 0 }
	}
	return &Live{w: w, every: every, size: size}
}

// liveTypes are the memory types a bar is drawn for, in report order.
var liveTypes = []struct {
	name string
	c    devices.Counter
}{
	{"DRAM", devices.CounterDRAM}, {"L1", devices.CounterL1}, {"L1_SMALL", devices.CounterL1Small},
	{"TRACE", devices.CounterTrace}, {"SYSMEM", devices.CounterSystemMemory}, {"CB", devices.CounterCB},
}

// Tick draws a frame if the interval has passed.
func (v *Live) Tick(view *View) {
	if view.Now.Sub(v.last) < v.every {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.last = view.Now
	cols, rows := v.size()
	lines := v.layout(view, max(cols, 40), rows)
	v.buf.Reset()
	if v.lines > 0 {
		fmt.Fprintf(&v.buf, "\x1b[%dA\r", v.lines)
	}
	for _, l := range lines {
		v.buf.WriteString(l)
		v.buf.WriteString("\x1b[K\n")
	}
	v.buf.WriteString("\x1b[J") // a shorter frame: clear what the last one left below
	v.lines = len(lines)
	_, _ = v.w.Write(v.buf.Bytes())
}

// layout renders view for a terminal of width columns and rows rows (0:
// not known): the full frame when it fits above the line the cursor is
// left on, else the compact one.
func (v *Live) layout(view *View, width, rows int) []string {
	lines := v.frame(view, width)
	if rows <= 0 || len(lines) < rows {
		return lines
	}
	return compactFrame(view, lines[:2], width, rows-1)
}

// frame renders view in full as lines of at most width columns, the first
// two its header.
func (v *Live) frame(view *View, width int) []string {
	l := view.Ledger
	head := fmt.Sprintf("tttrace live %s  %d events", view.Now.Format("15:04:05"), l.Events())
	if n := l.LostEvents(); n > 0 {
		head += fmt.Sprintf("  LOST %d: incomplete", n)
	}
	state := fmt.Sprintf("%d librar%s probed  %d process(es)", view.Libraries, plural(view.Libraries, "y", "ies"), len(view.Procs))
	if view.Waiting > 0 {
		state += fmt.Sprintf(" (%d waiting for libtt_metal.so)", view.Waiting)
	}
	lines := []string{head, state}
	// The per-chip totals of all processes go by physical chip; a chip
	// whose identity is not known is its process's alone.
	type chipTot struct {
		name string
		cur  devices.Totals
	}
	var all []chipTot
	at := map[string]int{}
	// A chip named by its PCI address in one process and by its unique
	// id in another is one chip (devices.ChipJoin).
	join := devices.NewChipJoin()
	for _, p := range view.Procs {
		for _, d := range l.Devices(p.Pid) {
			join.Add(&d.ChipIdentity)
		}
	}
	for _, p := range view.Procs {
		// The placement before the command, which may be long and cut.
		head := fmt.Sprintf("pid %d", p.Pid)
		if pl := p.Placement.String(); pl != "" {
			head += "  [" + Printable(pl) + "]"
		}
		lines = append(lines, head+"  "+Printable(p.Command))
		if op, ok := l.LastOp(p.Pid); ok {
			lines = append(lines, "  last allocation in "+Printable(opName(op.Name, op.DeviceOp)))
		}
		devs := l.Devices(p.Pid)
		if len(devs) == 0 {
			lines = append(lines, "  no device memory yet")
			continue
		}
		hr := l.L1Headroom(p.Pid) // sorted by chip, as devs
		for i, d := range devs {
			cur, peak := totalsOf(&d)
			state := ""
			if d.Closed {
				state = "  closed"
			}
			phys := "physical chip unknown"
			if d.UID != nil {
				phys = PhysicalName(&d.ChipIdentity)
			}
			lines = append(lines, fmt.Sprintf("  chip %d (%s)  %d buffer(s), peak %d%s", d.Device, Printable(phys), d.LiveBuffers, d.Peaks.LiveBuffers.Value, state))
			for _, t := range liveTypes {
				if t.c == devices.CounterCB {
					// Also while no core holds CBs yet but programs
					// registered some.
					if peak[t.c] != 0 || d.Peaks.CBRegisteredBytes.Value != 0 {
						lines = append(lines, bar(t.name, cur[t.c], peak[t.c], width), "             "+cbNote(&d))
					}
					continue
				}
				if peak[t.c] == 0 {
					continue
				}
				lines = append(lines, bar(t.name, cur[t.c], peak[t.c], width))
			}
			if c := d.L1BusiestCore; c != nil {
				line := "    L1/core  " + L1CoreText(c)
				if pk := d.PeakL1BusiestCore; pk != nil && pk.TotalBytes > c.TotalBytes {
					line += "; peak " + human(pk.TotalBytes)
				}
				lines = append(lines, line)
			}
			if i < len(hr) && hr[i].Device == d.Device && hr[i].HasHeadroom {
				lines = append(lines, headroomLine(hr[i]))
			}
			lines = append(lines, allocatorLines(d.Allocator, d.AllocatorWhy)...)
			name := fmt.Sprintf("pid %d chip %d (physical chip unknown)", p.Pid, d.Device)
			key := name
			if id := join.Resolve(d.ChipIdentity); id.UID != nil {
				// One physical chip, one total, however each process names it.
				name, key = PhysicalName(&id), *id.UID
				if id.UniqueID != "" {
					id.PCI = join.PCIOf(id.UniqueID)
					name = PhysicalName(&id)
				}
			}
			i, ok := at[key]
			if !ok {
				i = len(all)
				at[key] = i
				all = append(all, chipTot{name: name})
			}
			for k := range cur {
				all[i].cur[k] += cur[k]
			}
		}
		// A MeshDevice's own allocator holds its buffers, which its chips'
		// allocator lines leave out.
		for _, m := range l.MeshAllocators(p.Pid) {
			if m.Allocator == nil {
				continue
			}
			chips := make([]string, len(m.Chips))
			for j, c := range m.Chips {
				chips[j] = fmt.Sprint(c)
			}
			lines = append(lines, fmt.Sprintf("  mesh %s (chips %s)", m.MeshDevice, strings.Join(chips, ",")))
			lines = append(lines, allocatorLines(m.Allocator, "")...)
		}
	}
	if len(view.Procs) > 1 {
		lines = append(lines, "all processes, per physical chip (current)")
		for _, c := range all {
			var parts []string
			for _, t := range liveTypes {
				if c.cur[t.c] > 0 {
					parts = append(parts, t.name+" "+human(c.cur[t.c]))
				}
			}
			if len(parts) == 0 {
				parts = []string{"nothing"}
			}
			lines = append(lines, fmt.Sprintf("  %s  %s", Printable(c.name), strings.Join(parts, "  ")))
		}
	}
	for i := range lines {
		lines[i] = clip(lines[i], width)
	}
	return lines
}

// bar is one memory type's line: its current size as a bar against its
// peak (the bar's full length, marked |), then the numbers.
func bar(name string, cur, peak uint64, width int) string {
	nums := fmt.Sprintf(" %10s  peak %10s", human(cur), human(peak))
	n := width - 4 - 9 - 1 - len(nums) // indent, name, marker
	if n < 4 {
		return clip(fmt.Sprintf("    %-8s%s", name, nums), width)
	}
	fill := 0
	if peak > 0 {
		fill = int(cur * uint64(n) / peak)
	}
	if cur > 0 && fill == 0 {
		fill = 1
	}
	return fmt.Sprintf("    %-8s %s%s|%s", name, strings.Repeat("#", fill), strings.Repeat("-", n-fill), nums)
}

// cbNote, the line under a chip's CB row, says what the row counts: the
// bytes resident on its busiest core (named; cb_bytes), and, when they
// differ from them, the per-core sizes of the CBs of every program holding
// CBs, summed (cb_registered_bytes: TT-NN's program cache can register
// more than a core's L1).
func cbNote(d *devices.DeviceSummary) string {
	note := "resident on the busiest core"
	if c := d.CBBusiestCore; c != nil {
		note = fmt.Sprintf("resident on the busiest core (%d,%d)", c[0], c[1])
	} else if d.CBBytes == 0 {
		note = "none resident"
	}
	if d.CBRegisteredBytes != d.CBBytes {
		note += "; programs registered " + human(d.CBRegisteredBytes)
	}
	return note
}

// allocatorLines are a chip's allocator as nvidia-smi shows a GPU's
// memory: per buffer type, what the allocator holds of its capacity (banks
// x per-bank bytes), the percentage, and the largest free block per bank.
func allocatorLines(a *devices.Allocator, why string) []string {
	if a == nil {
		return []string{"    allocator unknown: " + why}
	}
	var out []string
	for _, t := range devices.AllocatorTypes() {
		at := a.Type(t)
		if at == nil || at.Banks == 0 || at.BankSize == 0 {
			continue
		}
		name := t.String() + " alloc"
		capacity := devices.SatMul(uint64(at.Banks), at.BankSize)
		st, ok := at.Stats()
		if !ok {
			out = append(out, fmt.Sprintf("    %-14s ? / %s: unknown (%s)", name, human(capacity), at.Why))
			continue
		}
		used := devices.SatMul(uint64(at.Banks), st.TotalAllocated)
		line := fmt.Sprintf("    %-14s %10s / %-10s %5.1f%%  largest free block %s x %d bank(s)",
			name, human(used), human(capacity), 100*float64(st.TotalAllocated)/float64(at.BankSize), human(st.LargestFreeBlock), at.Banks)
		if at.Failures > 0 {
			line += fmt.Sprintf("  %d FAILED", at.Failures)
		}
		out = append(out, line)
	}
	return out
}

// headroomLine is a chip's L1 headroom: the room between the end of its
// programs' circular buffers and its lowest L1 buffer, which TT-Metal
// needs to stay positive.
func headroomLine(h devices.Headroom) string {
	if h.Headroom < 0 {
		return fmt.Sprintf("    L1 headroom -%s: CLASH (CBs end at %#x, above the L1 buffer at %#x)",
			human(uint64(-h.Headroom)), h.CBRegionEnd, h.LowestL1Address)
	}
	return fmt.Sprintf("    L1 headroom %s (CBs end at %#x, lowest L1 buffer at %#x)",
		human(uint64(h.Headroom)), h.CBRegionEnd, h.LowestL1Address)
}

// totalsOf is a DeviceSummary's current totals and peaks by counter.
func totalsOf(d *devices.DeviceSummary) (cur, peak devices.Totals) {
	cur[devices.CounterDRAM], peak[devices.CounterDRAM] = d.DRAMBytes, d.Peaks.DRAMBytes.Value
	cur[devices.CounterL1], peak[devices.CounterL1] = d.L1Bytes, d.Peaks.L1Bytes.Value
	cur[devices.CounterL1Small], peak[devices.CounterL1Small] = d.L1SmallBytes, d.Peaks.L1SmallBytes.Value
	cur[devices.CounterTrace], peak[devices.CounterTrace] = d.TraceBytes, d.Peaks.TraceBytes.Value
	cur[devices.CounterSystemMemory], peak[devices.CounterSystemMemory] = d.SystemMemoryBytes, d.Peaks.SystemMemoryBytes.Value
	cur[devices.CounterCB], peak[devices.CounterCB] = d.CBBytes, d.Peaks.CBBytes.Value
	cur[devices.CounterLiveBuffers], peak[devices.CounterLiveBuffers] = d.LiveBuffers, d.Peaks.LiveBuffers.Value
	return cur, peak
}

// clip cuts s to width columns (runes), marking the cut.
func clip(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "~"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Log is w for tttrace's own lines (its log) while the view draws on the
// same terminal: each write erases the frame first and goes above it; the
// next tick draws the frame again below. Without it a line written while
// a frame is up would land inside the frame and be overwritten.
func (v *Live) Log(w io.Writer) io.Writer { return liveLog{v, w} }

type liveLog struct {
	v *Live
	w io.Writer
}

func (l liveLog) Write(p []byte) (int, error) {
	l.v.mu.Lock()
	defer l.v.mu.Unlock()
	l.v.eraseLocked()
	return l.w.Write(p)
}

// ProcessEnded erases the view: a report follows.
func (v *Live) ProcessEnded(*devices.Summary, bool) { v.erase() }

// Summary erases the view before the final report.
func (v *Live) Summary(*devices.Summary) error {
	v.erase()
	return nil
}

// Close erases the view.
func (v *Live) Close() error {
	v.erase()
	return nil
}

// erase removes the last frame.
func (v *Live) erase() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.eraseLocked()
}

func (v *Live) eraseLocked() {
	if v.lines == 0 {
		return
	}
	fmt.Fprintf(v.w, "\x1b[%dA\r\x1b[J", v.lines)
	v.lines = 0
}
