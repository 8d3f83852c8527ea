package diff

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// Result is a comparison of run A with run B (B the newer): what changed,
// per process, chip and type. It marshals to the --json line; field names
// are a public interface (docs/ndjson.md, "Comparing two runs").
type Result struct {
	Type string  `json:"type"` // "diff"
	A    RunInfo `json:"a"`
	B    RunInfo `json:"b"`
	// SitesBy: "usage" (both runs' events were replayed: what each site
	// holds at the end, allocated, and held at its chip's peak) or "leaks"
	// (a run is a summary alone: what each site holds at the end).
	SitesBy string `json:"sites_by"`
	// Same: nothing below changed.
	Same bool `json:"same"`
	// Unchanged counts the processes matched with nothing changed.
	Unchanged int `json:"unchanged_processes"`
	// Processes: those that changed, appeared (only in B) or vanished
	// (only in A), in A's order, then B's new ones.
	Processes []ProcessDiff `json:"processes"`
	// Growth: every memory counter (a type's bytes, the CB bytes of the
	// busiest core, L1 per core: what the busiest core's L1 holds) of a
	// chip of a process that is higher in B, at the end, at its peak or at
	// its peak in a window of both runs, most bytes first: what
	// --fail-on-growth judges.
	Growth []Growth `json:"growth"`
}

// RunInfo says what a run is.
type RunInfo struct {
	File            string `json:"file"`
	Processes       int    `json:"processes"`
	Events          uint64 `json:"events"`
	LostEvents      uint64 `json:"lost_events"`
	LayoutAnomalies uint64 `json:"layout_anomalies"`
	Dropped         uint64 `json:"dropped_processes,omitempty"`
	SummaryOnly     bool   `json:"summary_only"`
}

// Complete says the run's ledger saw everything and can be trusted.
func (r *RunInfo) Complete() bool { return r.LostEvents == 0 && r.LayoutAnomalies == 0 }

// ProcessDiff is one process's changes.
type ProcessDiff struct {
	// Status: changed, appeared (only in B) or vanished (only in A).
	Status  string `json:"status"`
	Command string `json:"command"` // A's (B's when appeared)
	// CommandB: B's command when it is not A's (the runs' only unmatched
	// processes are compared with each other).
	CommandB string  `json:"command_b,omitempty"`
	PidA     *uint32 `json:"pid_a"`
	PidB     *uint32 `json:"pid_b"`
	// Exit: how each ended, when that differs.
	Exit *ExitDiff `json:"exit,omitempty"`
	// Trimmed: a run kept only the totals of this process (--keep-ended):
	// its sites and records are not compared.
	Trimmed bool         `json:"trimmed,omitempty"`
	Chips   []ChipDiff   `json:"chips"`
	Meshes  []MeshDiff   `json:"meshes"`
	Sites   []SiteDiff   `json:"sites"`
	Records []RecordDiff `json:"records"`
	// Windows: the windows (tttrace mark) whose peaks or memory_stats
	// differ; Ops: the TT-NN ops rows whose figures differ.
	Windows []WindowDiff `json:"windows"`
	Ops     []OpDiff     `json:"ops"`
	// WindowsDropped, OpsDropped: when a run kept not all of the
	// process's windows (past 64) or ops rows (past 4096), how many each
	// dropped (ended windows; records of rows): what one lacks may be
	// among them.
	WindowsDropped *Num `json:"windows_dropped,omitempty"`
	OpsDropped     *Num `json:"ops_dropped,omitempty"`
	// Counts: all the failed allocations, clashes and trace problems of
	// each (the records above are matched among the first 100 of each
	// kind the summaries keep), when they differ.
	Counts *CountsDiff `json:"counts,omitempty"`
}

// ExitDiff is how the process ended in each run.
type ExitDiff struct {
	A ExitFig `json:"a"`
	B ExitFig `json:"b"`
}

// ExitFig is how a process ended.
type ExitFig struct {
	Exited bool `json:"exited"`
	Code   int  `json:"exit_code"`
	Signal int  `json:"exit_signal"`
}

// CountsDiff are the problem counts of each run.
type CountsDiff struct {
	A Counts `json:"a"`
	B Counts `json:"b"`
}

// Num is a number in each run and B - A.
type Num struct {
	A     uint64 `json:"a"`
	B     uint64 `json:"b"`
	Delta int64  `json:"delta"`
}

func num(a, b uint64) Num { return Num{A: a, B: b, Delta: delta(a, b)} }

// delta is b - a, saturated to int64.
func delta(a, b uint64) int64 {
	if b >= a {
		return int64(min(b-a, math.MaxInt64))
	}
	return -int64(min(a-b, math.MaxInt64))
}

// OptNum is a number that may be unknown (null) in a run.
type OptNum struct {
	A     *uint64 `json:"a"`
	B     *uint64 `json:"b"`
	Delta *int64  `json:"delta"` // null unless both are known
}

func optNum(a, b *uint64) OptNum {
	o := OptNum{A: a, B: b}
	if a != nil && b != nil {
		d := delta(*a, *b)
		o.Delta = &d
	}
	return o
}

func (o OptNum) same() bool {
	return (o.A == nil) == (o.B == nil) && (o.A == nil || *o.A == *o.B)
}

// ChipDiff is one chip's changes in a process.
type ChipDiff struct {
	Device int32 `json:"device"`
	// Status: changed, appeared (only B's process touched it), vanished.
	Status    string        `json:"status"`
	Counters  []CounterDiff `json:"counters"`
	Leaks     []LeakDiff    `json:"leaks"`
	Allocator []AllocDiff   `json:"allocator"`
	// MinL1Headroom: the lowest L1 headroom in each (null: never defined).
	MinL1Headroom *HeadroomDiff `json:"min_l1_headroom,omitempty"`
}

// CounterDiff is one counter of a chip (dram_bytes, ..., cb_bytes,
// live_buffers, cb_registered_bytes, cb_resident_total_bytes,
// l1_busiest_core_bytes: l1_busiest_core.total_bytes and its peak
// peak_l1_busiest_core.total_bytes) at the end and at its peak.
type CounterDiff struct {
	Counter string `json:"counter"`
	End     Num    `json:"end"`
	Peak    Num    `json:"peak"`
	// PeakAtA, PeakAtB: when the peak was first reached, in ns after the
	// process's first event (null: unknown, or no peak).
	PeakAtA *uint64 `json:"peak_at_ns_a"`
	PeakAtB *uint64 `json:"peak_at_ns_b"`
}

// LeakDiff is what leaked of one type on a chip.
type LeakDiff struct {
	Type  string `json:"type"`
	Count Num    `json:"count"`
	Bytes Num    `json:"bytes"`
}

// AllocDiff is one bank manager of a chip's (or mesh's) allocator, per
// bank as get_statistics gives it (null: no view, or not exact).
type AllocDiff struct {
	Type         string `json:"type"` // dram, l1, l1_small, trace
	Allocated    OptNum `json:"total_allocated_bytes"`
	Free         OptNum `json:"total_free_bytes"`
	LargestFree  OptNum `json:"largest_free_block_bytes"`
	Failures     OptNum `json:"alloc_failures"`
	PerCoreBytes OptNum `json:"per_core_bytes"`
}

// HeadroomDiff is a signed figure in each run (null: none).
type HeadroomDiff struct {
	A *int64 `json:"a"`
	B *int64 `json:"b"`
}

// MeshDiff is a live MeshDevice's own allocator, named by its chips.
type MeshDiff struct {
	Chips     []int32     `json:"chips"`
	Status    string      `json:"status"`
	Allocator []AllocDiff `json:"allocator"`
}

// SiteDiff is one allocation site on one chip with one type.
type SiteDiff struct {
	// Status: appeared (nothing of it in A), vanished (nothing in B),
	// grew (no figure lower in B), shrank (none higher), changed.
	Status string   `json:"status"`
	Device int32    `json:"device"`
	Type   string   `json:"type"`
	Site   *SiteRef `json:"site"`
	A      SiteFig  `json:"a"`
	B      SiteFig  `json:"b"`
}

// RecordDiff is a failed allocation, clash or trace problem that one run
// has more often than the other.
type RecordDiff struct {
	Status string `json:"status"` // new (more in B), gone (more in A)
	CountA uint64 `json:"count_a"`
	CountB uint64 `json:"count_b"`
	*Record
}

// Growth is a memory counter that is higher in B.
type Growth struct {
	Command string  `json:"command"`
	PidA    *uint32 `json:"pid_a"`
	PidB    *uint32 `json:"pid_b"`
	Device  int32   `json:"device"`
	Counter string  `json:"counter"`
	At      string  `json:"at"` // "end", "peak" or "window_peak"
	// Window: B's window whose peak grew (At "window_peak").
	Window *WindowRef `json:"window,omitempty"`
	A      uint64     `json:"a"`
	B      uint64     `json:"b"`
	Bytes  uint64     `json:"bytes"` // B - A
	// Pct: the growth in percent of A (null when A is 0: without bound).
	Pct *float64 `json:"pct"`
}

// Compare compares run a with run b; fileA and fileB name them.
func Compare(a, b *Run, fileA, fileB string) *Result {
	res := &Result{Type: "diff", A: info(a, fileA), B: info(b, fileB), SitesBy: "usage",
		Processes: []ProcessDiff{}, Growth: []Growth{}}
	usage := a.SiteUsage && b.SiteUsage
	if !usage {
		res.SitesBy = "leaks"
	}
	for _, m := range match(a.Processes, b.Processes) {
		d := compareProcess(m.a, m.b, usage)
		res.Growth = append(res.Growth, d.growth()...)
		if d.changed() {
			res.Processes = append(res.Processes, *d)
		} else {
			res.Unchanged++
		}
	}
	sort.SliceStable(res.Growth, func(i, j int) bool { return res.Growth[i].Bytes > res.Growth[j].Bytes })
	res.Same = len(res.Processes) == 0
	return res
}

func info(r *Run, file string) RunInfo {
	return RunInfo{File: file, Processes: len(r.Processes), Events: r.Events, LostEvents: r.LostEvents,
		LayoutAnomalies: r.LayoutAnomalies, Dropped: r.Dropped, SummaryOnly: !r.SiteUsage}
}

type pair struct{ a, b *Process }

// match pairs A's processes with B's: by command, the n-th of a command
// in A (by first event, else as listed) with the n-th in B; when then
// exactly one process of each run is left, those two.
func match(as, bs []*Process) []pair {
	order := func(ps []*Process) []*Process {
		o := slices.Clone(ps)
		sort.SliceStable(o, func(i, j int) bool {
			if o[i].StartNs != 0 && o[j].StartNs != 0 {
				return o[i].StartNs < o[j].StartNs
			}
			return false
		})
		return o
	}
	byCmd := map[string][]*Process{}
	for _, p := range order(bs) {
		byCmd[p.Command] = append(byCmd[p.Command], p)
	}
	var out []pair
	var leftA []int
	for _, p := range order(as) {
		if q := byCmd[p.Command]; len(q) > 0 {
			out = append(out, pair{p, q[0]})
			byCmd[p.Command] = q[1:]
			continue
		}
		leftA = append(leftA, len(out))
		out = append(out, pair{a: p})
	}
	var leftB []*Process
	for _, p := range order(bs) {
		if q := byCmd[p.Command]; len(q) > 0 && q[0] == p {
			leftB = append(leftB, p)
			byCmd[p.Command] = q[1:]
		}
	}
	if len(leftA) == 1 && len(leftB) == 1 {
		out[leftA[0]].b = leftB[0]
		return out
	}
	for _, p := range leftB {
		out = append(out, pair{b: p})
	}
	return out
}

func (d *ProcessDiff) changed() bool {
	return d.Status != "changed" || d.Exit != nil || len(d.Chips) > 0 || len(d.Meshes) > 0 || len(d.Sites) > 0 ||
		len(d.Records) > 0 || d.Counts != nil || len(d.Windows) > 0 || len(d.Ops) > 0
}

var empty = &Process{Sites: map[SiteRow]*SiteFig{}, Descs: map[string]*SiteRef{}, Records: map[string]*Record{}, Ops: map[OpKey]*OpFig{}}

func compareProcess(a, b *Process, usage bool) *ProcessDiff {
	d := &ProcessDiff{Status: "changed", Chips: []ChipDiff{}, Meshes: []MeshDiff{}, Sites: []SiteDiff{}, Records: []RecordDiff{},
		Windows: []WindowDiff{}, Ops: []OpDiff{}}
	switch {
	case a == nil:
		d.Status, a = "appeared", empty
		d.Command = b.Command
	case b == nil:
		d.Status, b = "vanished", empty
		d.Command = a.Command
	default:
		d.Command = a.Command
		if b.Command != a.Command {
			d.CommandB = b.Command
		}
		ea, eb := ExitFig{a.Exited, a.ExitCode, a.ExitSignal}, ExitFig{b.Exited, b.ExitCode, b.ExitSignal}
		if ea != eb {
			d.Exit = &ExitDiff{ea, eb}
		}
	}
	if a != empty {
		pid := a.Pid
		d.PidA = &pid
	}
	if b != empty {
		pid := b.Pid
		d.PidB = &pid
	}
	d.Chips = compareChips(a, b)
	d.Meshes = compareMeshes(a.Meshes, b.Meshes)
	if a.Trimmed || b.Trimmed {
		d.Trimmed = true
	} else {
		d.Sites = compareSites(a, b, usage)
		d.Records = compareRecords(a.Records, b.Records)
		d.Windows = compareWindows(a, b)
		d.Ops = compareOps(a.Ops, b.Ops)
		if a.WindowsDropped+b.WindowsDropped > 0 {
			n := num(a.WindowsDropped, b.WindowsDropped)
			d.WindowsDropped = &n
		}
		if a.OpsDropped+b.OpsDropped > 0 {
			n := num(a.OpsDropped, b.OpsDropped)
			d.OpsDropped = &n
		}
	}
	if a.Counts != b.Counts {
		d.Counts = &CountsDiff{a.Counts, b.Counts}
	}
	return d
}

func compareChips(a, b *Process) []ChipDiff {
	out := []ChipDiff{}
	i, j := 0, 0
	for i < len(a.Chips) || j < len(b.Chips) {
		var ca, cb *Chip
		switch {
		case j == len(b.Chips) || (i < len(a.Chips) && a.Chips[i].Device < b.Chips[j].Device):
			ca = &a.Chips[i]
			i++
		case i == len(a.Chips) || b.Chips[j].Device < a.Chips[i].Device:
			cb = &b.Chips[j]
			j++
		default:
			ca, cb = &a.Chips[i], &b.Chips[j]
			i++
			j++
		}
		if cd := compareChip(ca, cb, a.StartNs, b.StartNs); cd != nil {
			out = append(out, *cd)
		}
	}
	return out
}

var noChip = &Chip{Leaks: map[string]LeakFig{}}

func compareChip(a, b *Chip, startA, startB uint64) *ChipDiff {
	d := &ChipDiff{Status: "changed", Counters: []CounterDiff{}, Leaks: []LeakDiff{}, Allocator: []AllocDiff{}}
	switch {
	case a == nil:
		d.Status, d.Device, a = "appeared", b.Device, noChip
	case b == nil:
		d.Status, d.Device, b = "vanished", a.Device, noChip
	default:
		d.Device = a.Device
	}
	at := func(c *Chip, i int, start uint64) *uint64 {
		if start == 0 || c.Peak[i] == 0 || c.PeakTs[i] < start {
			return nil
		}
		v := c.PeakTs[i] - start
		return &v
	}
	for i := range nCounters {
		if a.End[i] == b.End[i] && a.Peak[i] == b.Peak[i] {
			continue
		}
		d.Counters = append(d.Counters, CounterDiff{Counter: counterNames[i], End: num(a.End[i], b.End[i]), Peak: num(a.Peak[i], b.Peak[i]),
			PeakAtA: at(a, i, startA), PeakAtB: at(b, i, startB)})
	}
	for _, t := range counterTypes {
		la, lb := a.Leaks[t], b.Leaks[t]
		if la != lb {
			d.Leaks = append(d.Leaks, LeakDiff{Type: t, Count: num(la.Count, lb.Count), Bytes: num(la.Bytes, lb.Bytes)})
		}
	}
	d.Allocator = compareAllocators(a.Alloc, b.Alloc)
	if ha, hb := a.MinL1Headroom, b.MinL1Headroom; (ha == nil) != (hb == nil) || (ha != nil && *ha != *hb) {
		d.MinL1Headroom = &HeadroomDiff{ha, hb}
	}
	if d.Status == "changed" && len(d.Counters) == 0 && len(d.Leaks) == 0 && len(d.Allocator) == 0 && d.MinL1Headroom == nil {
		return nil
	}
	return d
}

// compareAllocators lists the bank managers whose numbers differ.
func compareAllocators(a, b *devices.Allocator) []AllocDiff {
	out := []AllocDiff{}
	for _, t := range devices.AllocatorTypes() {
		ta, tb := a.Type(t), b.Type(t)
		d := AllocDiff{Type: devices.AllocatorKey(t)}
		if ta != nil || tb != nil {
			field := func(at *devices.AllocatorType, f func(*devices.AllocatorType) *uint64) *uint64 {
				if at == nil {
					return nil
				}
				return f(at)
			}
			d.Allocated = optNum(field(ta, func(x *devices.AllocatorType) *uint64 { return x.TotalAllocated }), field(tb, func(x *devices.AllocatorType) *uint64 { return x.TotalAllocated }))
			d.Free = optNum(field(ta, func(x *devices.AllocatorType) *uint64 { return x.TotalFree }), field(tb, func(x *devices.AllocatorType) *uint64 { return x.TotalFree }))
			d.LargestFree = optNum(field(ta, func(x *devices.AllocatorType) *uint64 { return x.LargestFree }), field(tb, func(x *devices.AllocatorType) *uint64 { return x.LargestFree }))
			d.Failures = optNum(field(ta, func(x *devices.AllocatorType) *uint64 { return &x.Failures }), field(tb, func(x *devices.AllocatorType) *uint64 { return &x.Failures }))
			d.PerCoreBytes = optNum(field(ta, func(x *devices.AllocatorType) *uint64 { return &x.PerCoreBytes }), field(tb, func(x *devices.AllocatorType) *uint64 { return &x.PerCoreBytes }))
		}
		if !d.Allocated.same() || !d.Free.same() || !d.LargestFree.same() || !d.Failures.same() || !d.PerCoreBytes.same() {
			out = append(out, d)
		}
	}
	return out
}

// compareMeshes pairs meshes by their chips (the n-th over the same chips
// with the n-th).
func compareMeshes(as, bs []Mesh) []MeshDiff {
	out := []MeshDiff{}
	key := func(m *Mesh) string {
		s := slices.Clone(m.Chips)
		slices.Sort(s)
		b := make([]byte, 0, 4*len(s))
		for _, c := range s {
			b = append(b, byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
		}
		return string(b)
	}
	byKey := map[string][]*Mesh{}
	for i := range bs {
		k := key(&bs[i])
		byKey[k] = append(byKey[k], &bs[i])
	}
	used := map[*Mesh]bool{}
	for i := range as {
		ma := &as[i]
		k := key(ma)
		var mb *Mesh
		if q := byKey[k]; len(q) > 0 {
			mb, byKey[k] = q[0], q[1:]
			used[mb] = true
		}
		if mb == nil {
			out = append(out, MeshDiff{Chips: ma.Chips, Status: "vanished", Allocator: compareAllocators(ma.Alloc, nil)})
			continue
		}
		if ad := compareAllocators(ma.Alloc, mb.Alloc); len(ad) > 0 {
			out = append(out, MeshDiff{Chips: ma.Chips, Status: "changed", Allocator: ad})
		}
	}
	for i := range bs {
		if mb := &bs[i]; !used[mb] {
			out = append(out, MeshDiff{Chips: mb.Chips, Status: "appeared", Allocator: compareAllocators(nil, mb.Alloc)})
		}
	}
	return out
}

// compareSites lists the sites whose figures differ; without usage, only
// what they hold at the end is compared.
func compareSites(a, b *Process, usage bool) []SiteDiff {
	fig := func(p *Process, k SiteRow) SiteFig {
		f := p.Sites[k]
		if f == nil {
			return SiteFig{}
		}
		if !usage {
			return SiteFig{InUseBytes: f.InUseBytes, InUseObjects: f.InUseObjects}
		}
		return *f
	}
	rows := map[SiteRow]bool{}
	for k := range a.Sites {
		rows[k] = true
	}
	for k := range b.Sites {
		rows[k] = true
	}
	out := []SiteDiff{}
	for k := range rows {
		fa, fb := fig(a, k), fig(b, k)
		if fa == fb {
			continue
		}
		desc := a.Descs[k.Site]
		if desc == nil {
			desc = b.Descs[k.Site]
		}
		out = append(out, SiteDiff{Status: siteStatus(fa, fb), Device: k.Device, Type: k.Type, Site: desc, A: fa, B: fb})
	}
	// Most change first (the largest of the figures' changes in bytes),
	// then by chip, type and site.
	size := func(s *SiteDiff) uint64 {
		var m uint64
		for _, v := range [][2]uint64{{s.A.PeakBytes, s.B.PeakBytes}, {s.A.InUseBytes, s.B.InUseBytes}, {s.A.AllocBytes, s.B.AllocBytes}} {
			m = max(m, max(v[0], v[1])-min(v[0], v[1]))
		}
		return m
	}
	keys := make(map[*SiteRef]string, len(a.Descs)+len(b.Descs))
	for _, p := range []*Process{a, b} {
		for k, r := range p.Descs {
			keys[r] = k
		}
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := &out[i], &out[j]
		if sx, sy := size(x), size(y); sx != sy {
			return sx > sy
		}
		if c := cmp.Compare(x.Device, y.Device); c != 0 {
			return c < 0
		}
		if x.Type != y.Type {
			return typeOrder(x.Type) < typeOrder(y.Type)
		}
		return keys[x.Site] < keys[y.Site]
	})
	return out
}

func typeOrder(t string) int {
	for i := events.BufferType(0); i < 8; i++ {
		if i.String() == t {
			return int(i)
		}
	}
	return 1 << 10
}

func siteStatus(a, b SiteFig) string {
	var zero SiteFig
	switch {
	case a == zero:
		return "appeared"
	case b == zero:
		return "vanished"
	}
	up, down := false, false
	for _, v := range [][2]uint64{{a.InUseBytes, b.InUseBytes}, {a.InUseObjects, b.InUseObjects}, {a.AllocBytes, b.AllocBytes},
		{a.AllocObjects, b.AllocObjects}, {a.PeakBytes, b.PeakBytes}} {
		up = up || v[1] > v[0]
		down = down || v[1] < v[0]
	}
	switch {
	case up && !down:
		return "grew"
	case down && !up:
		return "shrank"
	}
	return "changed"
}

// compareRecords lists the records one run has more often than the other.
func compareRecords(a, b map[string]*Record) []RecordDiff {
	out := []RecordDiff{}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		var na, nb uint64
		r := a[k]
		if r != nil {
			na = r.count
		}
		if x := b[k]; x != nil {
			nb, r = x.count, x
		}
		switch {
		case nb > na:
			out = append(out, RecordDiff{Status: "new", CountA: na, CountB: nb, Record: r})
		case na > nb:
			out = append(out, RecordDiff{Status: "gone", CountA: na, CountB: nb, Record: r})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := &out[i], &out[j]
		if x.Status != y.Status {
			return x.Status == "new"
		}
		if x.Kind != y.Kind {
			return x.Kind < y.Kind
		}
		return x.key < y.key
	})
	return out
}

// growth lists d's gated counters that are higher in B, at the end, at
// the peak or at the peak in a window.
func (d *ProcessDiff) growth() []Growth {
	var out []Growth
	for i := range d.Chips {
		c := &d.Chips[i]
		for j := range c.Counters {
			cd := &c.Counters[j]
			if !gated(counterIndex(cd.Counter)) {
				continue
			}
			for _, v := range []struct {
				at string
				n  Num
			}{{"end", cd.End}, {"peak", cd.Peak}} {
				if v.n.B <= v.n.A {
					continue
				}
				out = append(out, newGrowth(d, c.Device, cd.Counter, v.at, v.n.A, v.n.B, nil))
			}
		}
	}
	return append(out, d.windowGrowth()...)
}

// newGrowth is a counter of d's chip dev grown from a to b (b > a).
func newGrowth(d *ProcessDiff, dev int32, counter, at string, a, b uint64, w *WindowRef) Growth {
	g := Growth{Command: d.Command, PidA: d.PidA, PidB: d.PidB, Device: dev, Counter: counter, At: at, Window: w,
		A: a, B: b, Bytes: b - a}
	if a > 0 {
		pct := float64(g.Bytes) * 100 / float64(a)
		g.Pct = &pct
	}
	return g
}

func counterIndex(name string) int {
	for i, n := range counterNames {
		if n == name {
			return i
		}
	}
	return nCounters
}

// Limit is a --fail-on-growth threshold: Bytes, or with IsPct a percentage
// of A's value.
type Limit struct {
	Bytes uint64
	Pct   float64
	IsPct bool
}

// Exceeds says g grew more than l allows (a percentage of nothing is
// without bound: it exceeds any).
func (l Limit) Exceeds(g *Growth) bool {
	if !l.IsPct {
		return g.Bytes > l.Bytes
	}
	return g.Pct == nil || *g.Pct > l.Pct
}

// Exceeding lists the growths of r past l, most bytes first.
func (r *Result) Exceeding(l Limit) []Growth {
	var out []Growth
	for i := range r.Growth {
		if l.Exceeds(&r.Growth[i]) {
			out = append(out, r.Growth[i])
		}
	}
	return out
}
