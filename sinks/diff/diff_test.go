package diff

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// site describes a crafted site: a native stack through TT-Metal into the
// workload at pc, and a Python line.
func site(id uint32, pc uint64, pyLine int, fn string) devices.Site {
	return devices.Site{Site: id,
		Native: []devices.NativeFrame{
			{PC: pc, Module: "/run" + string(rune('a'+id%3)) + "/lib/libtt_metal.so", Function: "tt::tt_metal::GraphTracker::track_allocate(tt::tt_metal::Buffer const*)", Offset: 3},
			{PC: pc + 0x40, Module: "/opt/w/libwork.so", Function: fn, Offset: pc & 0xfff},
			{PC: pc + 0x90, Module: "/opt/w/libwork.so", Offset: 0x1234},
		},
		Python: []devices.PyFrame{{Function: "run", File: "/src/work.py", Line: pyLine}}}
}

// proc is a crafted process of one chip (0) with per-site rows.
type proc struct {
	pid           uint32
	cmd           string
	dram, peak    uint64
	peakTs        uint64
	l1, l1Peak    uint64
	leaks         []devices.Leak
	usage         []devices.SiteUsage
	sites         []devices.Site
	failures      []devices.AllocFailure
	allocated     uint64
	nfail, nclash uint64
}

func summary(procs ...proc) *devices.Summary {
	s := &devices.Summary{Type: "summary", Complete: true, Events: 100}
	for _, p := range procs {
		ps := devices.ProcessSummary{Pid: p.pid, Command: p.cmd, Exited: true,
			Devices: []devices.DeviceSummary{{Device: 0, DRAMBytes: p.dram, L1Bytes: p.l1,
				Peaks: devices.Peaks{DRAMBytes: devices.Peak{Value: p.peak, TsNs: p.peakTs}, L1Bytes: devices.Peak{Value: p.l1Peak, TsNs: p.peakTs}},
				Allocator: &devices.Allocator{DRAM: &devices.AllocatorType{Banks: 12, BankSize: 1 << 30, TotalAllocatable: 1 << 30,
					TotalAllocated: ptr(p.allocated), TotalFree: ptr(1<<30 - p.allocated), LargestFree: ptr(1<<30 - p.allocated)}}}},
			Leaks: p.leaks, Sites: p.sites, SiteUsage: p.usage, AllocFailures: p.failures}
		ps.Stats.AllocFailures, ps.Stats.L1Clashes = p.nfail, p.nclash
		for _, l := range p.leaks {
			n := len(ps.LeakGroups)
			if n == 0 || ps.LeakGroups[n-1].Type != l.Type || ps.LeakGroups[n-1].Device != l.Device {
				ps.LeakGroups = append(ps.LeakGroups, devices.LeakGroup{Device: l.Device, Type: l.Type})
				n++
			}
			ps.LeakGroups[n-1].Count++
			ps.LeakGroups[n-1].Bytes += l.Size
		}
		s.Processes = append(s.Processes, ps)
	}
	return s
}

func ptr(v uint64) *uint64 { return &v }

func usage(s *devices.Site, typ string, inuse, alloc, peak uint64) devices.SiteUsage {
	u := devices.SiteUsage{Site: s.Site, Device: 0, Type: typ, InuseBytes: inuse, AllocBytes: alloc, PeakBytes: peak, Desc: s}
	if inuse > 0 {
		u.InuseObjects = 1
	}
	if alloc > 0 {
		u.AllocObjects = 1
	}
	return u
}

func compare(t *testing.T, a, b *devices.Summary, use bool) *Result {
	t.Helper()
	ra, err := FromSummary(a, use)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := FromSummary(b, use)
	if err != nil {
		t.Fatal(err)
	}
	return Compare(ra, rb, "a.ndjson", "b.ndjson")
}

// collect is the Run a replay of s makes whose processes' first events
// came at starts.
func collect(t *testing.T, s *devices.Summary, starts map[uint32]uint64) *Run {
	t.Helper()
	c := NewCollector()
	for pid, ts := range starts {
		c.Event(&events.Event{Kind: events.KindAlloc, Pid: pid, TsNs: ts})
		c.Event(&events.Event{Kind: events.KindAlloc, Pid: pid, TsNs: ts + 1})
	}
	if err := c.Summary(s); err != nil {
		t.Fatal(err)
	}
	r, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The run of a workload, as the same workload run again makes it: other
// pids, site ids, pcs, module directories, Buffer pointers, seqs and times.
func baseline(pid uint32, pcBase uint64, siteBase uint32) *devices.Summary {
	s1, s2 := site(siteBase+1, pcBase+0x100, 10, "work(int)"), site(siteBase+2, pcBase+0x200, 20, "work(int)")
	fail := devices.AllocFailure{Type: "alloc_failed", Pid: pid, Seq: uint64(pcBase), TsNs: pcBase, DeviceKind: "chip", Device: new(int32),
		Manager: "0x" + string(rune('1'+siteBase)), BufferType: "DRAM", Size: 1 << 31, Cause: "exhausted", Site: s2.Site}
	return summary(proc{pid: pid, cmd: "python work.py", dram: 4096, peak: 12288, peakTs: pcBase + 500, allocated: 4096,
		leaks:    []devices.Leak{{Device: 0, Type: "DRAM", Address: 0x10000, Size: 4096, Buffer: "0x" + string(rune('a'+siteBase)), Site: s1.Site, Seq: pcBase}},
		sites:    []devices.Site{s1, s2},
		usage:    []devices.SiteUsage{usage(&s1, "DRAM", 4096, 8192, 8192), usage(&s2, "DRAM", 0, 4096, 4096)},
		failures: []devices.AllocFailure{fail}, nfail: 1})
}

func TestSameRunsAreSame(t *testing.T) {
	r := compare(t, baseline(100, 0x7f0000, 0), baseline(200, 0x5500000, 40), true)
	if !r.Same || len(r.Processes) != 0 || len(r.Growth) != 0 || r.Unchanged != 1 {
		b, _ := json.Marshal(r)
		t.Fatalf("two runs of one workload differ: %s", b)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no change: 1 process(es) matched") {
		t.Errorf("text:\n%s", out.String())
	}
}

// A known change (one more DRAM buffer of 64 KiB left allocated, from a new
// Python line) is named, and nothing else.
func TestKnownChangeIsNamedExactly(t *testing.T) {
	a := baseline(100, 0x7f0000, 0)
	b := baseline(200, 0x5500000, 40)
	pb := &b.Processes[0]
	s3 := site(50, 0x5500300, 33, "work(int)")
	pb.Sites = append(pb.Sites, s3)
	pb.SiteUsage = append(pb.SiteUsage, usage(&s3, "DRAM", 65536, 65536, 65536))
	pb.Leaks = append(pb.Leaks, devices.Leak{Device: 0, Type: "DRAM", Address: 0x20000, Size: 65536, Site: s3.Site})
	pb.LeakGroups[0].Count, pb.LeakGroups[0].Bytes = 2, 4096+65536
	d := &pb.Devices[0]
	d.DRAMBytes += 65536
	d.Peaks.DRAMBytes.Value += 65536
	d.Allocator.DRAM.TotalAllocated = ptr(4096 + 65536)
	d.Allocator.DRAM.TotalFree = ptr(1<<30 - 4096 - 65536)
	d.Allocator.DRAM.LargestFree = ptr(1<<30 - 4096 - 65536)

	r := Compare(collect(t, a, map[uint32]uint64{100: 0x7f0000}), collect(t, b, map[uint32]uint64{200: 1}), "a.ndjson", "b.ndjson")
	if r.Same || len(r.Processes) != 1 {
		t.Fatalf("processes: %+v", r.Processes)
	}
	p := r.Processes[0]
	if p.Status != "changed" || *p.PidA != 100 || *p.PidB != 200 || p.Exit != nil || p.Counts != nil || len(p.Records) != 0 || len(p.Meshes) != 0 {
		t.Errorf("process: %+v", p)
	}
	if len(p.Chips) != 1 || len(p.Chips[0].Counters) != 1 {
		t.Fatalf("chips: %+v", p.Chips)
	}
	c := p.Chips[0]
	if cd := c.Counters[0]; cd.Counter != "dram_bytes" || cd.End != num(4096, 4096+65536) || cd.Peak != num(12288, 12288+65536) ||
		*cd.PeakAtA != 500 || *cd.PeakAtB != 0x5500000+499 {
		t.Errorf("counter: %+v", cd)
	}
	if len(c.Leaks) != 1 || c.Leaks[0].Type != "DRAM" || c.Leaks[0].Count != num(1, 2) || c.Leaks[0].Bytes.Delta != 65536 {
		t.Errorf("leaks: %+v", c.Leaks)
	}
	if len(c.Allocator) != 1 || c.Allocator[0].Type != "dram" || *c.Allocator[0].Allocated.Delta != 65536 || *c.Allocator[0].LargestFree.Delta != -65536 ||
		!c.Allocator[0].Failures.same() {
		t.Errorf("allocator: %+v", c.Allocator)
	}
	if len(p.Sites) != 1 {
		t.Fatalf("sites: %+v", p.Sites)
	}
	if s := p.Sites[0]; s.Status != "appeared" || s.Type != "DRAM" || s.B.InUseBytes != 65536 || s.Site.Python[0].Line != 33 ||
		s.Site.Native[1].Function != "work(int)" || s.Site.Native[0].Module != "libtt_metal.so" || *s.Site.Native[2].Offset != 0x1234 {
		t.Errorf("site: %+v %+v", s, s.Site)
	}
	if len(r.Growth) != 2 || r.Growth[0].Bytes != 65536 || r.Growth[1].Bytes != 65536 {
		t.Fatalf("growth: %+v", r.Growth)
	}
	for _, g := range r.Growth {
		if g.Counter != "dram_bytes" || g.Pct == nil {
			t.Errorf("growth: %+v", g)
		}
	}
	if g := r.Growth; *g[0].Pct != 1600 && *g[0].Pct != 65536*100.0/12288 {
		t.Errorf("growth pct: %v", *g[0].Pct)
	}
	for _, c := range []struct {
		l    Limit
		fail int
	}{
		{Limit{Bytes: 0}, 2}, {Limit{Bytes: 65535}, 2}, {Limit{Bytes: 65536}, 0},
		{Limit{Pct: 600, IsPct: true}, 1}, {Limit{Pct: 1600, IsPct: true}, 0}, {Limit{Pct: 100, IsPct: true}, 2},
	} {
		if n := len(r.Exceeding(c.l)); n != c.fail {
			t.Errorf("%+v: %d growths exceed it, want %d", c.l, n, c.fail)
		}
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"process 100 in A, 200 in B (python work.py)",
		"  0      DRAM        4.0 KiB   68.0 KiB   +64.0 KiB   12.0 KiB   76.0 KiB   +64.0 KiB  +0.000s / +0.089s",
		"    chip 0 DRAM: 1 -> 2 buffer(s), 4.0 KiB -> 68.0 KiB (+64.0 KiB)",
		"    chip 0 dram: allocated 4.0 KiB -> 68.0 KiB, free 1024.0 MiB -> 1023.9 MiB, largest free block 1024.0 MiB -> 1023.9 MiB",
		"  sites (by chip and type): 1 appeared",
		"    appeared  chip 0 DRAM: in use 0 B -> 64.0 KiB (0 -> 1), at the peak 0 B -> 64.0 KiB, allocated 0 B -> 64.0 KiB (0 -> 1)",
		"      /src/work.py:33 in run",
		"      work(int) [libwork.so]",
		"      libwork.so+0x1234",
		"growth: 2 memory counter(s) higher in B; the most: pid 100/200 chip 0 DRAM at the end 4.0 KiB -> 68.0 KiB (+64.0 KiB, +1600.0%)",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}

// Sites are matched by description: a site that moved to another Python
// line is one that vanished and one that appeared; the same description
// under two site ids of a run is one site.
func TestSitesMatchByDescription(t *testing.T) {
	a := baseline(100, 0x7f0000, 0)
	b := baseline(200, 0x5500000, 40)
	pb := &b.Processes[0]
	moved := site(pb.Sites[1].Site, 0x5500200, 21, "work(int)")
	pb.Sites[1] = moved
	pb.SiteUsage[1].Desc = &pb.Sites[1]
	pb.AllocFailures[0].Site = 0 // the failure's stack is not known in B: it is another record
	r := compare(t, a, b, true)
	p := r.Processes[0]
	if len(p.Sites) != 2 || p.Sites[0].Status == p.Sites[1].Status {
		t.Fatalf("sites: %+v", p.Sites)
	}
	for _, s := range p.Sites {
		if want := map[string]int{"vanished": 20, "appeared": 21}[s.Status]; s.Site.Python[0].Line != want {
			t.Errorf("%s site at line %d, want %d", s.Status, s.Site.Python[0].Line, want)
		}
	}
	if len(p.Records) != 2 || p.Records[0].Status != "new" || !p.Records[0].Site.Unknown || p.Records[1].Status != "gone" || p.Records[1].Site.Python[0].Line != 20 {
		t.Errorf("records: %+v", p.Records)
	}
	if len(p.Chips) != 0 || len(r.Growth) != 0 {
		t.Errorf("chips %+v growth %+v", p.Chips, r.Growth)
	}

	// One description, two ids in B (the same stack interned twice): summed.
	b = baseline(200, 0x5500000, 40)
	pb = &b.Processes[0]
	twin := pb.Sites[0]
	twin.Site = 77
	twin.Native = append([]devices.NativeFrame{}, twin.Native...)
	twin.Native[0].PC += 0x1000
	pb.Sites = append(pb.Sites, twin)
	pb.SiteUsage[0].InuseBytes, pb.SiteUsage[0].AllocBytes, pb.SiteUsage[0].PeakBytes = 2048, 4096, 4096
	pb.SiteUsage = append(pb.SiteUsage, usage(&pb.Sites[2], "DRAM", 2048, 4096, 4096))
	pb.SiteUsage[2].InuseObjects, pb.SiteUsage[0].AllocObjects = 0, 0
	pb.SiteUsage[0].InuseObjects = 1
	if r := compare(t, a, b, true); !r.Same {
		t.Errorf("a site split over two ids differs: %+v", r.Processes)
	}
}

// Processes are matched by command, the n-th with the n-th; the runs' only
// unmatched processes are compared with each other.
func TestProcessMatching(t *testing.T) {
	one := func(pid uint32, cmd string, dram uint64) proc {
		return proc{pid: pid, cmd: cmd, dram: dram, peak: dram, allocated: dram}
	}
	a := summary(one(10, "pytest a", 100), one(11, "pytest b", 200), one(12, "pytest b", 300), one(13, "old", 1))
	b := summary(one(20, "pytest b", 200), one(21, "pytest a", 150), one(22, "pytest b", 300), one(23, "new", 1))
	r := compare(t, a, b, false)
	if r.Unchanged != 3 || len(r.Processes) != 1 {
		t.Fatalf("unchanged %d, processes %+v", r.Unchanged, r.Processes)
	}
	// pytest a changed (100 -> 150); old and new are paired, the same.
	if p := r.Processes[0]; *p.PidA != 10 || *p.PidB != 21 || p.Chips[0].Counters[0].End != num(100, 150) {
		t.Errorf("%+v", p)
	}
	b = summary(one(20, "pytest b", 200), one(21, "pytest a", 100), one(22, "pytest b", 300), one(23, "new", 1), one(24, "newer", 5))
	r = compare(t, a, b, false)
	if len(r.Processes) != 3 || r.Processes[0].Status != "vanished" || *r.Processes[0].PidA != 13 ||
		r.Processes[1].Status != "appeared" || *r.Processes[1].PidB != 23 || r.Processes[2].Status != "appeared" || r.Processes[2].PidA != nil {
		t.Fatalf("%+v", r.Processes)
	}
	if c := r.Processes[2].Chips[0]; c.Status != "appeared" || c.Counters[0].End != num(0, 5) {
		t.Errorf("%+v", c)
	}
	// An appeared process's memory is growth from nothing.
	if len(r.Growth) != 4 || r.Growth[0].Bytes != 5 || r.Growth[0].Pct != nil || !(Limit{Pct: 1e9, IsPct: true}).Exceeds(&r.Growth[0]) {
		t.Errorf("growth: %+v", r.Growth)
	}
}

// A summary alone (--no-events): sites compare by what they hold at the
// end, read from its leaks, whatever the other run has.
func TestSummaryAloneComparesLeaks(t *testing.T) {
	a := baseline(100, 0x7f0000, 0)
	b := baseline(200, 0x5500000, 40)
	b.Processes[0].SiteUsage = nil
	ra, _ := FromSummary(a, true)
	rb, _ := FromSummary(b, false)
	r := Compare(ra, rb, "a", "b")
	if !r.Same || r.SitesBy != "leaks" || !r.B.SummaryOnly {
		t.Fatalf("%+v", r)
	}
	b.Processes[0].Leaks[0].Size = 8192
	rb, _ = FromSummary(b, false)
	r = Compare(ra, rb, "a", "b")
	p := r.Processes[0]
	if len(p.Sites) != 1 || p.Sites[0].Status != "grew" || p.Sites[0].A != (SiteFig{InUseBytes: 4096, InUseObjects: 1}) || p.Sites[0].B.InUseBytes != 8192 {
		t.Errorf("%+v", p.Sites)
	}
}

// Names from the runs are escaped in the table; the JSON keeps them.
func TestTextEscapes(t *testing.T) {
	a := summary(proc{pid: 1, cmd: "evil\x1b[2J", dram: 1})
	b := summary(proc{pid: 2, cmd: "evil\x1b[2J", dram: 2})
	r := compare(t, a, b, true)
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || !strings.Contains(out.String(), `evil\x1b[2J`) {
		t.Errorf("%q", out.String())
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(j, []byte(`"command":"evil\u001b[2J"`)) {
		t.Errorf("%s", j)
	}
}

// A run over the bounds is refused with one error.
func TestBounds(t *testing.T) {
	s := &devices.Summary{}
	for i := range MaxProcesses + 1 {
		s.Processes = append(s.Processes, devices.ProcessSummary{Pid: uint32(i)})
	}
	if _, err := FromSummary(s, true); err == nil || !strings.Contains(err.Error(), "more than 65536 processes") {
		t.Errorf("%v", err)
	}
}

// The CB figures are compared; only the CBs resident on the busiest core
// (cb_bytes) are memory --fail-on-growth judges.
func TestCBFigures(t *testing.T) {
	cb := func(pid uint32, resident, registered uint64) *devices.Summary {
		s := summary(proc{pid: pid, cmd: "w"})
		d := &s.Processes[0].Devices[0]
		d.CBBytes, d.CBRegisteredBytes, d.CBResidentTotalBytes = resident, registered, resident*4
		d.Peaks.CBBytes.Value, d.Peaks.CBRegisteredBytes.Value, d.Peaks.CBResidentTotalBytes.Value = resident, registered, resident*4
		return s
	}
	r := compare(t, cb(1, 4096, 8192), cb(2, 4096, 16384), true)
	if len(r.Processes) != 1 || len(r.Processes[0].Chips[0].Counters) != 1 || r.Processes[0].Chips[0].Counters[0].Counter != "cb_registered_bytes" || len(r.Growth) != 0 {
		t.Errorf("registered CBs grew: %+v, growth %+v", r.Processes, r.Growth)
	}
	r = compare(t, cb(1, 4096, 8192), cb(2, 6144, 8192), true)
	var got []string
	for _, g := range r.Growth {
		got = append(got, g.Counter+" "+g.At)
	}
	if strings.Join(got, ",") != "cb_bytes end,cb_bytes peak" || len(r.Processes[0].Chips[0].Counters) != 2 {
		t.Errorf("resident CBs grew: growth %v, counters %+v", got, r.Processes[0].Chips[0].Counters)
	}
}
