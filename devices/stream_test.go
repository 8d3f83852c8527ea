package devices

import (
	"reflect"
	"sort"
	"testing"
)

// checkStreamed compares SummaryStreamed with Summary, whose leak lists
// and groups are made here independently (wholeLeaks): every leak, in
// order, the groups and everything else (the sinks test that the text
// report of both is the same).
func checkStreamed(t testing.TB, l *Ledger) {
	t.Helper()
	want, got := l.Summary(), l.SummaryStreamed()
	if len(got.Processes) != len(want.Processes) {
		t.Fatalf("streamed: %d processes, want %d", len(got.Processes), len(want.Processes))
	}
	// The processes in summary order: by pid, a reused pid's in the order
	// they lived.
	procs := append([]*proc{}, l.retired...)
	for _, pid := range l.Processes() {
		procs = append(procs, l.procs[pid])
	}
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].pid < procs[j].pid })
	for i, p := range procs {
		w := &want.Processes[i]
		w.Leaks, w.UnplacedLeaks, w.LeakGroups = p.wholeLeaks()
	}
	for i := range want.Processes {
		w, g := &want.Processes[i], &got.Processes[i]
		if !g.Streamed() || w.Streamed() {
			t.Fatalf("pid %d: Streamed %v and %v", w.Pid, g.Streamed(), w.Streamed())
		}
		collect := func(seq func(func(*Leak) bool)) []Leak {
			out := []Leak{}
			for lk := range seq {
				out = append(out, *lk)
			}
			return out
		}
		if ls := collect(g.AllLeaks()); !reflect.DeepEqual(ls, w.Leaks) || g.LeakCount() != len(w.Leaks) {
			t.Fatalf("pid %d: streamed leaks (%d)\n%+v\nwant\n%+v", w.Pid, g.LeakCount(), ls, w.Leaks)
		}
		if ls := collect(g.AllUnplacedLeaks()); !reflect.DeepEqual(ls, w.UnplacedLeaks) || g.UnplacedLeakCount() != len(w.UnplacedLeaks) {
			t.Fatalf("pid %d: streamed unplaced leaks\n%+v\nwant\n%+v", w.Pid, ls, w.UnplacedLeaks)
		}
		if ls := collect(w.AllLeaks()); !reflect.DeepEqual(ls, w.Leaks) {
			t.Fatalf("pid %d: AllLeaks of a list is not the list", w.Pid)
		}
		h := *g
		h.Leaks, h.UnplacedLeaks, h.leaks = w.Leaks, w.UnplacedLeaks, nil
		if !reflect.DeepEqual(&h, w) {
			t.Fatalf("pid %d: streamed summary\n%+v\nwant\n%+v", w.Pid, h, *w)
		}
	}
}
