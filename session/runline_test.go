package session

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// The NDJSON of a run starts with its run line: the flags that shaped its
// ledger. A replay takes them from it (a run with --max-chips 1 refused
// the second chip: so does the replay, told nothing), writes the same
// stream again, and a flag given to the replay wins, with a note.
func TestReplayRunLine(t *testing.T) {
	var run bytes.Buffer
	nd := sinks.NewNDJSON(&run, false)
	s := newSession(Config{NoStacks: true, MaxChips: 1, L1Warn: 4096, KeepEnded: 3}, nil, nil, []sinks.Sink{nd}, nil)
	s.ledger.SetProcessInfo(9, devices.ProcessInfo{Command: "work"})
	for i, chip := range []int32{0, 1} {
		ev := events.Event{Kind: events.KindAlloc, Pid: 9, Tid: 9, Seq: uint64(i + 1), TsNs: uint64(100 * (i + 1)), Object: uint64(0x10 + i),
			DeviceKind: events.DeviceChip, Device: 0x7f00 + uint64(chip), Chip: chip, BufferType: events.DRAM, OwnsData: true, Size: 4096}
		s.apply(&ev)
		s.send(&ev)
	}
	sum := s.ledger.Summary()
	if err := nd.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	head := `{"type":"run","l1_warn":4096,"max_chips":1,"keep_ended":3,"keep_ended_totals":10000}` + "\n"
	if !strings.HasPrefix(run.String(), head) {
		t.Fatalf("the stream starts %q", run.String()[:min(run.Len(), 120)])
	}
	if len(sum.Processes[0].Devices) != 1 {
		t.Fatalf("the run kept %d chips", len(sum.Processes[0].Devices))
	}
	var again, log bytes.Buffer
	res, err := Replay(bytes.NewReader(run.Bytes()), ReplayConfig{Log: &log}, []sinks.Sink{sinks.NewNDJSON(&again, false)})
	if err != nil {
		t.Fatal(err)
	}
	if again.String() != run.String() {
		t.Errorf("replayed:\n%s\nrun:\n%s", again.String(), run.String())
	}
	if n := len(res.Summary.Processes[0].Devices); n != 1 || log.Len() != 0 {
		t.Errorf("replay kept %d chips; log %q", n, log.String())
	}
	log.Reset()
	res, err = Replay(bytes.NewReader(run.Bytes()), ReplayConfig{Log: &log, MaxChips: 8, Set: map[string]bool{"max-chips": true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Summary.Processes[0].Devices); n != 2 || log.String() != "tttrace: note: replaying with --max-chips 8; the run had 1\n" {
		t.Errorf("replay with --max-chips 8 kept %d chips; log %q", n, log.String())
	}
	for _, c := range []struct{ text, want string }{
		{`{"type":"run","l1_warn":0,"max_chips":0,"keep_ended":1,"keep_ended_totals":1}` + "\n", "line 1: run: max_chips, keep_ended and keep_ended_totals must be positive"},
		{`{"type":"run","max_chips":"x"}` + "\n", "line 1: run: json"},
		{strings.TrimSuffix(head, "\n") + head, "line 1: run: invalid character"},
	} {
		if _, err := Replay(strings.NewReader(c.text), ReplayConfig{}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
	_, err = Replay(strings.NewReader(head+head), ReplayConfig{}, nil)
	if err == nil || !strings.Contains(err.Error(), "line 2: a run line that is not the first") {
		t.Errorf("two run lines: %v", err)
	}
}
