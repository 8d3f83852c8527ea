package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
		case "stack", "py_stack", "py_code", "link_object":
			// Not events (docs/ndjson.md, lost_records).
		default:
			events += n
		}
	}
	if events != sum.LostEvents {
		t.Errorf("the event kinds of lost_records sum to %d, lost_events is %d", events, sum.LostEvents)
	}
}

// loaderFloodC calls dlopen and dlclose of one library in a loop until
// killed: each pair makes ld.so call _dl_debug_state four times.
const loaderFloodC = `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	unsigned long n = 0;
	for (;;) {
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
		dlclose(h);
		if (++n == 1000) { puts("flooding"); fflush(stdout); }
	}
}
`

// TestE2ELoaderFlood: a traced process calls dlopen/dlclose (so
// _dl_debug_state) as fast as it can beside a legitimate workload traced
// with it. Its calls over the per-process budget are dropped in BPF and
// counted, the ring keeps up (nothing lost, with a 1 MiB ring and no
// stacks), and the workload's ledger is exact against the replica's truth.
// (-p, not --all: under --all the other processes of a shared machine
// share the small ring.)
func TestE2ELoaderFlood(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	lib, flood := filepath.Join(tmp, "libempty.so"), filepath.Join(tmp, "flood")
	src := filepath.Join(tmp, "flood.c")
	if err := os.WriteFile(src, []byte(loaderFloodC), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(tmp, "empty.c")
	if err := os.WriteFile(empty, []byte("int empty_symbol = 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-shared", "-fPIC", "-o", lib, empty}, {"-O2", "-o", flood, src, "-ldl"}} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	ready, out, truthPath, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
	f, fout := start(t, flood, lib)
	waitFor(t, func() bool { return strings.Contains(fout.String(), "flooding") }, "the flood")
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "threads", "--threads", "3", "--leak", "--truth", truthPath, "--go-file", goFile)
	tt, tout := start(t, bin, "--json", "--no-events", "--no-stacks", "--ring-size", "1M", "-o", out, "--ready-file", ready,
		"-p", strconv.Itoa(f.Process.Pid), "-p", strconv.Itoa(w.Process.Pid))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	time.Sleep(time.Second) // the flood past its budget's burst
	touch(t, goFile)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	time.Sleep(300 * time.Millisecond)
	f.Process.Kill()
	f.Wait()
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	sum, tr := lastSummary(t, out), readTruth(t, truthPath)
	t.Logf("loader calls dropped %d, lost_events %d, lost_records %v", sum.LoaderCallsDropped, sum.LostEvents, sum.LostRecords)
	if sum.LostEvents != 0 || !sum.Complete {
		t.Errorf("%d records lost under the flood", sum.LostEvents)
	}
	if p := process(sum, uint32(f.Process.Pid)); p == nil || p.LoaderCallsDropped == 0 || p.LoaderCallsDropped != sum.LoaderCallsDropped {
		t.Errorf("the flooding process %d: %+v; want all %d dropped calls", f.Process.Pid, p, sum.LoaderCallsDropped)
	}
	if !strings.Contains(tout.String(), fmt.Sprintf("pid %d calls the dynamic loader's _dl_debug_state faster than its budget", f.Process.Pid)) {
		t.Errorf("tttrace does not say the flooding process was limited:\n%s", tout)
	}
	wantExact(t, "-p beside a _dl_debug_state flood", false, sum, tr)
}
