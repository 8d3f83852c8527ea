package session

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// A run with a per_core_address_divergence replays: the ledger makes the
// record again at its buffer's alloc, and the NDJSON comes out the same.
func TestReplayPerCoreDivergence(t *testing.T) {
	var run bytes.Buffer
	nd := sinks.NewNDJSON(&run, false)
	s := newSession(Config{NoStacks: true}, nil, nil, []sinks.Sink{nd}, nil)
	s.ledger.SetProcessInfo(9, devices.ProcessInfo{Command: "work"})
	ts := uint64(0)
	emit := func(ev events.Event) {
		ts += 100
		ev.Pid, ev.Tid, ev.TsNs, ev.Seq = 9, 1, ts, ts
		s.apply(&ev)
		s.send(&ev)
	}
	// One chip's DRAM and L1 bank managers (64 L1 banks of 0xe8000 at
	// 0x18000), a per-core buffer on banks 0 and 1, then one on bank 1
	// alone: bank 0's list places it lower than bank 1's.
	const mgrL1, base, bank = 0xd2, 0x18000, 0xe8000
	emit(devicestest.Capacity(0, events.DRAM, 0xd0, 12, 1<<20, 32, 0x40))
	emit(devicestest.Capacity(0, events.L1, mgrL1, 64, bank, 16, base))
	perCore := func(buf, addr uint64, banks ...uint32) {
		for _, b := range banks {
			q := devicestest.Request(1, mgrL1, 2048, 2048, false)
			q.Shards, q.AllocatorID = 1, b+1
			emit(q)
		}
		emit(devicestest.AllocPage(1, buf, 0, events.L1, addr, 2048*uint64(len(banks)), 2048))
	}
	perCore(0xb2, base+bank-2048, 0)
	perCore(0xb3, base+bank-4096, 0, 1)
	emit(devicestest.Exit(0, 0))
	sum := s.ledger.Summary()
	if err := nd.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(run.String(), `"type":"per_core_address_divergence"`); n != 2 { // its line and the summary's list
		t.Fatalf("%d divergences in the run:\n%s", n, run.String())
	}
	var again bytes.Buffer
	if _, err := Replay(bytes.NewReader(run.Bytes()), ReplayConfig{}, []sinks.Sink{sinks.NewNDJSON(&again, false)}); err != nil {
		t.Fatal(err)
	}
	if again.String() != run.String() {
		t.Errorf("replayed:\n%s\nrun:\n%s", again.String(), run.String())
	}
}
