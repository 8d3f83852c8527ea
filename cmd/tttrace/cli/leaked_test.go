package cli

import (
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// --fail-on-leak counts the leaks of processes kept as totals only and of
// those only summed, not just of those kept in full.
func TestLeakedCountsRetired(t *testing.T) {
	l := devices.NewLedger(devices.Options{KeepEnded: 1, KeepEndedTotals: 1})
	seq := uint64(0)
	for i := range 3 {
		pid := uint32(10 + i)
		for j := 0; j <= i; j++ {
			seq++
			l.Apply(&events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid, Seq: seq, Object: uint64(0x100 + j), Device: 0x7f00,
				DeviceKind: events.DeviceChip, BufferType: events.DRAM, Size: 1024, OwnsData: true, Status: 1})
		}
		seq++
		l.Apply(&events.Event{Kind: events.KindExit, Pid: pid, Seq: seq, Chip: -1})
		l.Trim()
	}
	s := l.Summary()
	if n, bytes := leaked(&s); n != 6 || bytes != 6*1024 {
		t.Errorf("leaked = %d, %d; want 6 leaks of 6144 bytes", n, bytes)
	}
}
