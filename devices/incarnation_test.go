package devices

import (
	"testing"

	"github.com/tttrace/tttrace/events"
)

// A pid the kernel reuses after the first process exited names a new
// process: its ledger starts empty and the first one keeps its leaks.
func TestNewIncarnation(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0x1000, 4096), evExit(0, 0))
	r.l.NewIncarnation(r.pid)
	r.apply(evAlloc(2, 0xa0, 1, events.L1, 0x2000, 64), evFree(2, 0xa0, 1))

	s := r.summary()
	if len(s.Processes) != 2 {
		t.Fatalf("%d processes, want both incarnations", len(s.Processes))
	}
	first, second := s.Processes[0], s.Processes[1]
	eq(t, "first exited", first.Exited, true)
	eq(t, "first leaks", len(first.Leaks), 1)
	eq(t, "second exited", second.Exited, false)
	eq(t, "second leaks", len(second.Leaks), 0)
	eq(t, "second frees of the first's Buffer* are not unknown", second.UnknownFrees, 0)
	eq(t, "second anomalies", sumCounts(second), 0)
	if err := r.l.Check(); err != nil {
		t.Fatal(err)
	}

	// A live process is not replaced.
	r.l.NewIncarnation(r.pid)
	eq(t, "processes after NewIncarnation of a live pid", len(r.summary().Processes), 2)
}
