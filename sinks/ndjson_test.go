package sinks

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/ledgertest"
	"github.com/tttrace/tttrace/events"
)

// summaries covers what the streamed encoding splices: nil, empty and full
// leak lists, strings that look like the keys it looks for (escaped), and
// characters encoding/json escapes.
func summaries() []*devices.Summary {
	h := int64(-4096)
	leak := func(i int) devices.Leak {
		return devices.Leak{Device: int32(i % 3), Type: "DRAM", Address: uint64(i) << 12, Size: 4096, PageSize: 2048,
			Buffer: "0x7f00" + string(rune('a'+i%6)), Mesh: i%2 == 0, MeshDevice: map[bool]string{true: "0x55aa", false: ""}[i%4 == 0],
			Tid: 42, Seq: uint64(i), TsNs: uint64(i) * 1000, MarkedDeallocated: i%5 == 0}
	}
	var many []devices.Leak
	for i := 0; i < 1000; i++ {
		many = append(many, leak(i))
	}
	p1 := devices.ProcessSummary{Pid: 10, Command: `python3 -c 'print("\"leaks\":null", "<&>")' "unplaced_leaks":null`, Parent: 1,
		Devices:       []devices.DeviceSummary{{Device: 0, DRAMBytes: 8192, LiveBuffers: uint64(h & 0xff)}},
		Leaks:         many,
		LeakGroups:    []devices.LeakGroup{{Device: 0, Type: "DRAM", Count: 2, Bytes: 8192}},
		UnplacedLeaks: []devices.Leak{leak(7)},
		AnomalyCounts: map[string]uint64{"unknown_device": 1, "double_free": 0},
		Anomalies:     []devices.Anomaly{{Kind: "unknown_device", Detail: `"leaks":null <b>`}},
	}
	p2 := devices.ProcessSummary{Pid: 11, Command: "ttwork", Leaks: []devices.Leak{}, Exited: true}
	p3 := devices.ProcessSummary{Pid: 12}
	return []*devices.Summary{
		{Type: "summary", Complete: true, Events: 5, Processes: []devices.ProcessSummary{p1, p2, p3}},
		{Type: "summary", LostEvents: 3, Processes: []devices.ProcessSummary{}},
		{Type: "summary"},
	}
}

// The summary line is, byte for byte, what encoding/json makes of the
// whole summary.
func TestSummaryStreamedIsEncodingJSON(t *testing.T) {
	for i, s := range summaries() {
		var got bytes.Buffer
		n := NewNDJSON(&got, true)
		if err := n.Summary(s); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("summary %d:\ngot  %.600s\nwant %.600s", i, got.Bytes(), want)
		}
	}
}

// So is the process_summary line.
func TestProcessSummaryStreamedIsEncodingJSON(t *testing.T) {
	for _, p := range summaries()[0].Processes {
		var got bytes.Buffer
		n := NewNDJSON(&got, true)
		n.ProcessEnded(&devices.Summary{Processes: []devices.ProcessSummary{p}}, true)
		want, err := json.Marshal(struct {
			Type string `json:"type"`
			*devices.ProcessSummary
		}{"process_summary", &p})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("pid %d:\ngot  %.600s\nwant %.600s", p.Pid, got.Bytes(), want)
		}
	}
}

// A summary whose leak lists stay in the ledger (SummaryStreamed) is
// written byte for byte as encoding/json writes the same ledger's Summary:
// placed, mesh (on several chips and on none learned) and marked leaks,
// over two processes.
func TestSummaryFromLedgerStreamed(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	var seq uint64
	apply := func(e events.Event) {
		seq++
		e.Seq, e.TsNs = seq, seq*100
		e.OwnsData, e.Status = true, 1
		if e.PageSize == 0 {
			e.PageSize = 1024
		}
		l.Apply(&e)
	}
	chip := func(c int32) uint64 { return 0x7f0000000000 + uint64(c)*0x1000 }
	for _, pid := range []uint32{300, 200} {
		for i := uint64(0); i < 50; i++ {
			c := int32(i % 3)
			apply(events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid + 1, Object: 0x55d000000000 + (i%7)<<32 + i*0x70,
				Device: chip(c), DeviceKind: events.DeviceChip, Chip: c, BufferType: events.BufferType(i % 3),
				Address: (50 - i%9) << 12, Size: 4096 + i})
		}
		apply(events.Event{Kind: events.KindMarkDeallocated, Pid: pid, Object: 0x55d000000000 + 7*0x70, Chip: -1})
		for i, mesh := range []uint64{0x5500a0000000, 0x5500b0000000} {
			apply(events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid, Object: 0x66e000000000 + uint64(i)*0x80, Device: mesh,
				DeviceKind: events.DeviceMesh, Chip: -1, BufferType: events.DRAM, Address: 0x9000, Size: 1 << 20})
		}
		// The first mesh's chips are learned from views; the second's never.
		for c := int32(0); c < 2; c++ {
			apply(events.Event{Kind: events.KindView, Pid: pid, Tid: pid, Device: chip(c), DeviceKind: events.DeviceChip,
				Chip: c, Address: 0x9000, Size: 4096})
		}
	}
	if err := ledgertest.Check(l); err != nil {
		t.Fatal(err)
	}
	whole := l.Summary()
	placed, unplaced := 0, 0
	for _, p := range whole.Processes {
		placed += len(p.Leaks)
		unplaced += len(p.UnplacedLeaks)
	}
	if placed < 100 || unplaced == 0 {
		t.Fatalf("the workload leaves %d placed and %d unplaced leaks", placed, unplaced)
	}
	want, err := json.Marshal(&whole)
	if err != nil {
		t.Fatal(err)
	}
	s := l.SummaryStreamed()
	var got bytes.Buffer
	if err := NewNDJSON(&got, true).Summary(&s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), append(want, '\n')) {
		t.Errorf("streamed summary:\ngot  %.2000s\nwant %.2000s", got.Bytes(), want)
	}
	for _, pid := range l.Processes() {
		whole, _ := l.ProcessSummary(pid)
		want, err := json.Marshal(struct {
			Type string `json:"type"`
			*devices.ProcessSummary
		}{"process_summary", &whole.Processes[0]})
		if err != nil {
			t.Fatal(err)
		}
		one, _ := l.ProcessSummaryStreamed(pid)
		var got bytes.Buffer
		NewNDJSON(&got, true).ProcessEnded(&one, true)
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("pid %d: streamed process summary:\ngot  %.2000s\nwant %.2000s", pid, got.Bytes(), want)
		}
	}
}

// C1 controls (U+0080-U+009F) leave as \u escapes, whatever the write
// boundaries, and decode back to the same strings; other non-ASCII
// characters (U+00A2 also starts with the byte C2) stay as they are.
func TestNDJSONEscapesC1(t *testing.T) {
	cmd := "ttwork \u009b31m red \u0085\u0080\u009f ¢é \xc2"
	var whole bytes.Buffer
	n := NewNDJSON(&whole, true)
	if err := n.Summary(&devices.Summary{Type: "summary", Processes: []devices.ProcessSummary{{Pid: 7, Command: cmd}}}); err != nil {
		t.Fatal(err)
	}
	out := whole.Bytes()
	for i := 0; i+1 < len(out); i++ {
		if out[i] == 0xc2 && out[i+1] >= 0x80 && out[i+1] <= 0x9f {
			t.Fatalf("raw C1 byte pair at %d: %q", i, out)
		}
	}
	for _, esc := range []string{`\u009b`, `\u0085`, `\u0080`, `\u009f`, "¢é"} {
		if !bytes.Contains(out, []byte(esc)) {
			t.Errorf("%q not in %q", esc, out)
		}
	}
	var back devices.Summary
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	// encoding/json makes the invalid lone C2 byte U+FFFD, as it did before.
	if want := "ttwork \u009b31m red \u0085\u0080\u009f ¢é \ufffd"; len(back.Processes) != 1 || back.Processes[0].Command != want {
		t.Errorf("decoded %+v, want command %q", back.Processes, want)
	}
	raw, err := json.Marshal(&devices.Summary{Type: "summary", Processes: []devices.ProcessSummary{{Pid: 7, Command: cmd}}})
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw, '\n')
	for cut := 0; cut <= len(raw); cut++ {
		var got bytes.Buffer
		e := &c1Escaper{w: &got}
		e.Write(raw[:cut])
		e.Write(raw[cut:])
		if !bytes.Equal(got.Bytes(), out) {
			t.Fatalf("written in two at %d:\ngot  %q\nwant %q", cut, got.Bytes(), out)
		}
	}
}

// A reader of the stream sees each event's line by the next tick, and the
// line equals the event's own encoding.
func TestNDJSONTickFlushes(t *testing.T) {
	var got bytes.Buffer
	n := NewNDJSON(&got, false)
	ev := events.Event{Kind: events.KindAlloc, Seq: 7, Pid: 3, Tid: 3, Size: 4096}
	n.Event(&ev)
	if got.Len() != 0 {
		t.Fatalf("written before the tick: %q (the test would prove nothing)", got.Bytes())
	}
	n.Tick(&View{})
	want := events.AppendJSON(nil, &ev) // with its newline
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("after the tick: %q, want %q", got.Bytes(), want)
	}
	n.Tick(&View{}) // nothing buffered: nothing written
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("after a second tick: %q", got.Bytes())
	}
}

// c1Reference is the escaping c1Escaper does, a byte at a time: what its
// writes must add up to, however the text is cut into writes.
func c1Reference(text []byte) []byte {
	const hex = "0123456789abcdef"
	var out []byte
	pending := false
	for _, b := range text {
		switch {
		case pending && b >= 0x80 && b <= 0x9f:
			out = append(out, '\\', 'u', '0', '0', hex[b>>4], hex[b&15])
			pending = false
		case pending:
			out = append(out, 0xc2)
			pending = b == 0xc2
			if !pending {
				out = append(out, b)
			}
		case b == 0xc2:
			pending = true
		default:
			out = append(out, b)
		}
	}
	return out
}

// The escaper's output, written in any number of pieces (a C2 byte ending
// one write and its C1 byte starting the next, C2 C2 runs, one-byte and
// empty writes), is the byte-at-a-time escaping of the whole; a write
// with nothing to escape reaches the writer as it is, without allocating.
func TestC1EscaperWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 21))
	alphabet := []byte{'a', '"', '\\', 0xc2, 0xc2, 0x80, 0x9b, 0x9f, 0xa0, 0xa2, 0x7f, 0xe2, 0xc3}
	for round := 0; round < 2000; round++ {
		text := make([]byte, rng.IntN(40))
		for i := range text {
			text[i] = alphabet[rng.IntN(len(alphabet))]
		}
		var got bytes.Buffer
		e := &c1Escaper{w: &got}
		for rest := text; ; {
			n := min(len(rest), rng.IntN(5))
			if k, err := e.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write of %d bytes: %d, %v", n, k, err)
			}
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
		}
		if want := c1Reference(text); !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("%q in pieces: got %q, want %q", text, got.Bytes(), want)
		}
	}
	// Split: the C2 ends the first write, its C1 byte starts the second.
	var got bytes.Buffer
	e := &c1Escaper{w: &got}
	e.Write([]byte("{\"command\":\"red \xc2"))
	e.Write([]byte("\x9b31m\"}\n"))
	if want := `{"command":"red \u009b31m"}` + "\n"; got.String() != want {
		t.Fatalf("split C1 character: %q, want %q", got.String(), want)
	}
	line := []byte(`{"type":"alloc","seq":7,"command":"¢ is not C1"}` + "\n")
	var w countingWriter
	e = &c1Escaper{w: &w}
	if n := testing.AllocsPerRun(100, func() { e.Write(line[:20]) }); n != 0 {
		t.Errorf("%v allocations per write with nothing to escape", n)
	}
	w = countingWriter{}
	e.Write(line)
	if w.writes != 1 || !bytes.Equal(w.last, line) {
		t.Errorf("a line with U+00A2: %d writes, last %q", w.writes, w.last)
	}
}

type countingWriter struct {
	writes int
	last   []byte
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	w.last = append(w.last[:0], p...)
	return len(p), nil
}

// The run line comes before the stream's first line, and only if there is
// one: a run that could not start leaves its output untouched.
func TestNDJSONRunLineFirst(t *testing.T) {
	run := NewRun(4096, 0, 0, 0)
	var none bytes.Buffer
	n := NewNDJSON(&none, false)
	if err := n.Run(&run); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil || none.Len() != 0 {
		t.Fatalf("nothing traced, yet %q (%v)", none.String(), err)
	}
	var out bytes.Buffer
	n = NewNDJSON(&out, false)
	if err := n.Run(&run); err != nil {
		t.Fatal(err)
	}
	n.Event(&events.Event{Kind: events.KindLost, LostBefore: 3, Chip: -1})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"run","l1_warn":4096,"max_chips":256,"keep_ended":100,"keep_ended_totals":10000}` + "\n" + `{"type":"lost","ts_ns":0,"pid":0,"count":3}` + "\n"
	if out.String() != want {
		t.Fatalf("stream %q, want %q", out.String(), want)
	}
}
