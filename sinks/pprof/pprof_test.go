package pprof

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/pprof/profile"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

func TestFramesPutPythonOnItsInterpreter(t *testing.T) {
	d := &devices.Site{
		Native: []devices.NativeFrame{
			{Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::Buffer::create()"},
			{Module: "/lib/_ttnn.so", Function: "bind"},
			{Module: "/usr/lib/libpython3.12.so.1.0", Function: "_PyEval_EvalFrameDefault"},
			{Module: "/usr/bin/python3.12", Offset: 0x1234},
		},
		Python:    []devices.PyFrame{{Function: "alloc", File: "m.py", Line: 3}, {Function: "main", File: "m.py", Line: 9}},
		Truncated: true,
	}
	var got []string
	for _, f := range Frames(d) {
		got = append(got, f.Function)
	}
	want := "tt::tt_metal::Buffer::create() bind alloc main _PyEval_EvalFrameDefault python3.12+0x1234 (stack truncated)"
	if strings.Join(got, " ") != want {
		t.Errorf("frames %q, want %q", strings.Join(got, " "), want)
	}
	if f := Frames(nil); len(f) != 1 || f[0].Function != unknownSite {
		t.Errorf("unknown site: %+v", f)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	site := &devices.Site{Site: 7, Native: []devices.NativeFrame{{Module: "/l.so", Function: "f", File: "f.cpp", Line: 10}, {Module: "/l.so", Function: "main"}}}
	s := &devices.Summary{Processes: []devices.ProcessSummary{{Pid: 42, SiteUsage: []devices.SiteUsage{
		{Site: 7, Device: 3, Type: "DRAM", InuseBytes: 100, InuseObjects: 1, AllocBytes: 300, AllocObjects: 3, PeakBytes: 200, Desc: site},
		{Site: 0, Device: 3, Type: "L1", AllocBytes: 64, AllocObjects: 1},
		{Site: 7, Device: 4, Type: "DRAM"}, // all zero: no sample
	}}}}
	uid := "0000:05:00.0"
	s.Processes[0].Devices = []devices.DeviceSummary{{Device: 3, ChipIdentity: devices.ChipIdentity{UID: &uid, PCI: uid}}, {Device: 4}}
	var buf bytes.Buffer
	if err := Build(s, time.Unix(1, 0)).Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 {
		t.Fatalf("%d samples", len(p.Sample))
	}
	s0 := p.Sample[0]
	if got := s0.Value; got[0] != 100 || got[1] != 1 || got[2] != 300 || got[3] != 3 || got[4] != 200 {
		t.Errorf("values %v", got)
	}
	if s0.Label["pid"][0] != "42" || s0.Label["chip"][0] != "3" || s0.Label["type"][0] != "DRAM" || s0.Label["site"][0] != "7" {
		t.Errorf("labels %v", s0.Label)
	}
	if got := s0.Label["chip_uid"]; len(got) != 1 || got[0] != uid {
		t.Errorf("chip 3 is physical chip %s, labels %v", uid, s0.Label)
	}
	if l := s0.Location; len(l) != 2 || l[0].Line[0].Function.Name != "f" || l[0].Line[0].Line != 10 || l[0].Line[0].Function.Filename != "f.cpp" || l[1].Line[0].Function.Filename != "/l.so" {
		t.Errorf("locations %+v", l)
	}
	var fb bytes.Buffer
	if err := WriteFolded(&fb, p, "alloc_space"); err != nil {
		t.Fatal(err)
	}
	want := "pid 42;chip 3;DRAM;main;f (f.cpp:10) 300\npid 42;chip 3;L1;" + unknownSite + " 64\n"
	if fb.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", fb.String(), want)
	}
}

// Names from the traced process (symbols, Python qualified names, files)
// reach the profile and the folded stacks escaped as the report escapes
// them (sinks.Printable): `go tool pprof -top` and a folded file read in a
// terminal print no escape sequence. ';' and spaces in names stay out of
// the folded format's separators.
func TestHostileNames(t *testing.T) {
	const (
		native = "evil\x1b]0;owned\x07\x1b[2J; a b\u009b\xff"
		qual   = "C.\x1b[31mred\u202e\r\nnext;line\x00"
		file   = "/tmp/\x1b[8mhidden\t.py"
		module = "/lib/lib\x1bx.so"
		uid    = "0000:05:00.0\x1b[K"
	)
	site := &devices.Site{Site: 1,
		Native: []devices.NativeFrame{{Module: module, Function: native}, {Module: module, Offset: 0x10}},
		Python: []devices.PyFrame{{Function: qual, File: file, Line: 5}},
	}
	s := &devices.Summary{Processes: []devices.ProcessSummary{{Pid: 9, SiteUsage: []devices.SiteUsage{
		{Site: 1, Device: 0, Type: "DRAM", InuseBytes: 4096, InuseObjects: 1, AllocBytes: 4096, AllocObjects: 1, PeakBytes: 4096, Desc: site},
	}}}}
	u := uid
	s.Processes[0].Devices = []devices.DeviceSummary{{Device: 0, ChipIdentity: devices.ChipIdentity{UID: &u}}}
	var buf bytes.Buffer
	if err := Build(s, time.Unix(1, 0)).Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	clean := func(what, s string) {
		t.Helper()
		for _, r := range s {
			if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\u202e' || r == utf8.RuneError {
				t.Errorf("%s %q holds %U", what, s, r)
				return
			}
		}
	}
	var names []string
	for _, f := range p.Function {
		clean("function", f.Name)
		clean("system name", f.SystemName)
		clean("file", f.Filename)
		names = append(names, f.Name+" @ "+f.Filename)
	}
	want := []string{
		sinks.Printable(native) + " @ " + sinks.Printable(module),
		`lib\x1bx.so+0x10 @ ` + sinks.Printable(module),
		sinks.Printable(qual) + " @ " + sinks.Printable(file),
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("functions %q, want %q", names, want)
	}
	if got := p.Sample[0].Label["chip_uid"]; len(got) != 1 || got[0] != sinks.Printable(uid) {
		t.Errorf("chip_uid %q", got)
	}

	var fb bytes.Buffer
	if err := WriteFolded(&fb, p, "inuse_space"); err != nil {
		t.Fatal(err)
	}
	out := fb.String()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("folded: %q, want one line", out)
	}
	line := strings.TrimSuffix(out, "\n")
	clean("folded line", line)
	// pid;chip;type, then the three frames outermost first.
	frames := strings.Split(line[:strings.LastIndexByte(line, ' ')], ";")
	if len(frames) != 6 || line[strings.LastIndexByte(line, ' ')+1:] != "4096" {
		t.Fatalf("folded %q: %d fields, want 6 and the value 4096", line, len(frames))
	}
	wantFrames := []string{ // no interpreter frame: Python's come last
		`C.\x1b[31mred\u202e\x0d\x0anext,line\x00 (\x1b[8mhidden\x09.py:5)`,
		`lib\x1bx.so+0x10`,
		`evil\x1b]0,owned\x07\x1b[2J, a b\u009b\xff`,
	}
	if got := frames[3:]; strings.Join(got, "\n") != strings.Join(wantFrames, "\n") {
		t.Errorf("folded frames %q, want %q", got, wantFrames)
	}
}

// A site's buffers made in a TT-NN op carry it as the "op" label, and the
// folded stacks put it at their root (after the type), escaped.
func TestOpLabel(t *testing.T) {
	site := &devices.Site{Site: 7, Native: []devices.NativeFrame{{Module: "/l.so", Function: "f"}}}
	s := &devices.Summary{Processes: []devices.ProcessSummary{{Pid: 42, SiteUsage: []devices.SiteUsage{
		{Site: 7, Device: 0, Type: "DRAM", AllocBytes: 300, AllocObjects: 3, Desc: site},
		{Site: 7, Device: 0, Type: "DRAM", AllocBytes: 64, AllocObjects: 1, Desc: site, Op: &devices.OpRef{Name: "ttnn.conv2d;x\x1b", DeviceOp: "MatmulDeviceOperation"}},
	}}}}
	var buf bytes.Buffer
	if err := Build(s, time.Unix(1, 0)).Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 || len(p.Sample[0].Label["op"]) != 0 || p.Sample[1].Label["op"][0] != `ttnn.conv2d;x\x1b > MatmulDeviceOperation` {
		t.Fatalf("samples %v / %v", p.Sample[0].Label, p.Sample[1].Label)
	}
	var fb bytes.Buffer
	if err := WriteFolded(&fb, p, "alloc_space"); err != nil {
		t.Fatal(err)
	}
	want := "pid 42;chip 0;DRAM;f 300\npid 42;chip 0;DRAM;ttnn.conv2d,x\\x1b > MatmulDeviceOperation;f 64\n"
	if fb.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", fb.String(), want)
	}
}

// l1_core_peak_space, from a real ledger: a chip with 64 L1 banks holds a
// lockstep L1 buffer of site 5 (4096 B per bank), a per-core buffer of
// site 6 (2048 B on bank 3), and, on core (1,1), the 12288 B of CBs of a
// program laid out in ttnn.matmul; then site 5's buffer is freed (below
// the peak). Per chip the sample type sums to 4096 + 2048 + 12288, the
// peak_l1_busiest_core total; the CBs are a sample of type CB on a frame
// naming their program and op (escaped), with program and op labels; the
// other sample types leave them out.
func TestL1CorePeakSpace(t *testing.T) {
	l := devices.NewLedger(devices.Options{SiteUsage: true})
	var seq uint64
	apply := func(es ...events.Event) {
		for _, e := range es {
			seq++
			e.Pid, e.Seq, e.TsNs = 7, seq, seq*10
			l.Apply(&e)
		}
	}
	const mgr, base, bank = 0xd2, 0x18000, 0xe8000
	// The DRAM bank manager gives the free lists' alignment.
	apply(devicestest.Capacity(2, events.DRAM, 0xd0, 12, 1<<20, 32, 0x40), devicestest.Capacity(2, events.L1, mgr, 64, bank, 16, base))
	lock := devicestest.AllocPage(1, 0xa1, 2, events.L1, base+bank-4096, 64*4096, 4096)
	lock.Site = 5
	apply(devicestest.Request(1, mgr, 64*4096, 4096, false), lock)
	pc := devicestest.Request(1, mgr, 2048, 2048, false)
	pc.Shards, pc.AllocatorID = 1, 3+1
	per := devicestest.AllocPage(1, 0xa2, 2, events.L1, base+bank-4096-2048, 2048, 2048)
	per.Site = 6
	apply(pc, per)
	cb := devicestest.CBOn(1, 2, 0x1000, 12288, [4]uint16{1, 1, 1, 1})
	cb.Op, cb.DeviceOp, cb.OpDepth = events.OpNames.Intern("ttnn.matmul\x1b[2J"), events.OpNames.Intern("Mm<f>(x)"), 1
	apply(devicestest.CBLayout(1, 0x5000, 2), cb, devicestest.Dispatch(1, 0x5000, 2), devicestest.Free(1, 0xa1, 2))
	s := l.Summary()
	pk := s.Processes[0].Devices[0].PeakL1BusiestCore
	if pk == nil || pk.TotalBytes != 4096+2048+12288 || pk.CBBytes != 12288 {
		t.Fatalf("peak_l1_busiest_core %+v", pk)
	}
	var buf bytes.Buffer
	if err := Build(&s, time.Unix(1, 0)).Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var sum int64
	for _, smp := range p.Sample {
		v := smp.Value[vL1CorePeakSpace]
		sum += v
		typ := smp.Label["type"][0]
		if typ != "CB" {
			got[typ+" site "+smp.Label["site"][0]] += v
			continue
		}
		fn := smp.Location[0].Line[0].Function
		if want := `(circular buffers of program 0x5000, laid out in ttnn.matmul\x1b[2J > Mm<f>(x))`; fn.Name != want || fn.SystemName != "" || len(smp.Location) != 1 {
			t.Errorf("CB frame %q (system name %q), want %q", fn.Name, fn.SystemName, want)
		}
		if smp.Label["program"][0] != "0x5000" || smp.Label["op"][0] != `ttnn.matmul\x1b[2J > Mm<f>(x)` || len(smp.Label["site"]) != 0 {
			t.Errorf("CB labels %v", smp.Label)
		}
		if smp.Value[vInuseSpace] != 0 || smp.Value[vPeakSpace] != 0 || smp.Value[vAllocSpace] != 0 {
			t.Errorf("CB values %v: only l1_core_peak_space", smp.Value)
		}
		got["CB"] += v
	}
	want := map[string]int64{"L1 site 5": 4096, "L1 site 6": 2048, "CB": 12288}
	if !maps.Equal(got, want) || sum != int64(pk.TotalBytes) {
		t.Errorf("l1_core_peak_space %v (sum %d), want %v (sum %d)", got, sum, want, pk.TotalBytes)
	}
	var fb bytes.Buffer
	if err := WriteFolded(&fb, p, "l1_core_peak_space"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fb.String(), "pid 7;chip 2;CB;ttnn.matmul\\x1b[2J > Mm<f>(x);(circular buffers of program 0x5000, laid out in ttnn.matmul\\x1b[2J > Mm<f>(x)) 12288\n") {
		t.Errorf("folded:\n%s", fb.String())
	}
}
