package diff

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/tttrace/tttrace/sinks"
)

// Caps of the human table; --json has everything.
const (
	textSites   = 10 // sites listed per process
	textFrames  = 6  // native frames shown per site
	textRecords = 10 // records listed per process and status
	textOps     = 10 // ops rows listed per process
)

// counterLabels name the counters in the table as the report does.
var counterLabels = [nCounters]string{"DRAM", "L1", "L1_SMALL", "TRACE", "SYSMEM", "CB", "BUFFERS", "CB_REG", "CB_TOTAL", "L1/CORE"}

func label(counter string) string {
	for i, n := range counterNames {
		if n == counter {
			return counterLabels[i]
		}
	}
	return counter
}

// WriteText writes the comparison for people: per process that changed,
// a table of its chips' counters (end and peak in A and B, and when each
// peak came), then its leaks, allocator numbers, sites and records.
func (r *Result) WriteText(w io.Writer) error {
	t := &text{sinks.Text{W: bufio.NewWriter(w)}}
	t.result(r)
	if err := t.W.Flush(); err != nil {
		return err
	}
	return t.Err
}

// text writes the comparison, for people (sinks.Text: every string made
// Printable, as the runs' commands, paths and names come from processes).
type text struct{ sinks.Text }

func (t *text) result(r *Result) {
	t.Printf("tttrace diff\n")
	for _, x := range []struct {
		name string
		ri   *RunInfo
	}{{"A", &r.A}, {"B", &r.B}} {
		t.Printf("  %s: %s: %d process(es), %d events", x.name, x.ri.File, x.ri.Processes, x.ri.Events)
		if x.ri.SummaryOnly {
			t.Printf(" (a summary alone)")
		}
		if x.ri.Dropped > 0 {
			t.Printf(", %d ended process(es) folded away by the run, not compared", x.ri.Dropped)
		}
		t.Printf("\n")
		if x.ri.LostEvents > 0 {
			t.Printf("  INCOMPLETE: %s lost %d events: its totals, peaks and leaks may be wrong, and so may the changes below\n", x.name, x.ri.LostEvents)
		}
		if x.ri.LayoutAnomalies > 0 {
			t.Printf("  UNTRUSTED: %s read %d buffer(s) with an impossible type or size (its layout did not fit the library)\n", x.name, x.ri.LayoutAnomalies)
		}
	}
	if r.SitesBy == "leaks" {
		t.Printf("  sites are compared by what they hold at the end only: a run is a summary alone (--no-events)\n")
	}
	if r.Same {
		t.Printf("\nno change: %d process(es) matched, each the same in both runs\n", r.Unchanged)
		return
	}
	if r.Unchanged > 0 {
		t.Printf("  %d process(es) matched with no change\n", r.Unchanged)
	}
	for i := range r.Processes {
		t.Printf("\n")
		t.process(&r.Processes[i])
	}
	t.Printf("\n")
	if len(r.Growth) == 0 {
		t.Printf("growth: no memory counter is higher in B\n")
		return
	}
	g := &r.Growth[0]
	t.Printf("growth: %d memory counter(s) higher in B; the most: %s chip %d %s at %s %s -> %s (+%s%s)\n",
		len(r.Growth), procName(g.PidA, g.PidB), g.Device, label(g.Counter), GrowthAt(g), human(g.A), human(g.B), human(g.Bytes), pct(g.Pct))
}

// GrowthAt says where g grew: "the end", "the peak", or "the peak of
// window N (NAME)".
func GrowthAt(g *Growth) string {
	if w := g.Window; w != nil {
		return "the peak of " + windowName(w.Index, w.Name)
	}
	return "the " + g.At
}

func windowName(index int, name string) string {
	if name == "" {
		return fmt.Sprintf("window %d", index)
	}
	return fmt.Sprintf("window %d (%s)", index, name)
}

func pct(p *float64) string {
	if p == nil {
		return ", from nothing"
	}
	return fmt.Sprintf(", %+.1f%%", *p)
}

func procName(a, b *uint32) string {
	switch {
	case a != nil && b != nil:
		return fmt.Sprintf("pid %d/%d", *a, *b)
	case a != nil:
		return fmt.Sprintf("pid %d (A)", *a)
	case b != nil:
		return fmt.Sprintf("pid %d (B)", *b)
	}
	return "?"
}

func (t *text) process(d *ProcessDiff) {
	switch d.Status {
	case "appeared":
		t.Printf("process %d (%s): only in B\n", *d.PidB, d.Command)
	case "vanished":
		t.Printf("process %d (%s): only in A\n", *d.PidA, d.Command)
	default:
		t.Printf("process %d in A, %d in B (%s)\n", *d.PidA, *d.PidB, d.Command)
		if d.CommandB != "" {
			t.Printf("  B's command: %s (the runs' only unmatched processes, compared)\n", d.CommandB)
		}
	}
	if e := d.Exit; e != nil {
		t.Printf("  ended: %s in A, %s in B\n", exitText(e.A), exitText(e.B))
	}
	t.chips(d)
	t.leaks(d)
	t.allocators(d)
	if d.Trimmed {
		t.Printf("  sites and records not compared: a run kept only this process's totals (--keep-ended)\n")
	}
	t.sites(d)
	t.records(d)
	t.windows(d)
	t.ops(d)
}

func exitText(e ExitFig) string {
	switch {
	case !e.Exited:
		return "running"
	case e.Signal > 0:
		return fmt.Sprintf("signal %d", e.Signal)
	}
	return fmt.Sprintf("exit %d", e.Code)
}

func (t *text) chips(d *ProcessDiff) {
	n := 0
	for i := range d.Chips {
		n += len(d.Chips[i].Counters)
	}
	if n == 0 {
		return
	}
	t.Printf("  %-6s %-8s %10s %10s %11s %10s %10s %11s  %s\n", "CHIP", "", "END A", "END B", "CHANGE", "PEAK A", "PEAK B", "CHANGE", "PEAK AT (A / B)")
	for i := range d.Chips {
		c := &d.Chips[i]
		chip := fmt.Sprint(c.Device)
		if c.Status != "changed" {
			chip += " (" + map[string]string{"appeared": "B only", "vanished": "A only"}[c.Status] + ")"
		}
		for _, cd := range c.Counters {
			f := human
			if cd.Counter == counterNames[cLiveBuffers] {
				f = func(v uint64) string { return fmt.Sprint(v) }
			}
			t.Printf("  %-6s %-8s %10s %10s %11s %10s %10s %11s  %s / %s\n", chip, label(cd.Counter),
				f(cd.End.A), f(cd.End.B), signed(cd.End.Delta, f), f(cd.Peak.A), f(cd.Peak.B), signed(cd.Peak.Delta, f),
				since(cd.PeakAtA), since(cd.PeakAtB))
		}
		if h := c.MinL1Headroom; h != nil {
			t.Printf("  %-6s min L1 headroom %s -> %s\n", chip, headroom(h.A), headroom(h.B))
		}
	}
}

func signed(d int64, f func(uint64) string) string {
	switch {
	case d > 0:
		return "+" + f(uint64(d))
	case d < 0:
		return "-" + f(uint64(-d))
	}
	return "0"
}

// since writes a time after the process's first event.
func since(ns *uint64) string {
	if ns == nil {
		return "-"
	}
	return fmt.Sprintf("+%.3fs", float64(*ns)/1e9)
}

func headroom(v *int64) string {
	switch {
	case v == nil:
		return "none"
	case *v < 0:
		return "-" + human(uint64(-*v))
	}
	return human(uint64(*v))
}

func (t *text) leaks(d *ProcessDiff) {
	first := true
	for i := range d.Chips {
		c := &d.Chips[i]
		for _, l := range c.Leaks {
			if first {
				t.Printf("  leaks:\n")
				first = false
			}
			t.Printf("    chip %d %s: %d -> %d buffer(s), %s -> %s (%s)\n", c.Device, l.Type, l.Count.A, l.Count.B,
				human(l.Bytes.A), human(l.Bytes.B), signed(l.Bytes.Delta, human))
		}
	}
}

func (t *text) allocators(d *ProcessDiff) {
	first := true
	head := func() {
		if first {
			t.Printf("  allocator (per bank, as get_statistics):\n")
			first = false
		}
	}
	for i := range d.Chips {
		c := &d.Chips[i]
		for j := range c.Allocator {
			head()
			t.allocLine(fmt.Sprintf("chip %d", c.Device), &c.Allocator[j])
		}
	}
	for i := range d.Meshes {
		m := &d.Meshes[i]
		for j := range m.Allocator {
			head()
			t.allocLine(fmt.Sprintf("mesh over chips %s", chipList(m.Chips)), &m.Allocator[j])
		}
	}
}

func chipList(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

func (t *text) allocLine(where string, a *AllocDiff) {
	opt := func(v *uint64) string {
		if v == nil {
			return "unknown"
		}
		return human(*v)
	}
	parts := []string{}
	for _, f := range []struct {
		name string
		n    OptNum
	}{{"allocated", a.Allocated}, {"free", a.Free}, {"largest free block", a.LargestFree}, {"per-core", a.PerCoreBytes}} {
		if f.n.same() {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, opt(f.n.A), opt(f.n.B)))
	}
	if !a.Failures.same() {
		cnt := func(v *uint64) string {
			if v == nil {
				return "-"
			}
			return fmt.Sprint(*v)
		}
		parts = append(parts, fmt.Sprintf("failures %s -> %s", cnt(a.Failures.A), cnt(a.Failures.B)))
	}
	t.Printf("    %s %s: %s\n", where, a.Type, strings.Join(parts, ", "))
}

func (t *text) sites(d *ProcessDiff) {
	if len(d.Sites) == 0 {
		return
	}
	counts := map[string]int{}
	var order []string
	for i := range d.Sites {
		s := d.Sites[i].Status
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	t.Printf("  sites (by chip and type): %s\n", strings.Join(parts, ", "))
	for i := range d.Sites {
		if i == textSites {
			t.Printf("    … %d more (--json lists them all)\n", len(d.Sites)-i)
			break
		}
		s := &d.Sites[i]
		t.Printf("    %-9s chip %d %s: in use %s -> %s (%d -> %d)", s.Status, s.Device, s.Type,
			human(s.A.InUseBytes), human(s.B.InUseBytes), s.A.InUseObjects, s.B.InUseObjects)
		if s.A.AllocObjects+s.B.AllocObjects+s.A.PeakBytes+s.B.PeakBytes > 0 {
			t.Printf(", at the peak %s -> %s, allocated %s -> %s (%d -> %d)", human(s.A.PeakBytes), human(s.B.PeakBytes),
				human(s.A.AllocBytes), human(s.B.AllocBytes), s.A.AllocObjects, s.B.AllocObjects)
		}
		t.Printf("\n")
		t.site(s.Site, "      ")
	}
}

// site writes a site's innermost Python frame and its native frames from
// the library's entry point (the outermost of the innermost module's
// frames) out.
func (t *text) site(s *SiteRef, indent string) {
	if s == nil || s.Unknown {
		t.Printf("%s(no stack: stacks off, or lost)\n", indent)
		return
	}
	if len(s.Python) > 0 {
		f := s.Python[0]
		t.Printf("%s%s:%d in %s\n", indent, f.File, f.Line, f.Function)
	}
	first := 0
	for first+1 < len(s.Native) && s.Native[first+1].Module == s.Native[0].Module {
		first++
	}
	for j := first; j < len(s.Native); j++ {
		if j-first == textFrames {
			t.Printf("%s… %d more frames\n", indent, len(s.Native)-j)
			break
		}
		t.Printf("%s%s\n", indent, frameText(&s.Native[j]))
	}
	if s.Truncated {
		t.Printf("%s(stack truncated)\n", indent)
	}
}

func frameText(f *Frame) string {
	var s string
	switch {
	case f.Function != "":
		s = f.Function
	case f.Offset != nil:
		s = fmt.Sprintf("%s+%#x", f.Module, *f.Offset)
	default:
		return "?"
	}
	if f.File != "" {
		s += fmt.Sprintf(" (%s:%d)", f.File, f.Line)
	}
	if f.Function != "" && f.Module != "" {
		s += " [" + f.Module + "]"
	}
	return s
}

var recordNames = map[string]string{
	"alloc_failed":         "failed allocation",
	"l1_clash":             "L1 clash",
	"trace_hazard":         "trace hazard",
	"trace_replay_invalid": "invalid trace replay",
	"trace_region_hazard":  "trace region hazard",
}

func (t *text) records(d *ProcessDiff) {
	if c := d.Counts; c != nil {
		t.Printf("  failed allocations %d -> %d, L1 clashes %d -> %d, trace problems %d -> %d\n",
			c.A.AllocFailures, c.B.AllocFailures, c.A.L1Clashes, c.B.L1Clashes, c.A.TraceProblems, c.B.TraceProblems)
	}
	shown := map[string]int{}
	for i := range d.Records {
		rd := &d.Records[i]
		if shown[rd.Status]++; shown[rd.Status] > textRecords {
			if shown[rd.Status] == textRecords+1 {
				t.Printf("    … more %s records (--json lists them all)\n", rd.Status)
			}
			continue
		}
		r := rd.Record
		t.Printf("  %s %s (%d in A, %d in B):", rd.Status, recordNames[r.Kind], rd.CountA, rd.CountB)
		if r.Device != nil {
			t.Printf(" chip %d", *r.Device)
		}
		if len(r.MeshChips) > 0 {
			t.Printf(" mesh over chips %s", chipList(r.MeshChips))
		}
		if r.BufferType != "" {
			t.Printf(" %s", r.BufferType)
		}
		if r.Size > 0 {
			t.Printf(" %s", human(r.Size))
		}
		if r.Cause != "" {
			t.Printf(" %s", r.Cause)
		}
		if r.Reason != "" {
			t.Printf(" (%s)", r.Reason)
		}
		if r.Kind == "l1_clash" {
			t.Printf(" CBs end at %#x, lowest L1 buffer at %#x", r.CBRegionEnd, r.LowestL1Address)
		}
		t.Printf("\n")
		if r.Site != nil {
			t.site(r.Site, "      ")
		}
		if r.Other != nil {
			t.Printf("    overlapping the captured buffer allocated at:\n")
			t.site(r.Other, "      ")
		}
	}
}

// human formats a byte count as the report does.
func human(n uint64) string { return sinks.HumanBytes(n) }

func (t *text) windows(d *ProcessDiff) {
	if n := d.WindowsDropped; n != nil {
		t.Printf("  windows dropped by the runs (past 64): %d in A, %d in B; a window one lacks may be among them\n", n.A, n.B)
	}
	if len(d.Windows) == 0 {
		return
	}
	t.Printf("  windows (peaks in the window; memory_stats at its end):\n")
	idx := func(i *int) string {
		if i == nil {
			return "-"
		}
		return fmt.Sprint(*i)
	}
	for i := range d.Windows {
		w := &d.Windows[i]
		var where string
		switch w.Status {
		case "appeared":
			where = windowName(*w.IndexB, w.Name) + ": only in B"
		case "vanished":
			where = windowName(*w.IndexA, w.Name) + ": only in A"
		default:
			where = windowName(*w.IndexA, w.Name)
			if *w.IndexB != *w.IndexA || w.NameB != "" {
				where += ", in B " + windowName(*w.IndexB, w.NameB)
			}
		}
		t.Printf("    %s (index A %s, B %s)\n", where, idx(w.IndexA), idx(w.IndexB))
		for j := range w.Chips {
			c := &w.Chips[j]
			chip := fmt.Sprintf("chip %d", c.Device)
			if c.Status != "changed" {
				chip += " (" + map[string]string{"appeared": "B only", "vanished": "A only"}[c.Status] + ")"
			}
			for _, p := range c.Peaks {
				f := human
				if p.Counter == counterNames[cLiveBuffers] {
					f = func(v uint64) string { return fmt.Sprint(v) }
				}
				t.Printf("      %s %s peak %s -> %s (%s), at %s / %s\n", chip, label(p.Counter), f(p.Peak.A), f(p.Peak.B),
					signed(p.Peak.Delta, f), since(p.PeakAtA), since(p.PeakAtB))
			}
			for k := range c.MemoryStats {
				m := &c.MemoryStats[k]
				opt := func(v *uint64) string {
					if v == nil {
						return "none"
					}
					return human(*v)
				}
				parts := []string{}
				for _, f := range []struct {
					name string
					n    OptNum
				}{{"bytes_in_use", m.BytesInUse}, {"peak_bytes_in_use", m.PeakBytesInUse}, {"bytes_limit", m.BytesLimit},
					{"largest_free_block_bytes", m.LargestFreeBlockBytes}} {
					if !f.n.same() {
						parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, opt(f.n.A), opt(f.n.B)))
					}
				}
				t.Printf("      %s memory_stats %s: %s\n", chip, m.Type, strings.Join(parts, ", "))
			}
		}
	}
}

// opFigs name an ops row's figures as the summary does, with whether
// each is bytes.
var opFigs = [9]struct {
	name  string
	bytes bool
}{{"calls", false}, {"allocs", false}, {"bytes", true}, {"peak_dram_bytes", true}, {"peak_l1_bytes", true}, {"cb_bytes", true},
	{"alloc_failures", false}, {"leaked_buffers", false}, {"leaked_bytes", true}}

func (t *text) ops(d *ProcessDiff) {
	if n := d.OpsDropped; n != nil {
		t.Printf("  records of TT-NN ops rows dropped by the runs (past 4096 rows): %d in A, %d in B; a row one lacks may be among them\n", n.A, n.B)
	}
	if len(d.Ops) == 0 {
		return
	}
	t.Printf("  TT-NN ops (by op and device op):\n")
	for i := range d.Ops {
		if i == textOps {
			t.Printf("    … %d more (--json lists them all)\n", len(d.Ops)-i)
			break
		}
		o := &d.Ops[i]
		name := o.Name
		if name == "" {
			name = "(no op)"
		}
		if o.DeviceOp != "" {
			name += " > " + o.DeviceOp
		}
		xa, xb := o.A.figures(), o.B.figures()
		parts := []string{}
		for k, f := range opFigs {
			if xa[k] == xb[k] {
				continue
			}
			if f.bytes {
				parts = append(parts, fmt.Sprintf("%s %s -> %s", f.name, human(xa[k]), human(xb[k])))
			} else {
				parts = append(parts, fmt.Sprintf("%s %d -> %d", f.name, xa[k], xb[k]))
			}
		}
		t.Printf("    %-9s %s: %s\n", o.Status, name, strings.Join(parts, ", "))
	}
}
