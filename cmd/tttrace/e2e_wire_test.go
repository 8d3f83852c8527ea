package main

import (
	"path/filepath"
	"testing"
)

// TestE2ELostByKind: with a ring far too small for a burst, the summary's
// lost_records says what was lost, kind by kind: the allocs and frees not
// seen (against the replica's own call counts), every native stack (a
// 4 KiB ring never takes a 16 KiB stack: each alloc's lost_stacks), and the
// kinds of events add up to lost_events.
func TestE2ELostByKind(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, truthPath := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	tt, tout := start(t, bin, "--json", "--no-events", "-o", out, "--ring-size", "4K", "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "burst", "--events", "100000", "--threads", "2", "--truth", truthPath)
	if code := exitCode(tt.Wait()); code != 7 {
		t.Fatalf("exit status %d, want 7 (events lost)\n%s", code, tout)
	}
	sum, tr := lastSummary(t, out), readTruth(t, truthPath)
	p := process(sum, tr.Pid)
	if p == nil || sum.LostEvents == 0 {
		t.Fatalf("no process %d, or nothing lost (%d)", tr.Pid, sum.LostEvents)
	}
	t.Logf("lost_events %d, lost_records %v, lost_stacks %d", sum.LostEvents, sum.LostRecords, p.LostStacks)
	lr := sum.LostRecords
	if want := tr.Calls["track_allocate"] - p.Stats.Allocs; lr["alloc"] != want {
		t.Errorf("lost_records.alloc %d, but %d allocs were not seen", lr["alloc"], want)
	}
	if want := tr.Calls["track_deallocate"] - p.Stats.Frees; lr["free"] != want {
		t.Errorf("lost_records.free %d, but %d frees were not seen", lr["free"], want)
	}
	if p.LostStacks == 0 || lr["stack"] != p.LostStacks {
		t.Errorf("lost_records.stack %d, lost_stacks %d: want the same, not 0", lr["stack"], p.LostStacks)
	}
	var events uint64
	for k, n := range lr {
		switch k {
		case "stack", "py_stack", "py_code":
		default:
			events += n
		}
	}
	if events != sum.LostEvents {
		t.Errorf("the event kinds of lost_records sum to %d, lost_events is %d", events, sum.LostEvents)
	}
}
