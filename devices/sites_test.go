package devices

import (
	"reflect"
	"testing"

	"github.com/tttrace/tttrace/events"
)

func TestTestOf(t *testing.T) {
	for _, c := range []struct {
		frames []PyFrame
		want   string
	}{
		{nil, ""},
		{[]PyFrame{{"helper", "/t/test_a.py", 3}, {"test_one", "/t/test_a.py", 9}}, "/t/test_a.py::test_one"},
		{[]PyFrame{{"TestK.test_m", "/t/b_test.py", 5}, {"test_outer", "/t/b_test.py", 1}}, "/t/b_test.py::TestK::test_m"},
		{[]PyFrame{{"test_x", "/t/helpers.py", 5}}, ""},                                                                   // not a test module
		{[]PyFrame{{"test_f.<locals>.test_g", "/t/test_c.py", 2}, {"test_f", "/t/test_c.py", 4}}, "/t/test_c.py::test_f"}, // nested: not collected
		{[]PyFrame{{"setup", "/t/test_d.py", 2}, {"<module>", "/t/test_d.py", 1}}, ""},
	} {
		if got := TestOf(c.frames); got != c.want {
			t.Errorf("TestOf(%v) = %q, want %q", c.frames, got, c.want)
		}
	}
}

// sitesStream: leaks from three sites (one a mesh buffer on two chips), one
// without a site, and one allocation whose stack was lost.
func sitesStream(t *testing.T) (*rec, *Summary) {
	r := newRec(t)
	r.l.SetProcessInfo(1000, ProcessInfo{Command: "python -m pytest"})
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	lost := evAlloc(7, 0x9000, 0, events.L1, 0x9000, 100)
	lost.Stack = events.StackLost
	r.apply(
		withSite(evMeshAlloc(7, 0x1000, meshA, events.DRAM, 0x20000, 1<<20), 1),
		evView(7, 0, 0x20000), evView(7, 1, 0x20000),
		withSite(evAlloc(7, 0x2000, 0, events.DRAM, 0x1000, 4096), 2),
		withSite(evAlloc(7, 0x3000, 0, events.L1, 0x2000, 4096), 2),
		withSite(evAlloc(7, 0x4000, 1, events.L1, 0x3000, 8192), 3),
		withSite(evAlloc(7, 0x5000, 1, events.L1, 0x4000, 64), 4),
		evFree(7, 0x5000, 1),
		lost,
	)
	r.l.SetSites(1000, siteFunc(func(id uint32) (Site, bool) {
		switch id {
		case 1:
			return Site{Site: 1, Native: []NativeFrame{
				{PC: 0x7f0000001003, Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::GraphTracker::track_allocate(tt::tt_metal::Buffer const*)", Offset: 3},
				{PC: 0x7f0000002100, Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::Buffer::create()", Offset: 0x40},
				{PC: 0x7f0000003100, Module: "/lib/_ttnn.so", Offset: 0x3100},
			}, Python: []PyFrame{{"TestMatmul.test_big", "/t/test_mm.py", 42}, {"<module>", "/t/conftest.py", 1}}}, true
		case 2:
			return Site{Site: 2, Native: []NativeFrame{{PC: 0x7f0000001003, Module: "/lib/libtt_metal.so", Function: "f", Offset: 3}}, Truncated: true}, true
		}
		return Site{}, false // site 3: not described
	}))
	s := r.summary()
	return r, &s
}

func TestAddSites(t *testing.T) {
	_, s := sitesStream(t)
	p := &s.Processes[0]
	want := []LeakSite{
		{Site: 1, Test: "/t/test_mm.py::TestMatmul::test_big", Count: 2, Bytes: 2 << 20, Devices: []int32{0, 1}},
		{Site: 2, Count: 2, Bytes: 8192, Devices: []int32{0}}, // equal bytes: by site
		{Site: 3, Count: 1, Bytes: 8192, Devices: []int32{1}},
	}
	if !reflect.DeepEqual(p.LeakSites, want) {
		t.Errorf("leak_sites = %+v\nwant %+v", p.LeakSites, want)
	}
	if len(p.Sites) != 2 || p.Sites[0].Site != 1 || p.Sites[1].Site != 2 || p.Sites[1].Python == nil {
		t.Errorf("sites = %+v: want 1 and 2 (3 is not described), python never null", p.Sites)
	}
	if p.LostStacks != 1 {
		t.Errorf("lost_stacks = %d, want 1", p.LostStacks)
	}
	for _, lk := range p.Leaks {
		if (lk.Size == 100) != (lk.Site == 0) {
			t.Errorf("leak %+v: only the one whose stack was lost has no site", lk)
		}
	}
}

// The L1 buffers an l1_clash names carry their allocation sites, and the
// summary describes those sites even when the buffers were freed since (no
// leak names them; sinks tests that the report says where).
func TestClashSites(t *testing.T) {
	r := newL1Rec(t, 0)
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	r.apply(
		withSite(evAlloc(1, 0xa0, 0, events.L1, 0x10000, 8192), 5),
		withSite(evAlloc(1, 0xa1, 0, events.L1, 0x14000, 8192), 6),
		evCBLayout(2, progP, 0),
		evCB(2, 0, 0x1000, 0x10000), // ends at 0x11000: past the buffer at 0x10000 only
		evProgramDestroy(2, progP),
		evFree(1, 0xa0, 0),
		evFree(1, 0xa1, 0),
	)
	cl := r.take(NoticeL1Clash)
	if len(cl) != 1 || len(cl[0].L1Buffers) != 1 || cl[0].L1Buffers[0].Site != 5 || cl[0].Lowest.Site != 5 {
		t.Fatalf("clash %+v: want the buffer at 0x10000 with site 5", cl)
	}
	r.l.SetSites(r.pid, siteFunc(func(id uint32) (Site, bool) {
		return Site{Site: id, Python: []PyFrame{{"make_act", "/t/model.py", 30 + int(id)}}}, true
	}))
	s := r.summary()
	p := &s.Processes[0]
	if len(p.Sites) != 1 || p.Sites[0].Site != 5 || len(p.LeakSites) != 0 {
		t.Errorf("sites %+v, leak_sites %+v: want site 5 described for the clash, no leak site", p.Sites, p.LeakSites)
	}
	if len(p.L1Clashes) != 1 || p.L1Clashes[0].L1Buffers[0].Site != 5 {
		t.Errorf("summary clashes %+v", p.L1Clashes)
	}
}

// siteFunc is a SiteSource from a function (no interpreter).
type siteFunc func(uint32) (Site, bool)

func (f siteFunc) Site(id uint32) (Site, bool) { return f(id) }
func (siteFunc) Python() *PythonInfo           { return nil }

// pySites is a SiteSource that names its sites and interpreter after itself.
type pySites struct{ name string }

func (s pySites) Site(id uint32) (Site, bool) {
	return Site{Site: id, Python: []PyFrame{{Function: s.name, File: "/t/test_x.py", Line: int(id)}}}, true
}
func (s pySites) Python() *PythonInfo { return &PythonInfo{Version: s.name, Supported: true} }

// A process keeps its own site source when a new incarnation takes its
// pid: each summary describes its sites (and interpreter) with its own,
// never another incarnation's.
func TestSitesFollowIncarnations(t *testing.T) {
	r := newRec(t)
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	r.l.SetSites(r.pid, pySites{"first"})
	r.apply(withSite(evAlloc(1, 0xa0, 0, events.DRAM, 0x1000, 4096), 1), evExit(0, 0))
	r.l.NewIncarnation(r.pid)
	r.l.SetSites(r.pid, pySites{"second"})
	r.apply(withSite(evAlloc(1, 0xa0, 0, events.DRAM, 0x1000, 4096), 1))
	s := r.summary()
	if len(s.Processes) != 2 {
		t.Fatalf("%d processes, want both incarnations", len(s.Processes))
	}
	for i, want := range []string{"first", "second"} {
		p := &s.Processes[i]
		if len(p.Sites) != 1 || p.Sites[0].Python[0].Function != want || p.Python == nil || p.Python.Version != want {
			t.Errorf("incarnation %d: sites %+v, python %+v: want them from %q", i, p.Sites, p.Python, want)
		}
	}
	one, _ := r.l.ProcessSummaryStreamed(r.pid)
	if p := &one.Processes[0]; len(p.Sites) != 1 || p.Sites[0].Python[0].Function != "second" {
		t.Errorf("the current incarnation's summary: sites %+v", p.Sites)
	}
}
