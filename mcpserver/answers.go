package mcpserver

// The answers: each tool's output, made from a run's summary (the one
// tttrace report --json gives for the file, or a snapshot's) by the
// functions below, pure and bounded (bound.go). Field names are the
// summary's (docs/ndjson.md) wherever a figure is the summary's.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks"
)

// RunInfo says which run an answer is about and how far it can be trusted.
type RunInfo struct {
	Source string `json:"source" jsonschema:"file: a saved run; snapshot: the state of a running tttrace as of the call"`
	File   string `json:"file" jsonschema:"the file read (for a snapshot: the summary file the running tttrace wrote)"`
	// TTtracePID: the running tttrace asked for the snapshot.
	TTtracePID  int    `json:"tttrace_pid,omitempty" jsonschema:"the running tttrace that wrote the snapshot"`
	SummaryOnly bool   `json:"summary_only" jsonschema:"the file holds the run's summary alone (--no-events or a snapshot): per-site usage (peak_bytes, alloc_bytes) is unknown"`
	Events      uint64 `json:"events"`
	LostEvents  uint64 `json:"lost_events" jsonschema:"records the ring buffer could not take: non-zero means the numbers are incomplete"`
	Complete    bool   `json:"complete" jsonschema:"no record was lost"`
	// LayoutAnomalies: non-zero means the layout does not fit the library.
	LayoutAnomalies uint64 `json:"layout_anomalies" jsonschema:"buffers read with impossible types or sizes: non-zero means the layout does not fit the library and no number can be trusted"`
	Processes       int    `json:"processes" jsonschema:"traced processes in the run"`
}

// Envelope is what every answer about a run carries besides its data.
type Envelope struct {
	Run     RunInfo  `json:"run"`
	Caveats []string `json:"caveats" jsonschema:"what limits this answer: lost events, an untrusted layout, processes attached mid-run, chips of unknown identity, allocations without a site, a snapshot of a running process; read them before concluding"`
	Cut     []Cut    `json:"cut" jsonschema:"lists this answer cut to its limit: raise limit or filter by pid/device for the rest"`
}

func (e *Envelope) finish(cuts []Cut, note string) {
	e.Cut = cuts
	if e.Cut == nil {
		e.Cut = []Cut{}
	}
	if note != "" {
		e.Caveats = append(e.Caveats, note)
	}
}

// ProcessHead names a traced process.
type ProcessHead struct {
	Pid            uint32 `json:"pid"`
	Command        string `json:"command"`
	Exited         bool   `json:"exited" jsonschema:"false: still running (a snapshot) or running when tracing stopped"`
	ExitCode       int    `json:"exit_code"`
	ExitSignal     int    `json:"exit_signal"`
	AttachedMidRun bool   `json:"attached_mid_run" jsonschema:"tttrace attached after it started: buffers allocated before are unknown"`
	LateLibrary    bool   `json:"late_library" jsonschema:"its TT-Metal library was probed only after it was mapped: calls before were missed"`
	Host           string `json:"host,omitempty"`
	Rank           *int64 `json:"rank,omitempty"`
}

func head(p *devices.ProcessSummary) ProcessHead {
	return ProcessHead{Pid: p.Pid, Command: str(p.Command), Exited: p.Exited, ExitCode: p.ExitCode, ExitSignal: p.ExitSignal,
		AttachedMidRun: p.AttachedMidRun, LateLibrary: p.LateLibrary, Host: str(p.Host), Rank: p.Rank}
}

// Filter narrows an answer to a traced process and a chip.
type Filter struct {
	Pid    uint32 `json:"pid,omitempty" jsonschema:"only this traced process (its pid in the run; not the tttrace's)"`
	Device *int32 `json:"device,omitempty" jsonschema:"only this chip id (as the process numbers its chips)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"entries per list, default 20, at most 500; the answer says what it cut"`
}

func (f *Filter) proc(p *devices.ProcessSummary) bool { return f.Pid == 0 || p.Pid == f.Pid }
func (f *Filter) chip(d int32) bool                   { return f.Device == nil || *f.Device == d }

// chipsAny says whether any of chips passes the filter.
func (f *Filter) chipsAny(chips []int32) bool {
	if f.Device == nil {
		return true
	}
	for _, c := range chips {
		if c == *f.Device {
			return true
		}
	}
	return false
}

// processes are the run's processes that pass the filter, cut.
func processes(c *cutter, s *devices.Summary, f *Filter) []*devices.ProcessSummary {
	var ps []*devices.ProcessSummary
	for i := range s.Processes {
		if f.proc(&s.Processes[i]) {
			ps = append(ps, &s.Processes[i])
		}
	}
	return keep(c, "processes", ps, 0)
}

// SiteDesc describes an allocation site, innermost frame first.
type SiteDesc struct {
	Site      uint32            `json:"site" jsonschema:"the site's id in its process (the ids are the run's own)"`
	Where     string            `json:"where" jsonschema:"in one line: the innermost Python line, else the first native frame outside the innermost module"`
	Test      string            `json:"test,omitempty" jsonschema:"the pytest test that allocated (FILE::test), when a Python frame is one"`
	Python    []devices.PyFrame `json:"python"`
	Native    []NativeFrame     `json:"native"`
	Truncated bool              `json:"truncated" jsonschema:"tttrace could not take the whole stack"`
	FramesCut int               `json:"frames_cut,omitempty" jsonschema:"frames this answer left out (16 of each kind are kept)"`
}

// NativeFrame is a native frame of a site (devices.NativeFrame, strings
// bounded).
type NativeFrame struct {
	PC       uint64 `json:"pc"`
	Module   string `json:"module"`
	Function string `json:"function"`
	Offset   uint64 `json:"offset"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
}

// siteDescs describes the sites ids of p names, in ascending id order.
func siteDescs(p *devices.ProcessSummary, ids map[uint32]bool) []SiteDesc {
	out := []SiteDesc{}
	for i := range p.Sites {
		s := &p.Sites[i]
		if !ids[s.Site] {
			continue
		}
		out = append(out, describe(p, s))
	}
	return out
}

func describe(p *devices.ProcessSummary, s *devices.Site) SiteDesc {
	d := SiteDesc{Site: s.Site, Where: str(sinks.SiteWhere(p, s.Site)), Test: str(devices.TestOf(s.Python)), Truncated: s.Truncated,
		Python: []devices.PyFrame{}, Native: []NativeFrame{}}
	for i, f := range s.Python {
		if i == maxFrames {
			d.FramesCut += len(s.Python) - i
			break
		}
		d.Python = append(d.Python, devices.PyFrame{Function: str(f.Function), File: str(f.File), Line: f.Line})
	}
	for i, f := range s.Native {
		if i == maxFrames {
			d.FramesCut += len(s.Native) - i
			break
		}
		d.Native = append(d.Native, NativeFrame{PC: f.PC, Module: str(f.Module), Function: str(f.Function), Offset: f.Offset, File: str(f.File), Line: f.Line})
	}
	return d
}

// where is SiteWhere bounded; "" for site 0.
func where(p *devices.ProcessSummary, id uint32) string {
	if id == 0 {
		return ""
	}
	return str(sinks.SiteWhere(p, id))
}

// caveats says what limits an answer about the processes ps of run (and,
// with f, only their chips that pass it).
func caveats(info *RunInfo, s *devices.Summary, ps []*devices.ProcessSummary, f *Filter) []string {
	var cv []string
	if info.Source == "snapshot" {
		cv = append(cv, fmt.Sprintf("a snapshot of the tttrace running as pid %d: a process not exited is still running, and what the summary calls its leaks are the buffers it holds now, not leaks", info.TTtracePID))
	}
	if s.LostEvents > 0 {
		var kinds []string
		for k, n := range s.LostRecords {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(kinds)
		cv = append(cv, fmt.Sprintf("%d events were lost (%s): the ledger is incomplete, so totals, peaks, leaks and failures may be wrong (tttrace exits 7 for such a run)", s.LostEvents, strings.Join(kinds, ", ")))
	} else if n := lostDescriptions(s); n > 0 {
		cv = append(cv, fmt.Sprintf("%d stack records were lost: the numbers are whole, but some allocations have no site", n))
	}
	if s.LayoutAnomalies > 0 {
		cv = append(cv, fmt.Sprintf("the layout tttrace read Buffer with does not fit the library (%d impossible buffer types or sizes): no number of this run can be trusted (exit 12)", s.LayoutAnomalies))
	}
	if info.SummaryOnly {
		cv = append(cv, "the file holds the run's summary alone: lists are those the summary kept, and what each site held at the peak is unknown")
	}
	if d := s.DroppedProcesses; d != nil && d.Processes > 0 {
		cv = append(cv, fmt.Sprintf("%d ended processes were folded into sums (dropped_processes): not listed", d.Processes))
	}
	for _, p := range ps {
		if p.AttachedMidRun {
			cv = append(cv, fmt.Sprintf("pid %d was attached mid-run: buffers it allocated before are unknown (%d frees of unknown buffers, %s)", p.Pid, p.UnknownFrees, sinks.HumanBytes(p.UnknownFreeBytes)))
		}
		if p.LateLibrary {
			cv = append(cv, fmt.Sprintf("pid %d: its TT-Metal library was probed only after it mapped it: its calls before were missed", p.Pid))
		}
		if p.Trimmed != nil {
			cv = append(cv, fmt.Sprintf("pid %d ended long before the end and was kept as totals only (--keep-ended): its lists are empty", p.Pid))
		}
		if len(p.SitesMissing) > 0 || p.LostStacks > 0 {
			var why []string
			var n uint64
			for k, c := range p.SitesMissing {
				why = append(why, fmt.Sprintf("%s %d", k, c))
				n += c
			}
			sort.Strings(why)
			cv = append(cv, fmt.Sprintf("pid %d: %d allocations have no whole site (%s; %d stacks lost): those buffers count, but where they were allocated is unknown or partial", p.Pid, n, strings.Join(why, ", "), p.LostStacks))
		}
		if py := p.Python; py != nil && !py.Supported {
			cv = append(cv, fmt.Sprintf("pid %d: Python %s is not supported (%s): sites have no Python lines", p.Pid, py.Version, str(py.Error)))
		}
		for i := range p.Devices {
			d := &p.Devices[i]
			if !f.chip(d.Device) {
				continue
			}
			if d.UID == nil {
				why := d.Why
				if why == "" {
					why = "not known"
				}
				cv = append(cv, fmt.Sprintf("pid %d chip %d: its physical chip is unknown (%s): it is never added to another process's chip", p.Pid, d.Device, str(why)))
			}
			if d.Allocator == nil && d.AllocatorWhy != "" {
				cv = append(cv, fmt.Sprintf("pid %d chip %d: its allocator's view is unknown: %s", p.Pid, d.Device, str(d.AllocatorWhy)))
			}
		}
	}
	if len(cv) > maxCaveats {
		n := len(cv) - maxCaveats + 1
		cv = append(cv[:maxCaveats-1], fmt.Sprintf("... %d more caveats of the same kinds (filter by pid or device)", n))
	}
	if cv == nil {
		cv = []string{}
	}
	return cv
}

// lostDescriptions counts the lost records that describe allocations.
func lostDescriptions(s *devices.Summary) uint64 {
	var n uint64
	for _, k := range []string{"stack", "py_stack", "py_code"} {
		n += s.LostRecords[k]
	}
	return n
}

// ChipsAnswer is chips' answer.
type ChipsAnswer struct {
	Envelope
	Processes []ChipsProcess `json:"processes"`
}

// ChipsProcess is one process's chips, as the summary has them.
type ChipsProcess struct {
	ProcessHead
	Devices []devices.DeviceSummary `json:"devices" jsonschema:"per chip: the bytes in use now (at the end of a run: left allocated) per type, cb_bytes (CBs resident on the busiest core), live_buffers, each one's peak with its time, the L1 headroom, the physical chip (chip_uid, pci, dev) and the allocator's view per type (banks, bank_size, total_allocated/free/largest_free_block_bytes per bank, alloc_failures)"`
	Meshes  []devices.MeshAllocator `json:"meshes" jsonschema:"the own allocators of the MeshDevices live at the end (mesh buffers count there, not in their chips' allocators)"`
}

func chipsAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*ChipsAnswer, error) {
	a := &ChipsAnswer{Processes: []ChipsProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		cp := ChipsProcess{ProcessHead: head(p), Devices: []devices.DeviceSummary{}, Meshes: []devices.MeshAllocator{}}
		for i := range p.Devices {
			if f.chip(p.Devices[i].Device) {
				cp.Devices = append(cp.Devices, p.Devices[i])
			}
		}
		cp.Devices = keep(c, fmt.Sprintf("pid %d devices", p.Pid), cp.Devices, 0)
		for i := range p.Meshes {
			if f.chipsAny(p.Meshes[i].Chips) {
				cp.Meshes = append(cp.Meshes, p.Meshes[i])
			}
		}
		cp.Meshes = keep(c, fmt.Sprintf("pid %d meshes", p.Pid), cp.Meshes, 0)
		a.Processes = append(a.Processes, cp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// HoldersAnswer is top_holders' answer.
type HoldersAnswer struct {
	Envelope
	Processes []HoldersProcess `json:"processes"`
}

// HoldersProcess is what holds one process's device memory.
type HoldersProcess struct {
	ProcessHead
	Basis        string       `json:"basis" jsonschema:"held_now: the process runs (a snapshot, or tracing stopped first): its live buffers; left_at_exit: it ended: what it left allocated (its leaks)"`
	BuffersCount uint64       `json:"buffers_count" jsonschema:"buffers held (each chip of a mesh buffer counts), after the device filter"`
	BuffersBytes uint64       `json:"buffers_bytes" jsonschema:"their bytes"`
	Buffers      []HeldBuffer `json:"buffers" jsonschema:"the largest buffers held, largest first"`
	Sites        []SiteHold   `json:"sites" jsonschema:"the allocation sites holding the most bytes, per chip and type, most first"`
	SiteDescs    []SiteDesc   `json:"site_descriptions" jsonschema:"the sites named above, described"`
	Unplaced     LeakFig      `json:"unplaced" jsonschema:"mesh buffers whose chips were never learned: held, on no known chip (not in the lists above)"`
}

// HeldBuffer is a live buffer (a leak, at the end).
type HeldBuffer struct {
	devices.Leak
	Where string `json:"where,omitempty" jsonschema:"where it was allocated, in one line"`
}

// SiteHold is what one site holds on one chip in one buffer type.
type SiteHold struct {
	Site         uint32  `json:"site" jsonschema:"0: buffers without a known site (see caveats)"`
	Where        string  `json:"where,omitempty"`
	Device       int32   `json:"device"`
	Type         string  `json:"type"`
	InUseBytes   uint64  `json:"in_use_bytes"`
	InUseBuffers uint64  `json:"in_use_buffers"`
	PeakBytes    *uint64 `json:"peak_bytes,omitempty" jsonschema:"what the site held when the chip's counter of this type first reached its peak (null: unknown, summary alone)"`
	AllocBytes   *uint64 `json:"alloc_bytes,omitempty" jsonschema:"what it allocated on the chip in all while traced"`
}

// LeakFig counts buffers and bytes.
type LeakFig struct {
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

type siteKey struct {
	site uint32
	dev  int32
	typ  string
}

func holdersAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*HoldersAnswer, error) {
	a := &HoldersAnswer{Processes: []HoldersProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		hp := HoldersProcess{ProcessHead: head(p), Basis: "held_now", Buffers: []HeldBuffer{}, Sites: []SiteHold{}}
		if p.Exited {
			hp.Basis = "left_at_exit"
		}
		top := newTopK[devices.Leak](c.limit, func(x, y *devices.Leak) bool {
			switch {
			case x.Size != y.Size:
				return x.Size > y.Size
			case x.Device != y.Device:
				return x.Device < y.Device
			case x.Type != y.Type:
				return x.Type < y.Type
			}
			return x.Address < y.Address
		})
		bySite := map[siteKey]*SiteHold{}
		for lk := range p.AllLeaks() {
			if !f.chip(lk.Device) {
				continue
			}
			hp.BuffersCount++
			hp.BuffersBytes += lk.Size
			top.add(lk)
			k := siteKey{lk.Site, lk.Device, lk.Type}
			h := bySite[k]
			if h == nil {
				h = &SiteHold{Site: lk.Site, Device: lk.Device, Type: lk.Type}
				bySite[k] = h
			}
			h.InUseBytes += lk.Size
			h.InUseBuffers++
		}
		if f.Device == nil {
			for lk := range p.AllUnplacedLeaks() {
				hp.Unplaced.Count++
				hp.Unplaced.Bytes += lk.Size
			}
		}
		for i := range p.SiteUsage {
			u := &p.SiteUsage[i]
			if h := bySite[siteKey{u.Site, u.Device, u.Type}]; h != nil {
				pk, al := u.PeakBytes, u.AllocBytes
				h.PeakBytes, h.AllocBytes = &pk, &al
			}
		}
		ids := map[uint32]bool{}
		for _, lk := range top.sorted() {
			hp.Buffers = append(hp.Buffers, HeldBuffer{Leak: *lk, Where: where(p, lk.Site)})
			ids[lk.Site] = true
		}
		c.note(fmt.Sprintf("pid %d buffers", p.Pid), len(hp.Buffers), hp.BuffersCount)
		for _, h := range bySite {
			hp.Sites = append(hp.Sites, *h)
		}
		sort.Slice(hp.Sites, func(i, j int) bool {
			x, y := &hp.Sites[i], &hp.Sites[j]
			switch {
			case x.InUseBytes != y.InUseBytes:
				return x.InUseBytes > y.InUseBytes
			case x.Site != y.Site:
				return x.Site < y.Site
			case x.Device != y.Device:
				return x.Device < y.Device
			}
			return x.Type < y.Type
		})
		hp.Sites = keep(c, fmt.Sprintf("pid %d sites", p.Pid), hp.Sites, 0)
		for i := range hp.Sites {
			hp.Sites[i].Where = where(p, hp.Sites[i].Site)
			ids[hp.Sites[i].Site] = true
		}
		hp.SiteDescs = siteDescs(p, ids)
		a.Processes = append(a.Processes, hp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// LeaksAnswer is leaks_by_site's answer.
type LeaksAnswer struct {
	Envelope
	Processes []LeaksProcess `json:"processes"`
}

// LeaksProcess is what one process left allocated, by site.
type LeaksProcess struct {
	ProcessHead
	Leaks       LeakFig             `json:"leaks" jsonschema:"every buffer left allocated (each chip of a mesh buffer counts once), after the device filter"`
	LeakGroups  []devices.LeakGroup `json:"leak_groups" jsonschema:"the leaks summed per chip and buffer type"`
	Sites       []LeakSite          `json:"sites" jsonschema:"per allocation site: the leaks it left, most bytes first"`
	WithoutSite LeakFig             `json:"without_site" jsonschema:"leaks whose site is unknown (stacks off or lost: see caveats)"`
	Unplaced    LeakFig             `json:"unplaced" jsonschema:"mesh buffers left whose chips were never learned (counted in sites, not in leak_groups)"`
	SiteDescs   []SiteDesc          `json:"site_descriptions"`
}

// LeakSite is the leaks of one site.
type LeakSite struct {
	Site    uint32  `json:"site"`
	Where   string  `json:"where,omitempty"`
	Test    string  `json:"test,omitempty" jsonschema:"the pytest test that allocated them"`
	Count   uint64  `json:"count"`
	Bytes   uint64  `json:"bytes"`
	Devices []int32 `json:"devices"`
}

func leaksAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*LeaksAnswer, error) {
	a := &LeaksAnswer{Processes: []LeaksProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		lp := LeaksProcess{ProcessHead: head(p), LeakGroups: []devices.LeakGroup{}, Sites: []LeakSite{}}
		for _, g := range p.LeakGroups {
			if f.chip(g.Device) {
				lp.LeakGroups = append(lp.LeakGroups, g)
			}
		}
		lp.LeakGroups = keep(c, fmt.Sprintf("pid %d leak_groups", p.Pid), lp.LeakGroups, 0)
		var sums devices.LeakSiteSums
		add := func(lk *devices.Leak) {
			if !sums.Add(lk) {
				lp.WithoutSite.Count++
				lp.WithoutSite.Bytes += lk.Size
			}
		}
		for lk := range p.AllLeaks() {
			if f.chip(lk.Device) {
				lp.Leaks.Count++
				lp.Leaks.Bytes += lk.Size
				add(lk)
			}
		}
		if f.Device == nil {
			for lk := range p.AllUnplacedLeaks() {
				lp.Unplaced.Count++
				lp.Unplaced.Bytes += lk.Size
				add(lk)
			}
		}
		for _, ls := range sums.Sites() {
			lp.Sites = append(lp.Sites, LeakSite{Site: ls.Site, Count: ls.Count, Bytes: ls.Bytes, Devices: ls.Devices})
		}
		lp.Sites = keep(c, fmt.Sprintf("pid %d sites", p.Pid), lp.Sites, 0)
		ids := map[uint32]bool{}
		for i := range lp.Sites {
			ls := &lp.Sites[i]
			ids[ls.Site] = true
			ls.Where = where(p, ls.Site)
			for j := range p.Sites {
				if p.Sites[j].Site == ls.Site {
					ls.Test = str(devices.TestOf(p.Sites[j].Python))
				}
			}
		}
		lp.SiteDescs = siteDescs(p, ids)
		a.Processes = append(a.Processes, lp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// FailuresAnswer is failed_allocations' answer.
type FailuresAnswer struct {
	Envelope
	Processes []FailuresProcess `json:"processes"`
}

// FailuresProcess is one process's failed allocations.
type FailuresProcess struct {
	ProcessHead
	Count     uint64     `json:"count" jsonschema:"failed allocations in all (the summary keeps the first 100)"`
	Failures  []Failure  `json:"failures" jsonschema:"in the order they happened"`
	SiteDescs []SiteDesc `json:"site_descriptions" jsonschema:"the sites the failures name (where each was asked for, the holders' sites), described"`
}

// Failure is an alloc_failed record with its explanation.
type Failure struct {
	devices.AllocFailure
	Explanation string `json:"explanation" jsonschema:"why it failed and what would make it fit, in words: exhausted (not enough free memory: free at least this much of what the holders hold), fragmented (enough free in all, no block large enough), larger_than_bank (no freeing helps)"`
	AskedAt     string `json:"asked_at,omitempty" jsonschema:"where it was asked for, in one line"`
}

func failuresAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*FailuresAnswer, error) {
	a := &FailuresAnswer{Processes: []FailuresProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		fp := FailuresProcess{ProcessHead: head(p), Count: p.Stats.AllocFailures, Failures: []Failure{}}
		var list []Failure
		for i := range p.AllocFailures {
			af := &p.AllocFailures[i]
			if f.Device != nil && !(af.Device != nil && *af.Device == *f.Device) && !(len(af.MeshChips) > 0 && f.chipsAny(af.MeshChips)) {
				continue
			}
			list = append(list, Failure{AllocFailure: *af, Explanation: sinks.FailureAdvice(af), AskedAt: where(p, af.Site)})
		}
		total := uint64(len(list))
		if f.Device == nil {
			total = p.Stats.AllocFailures
		}
		fp.Failures = keep(c, fmt.Sprintf("pid %d failures", p.Pid), list, total)
		ids := map[uint32]bool{}
		for i := range fp.Failures {
			x := &fp.Failures[i]
			ids[x.Site] = true
			x.Holders = keep(c, fmt.Sprintf("pid %d failure seq %d holders", p.Pid, x.Seq), x.Holders, uint64(x.HoldersCount))
			x.HolderSites = keep(c, fmt.Sprintf("pid %d failure seq %d holder_sites", p.Pid, x.Seq), x.HolderSites, 0)
			for _, h := range x.Holders {
				ids[h.Site] = true
			}
			for _, h := range x.HolderSites {
				ids[h.Site] = true
			}
		}
		fp.SiteDescs = siteDescs(p, ids)
		a.Processes = append(a.Processes, fp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// HazardsAnswer is hazards' answer.
type HazardsAnswer struct {
	Envelope
	Processes []HazardsProcess `json:"processes"`
}

// HazardsProcess is one process's hazards.
type HazardsProcess struct {
	ProcessHead
	TraceProblems uint64                `json:"trace_problems" jsonschema:"trace hazards, invalid replays and region hazards, all of them (what --fail-on-trace-hazard exits 10 for)"`
	Traces        *devices.TraceSummary `json:"traces" jsonschema:"Metal trace use and problems: hazards (a replay overwrote a live buffer allocated after the capture), invalid_replays (a released trace, a closed device), region_hazards (a trace buffer under another live trace's high-water mark); null: no trace call"`
	L1ClashCount  uint64                `json:"l1_clash_count" jsonschema:"CB layouts whose region reached past the lowest live L1 buffer (TT-Metal throws for these)"`
	L1Clashes     []devices.Notice      `json:"l1_clashes" jsonschema:"the clashes: the program, its CB region's end, the L1 buffers in its way"`
	L1Headroom    []ChipHeadroom        `json:"l1_headroom" jsonschema:"per chip: lowest live L1 buffer minus the CB region's end, now and at its lowest (negative: overlap)"`
	Anomalies     map[string]uint64     `json:"anomaly_counts" jsonschema:"lifecycle anomalies by kind (double_free, unknown_device, ...), those that happened"`
	AnomalyList   []devices.Anomaly     `json:"anomalies" jsonschema:"the first ones, in stream order"`
	UnknownFrees  uint64                `json:"unknown_frees" jsonschema:"frees of buffers never seen allocated (allocated before the attach)"`
	DoubleFrees   uint64                `json:"double_frees"`
	SiteDescs     []SiteDesc            `json:"site_descriptions"`
}

// ChipHeadroom is one chip's L1 headroom.
type ChipHeadroom struct {
	Device int32                `json:"device"`
	Now    *int64               `json:"l1_headroom" jsonschema:"null: the chip lacks live L1 buffers or CBs"`
	Min    *devices.MinHeadroom `json:"min_l1_headroom"`
}

func hazardsAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*HazardsAnswer, error) {
	a := &HazardsAnswer{Processes: []HazardsProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		hp := HazardsProcess{ProcessHead: head(p), TraceProblems: p.Traces.Problems(), L1ClashCount: p.Stats.L1Clashes,
			L1Clashes: []devices.Notice{}, L1Headroom: []ChipHeadroom{}, Anomalies: map[string]uint64{},
			UnknownFrees: p.UnknownFrees, DoubleFrees: p.DoubleFrees}
		ids := map[uint32]bool{}
		if t := p.Traces; t != nil {
			tc := *t
			cut := func(name string, list []devices.TraceNote, n uint64) []devices.TraceNote {
				var out []devices.TraceNote
				for _, x := range list {
					if f.chip(x.Device) {
						out = append(out, x)
					}
				}
				if f.Device != nil {
					n = uint64(len(out))
				}
				out = keep(c, fmt.Sprintf("pid %d traces %s", p.Pid, name), out, n)
				for _, x := range out {
					if x.Buffer != nil {
						ids[x.Buffer.Site] = true
					}
					if x.Captured != nil {
						ids[x.Captured.Site] = true
					}
				}
				if out == nil {
					out = []devices.TraceNote{}
				}
				return out
			}
			tc.Hazards = cut("hazards", t.Hazards, t.HazardCount)
			tc.InvalidReplays = cut("invalid_replays", t.InvalidReplays, t.InvalidReplayCount)
			tc.RegionHazards = cut("region_hazards", t.RegionHazards, t.RegionHazardCount)
			tc.CaptureAllocs = cut("capture_allocs", t.CaptureAllocs, t.CaptureAllocCount)
			hp.Traces = &tc
		}
		var clashes []devices.Notice
		for _, n := range p.L1Clashes {
			if f.chip(n.Chip) {
				clashes = append(clashes, n)
			}
		}
		total := uint64(len(clashes))
		if f.Device == nil {
			total = p.Stats.L1Clashes
		}
		hp.L1Clashes = keep(c, fmt.Sprintf("pid %d l1_clashes", p.Pid), clashes, total)
		for i := range hp.L1Clashes {
			n := &hp.L1Clashes[i]
			ids[n.Lowest.Site] = true
			n.L1Buffers = keep(c, fmt.Sprintf("pid %d l1_clash seq %d l1_buffers", p.Pid, n.Seq), n.L1Buffers, uint64(n.L1BuffersCount))
			for _, b := range n.L1Buffers {
				ids[b.Site] = true
			}
		}
		if hp.L1Clashes == nil {
			hp.L1Clashes = []devices.Notice{}
		}
		for i := range p.Devices {
			d := &p.Devices[i]
			if f.chip(d.Device) && (d.L1Headroom != nil || d.MinL1Headroom != nil) {
				hp.L1Headroom = append(hp.L1Headroom, ChipHeadroom{Device: d.Device, Now: d.L1Headroom, Min: d.MinL1Headroom})
			}
		}
		hp.L1Headroom = keep(c, fmt.Sprintf("pid %d l1_headroom", p.Pid), hp.L1Headroom, 0)
		var total2 uint64
		for k, n := range p.AnomalyCounts {
			if n > 0 {
				hp.Anomalies[k] = n
				total2 += n
			}
		}
		hp.AnomalyList = keep(c, fmt.Sprintf("pid %d anomalies", p.Pid), p.Anomalies, total2)
		if hp.AnomalyList == nil {
			hp.AnomalyList = []devices.Anomaly{}
		}
		hp.SiteDescs = siteDescs(p, ids)
		a.Processes = append(a.Processes, hp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// WindowsAnswer is windows' answer.
type WindowsAnswer struct {
	Envelope
	Processes []WindowsProcess `json:"processes"`
}

// WindowsProcess is one process's windows.
type WindowsProcess struct {
	ProcessHead
	Windows        []devices.Window `json:"windows" jsonschema:"window 0 runs from the start to the first mark (tttrace mark PID NAME), each next one to the next mark, the last one to now or the end; per chip: each counter's peak in the window (peaks, by the summary's counter names, with when it was first reached) and per allocator type memory_stats as PJRT/JAX give them: bytes_in_use (at the window's end), peak_bytes_in_use (in the window), bytes_limit and largest_free_block_bytes (the allocator then, absent without its view)"`
	WindowsDropped uint64           `json:"windows_dropped" jsonschema:"ended windows past the ledger's bound, not kept"`
}

func windowsAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*WindowsAnswer, error) {
	a := &WindowsAnswer{Processes: []WindowsProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		wp := WindowsProcess{ProcessHead: head(p), Windows: []devices.Window{}, WindowsDropped: p.WindowsDropped}
		// The last windows: the current one is the one asked about most.
		ws := p.Windows
		if n := len(ws); n > c.limit {
			c.note(fmt.Sprintf("pid %d windows (the last ones are given)", p.Pid), c.limit, uint64(n))
			ws = ws[n-c.limit:]
		}
		for _, w := range ws {
			wc := w
			wc.Name = str(w.Name)
			wc.Devices = []devices.WindowDevice{}
			for _, d := range w.Devices {
				if f.chip(d.Device) {
					wc.Devices = append(wc.Devices, d)
				}
			}
			wc.Devices = keep(c, fmt.Sprintf("pid %d window %d devices", p.Pid, w.Index), wc.Devices, 0)
			wp.Windows = append(wp.Windows, wc)
		}
		a.Processes = append(a.Processes, wp)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// OpsAnswer is ops' answer.
type OpsAnswer struct {
	Envelope
	Processes []OpsProcess `json:"processes"`
}

// OpsProcess is one process's TT-NN ops rows.
type OpsProcess struct {
	ProcessHead
	Ops        []devices.OpRow `json:"ops" jsonschema:"a row per TT-NN op (name, the Python name: ttnn.matmul; \"\" for a device op launched where no op is live) and device op (device_op, absent for the op's own records outside a device op), most bytes first: calls (of the op, or launches of the device op in it), allocs and bytes (buffers allocated in it), peak_dram_bytes and peak_l1_bytes (the process's DRAM / L1 bytes over its chips right after one of its allocations), cb_bytes (per-core sizes of the CBs laid out in it), alloc_failures, leaked_buffers and leaked_bytes (its buffers still live at the end, or now in a snapshot)"`
	OpsCount   uint64          `json:"ops_count" jsonschema:"rows the summary has (the list may be cut to limit)"`
	OpsDropped uint64          `json:"ops_dropped" jsonschema:"records of rows past the ledger's bound (4096 rows), not in any row"`
	TrimmedOps uint64          `json:"trimmed_ops" jsonschema:"rows the run folded away (a process kept as totals keeps its 10 rows that allocated most)"`
}

func opsAnswer(c *cutter, info RunInfo, s *devices.Summary, f *Filter) (*OpsAnswer, error) {
	a := &OpsAnswer{Processes: []OpsProcess{}}
	ps := processes(c, s, f)
	for _, p := range ps {
		op := OpsProcess{ProcessHead: head(p), OpsCount: uint64(len(p.Ops)), OpsDropped: p.OpsDropped}
		if p.Trimmed != nil {
			op.TrimmedOps = p.Trimmed.Ops
		}
		rows := make([]devices.OpRow, len(p.Ops))
		copy(rows, p.Ops)
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].Bytes > rows[j].Bytes })
		rows = keep(c, fmt.Sprintf("pid %d ops", p.Pid), rows, 0)
		op.Ops = make([]devices.OpRow, len(rows))
		for i, r := range rows {
			r.Name, r.DeviceOp = str(r.Name), str(r.DeviceOp)
			op.Ops[i] = r
		}
		a.Processes = append(a.Processes, op)
	}
	a.Run, a.Caveats = info, caveats(&info, s, ps, f)
	return a, nil
}

// topK keeps the k first of what it is given in less's order.
type topK[T any] struct {
	k    int
	less func(x, y *T) bool
	list []T // sorted
}

func newTopK[T any](k int, less func(x, y *T) bool) *topK[T] {
	return &topK[T]{k: k, less: less}
}

func (t *topK[T]) add(x *T) {
	n := len(t.list)
	if n == t.k && !t.less(x, &t.list[n-1]) {
		return
	}
	i := sort.Search(n, func(i int) bool { return t.less(x, &t.list[i]) })
	if n < t.k {
		t.list = append(t.list, *x)
	}
	copy(t.list[i+1:], t.list[i:len(t.list)-1])
	t.list[i] = *x
}

func (t *topK[T]) sorted() []*T {
	out := make([]*T, len(t.list))
	for i := range t.list {
		out[i] = &t.list[i]
	}
	return out
}
