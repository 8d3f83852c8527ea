package sinks

import (
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// retained is a ledger that met three processes leaking 1, 2 and 3 DRAM
// buffers of 1 KiB, keeping one in full and one as totals.
func retained() *devices.Ledger {
	l := devices.NewLedger(devices.Options{KeepEnded: 1, KeepEndedTotals: 1})
	seq := uint64(0)
	for i := range 3 {
		pid := uint32(10 + i)
		for j := 0; j <= i; j++ {
			e := chipEv(events.KindAlloc, pid, uint64(0x100+j), 0, events.DRAM, 1024)
			seq++
			e.Seq = seq
			l.Apply(e)
		}
		seq++
		l.Apply(&events.Event{Kind: events.KindExit, Pid: pid, Seq: seq, Chip: -1})
		l.Trim()
	}
	return l
}

// The report of trimmed and dropped processes keeps their leaks' totals
// and says what it no longer has.
func TestReportRetention(t *testing.T) {
	s := retained().Summary()
	var b strings.Builder
	if err := writeReport(&b, &s); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"process 11", "leaked: 2 buffer(s) on chips, 2.0 KiB", "kept as totals only",
		"process 12", "leaked: 3 buffer(s) on chips, 3.0 KiB",
		"1 earlier ended process(es) not listed (past --keep-ended-totals): 2 event(s), 1 leak(s) of 1.0 KiB",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "process 10 ") {
		t.Errorf("the dropped process is listed:\n%s", text)
	}
}
