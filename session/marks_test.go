package session

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// A mark waits for its place in the stream: it starts its window before
// the first record of its time or later, or at once when the ring runs dry.
func TestMarksTakeTheirPlace(t *testing.T) {
	marks := make(chan MarkRequest, 4)
	var log bytes.Buffer
	s := newSession(Config{NoStacks: true, Marks: marks, Log: &log}, nil, nil, nil, nil)
	alloc := func(ts, size uint64) {
		ev := events.Event{Kind: events.KindAlloc, Pid: 9, Tid: 9, TsNs: ts, Object: ts, DeviceKind: events.DeviceChip, Device: 0x7f00, Chip: 0,
			BufferType: events.DRAM, Size: size, OwnsData: true}
		s.marksBefore(ts) // as handle does for a record of time ts
		s.apply(&ev)
	}
	window := func() devices.Window {
		w, _ := s.ledger.CurrentWindow(9)
		return w
	}
	alloc(100, 1000)
	marks <- MarkRequest{Name: "a", TsNs: 150}
	marks <- MarkRequest{Name: "b", TsNs: 300}
	s.takeMarks(false) // records still come: the marks wait
	if w := window(); w.Index != 0 || len(s.marks) != 2 {
		t.Fatalf("marks started before their time: window %d, %d waiting", w.Index, len(s.marks))
	}
	alloc(140, 10) // before mark a: window 0
	alloc(200, 20) // after mark a: in window 1, mark b waits
	if w := window(); w.Index != 1 || w.Name != "a" || w.StartTsNs != 150 || w.Devices[0].Peaks["dram_bytes"].Value != 1030 || len(s.marks) != 1 {
		t.Fatalf("window %+v, %d waiting", w, len(s.marks))
	}
	s.takeMarks(true) // the ring ran dry: mark b now
	if w := window(); w.Index != 2 || w.Name != "b" || len(s.marks) != 0 {
		t.Fatalf("window %+v, %d waiting", w, len(s.marks))
	}
	if got := log.String(); got != "tttrace: window 1 (a) started\ntttrace: window 2 (b) started\n" {
		t.Errorf("log: %q", got)
	}
}

// The window lines of a run are replayed where they are: the NDJSON and the
// summary's windows come out the same.
func TestReplayWindows(t *testing.T) {
	var run bytes.Buffer
	nd := sinks.NewNDJSON(&run, false)
	s := newSession(Config{NoStacks: true}, nil, nil, []sinks.Sink{nd}, nil)
	s.ledger.SetProcessInfo(9, devices.ProcessInfo{Command: "work"})
	ts := uint64(0)
	emit := func(ev events.Event) {
		ts += 100
		ev.Pid, ev.Tid, ev.TsNs, ev.Seq = 9, 9, ts, ts
		if ev.Kind == events.KindAlloc || ev.Kind == events.KindFree {
			ev.DeviceKind, ev.Device, ev.Chip, ev.BufferType, ev.OwnsData = events.DeviceChip, 0x7f00, 0, events.DRAM, true
		}
		s.apply(&ev)
		s.send(&ev)
	}
	emit(events.Event{Kind: events.KindAlloc, Object: 1, Size: 4096})
	emit(events.Event{Kind: events.KindFree, Object: 1})
	s.mark("second", ts+10)
	emit(events.Event{Kind: events.KindAlloc, Object: 2, Size: 1024})
	s.mark("", ts+10)
	emit(events.Event{Kind: events.KindExit, ExitCode: 0})
	sum := s.ledger.Summary()
	if err := nd.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Processes) != 1 || len(sum.Processes[0].Windows) != 3 {
		t.Fatalf("%+v", sum.Processes)
	}
	if !strings.Contains(run.String(), `{"type":"window","index":1,"name":"second","ts_ns":210}`+"\n") {
		t.Errorf("no window line:\n%s", run.String())
	}
	var again bytes.Buffer
	res, err := Replay(bytes.NewReader(run.Bytes()), ReplayConfig{}, []sinks.Sink{sinks.NewNDJSON(&again, false)})
	if err != nil {
		t.Fatal(err)
	}
	if again.String() != run.String() {
		t.Errorf("replayed:\n%s\nrun:\n%s", again.String(), run.String())
	}
	a, _ := json.Marshal(res.Summary.Processes[0].Windows)
	b, _ := json.Marshal(sum.Processes[0].Windows)
	if string(a) != string(b) {
		t.Errorf("windows replayed %s, run %s", a, b)
	}
}

// A file cannot make a replay mark more than ReplayMaxMarks windows.
func TestReplayMarksBound(t *testing.T) {
	var b strings.Builder
	for i := range ReplayMaxMarks + 1 {
		b.WriteString(`{"type":"window","index":1,"name":"x","ts_ns":` + strconv.Itoa(i) + "}\n")
	}
	_, err := Replay(strings.NewReader(b.String()), ReplayConfig{}, nil)
	if err == nil || !strings.Contains(err.Error(), "line 65537: more than 65536 window lines") {
		t.Errorf("%v", err)
	}
}
