package session

import (
	"context"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// --all meets one pid in three successive processes, each leaking one
// buffer allocated at a known site: with one ended process kept in full and
// one as totals, the first is summed in dropped_processes, the second is
// trimmed but keeps its leak site, and the third is whole; each trimmed
// process's stack table is matched to its own incarnation.
func TestRunRetention(t *testing.T) {
	pid := uint32(os.Getpid()) // a live process: its maps are real
	ip := uint64(reflect.ValueOf(TestRunRetention).Pointer())
	h := newFakeHost()
	var script []step
	for i := range uint64(3) {
		a := alloc(pid, 0xb0+i, 0, events.DRAM, 0x1000*(i+1), 4096*(i+1))
		a.rec.Hdr.Seq = 100 + i
		a.rec.Stack = events.StackFollows
		// Two idle reads: one ends the loop's read, one the drain before the reap.
		script = append(script, a, stackRec(a.rec.Hdr.Seq, pid, ip), groupExit(pid), step{idle: true}, step{idle: true})
	}
	be := newFakeBackend(script...)
	r := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	cfg := Config{All: true, KeepEnded: 1, KeepEndedTotals: 1}
	if _, err := run(ctx, cfg, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	s := r.summary
	if d := s.DroppedProcesses; d == nil || d.Processes != 1 || d.Leaks != 1 || d.LeakedBytes != 4096 {
		t.Errorf("dropped %+v, want the first process and its 4096-byte leak", d)
	}
	if len(s.Processes) != 2 {
		t.Fatalf("%d processes, want 2", len(s.Processes))
	}
	trimmed, full := s.Processes[0], s.Processes[1]
	if trimmed.Trimmed == nil || trimmed.Trimmed.Leaks != 1 || len(trimmed.Leaks) != 0 || trimmed.LeakGroups[0].Bytes != 8192 {
		t.Errorf("second process: trimmed %+v, leaks %d, groups %+v", trimmed.Trimmed, len(trimmed.Leaks), trimmed.LeakGroups)
	}
	if len(trimmed.LeakSites) != 1 || trimmed.LeakSites[0].Bytes != 8192 {
		t.Errorf("second process: leak sites %+v, want its one site of 8192 bytes", trimmed.LeakSites)
	}
	if full.Trimmed != nil || full.LeakCount() != 1 || len(full.LeakSites) != 1 || full.LeakSites[0].Bytes != 12288 || len(full.Sites) != 1 {
		t.Errorf("third process: trimmed %+v, %d leaks, leak sites %+v, %d sites", full.Trimmed, full.LeakCount(), full.LeakSites, len(full.Sites))
	}
}
