package sinks

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// ledgerOf applies evs to a new ledger as the ledger's own tests number
// them: seq from 1, ts in steps of 100, pid 1000 where none is set.
func ledgerOf(l *devices.Ledger, evs ...events.Event) *devices.Ledger {
	if l == nil {
		l = devices.NewLedger(devices.Options{})
	}
	for i, e := range evs {
		if e.Seq == 0 {
			e.Seq = uint64(i + 1)
		}
		if e.TsNs == 0 {
			e.TsNs = uint64(i+1) * 100
		}
		if e.Pid == 0 && e.Kind != events.KindLost {
			e.Pid = 1000
		}
		l.Apply(&e)
	}
	return l
}

// reportLedger is a run with something of everything the report shows.
func reportLedger() *devices.Ledger {
	l := devices.NewLedger(devices.Options{})
	// Two PCIe chips, by address in the order /dev/tenstorrent/1, /0; the
	// process's chip 100 is not one of them.
	pcie := []devices.PCIChip{{Num: 0, PCI: "0000:05:00.0", DeviceID: "0x401e"}, {Num: 1, PCI: "0000:02:00.0", DeviceID: "0x401e"}}
	l.SetProcessInfo(1000, devices.ProcessInfo{Command: "python -m pytest tests/ttnn", Parent: 1, AttachedMidRun: true,
		Chips: devices.NewChipMap(func(string) (string, bool) { return "", false }, pcie, nil)})
	evs := []events.Event{
		dt.MeshAlloc(7, 0x55d0c0ffee00, dt.MeshA, events.DRAM, 0x20000, 96<<20),
		dt.View(7, 0, 0x20000), dt.View(7, 1, 0x20000),
		dt.Alloc(7, 0x55d0c0ff0000, 0, events.L1, 0x1000, 1536),
		dt.Alloc(7, 0x55d0c0ff0040, 1, events.L1Small, 0x1000, 64),
		dt.Alloc(8, 0x55d0c0ff0080, 100, events.Trace, 0x0, 3<<30),
		dt.Alloc(8, 0x55d0c0ff00c0, 100, events.SystemMemory, 0x0, 1<<30+1<<29),
		dt.CBLayout(9, dt.ProgP, 0), dt.CB(9, 0, 0x10000, 64<<10), dt.CB(9, 1, 0x10000, 64<<10),
		dt.Free(8, 0xdead0000, 0), dt.Free(8, 0x55d0c0ff00c0, 100), dt.Free(8, 0x55d0c0ff00c0, 100),
		dt.Alloc(8, 0x55d0c0ff0100, 3, events.DRAM, 0x0, 1<<20),
		dt.DeviceClose(8, 3),
		dt.Alloc(8, 0x55d0c0ff0140, 5, events.BufferType(9), 0, 1),
	}
	for i := uint64(0); i < 13; i++ {
		evs = append(evs, dt.Alloc(10, 0x55d0c1000000+i*0x40, 1, events.DRAM, 0x100000+i*0x1000, 4096))
	}
	lost := dt.Alloc(10, 0x55d0c2000000, 1, events.L1, 0x40000, 100)
	lost.LostBefore = 3
	evs = append(evs, lost, dt.Exit(0, 11))
	other := dt.Alloc(1, 0x55d0c0ffee00, 0, events.DRAM, 0x0, 512)
	other.Pid = 2000
	return ledgerOf(l, append(evs, other)...)
}

// sitesSummary: leaks from three sites (one a mesh buffer on two chips),
// one without a site, and one allocation whose stack was lost; sites 1 and
// 2 described, 3 not.
func sitesSummary() (*devices.Ledger, *devices.Summary) {
	l := devices.NewLedger(devices.Options{})
	l.SetProcessInfo(1000, devices.ProcessInfo{Command: "python -m pytest"})
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	lost := dt.Alloc(7, 0x9000, 0, events.L1, 0x9000, 100)
	lost.Stack = events.StackLost
	ledgerOf(l,
		withSite(dt.MeshAlloc(7, 0x1000, dt.MeshA, events.DRAM, 0x20000, 1<<20), 1),
		dt.View(7, 0, 0x20000), dt.View(7, 1, 0x20000),
		withSite(dt.Alloc(7, 0x2000, 0, events.DRAM, 0x1000, 4096), 2),
		withSite(dt.Alloc(7, 0x3000, 0, events.L1, 0x2000, 4096), 2),
		withSite(dt.Alloc(7, 0x4000, 1, events.L1, 0x3000, 8192), 3),
		withSite(dt.Alloc(7, 0x5000, 1, events.L1, 0x4000, 64), 4),
		dt.Free(7, 0x5000, 1),
		lost,
	)
	l.SetSites(1000, siteFunc(describeSites))
	s := l.Summary()
	return l, &s
}

func describeSites(id uint32) (devices.Site, bool) {
	switch id {
	case 1:
		return devices.Site{Site: 1, Native: []devices.NativeFrame{
			{PC: 0x7f0000001003, Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::GraphTracker::track_allocate(tt::tt_metal::Buffer const*)", Offset: 3},
			{PC: 0x7f0000002100, Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::Buffer::create()", Offset: 0x40},
			{PC: 0x7f0000003100, Module: "/lib/_ttnn.so", Offset: 0x3100},
		}, Python: []devices.PyFrame{{Function: "TestMatmul.test_big", File: "/t/test_mm.py", Line: 42}, {Function: "<module>", File: "/t/conftest.py", Line: 1}}}, true
	case 2:
		return devices.Site{Site: 2, Native: []devices.NativeFrame{{PC: 0x7f0000001003, Module: "/lib/libtt_metal.so", Function: "f", Offset: 3}}, Truncated: true}, true
	}
	return devices.Site{}, false // site 3: not described
}

func report(t testing.TB, s *devices.Summary) string {
	t.Helper()
	var buf bytes.Buffer
	if err := writeReport(&buf, s); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// siteFunc is a devices.SiteSource from a function (no interpreter).
type siteFunc func(uint32) (devices.Site, bool)

func (f siteFunc) Site(id uint32) (devices.Site, bool) { return f(id) }
func (siteFunc) Python() *devices.PythonInfo           { return nil }

// sameStreamed: the report of the streamed summary (leaks read from the
// ledger) is the report of the whole one.
func sameStreamed(t testing.TB, l *devices.Ledger) {
	t.Helper()
	whole, streamed := l.Summary(), l.SummaryStreamed()
	if w, g := report(t, &whole), report(t, &streamed); w != g {
		t.Fatalf("report of the streamed summary:\n%s\nwant\n%s", g, w)
	}
}

func TestWriteReportGolden(t *testing.T) {
	l := reportLedger()
	s := l.Summary()
	golden(t, "report.golden", []byte(report(t, &s)))
	sameStreamed(t, l)
}

func TestWriteReportEmpty(t *testing.T) {
	s := devices.NewLedger(devices.Options{}).Summary()
	golden(t, "report_empty.golden", []byte(report(t, &s)))
}

func TestWriteReportSites(t *testing.T) {
	l, s := sitesSummary()
	golden(t, "report_sites.golden", []byte(report(t, s)))
	sameStreamed(t, l)
}

// The L1 buffers an l1_clash names carry their allocation sites, and the
// report says where such a buffer was allocated even when it was freed
// since (no leak names it).
func TestReportClashSites(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	ledgerOf(l,
		withSite(dt.Alloc(1, 0xa0, 0, events.L1, 0x10000, 8192), 5),
		withSite(dt.Alloc(1, 0xa1, 0, events.L1, 0x14000, 8192), 6),
		dt.CBLayout(2, dt.ProgP, 0),
		dt.CB(2, 0, 0x1000, 0x10000), // ends at 0x11000: past the buffer at 0x10000 only
		dt.ProgramDestroy(2, dt.ProgP),
		dt.Free(1, 0xa0, 0),
		dt.Free(1, 0xa1, 0),
	)
	l.SetSites(1000, siteFunc(func(id uint32) (devices.Site, bool) {
		return devices.Site{Site: id, Python: []devices.PyFrame{{Function: "make_act", File: "/t/model.py", Line: 30 + int(id)}}}, true
	}))
	s := l.Summary()
	if r := report(t, &s); !strings.Contains(r, "site 5: /t/model.py:35 in make_act") {
		t.Errorf("the report does not say where the L1 buffer in the way was allocated:\n%s", r)
	}
}

// The report of any stream the ledger takes is written without error, and
// the same from the streamed summary: random streams from devicestest's
// fuzzer mapping (fixed seed), and the fuzz target over it.
func TestReportRandomStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		data := make([]byte, rng.IntN(9*400))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		reportFuzzed(t, data)
	}
}

func FuzzReport(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 1, 16, 2, 1, 0, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 2, 3, 1, 200, 10, 2, 0, 5, 0, 0, 0, 0, 0, 0, 2, 0, 6, 0, 0, 8, 0, 0, 0, 2, 0, 4, 4, 2, 3, 1, 1, 1, 1, 0})
	f.Add([]byte{9, 4, 240, 0, 0, 0, 0, 0, 0, 7, 4, 0, 0, 0, 64, 4, 0, 0, 8, 4, 240, 0, 0, 0, 0, 0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) { reportFuzzed(t, data) })
}

func reportFuzzed(t *testing.T, data []byte) {
	t.Helper()
	l := devices.NewLedger(devices.Options{L1Warn: 0x3000})
	for _, e := range dt.FuzzEvents(data) {
		l.Apply(&e)
	}
	l.Flush()
	sameStreamed(t, l)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sinks -run Report -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n += len(p); w.n > 100 {
		return 0, os.ErrClosed
	}
	return len(p), nil
}

func TestWriteReportError(t *testing.T) {
	s := reportLedger().Summary()
	if err := writeReport(&failWriter{}, &s); err == nil {
		t.Fatal("no error from a failing writer")
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 96 << 20: "96.0 MiB",
		3 << 30: "3.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		if got := human(n); got != want {
			t.Errorf("human(%d) = %q, want %q", n, got, want)
		}
	}
}

// A mesh buffer of a 28-chip mesh is listed once, with its chips, not 28
// times; each chip's group still counts it.
func TestReportMeshBufferOnce(t *testing.T) {
	evs := []events.Event{dt.MeshAlloc(7, 0x1000, dt.MeshA, events.DRAM, 0x20000, 4096)}
	for c := int32(4); c <= 31; c++ {
		evs = append(evs, dt.View(7, c, 0x20000))
	}
	evs = append(evs, dt.Alloc(8, 0x2000, 9, events.L1, 0x1000, 64))
	s := ledgerOf(nil, evs...).Summary()
	out := report(t, &s)
	if n := strings.Count(out, "mesh buffer 0x1000"); n != 1 || !strings.Contains(out, "on chips 4-31\n") {
		t.Errorf("the mesh buffer is listed %d times, or not on chips 4-31:\n%s", n, out)
	}
	if n := strings.Count(out, "and 1 mesh buffer(s), listed below"); n != 28 {
		t.Errorf("%d chip groups point at the mesh buffer, want 28:\n%s", n, out)
	}
	for ids, want := range map[string]string{"5": "chip 5", "0 2 3 7": "chips 0,2-3,7", "-2 -1 0 100": "chips -2-0,100"} {
		var v []int32
		for _, f := range strings.Fields(ids) {
			var x int32
			fmt.Sscan(f, &x)
			v = append(v, x)
		}
		if got := chipRanges(v); got != want {
			t.Errorf("chipRanges(%v) = %q, want %q", v, got, want)
		}
	}
}

// The report says which records were lost, by kind, and how many loader
// calls went over budget, in all and per process.
func TestReportLostRecordsAndLoaderDrops(t *testing.T) {
	s := reportLedger().Summary()
	s.Complete, s.LostEvents = false, 5
	s.LostRecords = map[string]uint64{"stack": 7, "free": 2, "alloc": 3}
	s.LoaderCallsDropped = 41
	s.Processes[0].LoaderCallsDropped = 41
	var b bytes.Buffer
	if err := writeReport(&b, &s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"lost records by kind: alloc 3, free 2, stack 7 ",
		"41 call(s) of the dynamic loader's _dl_debug_state over their process's budget were not recorded",
		"  loader calls over budget: 41 ",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
