// Package diff compares two runs of tttrace (`tttrace diff A B`): each run's
// NDJSON is replayed through the live path (session.Replay, as `tttrace
// report` does) into a Collector, a sink that keeps what can be compared of
// its summary (a Run); Compare matches the runs' processes by command and
// lists, per process, chip and type, what changed: end totals, peaks (and
// when, from the process's first event), the allocator's numbers, leaks, CB
// figures, L1 per core (the busiest core's total), the allocation sites that grew, appeared or vanished, and the
// failed allocations, L1 clashes and Metal trace problems one run has and
// the other not. Sites and records are matched by what describes them (the
// symbolized native frames and the Python lines, never a site id, a pc or a
// host pointer), so two runs of one program compare whatever their
// addresses. The Result marshals to the --json line and writes the human
// table (WriteText); Exceeding is the --fail-on-growth gate.
package diff

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// Bounds: a run's files can make a Collector hold no more than this
// (besides the replay's own bounds).
const (
	// MaxProcesses bounds the processes of one run that are compared.
	MaxProcesses = 1 << 16
	// MaxSiteRows bounds the per-site rows (site, chip, type) of one run.
	MaxSiteRows = 1 << 20
	// maxFrames bounds the frames of a site's description that identify it.
	maxFrames = 128
)

// The counters compared per chip, as the summary names them.
const (
	cDRAM = iota
	cL1
	cL1Small
	cTrace
	cSysMem
	cCB
	cLiveBuffers
	cCBRegistered
	cCBResidentTotal
	// cL1Core: L1 per core, the busiest core's total (at the end
	// l1_busiest_core.total_bytes, its peak peak_l1_busiest_core's; a
	// window's peaks name it l1_busiest_core_bytes, as devices does).
	cL1Core
	nCounters
)

var counterNames = [nCounters]string{"dram_bytes", "l1_bytes", "l1_small_bytes", "trace_bytes", "system_memory_bytes", "cb_bytes", "live_buffers",
	"cb_registered_bytes", "cb_resident_total_bytes", "l1_busiest_core_bytes"}

// gated: the counters --fail-on-growth judges: the memory a chip holds (a
// type's bytes, the CBs resident on its busiest core, what its busiest
// core's L1 holds), not counts or sums over programs or cores.
func gated(i int) bool { return i <= cCB || i == cL1Core }

// counterTypes are the buffer types of the first five counters.
var counterTypes = [cCB]string{"DRAM", "L1", "L1_SMALL", "TRACE", "SYSTEM_MEMORY"}

func counters(d *devices.DeviceSummary) (end, peak, peakTs [nCounters]uint64) {
	end = [nCounters]uint64{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBBytes, d.LiveBuffers,
		d.CBRegisteredBytes, d.CBResidentTotalBytes}
	p := &d.Peaks
	for i, pk := range [cL1Core]devices.Peak{p.DRAMBytes, p.L1Bytes, p.L1SmallBytes, p.TraceBytes, p.SystemMemoryBytes, p.CBBytes, p.LiveBuffers,
		p.CBRegisteredBytes, p.CBResidentTotalBytes} {
		peak[i], peakTs[i] = pk.Value, pk.TsNs
	}
	// L1 per core: absent while the chip's L1 held nothing known (0).
	if c := d.L1BusiestCore; c != nil {
		end[cL1Core] = c.TotalBytes
	}
	if c := d.PeakL1BusiestCore; c != nil {
		peak[cL1Core], peakTs[cL1Core] = c.TotalBytes, c.TsNs
	}
	return end, peak, peakTs
}

// Run is what a Collector kept of one run.
type Run struct {
	Events          uint64
	LostEvents      uint64
	LayoutAnomalies uint64
	// SiteUsage: the run's events were replayed, so every process has its
	// per-site accounting (in use, allocated, held at the peak); false for
	// a summary alone (--no-events), whose sites are its leaks'.
	SiteUsage bool
	// Dropped: processes the run itself had folded away (past
	// --keep-ended-totals): not compared.
	Dropped   uint64
	Processes []*Process
}

// Process is one process of a run.
type Process struct {
	Pid     uint32
	Command string
	// StartNs: the ts_ns of its first event (0: unknown, a summary alone).
	StartNs    uint64
	Exited     bool
	ExitCode   int
	ExitSignal int
	// Trimmed: the run kept only its totals (past --keep-ended): its
	// sites and records are not compared.
	Trimmed bool
	Chips   []Chip // by device
	Meshes  []Mesh
	// Sites: per site description, chip and type.
	Sites map[SiteRow]*SiteFig
	// Descs: each site key's description.
	Descs map[string]*SiteRef
	// Records: alloc_failed, l1_clash and trace problems (hazards, invalid
	// replays, region hazards) as kept by the summary (its first 100 of
	// each), keyed by their description; Counts: all of them.
	Records map[string]*Record
	Counts  Counts
	// Windows: its windows (tttrace mark), in the summary's order;
	// WindowsDropped: its ended windows the run did not keep (past 64).
	Windows        []Window
	WindowsDropped uint64
	// Ops: its TT-NN ops rows by (name, device op); OpsDropped: records of
	// rows the run did not keep (past 4096).
	Ops        map[OpKey]*OpFig
	OpsDropped uint64
}

// Counts are a process's problem counts, all of them (the summary keeps
// the first 100 records of each).
type Counts struct {
	AllocFailures uint64 `json:"alloc_failures"`
	L1Clashes     uint64 `json:"l1_clashes"`
	TraceProblems uint64 `json:"trace_problems"`
}

// Chip is one chip of a process.
type Chip struct {
	Device            int32
	End, Peak, PeakTs [nCounters]uint64
	Closed            bool
	// Leaks by buffer type.
	Leaks map[string]LeakFig
	// Alloc: the allocator's view (nil: none; AllocWhy says why).
	Alloc    *devices.Allocator
	AllocWhy string
	// MinL1Headroom: the lowest L1 headroom (nil: never defined).
	MinL1Headroom *int64
}

// LeakFig is what leaked of one type on one chip.
type LeakFig struct {
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// Mesh is a live MeshDevice's own allocator, named by its chips (its
// pointer is the run's).
type Mesh struct {
	Chips    []int32
	Alloc    *devices.Allocator
	AllocWhy string
}

// SiteRow keys a site's figures: its description's key, the chip, the
// buffer type.
type SiteRow struct {
	Site   string
	Device int32
	Type   string
}

// SiteFig is what the sites of one description did on one chip with one
// type (summed over the run's site ids that share the description).
type SiteFig struct {
	InUseBytes   uint64 `json:"in_use_bytes"`
	InUseObjects uint64 `json:"in_use_buffers"`
	AllocBytes   uint64 `json:"alloc_bytes"`
	AllocObjects uint64 `json:"alloc_buffers"`
	// PeakBytes: held when the chip's counter of this type first reached
	// its peak.
	PeakBytes uint64 `json:"peak_bytes"`
}

// SiteRef describes an allocation site as the diff matches it: its Python
// frames (function, file, line) and its native frames by symbol (the
// module's base name; the DWARF line where there is one; the offset in the
// module only for a frame no symbol covers), innermost first. No pc, no
// site id: those are the run's.
type SiteRef struct {
	Python    []devices.PyFrame `json:"python"`
	Native    []Frame           `json:"native"`
	Truncated bool              `json:"truncated,omitempty"`
	// Unknown: no stack (stacks off, or the stack was lost).
	Unknown bool `json:"unknown,omitempty"`
}

// Frame is a native frame of a SiteRef.
type Frame struct {
	Function string  `json:"function,omitempty"`
	Module   string  `json:"module,omitempty"`
	Offset   *uint64 `json:"offset,omitempty"` // only without Function
	File     string  `json:"file,omitempty"`
	Line     int     `json:"line,omitempty"`
}

var unknownRef = &SiteRef{Python: []devices.PyFrame{}, Native: []Frame{}, Unknown: true}

// ref is the SiteRef of a described site (nil: unknown) and its key.
func ref(d *devices.Site) (*SiteRef, string) {
	if d == nil || (len(d.Native) == 0 && len(d.Python) == 0) {
		return unknownRef, "?"
	}
	r := &SiteRef{Python: make([]devices.PyFrame, 0, min(len(d.Python), maxFrames)), Native: make([]Frame, 0, min(len(d.Native), maxFrames)), Truncated: d.Truncated}
	for i, f := range d.Python {
		if i == maxFrames {
			r.Truncated = true
			break
		}
		r.Python = append(r.Python, f)
	}
	for i := range d.Native {
		if i == maxFrames {
			r.Truncated = true
			break
		}
		f := &d.Native[i]
		fr := Frame{Function: f.Function, File: f.File, Line: f.Line}
		if f.Module != "" {
			fr.Module = filepath.Base(f.Module)
		}
		if f.Function == "" && f.Module != "" {
			off := f.Offset // the ELF address in its file: no symbol names it
			fr.Offset = &off
		}
		r.Native = append(r.Native, fr)
	}
	k, _ := json.Marshal(r)
	return r, string(k)
}

// Record is an alloc_failed, l1_clash or trace problem as the diff
// matches it: its kind and what describes it, never its pointers, seqs or
// times.
type Record struct {
	Kind       string  `json:"kind"` // alloc_failed, l1_clash, trace_hazard, trace_replay_invalid, trace_region_hazard
	Device     *int32  `json:"device,omitempty"`
	MeshChips  []int32 `json:"mesh_chips,omitempty"`
	BufferType string  `json:"buffer_type,omitempty"`
	Size       uint64  `json:"size,omitempty"`
	// Cause: an alloc_failed's cause; Reason: a trace_replay_invalid's.
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// An l1_clash's CB region end and lowest L1 address.
	CBRegionEnd     uint64 `json:"cb_region_end,omitempty"`
	LowestL1Address uint64 `json:"lowest_l1_address,omitempty"`
	// Site: where the failed allocation was asked for, the lowest L1
	// buffer of a clash, the buffer a trace record names; Other: the
	// captured buffer a trace_hazard overlaps.
	Site  *SiteRef `json:"site,omitempty"`
	Other *SiteRef `json:"other_site,omitempty"`
	key   string   // its JSON: what matches it
	count uint64
}

// Collector is a sink that keeps what Compare needs of a replayed run:
// each process's first event (for the peaks' times) and, at the summary,
// its comparable figures.
type Collector struct {
	sinks.Base
	run    *Run
	err    error
	starts map[uint32][]uint64 // each pid's incarnations' first event
	live   map[uint32]bool     // pids with an incarnation not exited
	events bool                // an event was replayed
	rows   int
}

// NewCollector makes a Collector for a replay that keeps per-site
// accounting (session.ReplayConfig.SiteUsage).
func NewCollector() *Collector {
	return &Collector{starts: map[uint32][]uint64{}, live: map[uint32]bool{}}
}

// Event notes each process's first event.
func (c *Collector) Event(ev *events.Event) {
	c.events = true
	switch ev.Kind {
	case events.KindLost:
		return
	case events.KindExit:
		c.live[ev.Pid] = false
		return
	}
	if !c.live[ev.Pid] && len(c.starts) < MaxProcesses {
		c.live[ev.Pid] = true
		c.starts[ev.Pid] = append(c.starts[ev.Pid], ev.TsNs)
	}
}

// Summary keeps the run's comparable figures (during the call: the leak
// lists are read from the ledger).
func (c *Collector) Summary(s *devices.Summary) error {
	r := &Run{Events: s.Events, LostEvents: s.LostEvents, LayoutAnomalies: s.LayoutAnomalies}
	if d := s.DroppedProcesses; d != nil {
		r.Dropped = d.Processes
	}
	if len(s.Processes) > MaxProcesses {
		c.err = fmt.Errorf("more than %d processes: diff compares at most %d", MaxProcesses, MaxProcesses)
		return nil
	}
	// Events replayed: the ledger kept per-site accounting; a summary
	// alone (no event) has its leaks only.
	r.SiteUsage = c.events
	byPid := map[uint32]int{}
	for i := range s.Processes {
		ps := &s.Processes[i]
		p, err := c.process(ps, r.SiteUsage)
		if err != nil {
			c.err = err
			return nil
		}
		if st := c.starts[ps.Pid]; len(st) == countPid(s, ps.Pid) {
			p.StartNs = st[byPid[ps.Pid]]
		}
		byPid[ps.Pid]++
		r.Processes = append(r.Processes, p)
	}
	c.run = r
	return nil
}

func countPid(s *devices.Summary, pid uint32) int {
	n := 0
	for i := range s.Processes {
		if s.Processes[i].Pid == pid {
			n++
		}
	}
	return n
}

// Run returns the run collected, or why it could not be.
func (c *Collector) Run() (*Run, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.run == nil {
		return nil, fmt.Errorf("no summary was made")
	}
	return c.run, nil
}

// FromSummary is the Run of a summary; usage: its per-site accounting
// (ProcessSummary.SiteUsage) is whole, as a replay with events makes it.
func FromSummary(s *devices.Summary, usage bool) (*Run, error) {
	c := NewCollector()
	c.events = usage
	if err := c.Summary(s); err != nil {
		return nil, err
	}
	return c.Run()
}

// process keeps ps's figures; usage: compare per-site accounting rather
// than leaks.
func (c *Collector) process(ps *devices.ProcessSummary, usage bool) (*Process, error) {
	p := &Process{Pid: ps.Pid, Command: ps.Command, Exited: ps.Exited, ExitCode: ps.ExitCode, ExitSignal: ps.ExitSignal,
		Trimmed: ps.Trimmed != nil, Sites: map[SiteRow]*SiteFig{}, Descs: map[string]*SiteRef{}, Records: map[string]*Record{},
		WindowsDropped: ps.WindowsDropped, OpsDropped: ps.OpsDropped}
	p.Counts = Counts{AllocFailures: ps.Stats.AllocFailures, L1Clashes: ps.Stats.L1Clashes, TraceProblems: ps.Traces.Problems()}
	for i := range ps.Devices {
		d := &ps.Devices[i]
		ch := Chip{Device: d.Device, Closed: d.Closed, Leaks: map[string]LeakFig{}, Alloc: d.Allocator, AllocWhy: d.AllocatorWhy}
		ch.End, ch.Peak, ch.PeakTs = counters(d)
		if h := d.MinL1Headroom; h != nil {
			v := h.Value
			ch.MinL1Headroom = &v
		}
		p.Chips = append(p.Chips, ch)
	}
	sort.Slice(p.Chips, func(i, j int) bool { return p.Chips[i].Device < p.Chips[j].Device })
	chip := func(dev int32) *Chip {
		i := sort.Search(len(p.Chips), func(i int) bool { return p.Chips[i].Device >= dev })
		if i < len(p.Chips) && p.Chips[i].Device == dev {
			return &p.Chips[i]
		}
		return nil
	}
	for _, g := range ps.LeakGroups {
		if ch := chip(g.Device); ch != nil {
			f := ch.Leaks[g.Type]
			f.Count = devices.SatAdd(f.Count, g.Count)
			f.Bytes = devices.SatAdd(f.Bytes, g.Bytes)
			ch.Leaks[g.Type] = f
		}
	}
	for _, m := range ps.Meshes {
		p.Meshes = append(p.Meshes, Mesh{Chips: append([]int32(nil), m.Chips...), Alloc: m.Allocator, AllocWhy: m.AllocatorWhy})
	}
	if p.Trimmed {
		return p, nil
	}
	if err := c.windowsAndOps(p, ps); err != nil {
		return nil, err
	}
	descs := make(map[uint32]*devices.Site, len(ps.Sites))
	for i := range ps.Sites {
		descs[ps.Sites[i].Site] = &ps.Sites[i]
	}
	keyOf := func(site uint32, d *devices.Site) string {
		if site == 0 {
			d = nil
		} else if d == nil {
			d = descs[site]
		}
		r, k := ref(d)
		if _, ok := p.Descs[k]; !ok {
			p.Descs[k] = r
		}
		return k
	}
	row := func(k SiteRow) (*SiteFig, error) {
		f := p.Sites[k]
		if f == nil {
			if c.rows++; c.rows > MaxSiteRows {
				return nil, fmt.Errorf("more than %d rows of sites, chips and types: diff compares at most %d", MaxSiteRows, MaxSiteRows)
			}
			f = &SiteFig{}
			p.Sites[k] = f
		}
		return f, nil
	}
	if usage {
		for i := range ps.SiteUsage {
			u := &ps.SiteUsage[i]
			f, err := row(SiteRow{Site: keyOf(u.Site, u.Desc), Device: u.Device, Type: u.Type})
			if err != nil {
				return nil, err
			}
			f.InUseBytes = devices.SatAdd(f.InUseBytes, u.InuseBytes)
			f.InUseObjects = devices.SatAdd(f.InUseObjects, u.InuseObjects)
			f.AllocBytes = devices.SatAdd(f.AllocBytes, u.AllocBytes)
			f.AllocObjects = devices.SatAdd(f.AllocObjects, u.AllocObjects)
			f.PeakBytes = devices.SatAdd(f.PeakBytes, u.PeakBytes)
		}
	} else {
		// A summary alone: what its sites hold at the end, from its leaks
		// (an unplaced mesh buffer is on no chip: left out, as its chips').
		for lk := range ps.AllLeaks() {
			f, err := row(SiteRow{Site: keyOf(lk.Site, nil), Device: lk.Device, Type: lk.Type})
			if err != nil {
				return nil, err
			}
			f.InUseBytes = devices.SatAdd(f.InUseBytes, lk.Size)
			f.InUseObjects++
		}
	}
	add := func(r *Record) {
		k, _ := json.Marshal(r)
		if e := p.Records[string(k)]; e != nil {
			e.count++
			return
		}
		r.key, r.count = string(k), 1
		p.Records[r.key] = r
	}
	siteRef := func(id uint32) *SiteRef {
		r, _ := ref(descsOrNil(descs, id))
		return r
	}
	for i := range ps.AllocFailures {
		f := &ps.AllocFailures[i]
		r := &Record{Kind: "alloc_failed", BufferType: f.BufferType, Size: f.Size, Cause: f.Cause, Site: siteRef(f.Site)}
		if f.Device != nil {
			d := *f.Device
			r.Device = &d
		}
		if f.DeviceKind == "mesh" {
			r.MeshChips = append([]int32{}, f.MeshChips...)
		}
		add(r)
	}
	for i := range ps.L1Clashes {
		n := &ps.L1Clashes[i]
		d := n.Chip
		add(&Record{Kind: "l1_clash", Device: &d, CBRegionEnd: n.CBRegionEnd, LowestL1Address: n.LowestL1Address, Site: siteRef(n.Lowest.Site)})
	}
	if tr := ps.Traces; tr != nil {
		for _, list := range [][]devices.TraceNote{tr.Hazards, tr.InvalidReplays, tr.RegionHazards} {
			for i := range list {
				n := &list[i]
				d := n.Device
				r := &Record{Kind: n.Type.String(), Device: &d, Reason: n.Reason}
				if b := n.Buffer; b != nil {
					r.BufferType, r.Size, r.Site = b.BufferType, b.Size, siteRef(b.Site)
				}
				if b := n.Captured; b != nil {
					r.Other = siteRef(b.Site)
				}
				add(r)
			}
		}
	}
	return p, nil
}

func descsOrNil(m map[uint32]*devices.Site, id uint32) *devices.Site {
	if id == 0 {
		return nil
	}
	return m[id]
}
