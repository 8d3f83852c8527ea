package sinks

import (
	"bufio"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
)

// Caps of the human report; the JSON summary has everything.
const (
	reportLeaksPerGroup = 10
	reportLeakSites     = 5 // sites listed
	reportSiteFrames    = 6 // native frames shown per site
	reportAnomalies     = 20
)

// writeReport writes the human report of s: per process a per-chip
// table of current totals and peaks, leaks grouped by chip and type, frees
// that matched nothing, anomalies, and loss, loudly.
func writeReport(w io.Writer, s *devices.Summary) error {
	bw := bufio.NewWriter(w)
	r := reporter{Text{W: bw}}
	r.summary(s)
	if err := bw.Flush(); err != nil {
		return err
	}
	return r.Err
}

// Report writes the human report: one per process that ends while others
// are traced, and the final report of everything when tracing ends.
type Report struct {
	Base
	w    *bufio.Writer
	snap OpenFunc // snapshots' own files (nil: in the stream)
}

// NewReport writes to w.
func NewReport(w io.Writer) *Report { return &Report{w: bufio.NewWriter(w)} }

// ProcessEnded writes the process's report at once when others go on.
func (r *Report) ProcessEnded(one *devices.Summary, more bool) {
	if !more {
		return
	}
	_ = writeReport(r.w, one)
	_ = r.w.Flush()
}

// Summary writes the final report.
func (r *Report) Summary(s *devices.Summary) error {
	if err := writeReport(r.w, s); err != nil {
		return err
	}
	return r.w.Flush()
}

// Close flushes what is buffered.
func (r *Report) Close() error { return r.w.Flush() }

// reporter writes the report, for people (Text).
type reporter struct{ Text }

func (r *reporter) summary(s *devices.Summary) {
	r.Printf("tttrace report: %d process(es), %d events\n", len(s.Processes), s.Events)
	if !s.Complete || s.LostEvents > 0 {
		r.Printf("INCOMPLETE: %d events lost: the totals, peaks and leaks below may be wrong\n", s.LostEvents)
	}
	if len(s.LostRecords) > 0 {
		r.Printf("lost records by kind: %s (stacks and Python records lost leave the ledger exact, without those sites)\n", lostKinds(s.LostRecords))
	}
	if s.LoaderCallsDropped > 0 {
		r.Printf("%d call(s) of the dynamic loader's _dl_debug_state over their process's budget were not recorded (the process's maps were read again instead)\n", s.LoaderCallsDropped)
	}
	if s.LayoutAnomalies > 0 {
		r.Printf("UNTRUSTED: %d buffer(s) read with an impossible buffer type or size: the layout tttrace reads Buffer with does not fit the library, so the numbers below cannot be trusted\n", s.LayoutAnomalies)
	}
	for i := range s.Processes {
		r.Printf("\n")
		r.process(&s.Processes[i])
	}
	if d := s.DroppedProcesses; d != nil {
		r.Printf("\n%d earlier ended process(es) not listed (past --keep-ended-totals): %d event(s), %d leak(s) of %s, %d anomalies\n",
			d.Processes, d.Events, d.Leaks, human(d.LeakedBytes), d.Anomalies)
	}
	if !s.Complete || s.LostEvents > 0 {
		r.Printf("\nINCOMPLETE: %d events lost\n", s.LostEvents)
	}
}

func (r *reporter) process(p *devices.ProcessSummary) {
	r.Printf("process %d", p.Pid)
	if p.NsPid != 0 && p.NsPid != p.Pid {
		r.Printf(" (pid %d in its namespace)", p.NsPid)
	}
	if p.Command != "" {
		r.Printf(" (%s)", p.Command)
	}
	if p.Parent != 0 {
		r.Printf(", parent %d", p.Parent)
	}
	if p.Rank != nil || p.MeshID != nil || p.MeshHostRank != nil || p.PodUID != "" {
		r.Printf(", %s", p.Placement)
	}
	switch {
	case !p.Exited:
		r.Printf(": still running when tracing stopped")
	case p.ExitSignal != 0:
		name := unix.SignalName(syscall.Signal(p.ExitSignal))
		if name == "" {
			name = "?"
		}
		r.Printf(": killed by signal %d (%s)", p.ExitSignal, name)
	case p.ExitCode < 0:
		r.Printf(": exited (status unknown)")
	default:
		r.Printf(": exited with code %d", p.ExitCode)
	}
	r.Printf("\n")
	switch {
	case p.LateLibrary:
		r.Printf("  INCOMPLETE: its TT-Metal library was probed only after it mapped it: its calls before are missed, earlier buffers are unknown and peaks are lower bounds (give --lib)\n")
	case p.AttachedMidRun:
		r.Printf("  started late: tttrace attached after the library was in use; earlier buffers are unknown and peaks are lower bounds\n")
	}

	if len(p.Devices) == 0 {
		r.Printf("  no device activity\n")
	} else {
		r.table(p.Devices)
		r.l1Cores(p.Devices)
		r.physical(p.Devices)
		r.allocator(p.Devices)
		r.meshAllocators(p.Meshes)
	}
	r.windows(p)
	r.ops(p)

	r.allocFailures(p)
	r.traces(p)
	r.l1(p)
	r.leaks(p)
	r.leakSites(p)

	if p.UnknownFrees > 0 {
		r.Printf("  unknown frees: %d (%s) of buffers allocated before tttrace attached\n", p.UnknownFrees, human(p.UnknownFreeBytes))
	}
	if p.DoubleFrees > 0 {
		r.Printf("  double frees: %d\n", p.DoubleFrees)
	}
	r.anomalies(p)
}

// physical says which physical chip each chip id is (host-wide sums go by
// it), or why that is not known: once when all share the reason.
func (r *reporter) physical(devs []devices.DeviceSummary) {
	var known []string
	why := map[string][]string{}
	var order []string
	for _, d := range devs {
		if d.UID != nil {
			s := fmt.Sprintf("chip %d = %s", d.Device, PhysicalName(&d.ChipIdentity))
			if d.Dev != "" {
				s += " (" + d.Dev + ")"
			}
			known = append(known, s)
			continue
		}
		if _, ok := why[d.Why]; !ok {
			order = append(order, d.Why)
		}
		why[d.Why] = append(why[d.Why], fmt.Sprint(d.Device))
	}
	if len(known) > 0 {
		r.Printf("  physical chips: %s\n", strings.Join(known, ", "))
	}
	for _, w := range order {
		if len(known) == 0 && len(order) == 1 {
			r.Printf("  physical chips unknown: %s\n", w)
			continue
		}
		r.Printf("  chip(s) %s: physical chip unknown: %s\n", strings.Join(why[w], ", "), w)
	}
}

// l1Cores writes each chip's L1 per core: the busiest core now and when
// its total was highest (docs/ttmetal.md §12).
func (r *reporter) l1Cores(devs []devices.DeviceSummary) {
	first := true
	for _, d := range devs {
		if d.L1BusiestCore == nil && d.PeakL1BusiestCore == nil {
			continue
		}
		if first {
			r.Printf("  L1 per core (the busiest core: L1 buffers and resident circular buffers):\n")
			first = false
		}
		if d.L1BusiestCore != nil {
			r.Printf("    chip %d now: %s\n", d.Device, L1CoreText(d.L1BusiestCore))
		}
		if pk := d.PeakL1BusiestCore; pk != nil {
			r.Printf("    chip %d peak: %s (ts %d)\n", d.Device, L1CoreText(pk), pk.TsNs)
		}
	}
}

// CB is what the busiest core holds resident, CB_REG what the programs
// holding CBs registered, summed (docs/ndjson.md, cb_bytes).
var tableHeader = []string{"CHIP", "DRAM", "L1", "L1_SMALL", "TRACE", "SYSMEM", "CB", "CB_REG", "BUFFERS"}

func (r *reporter) table(devs []devices.DeviceSummary) {
	rows := [][]string{tableHeader}
	for _, d := range devs {
		chip := fmt.Sprint(d.Device)
		if d.Closed {
			chip += " (closed)"
		}
		rows = append(rows,
			[]string{chip, human(d.DRAMBytes), human(d.L1Bytes), human(d.L1SmallBytes), human(d.TraceBytes),
				human(d.SystemMemoryBytes), human(d.CBBytes), human(d.CBRegisteredBytes), fmt.Sprint(d.LiveBuffers)},
			[]string{"  peak", human(d.Peaks.DRAMBytes.Value), human(d.Peaks.L1Bytes.Value), human(d.Peaks.L1SmallBytes.Value),
				human(d.Peaks.TraceBytes.Value), human(d.Peaks.SystemMemoryBytes.Value), human(d.Peaks.CBBytes.Value),
				human(d.Peaks.CBRegisteredBytes.Value), fmt.Sprint(d.Peaks.LiveBuffers.Value)})
	}
	width := make([]int, len(tableHeader))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, cell := range row {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[i], cell)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], cell)
			}
		}
		r.Printf("%s\n", b.String())
	}
}

// trimmedLeaks reports the leaks of a process kept as totals only.
func (r *reporter) trimmedLeaks(p *devices.ProcessSummary) {
	t := p.Trimmed
	var n, bytes uint64
	for _, g := range p.LeakGroups {
		n += g.Count
		bytes = devices.SatAdd(bytes, g.Bytes)
	}
	if n == 0 && t.UnplacedLeaks == 0 {
		r.Printf("  no leaks\n")
	} else {
		r.Printf("  leaked: %d buffer(s) on chips, %s\n", n, human(bytes))
		for _, g := range p.LeakGroups {
			r.Printf("    chip %d %s: %d buffer(s), %s\n", g.Device, g.Type, g.Count, human(g.Bytes))
		}
		if t.UnplacedLeaks > 0 {
			r.Printf("  leaked on chips never learned: %d mesh buffer(s), %s\n", t.UnplacedLeaks, human(t.UnplacedBytes))
		}
	}
	r.Printf("  kept as totals only (more than --keep-ended processes ended after it): %d leak entries, %d site(s), %d anomaly detail(s) not kept\n",
		t.Leaks+t.UnplacedLeaks, t.Sites, t.Anomalies)
}

func (r *reporter) leaks(p *devices.ProcessSummary) {
	if p.Trimmed != nil {
		r.trimmedLeaks(p)
		return
	}
	if p.LeakCount() == 0 && p.UnplacedLeakCount() == 0 {
		r.Printf("  no leaks\n")
		return
	}
	var n, bytes uint64
	for _, g := range p.LeakGroups {
		n += g.Count
		bytes += g.Bytes
	}
	verb := "leaked"
	if !p.Exited {
		verb = "still allocated"
	}
	r.Printf("  %s: %d buffer(s) on chips, %s\n", verb, n, human(bytes))
	// The leaks come in group order (LeakGroups sums them). A mesh buffer
	// is one leak per chip of its mesh: its groups count it, and it is
	// listed once, below, with its chips.
	type meshLeak struct {
		lk    devices.Leak
		chips []int32
	}
	var meshes []*meshLeak
	meshOf := map[meshKey]*meshLeak{}
	next, stop := iter.Pull(p.AllLeaks())
	defer stop()
	for _, g := range p.LeakGroups {
		r.Printf("    chip %d %s: %d buffer(s), %s\n", g.Device, g.Type, g.Count, human(g.Bytes))
		shown, own, inMesh := 0, uint64(0), uint64(0)
		for i := uint64(0); i < g.Count; i++ {
			lk, ok := next()
			if !ok {
				break
			}
			if lk.Mesh {
				inMesh++
				k := meshKey{lk.Buffer, lk.Seq}
				m := meshOf[k]
				if m == nil {
					m = &meshLeak{lk: *lk}
					meshOf[k] = m
					meshes = append(meshes, m)
				}
				m.chips = append(m.chips, lk.Device)
				continue
			}
			own++
			if shown < reportLeaksPerGroup {
				r.leak(lk, "")
				shown++
			}
		}
		if own > uint64(shown) {
			r.Printf("      … %d more\n", own-uint64(shown))
		}
		if inMesh > 0 {
			r.Printf("      and %d mesh buffer(s), listed below\n", inMesh)
		}
	}
	if len(meshes) > 0 {
		r.Printf("    mesh buffers (each counted on every chip of its mesh): %d\n", len(meshes))
		for i, m := range meshes {
			if i == reportLeaksPerGroup {
				r.Printf("      … %d more\n", len(meshes)-i)
				break
			}
			sort.Slice(m.chips, func(a, b int) bool { return m.chips[a] < m.chips[b] })
			r.leak(&m.lk, chipRanges(m.chips))
		}
	}
	if n := p.UnplacedLeakCount(); n > 0 {
		r.Printf("    on meshes whose chips were never seen: %d buffer(s)\n", n)
		j := 0
		for lk := range p.AllUnplacedLeaks() {
			if j == reportLeaksPerGroup {
				r.Printf("      … %d more\n", n-j)
				break
			}
			r.leak(lk, "")
			j++
		}
	}
}

// leakSites lists the sites that leaked most: the test, the Python line
// and the first native frames of each.
func (r *reporter) leakSites(p *devices.ProcessSummary) {
	if p.LoaderCallsDropped > 0 {
		r.Printf("  loader calls over budget: %d (not recorded; maps read again)\n", p.LoaderCallsDropped)
	}
	if p.LostStacks > 0 {
		r.Printf("  lost stacks: %d allocation(s) without a site (the ring buffer was too full)\n", p.LostStacks)
	}
	if len(p.SitesMissing) > 0 {
		r.Printf("  %s\n", sitesMissingText(p.SitesMissing))
	}
	if len(p.LeakSites) == 0 {
		return
	}
	sites := make(map[uint32]*devices.Site, len(p.Sites))
	for i := range p.Sites {
		sites[p.Sites[i].Site] = &p.Sites[i]
	}
	r.Printf("  top leak sites:\n")
	for i, ls := range p.LeakSites {
		if i == reportLeakSites {
			r.Printf("    … %d more sites (the JSON summary lists them all)\n", len(p.LeakSites)-i)
			break
		}
		chips := make([]string, len(ls.Devices))
		for j, d := range ls.Devices {
			chips[j] = fmt.Sprint(d)
		}
		on := "chip"
		if len(chips) > 1 {
			on = "chips"
		}
		r.Printf("    site %d: %d buffer(s), %s on %s %s", ls.Site, ls.Count, human(ls.Bytes), on, strings.Join(chips, ","))
		if ls.Test != "" {
			r.Printf(" in %s", ls.Test)
		}
		r.Printf("\n")
		s := sites[ls.Site]
		if s == nil {
			continue
		}
		if len(s.Python) > 0 {
			f := s.Python[0]
			r.Printf("      %s:%d in %s\n", f.File, f.Line, f.Function)
		}
		// From the library's entry point (the outermost of the innermost
		// module's frames) out: where the program called TT-Metal.
		first := 0
		for first+1 < len(s.Native) && s.Native[first+1].Module == s.Native[0].Module {
			first++
		}
		for j := first; j < len(s.Native); j++ {
			if j-first == reportSiteFrames {
				r.Printf("      … %d more frames\n", len(s.Native)-j)
				break
			}
			r.Printf("      %s\n", nativeString(&s.Native[j]))
		}
		if s.Truncated {
			r.Printf("      (stack truncated)\n")
		}
	}
}

// nativeString renders a frame as function+0xoff (file:line) [module].
func nativeString(f *devices.NativeFrame) string {
	var s string
	mod := filepath.Base(f.Module)
	switch {
	case f.Function != "":
		s = fmt.Sprintf("%s+%#x", f.Function, f.Offset)
	case f.Module != "":
		s = fmt.Sprintf("%s+%#x", mod, f.Offset)
	default:
		return fmt.Sprintf("%#x", f.PC)
	}
	if f.File != "" {
		s += fmt.Sprintf(" (%s:%d)", f.File, f.Line)
	}
	if f.Function != "" {
		s += " [" + mod + "]"
	}
	return s
}

// meshKey is one mesh buffer among a process's leaks.
type meshKey struct {
	buffer string
	seq    uint64
}

// chipRanges writes sorted chip ids as "chips 4-31" or "chips 0,2-3,7"
// ("chip 5" for one).
func chipRanges(ids []int32) string {
	if len(ids) == 1 {
		return fmt.Sprintf("chip %d", ids[0])
	}
	var b strings.Builder
	b.WriteString("chips ")
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && int64(ids[j+1]) == int64(ids[j])+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ids[i], ids[j])
		} else {
			fmt.Fprintf(&b, "%d", ids[i])
		}
		i = j + 1
	}
	return b.String()
}

// leak writes one leak; chips, when not "", says where a mesh buffer is.
func (r *reporter) leak(l *devices.Leak, chips string) {
	r.Printf("      %s %#x  %s", l.Type, l.Address, human(l.Size))
	if l.Mesh {
		r.Printf("  mesh buffer %s on mesh %s", l.Buffer, l.MeshDevice)
	} else {
		r.Printf("  buffer %s", l.Buffer)
	}
	r.Printf("  tid %d seq %d", l.Tid, l.Seq)
	if l.Site != 0 {
		r.Printf("  site %d", l.Site)
	}
	if l.Op != nil {
		r.Printf("  in %s", opName(l.Op.Name, l.Op.DeviceOp))
	}
	if chips != "" {
		r.Printf("  on %s", chips)
	}
	r.Printf("\n")
}

// l1 writes each chip's minimum L1 headroom and the CB / L1 clashes.
func (r *reporter) l1(p *devices.ProcessSummary) {
	first := true
	for _, d := range p.Devices {
		m := d.MinL1Headroom
		if m == nil {
			continue
		}
		if first {
			r.Printf("  L1 headroom (lowest L1 buffer - end of the CB region), minimum:\n")
			first = false
		}
		r.Printf("    chip %d: %s (L1 buffer at %#x, CBs end at %#x, ts %d)", d.Device, signedHuman(m.Value), m.LowestL1Address, m.CBRegionEnd, m.TsNs)
		if d.L1Headroom != nil {
			r.Printf("; now %s", signedHuman(*d.L1Headroom))
		}
		r.Printf("\n")
	}
	if len(p.L1Clashes) == 0 && len(p.L1ClashesPossible) == 0 {
		return
	}
	r.Printf("  L1 clashes: %d (TT-Metal throws \"circular buffers ... clash with L1 buffers\" for these)\n", p.Stats.L1Clashes)
	r.first(len(p.L1Clashes), p.Stats.L1Clashes, "    ", summaryLists, func(i int) {
		n := &p.L1Clashes[i]
		r.Printf("    chip %d program %s (tid %d seq %d): CBs end at %#x, %s above the L1 buffer at %#x; %d L1 buffer(s) in the way, %s\n",
			n.Chip, n.Program, n.Tid, n.Seq, n.CBRegionEnd, human(uint64(-n.Headroom)), n.LowestL1Address, n.L1BuffersCount, human(n.L1BuffersBytes))
		for j := range n.L1Buffers {
			b := &n.L1Buffers[j]
			r.Printf("      L1 %#x  %s  ", b.Address, human(b.Size))
			r.whose(p, b.Mesh, b.Buffer, b.MeshDevice, b.Tid, b.Seq, b.Site)
		}
		if n.L1BuffersCount > len(n.L1Buffers) {
			r.Printf("      … %d more\n", n.L1BuffersCount-len(n.L1Buffers))
		}
		r.clashDetail(p, n)
	})
	if len(p.L1ClashesPossible) == 0 {
		return
	}
	r.Printf("  possible L1 clashes: %d (CBs above per-core buffers of banks whose cores tttrace does not know; TT-Metal throws if one is a core of the range)\n", p.Stats.L1ClashesPossible)
	r.first(len(p.L1ClashesPossible), p.Stats.L1ClashesPossible, "    ", summaryLists, func(i int) {
		n := &p.L1ClashesPossible[i]
		r.Printf("    chip %d program %s (tid %d seq %d): CBs end at %#x, above the per-core block at %#x\n",
			n.Chip, n.Program, n.Tid, n.Seq, n.CBRegionEnd, n.LowestL1Address)
		r.clashDetail(p, n)
	})
}

// clashDetail writes a clash's core ranges and per-core blocks.
func (r *reporter) clashDetail(p *devices.ProcessSummary, n *devices.Notice) {
	for _, cr := range n.CoreRanges {
		r.Printf("      core range (%d,%d)-(%d,%d): CBs end at %#x, %s", cr.Range[0], cr.Range[1], cr.Range[2], cr.Range[3], cr.CBRegionEnd, cr.Clash)
		if cr.Headroom != nil {
			r.Printf(", headroom %s on each of its cores", signedHuman(*cr.Headroom))
		}
		r.Printf("\n")
	}
	if n.CoreRangesCount > len(n.CoreRanges) {
		r.Printf("      … %d more core ranges\n", n.CoreRangesCount-len(n.CoreRanges))
	}
	for j := range n.PerCoreBlocks {
		b := &n.PerCoreBlocks[j]
		bank := uint32(0)
		if b.Bank != nil {
			bank = *b.Bank
		}
		r.Printf("      per-core L1 %#x on bank %d  %s  ", b.Address, bank, human(b.Span))
		r.whose(p, false, b.Buffer, "", b.Tid, b.Seq, b.Site)
	}
	if n.PerCoreBlocksCount > len(n.PerCoreBlocks) {
		r.Printf("      … %d more per-core blocks\n", n.PerCoreBlocksCount-len(n.PerCoreBlocks))
	}
}

// allocator writes each chip's allocator per buffer type: what it holds
// of a bank, every bank alike, and its largest free block; nothing when
// no chip's allocator was seen made.
func (r *reporter) allocator(devs []devices.DeviceSummary) {
	seen := false
	for i := range devs {
		seen = seen || devs[i].Allocator != nil
	}
	if !seen {
		return // no bank manager was seen made (the JSON summary says why per chip)
	}
	r.Printf("  allocator (as TT-Metal's get_statistics: per bank, every bank of a type alike):\n")
	for i := range devs {
		d := &devs[i]
		if d.Allocator == nil {
			r.Printf("    chip %d  unknown: %s\n", d.Device, d.AllocatorWhy)
			continue
		}
		r.allocatorTypes(fmt.Sprintf("    chip %-3d", d.Device), d.Allocator)
	}
}

// meshAllocators writes each live mesh's own allocator as allocator()
// does a chip's: the mesh's buffers, which their chips' lines leave out;
// nothing when no mesh's allocator is known.
func (r *reporter) meshAllocators(meshes []devices.MeshAllocator) {
	seen := false
	for i := range meshes {
		seen = seen || meshes[i].Allocator != nil
	}
	if !seen {
		return // no mesh's bank managers were seen (the JSON summary says why per mesh)
	}
	r.Printf("  mesh allocators (a MeshDevice's own; its buffers are not in its chips' lines above):\n")
	for i := range meshes {
		m := &meshes[i]
		chips := make([]string, len(m.Chips))
		for j, c := range m.Chips {
			chips[j] = fmt.Sprint(c)
		}
		r.Printf("    mesh %s (chips %s)\n", m.MeshDevice, strings.Join(chips, ","))
		if m.Allocator == nil {
			r.Printf("      unknown: %s\n", m.AllocatorWhy)
			continue
		}
		r.allocatorTypes("     ", m.Allocator)
	}
}

// allocatorTypes writes one line per buffer type of allocator a, the first
// led by lead.
func (r *reporter) allocatorTypes(lead string, a *devices.Allocator) {
	pad := strings.Repeat(" ", len(lead))
	for _, t := range devices.AllocatorTypes() {
		at := a.Type(t)
		if at == nil {
			continue
		}
		r.Printf("%s %-8s ", lead, t)
		lead = pad
		st, ok := at.Stats()
		switch {
		case !ok:
			r.Printf("%d bank(s) of %s: state unknown (%s)", at.Banks, human(at.BankSize), at.Why)
		case at.BankSize == 0:
			r.Printf("%d bank(s) of 0 B", at.Banks)
		default:
			r.Printf("%s of %s used (%.1f%%) x %d bank(s); free %s, largest free block %s",
				human(st.TotalAllocated), human(at.BankSize), 100*float64(st.TotalAllocated)/float64(at.BankSize), at.Banks,
				human(st.TotalFree), human(st.LargestFreeBlock))
		}
		if at.PerCoreBuffers > 0 {
			r.Printf("; %d per-core buffer(s), %s, not in these numbers", at.PerCoreBuffers, human(at.PerCoreBytes))
		}
		if at.Failures > 0 {
			r.Printf("; %d failed allocation(s)", at.Failures)
		}
		r.Printf("\n")
	}
}

// allocFailures writes a section per failed allocation: the request, the
// allocator's state then, why it failed in words that say what to do, and
// what filled the chip.
func (r *reporter) allocFailures(p *devices.ProcessSummary) {
	if len(p.AllocFailures) == 0 {
		return
	}
	r.Printf("  failed allocations: %d (TT-Metal threw \"Out of Memory\"; the process may have caught it)\n", p.Stats.AllocFailures)
	r.first(len(p.AllocFailures), p.Stats.AllocFailures, "    ", summaryLists, func(i int) {
		f := &p.AllocFailures[i]
		where := "no known chip"
		switch {
		case f.Device != nil:
			where = fmt.Sprintf("chip %d", *f.Device)
		case f.MeshDevice != "":
			where = fmt.Sprintf("mesh %s", f.MeshDevice)
		}
		r.Printf("    %s %s, tid %d seq %d: %s across %d bank(s) needs %s per bank; a bank holds %s",
			where, f.BufferType, f.Tid, f.Seq, human(f.Size), f.Banks, human(f.SizePerBank), human(f.BankSize))
		if f.TotalAllocated != nil {
			r.Printf(" (%s allocated, %s free, largest free block %s)", human(*f.TotalAllocated), human(*f.TotalFree), human(*f.LargestFree))
		}
		r.Printf("\n")
		if f.Op != nil {
			r.Printf("      in %s", opName(f.Op.Name, f.Op.DeviceOp))
			if f.Op.RuntimeID != nil {
				r.Printf(" (runtime id %d)", *f.Op.RuntimeID)
			}
			r.Printf("\n")
		}
		r.Printf("      %s\n", failureAdvice(f))
		if f.Site != 0 {
			r.Printf("      asked at site %d", f.Site)
			if w := siteWhere(p, f.Site); w != "" {
				r.Printf(": %s", w)
			}
			r.Printf("\n")
		}
		if f.HoldersCount == 0 {
			if f.Device != nil || f.MeshDevice != "" {
				r.Printf("      nothing of this process held %s on %s then\n", f.BufferType, where)
			}
			return
		}
		r.Printf("      what held %s on %s then: %d buffer(s), %s; the largest:\n", f.BufferType, where, f.HoldersCount, human(f.HoldersBytes))
		for j := range f.Holders {
			h := &f.Holders[j]
			r.Printf("        %#x  %s", h.Address, human(h.Size))
			if h.Span != nil {
				r.Printf(" (%s per bank)", human(*h.Span))
			}
			r.Printf("  ")
			r.whose(p, h.Mesh, h.Buffer, h.MeshDevice, h.Tid, h.Seq, h.Site)
		}
		if f.HoldersCount > len(f.Holders) {
			r.Printf("        … %d more\n", f.HoldersCount-len(f.Holders))
		}
		for j := range f.HolderSites {
			s := &f.HolderSites[j]
			r.Printf("      site %d holds %d buffer(s), %s (%s per bank)", s.Site, s.Buffers, human(s.Bytes), human(s.SpanBytes))
			if w := siteWhere(p, s.Site); w != "" {
				r.Printf(": %s", w)
			}
			r.Printf("\n")
		}
	})
}

// FailureAdvice says, as the report does, why an allocation failed and
// what would make it fit (tttrace mcp gives agents the same words).
func FailureAdvice(f *devices.AllocFailure) string { return failureAdvice(f) }

// failureAdvice says why an allocation failed and what would make it fit.
func failureAdvice(f *devices.AllocFailure) string {
	switch f.Cause {
	case "exhausted":
		need := uint64(0)
		if f.Span != nil && f.TotalFree != nil && *f.Span > *f.TotalFree {
			need = *f.Span - *f.TotalFree
		}
		whose := "the chip's"
		if f.MeshDevice != "" {
			whose = "the mesh's" // the same on every chip of the mesh
		}
		return fmt.Sprintf("exhausted: not enough free memory; free at least %s per bank (%s over %s %d banks) of the buffers below, or allocate less",
			human(need), human(devices.SatMul(need, uint64(f.Banks))), whose, f.Banks)
	case "fragmented":
		return fmt.Sprintf("fragmented: %s per bank is free in all, but no free block holds %s (the largest is %s); free buffers next to the free holes, allocate the large buffers first, or split this one",
			human(deref(f.TotalFree)), human(deref(f.Span)), human(deref(f.LargestFree)))
	case "larger_than_bank":
		return fmt.Sprintf("larger than a bank: one bank would need %s but holds %s; no freeing helps: spread it over more banks (shard over more cores) or split the tensor",
			human(f.SizePerBank), human(f.BankSize))
	case "":
		return "cause unknown: " + f.Why
	}
	return f.Cause
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// siteWhere says in one line where a site allocated: its innermost Python
// line, else the first native frame outside the innermost module (where
// the program called TT-Metal); "" for a site the summary does not describe.
// whose ends a line about one live buffer (an L1 buffer in a clash's way, a
// holder of a failed allocation's chip): which buffer, the allocating thread
// and event, and where it was allocated when known.
func (r *reporter) whose(p *devices.ProcessSummary, mesh bool, buffer, meshDevice string, tid uint32, seq uint64, site uint32) {
	if mesh {
		r.Printf("mesh buffer %s on mesh %s", buffer, meshDevice)
	} else {
		r.Printf("buffer %s", buffer)
	}
	r.Printf("  tid %d seq %d", tid, seq)
	if site != 0 {
		r.Printf("  site %d", site)
		if w := siteWhere(p, site); w != "" {
			r.Printf(": %s", w)
		}
	}
	r.Printf("\n")
}

// SiteWhere is siteWhere: where site id of p allocated, in one line ("":
// the summary does not describe it).
func SiteWhere(p *devices.ProcessSummary, id uint32) string { return siteWhere(p, id) }

func siteWhere(p *devices.ProcessSummary, id uint32) string {
	for i := range p.Sites {
		s := &p.Sites[i]
		if s.Site != id {
			continue
		}
		if len(s.Python) > 0 {
			f := s.Python[0]
			return fmt.Sprintf("%s:%d in %s", f.File, f.Line, f.Function)
		}
		for j := range s.Native {
			if s.Native[j].Module != s.Native[0].Module {
				return nativeString(&s.Native[j])
			}
		}
		return ""
	}
	return ""
}

// signedHuman is human for a signed byte count.
func signedHuman(v int64) string {
	if v < 0 {
		return "-" + human(uint64(-v))
	}
	return human(uint64(v))
}

func (r *reporter) anomalies(p *devices.ProcessSummary) {
	kinds := make([]string, 0, len(p.AnomalyCounts))
	var total uint64
	for k, n := range p.AnomalyCounts {
		if n > 0 {
			kinds = append(kinds, k)
			total += n
		}
	}
	if total == 0 {
		return
	}
	sort.Strings(kinds)
	r.Printf("  anomalies: %d\n", total)
	for _, k := range kinds {
		r.Printf("    %s: %d\n", k, p.AnomalyCounts[k])
	}
	var shown uint64
	for _, a := range p.Anomalies {
		if shown == reportAnomalies {
			break
		}
		r.Printf("    seq %d tid %d %s %s: %s\n", a.Seq, a.Tid, a.Event, a.Kind, a.Detail)
		shown++
	}
	if total > shown {
		r.Printf("    … %d more (the JSON summary lists the first %d)\n", total-shown, devices.MaxAnomalies)
	}
}

// summaryLists follows the count of a list of the report cut where the
// JSON summary's is not.
var summaryLists = fmt.Sprintf(" (the JSON summary lists the first %d)", devices.MaxAnomalies)

// first writes the first reportAnomalies of the n items of a list (item
// writes the ith); past them, one line at indent says how many of total
// are not shown, then more.
func (r *reporter) first(n int, total uint64, indent, more string, item func(i int)) {
	for i := range n {
		if i == reportAnomalies {
			r.Printf("%s… %d more%s\n", indent, total-uint64(i), more)
			return
		}
		item(i)
	}
}

// human is HumanBytes.
func human(n uint64) string { return HumanBytes(n) }

// HumanBytes formats a byte count for people: exact below 1 KiB, else one
// decimal in the largest binary unit that keeps the number at least 1.
func HumanBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// lostKinds is "alloc 3, stack 10": the kinds in name order.
func lostKinds(m map[string]uint64) string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

// sitesMissingText says how many allocations have no complete site, and
// why: "N allocation(s) without a site: reason n, ...", reasons by name.
func sitesMissingText(m map[string]uint64) string {
	reasons := make([]string, 0, len(m))
	var n uint64
	for r, c := range m {
		reasons = append(reasons, r)
		n += c
	}
	sort.Strings(reasons)
	var b strings.Builder
	fmt.Fprintf(&b, "%d allocation(s) without a site:", n)
	for i, r := range reasons {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", r, m[r])
	}
	return b.String()
}
