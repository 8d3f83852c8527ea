package pprof

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/tttrace/tttrace/devices"
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
