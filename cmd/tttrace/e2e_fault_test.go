package main

// The fault matrix: tttrace falling behind, being killed, the traced
// process being killed, exec and fork, two tracers at once, the ring filled
// on purpose. Each case checks the ledger against the replica's truth
// where there is one, and that the workload's own output and exit status
// are what they are untraced.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stall stops tttrace for d, then lets it go on.
func stall(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestE2EStalledConsumer: tttrace stopped (SIGSTOP) while the workload runs
// and ends; once it goes on, every record is still in the ring and what it
// concludes about the process comes from the records, not from /proc
// (where the process is gone): the ledger is exact.
func TestE2EStalledConsumer(t *testing.T) {
	for _, withLib := range []bool{false, true} {
		t.Run(fmt.Sprintf("pid_python_late_load_lib=%v", withLib), func(t *testing.T) {
			bin, replica := setup(t)
			dir := filepath.Join(replica, "gcc-O2")
			tmp := t.TempDir()
			loadFile, ready, out, truthPath := filepath.Join(tmp, "load"), filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
			w, wout := start(t, "python3", filepath.Join(dir, "ttwork.py"), "--load-after", loadFile, "--scenario", "basic", "--leak", "--truth", truthPath)
			waitFor(t, func() bool { return strings.Contains(wout.String(), "waiting-to-load") }, "python waiting")
			args := []string{"--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid)}
			if withLib {
				args = append(args, "--lib", filepath.Join(dir, "libtt_metal.so"))
			}
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
			if err := syscall.Kill(tt.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			touch(t, loadFile)
			if err := w.Wait(); err != nil {
				t.Fatalf("workload: %v\n%s", err, wout)
			}
			time.Sleep(300 * time.Millisecond) // the process is gone from /proc
			if err := syscall.Kill(tt.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if err := tt.Wait(); err != nil {
				t.Fatalf("tttrace: %v\n%s", err, tout)
			}
			sum, tr := lastSummary(t, out), readTruth(t, truthPath)
			wantExact(t, "stalled -p", true, sum, tr)
		})
	}
	t.Run("cmd_python_nolib", func(t *testing.T) {
		bin, replica := setup(t)
		dir := filepath.Join(replica, "gcc-O2")
		tmp := t.TempDir()
		goFile, out, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
		tt, tout := start(t, bin, "--json", "-o", out, "--", "python3", filepath.Join(dir, "ttwork.py"),
			"--scenario", "threads", "--threads", "3", "--leak", "--truth", truthPath, "--go-file", goFile)
		waitFor(t, func() bool { return strings.Contains(tout.String(), "ready") }, "workload ready")
		if err := syscall.Kill(tt.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		touch(t, goFile)
		// The workload cannot end before tttrace reaps it (it is tttrace's
		// child), but it runs all its TT-Metal calls while tttrace sleeps.
		waitFor(t, func() bool { _, err := os.Stat(truthPath); return err == nil }, "workload done")
		time.Sleep(200 * time.Millisecond)
		if err := syscall.Kill(tt.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		sum, tr := lastSummary(t, out), readTruth(t, truthPath)
		wantExact(t, "stalled --", false, sum, tr)
	})
}

// TestE2EStalledAll: --all, tttrace stopped while a workload it has never
// met starts, loads the library, runs and exits: found by its records.
func TestE2EStalledAll(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	ready, out, truthPath := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	tt, tout := start(t, bin, "--all", "--json", "--no-events", "-o", out, "--ready-file", ready, "--lib", filepath.Join(dir, "libtt_metal.so"))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	if err := syscall.Kill(tt.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "mesh", "--leak", "--truth", truthPath)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(tt.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Contains(b, []byte(`"process_summary"`))
	}, "the workload's report")
	tt.Process.Signal(syscall.SIGINT)
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	wantExact(t, "stalled --all", true, lastSummary(t, out), readTruth(t, truthPath))
}

// TestE2EKilledMidBurst: the traced command SIGKILLed while it allocates
// at full speed: tttrace ends on its own, reports the process killed, has
// lost nothing, and its ledger holds together (every buffer it still
// counts is one whose free it did not see).
func TestE2EKilledMidBurst(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	out := filepath.Join(t.TempDir(), "out")
	tt, tout := start(t, bin, "--json", "--no-events", "-o", out, "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "burst", "--events", "50000000", "--threads", "2")
	waitFor(t, func() bool { return strings.Contains(tout.String(), "tracing") }, "tracing")
	time.Sleep(700 * time.Millisecond)
	var pid int
	waitFor(t, func() bool { pid = childNamed(tt.Process.Pid, "ttwork"); return pid > 0 }, "the workload")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tt.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 128+int(syscall.SIGKILL) {
			t.Fatalf("tttrace exit status %d, want %d\n%s", code, 128+int(syscall.SIGKILL), tout)
		}
	case <-time.After(60 * time.Second):
		tt.Process.Kill()
		t.Fatalf("tttrace did not end after its command was killed\n%s", tout)
	}
	sum := lastSummary(t, out)
	p := process(sum, uint32(pid))
	if p == nil || !p.Exited || p.ExitSignal != int(syscall.SIGKILL) {
		t.Fatalf("summary %+v: want the process reported killed by SIGKILL", p)
	}
	if sum.LostEvents != 0 {
		t.Errorf("%d events lost", sum.LostEvents)
	}
	if p.Stats.Allocs == 0 {
		t.Fatal("no allocation seen before the kill: the test proves nothing")
	}
	var live uint64
	for _, d := range p.Devices {
		live += d.LiveBuffers
	}
	if want := p.Stats.Allocs - p.Stats.Frees; live != want || uint64(len(p.Leaks)) != want {
		t.Errorf("%d live buffers and %d leaks, want allocs-frees = %d", live, len(p.Leaks), want)
	}
}

// TestE2EExecAfterAttach: a shell shim that execs Python (as pyenv's
// shims do): the pid stays, the program changes, the library is loaded by
// the new program. Under -- and with -p on the shim before it execs.
func TestE2EExecAfterAttach(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	t.Run("cmd", func(t *testing.T) {
		tmp := t.TempDir()
		out, truthPath := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
		shim := fmt.Sprintf("exec python3 %s --scenario basic --leak --truth %s", filepath.Join(dir, "ttwork.py"), truthPath)
		tt, tout := start(t, bin, "--json", "-o", out, "--", "sh", "-c", shim)
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		sum, tr := lastSummary(t, out), readTruth(t, truthPath)
		wantExact(t, "exec shim --", true, sum, tr)
		if p := process(sum, tr.Pid); p == nil || p.AttachedMidRun {
			t.Errorf("the library named in the shim's script was not probed before it loaded: %+v", p)
		}
	})
	t.Run("pid", func(t *testing.T) {
		tmp := t.TempDir()
		out, truthPath, goFile, ready := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go"), filepath.Join(tmp, "ready")
		shim := fmt.Sprintf("echo shim-ready >&2; while [ ! -e %s ]; do sleep 0.01; done; exec python3 %s --scenario basic --leak --truth %s",
			goFile, filepath.Join(dir, "ttwork.py"), truthPath)
		w, wout := start(t, "sh", "-c", shim)
		waitFor(t, func() bool { return strings.Contains(wout.String(), "shim-ready") }, "shim")
		tt, tout := start(t, bin, "--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
		waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
		touch(t, goFile)
		if err := w.Wait(); err != nil {
			t.Fatalf("workload: %v\n%s", err, wout)
		}
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		sum, tr := lastSummary(t, out), readTruth(t, truthPath)
		wantExact(t, "exec shim -p", true, sum, tr)
	})
}

// TestE2EForkExec: the command forks and execs the workload (sh runs it
// in the background and waits): the child is followed across its exec.
func TestE2EForkExec(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, truthPath := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	script := fmt.Sprintf("%s --scenario threads --threads 2 --leak --truth %s & wait; echo shell-done", filepath.Join(dir, "ttwork"), truthPath)
	tt, tout := start(t, bin, "--json", "-o", out, "--lib", filepath.Join(dir, "libtt_metal.so"), "--", "sh", "-c", script)
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	if !strings.Contains(tout.String(), "shell-done") {
		t.Errorf("the shell's own output is missing:\n%s", tout)
	}
	sum, tr := lastSummary(t, out), readTruth(t, truthPath)
	wantExact(t, "fork+exec", false, sum, tr)
	if p := process(sum, tr.Pid); p == nil || !strings.Contains(p.Command, "ttwork") {
		t.Errorf("the child is reported as %+v, want its exec'ed command", p)
	}
}

// TestE2ETwoTracers: two tttrace on the same library and the same process
// at once: each ledger is exact, and the workload is unchanged.
func TestE2ETwoTracers(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	goFile, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "truth")
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "threads", "--threads", "3", "--leak", "--truth", truthPath, "--go-file", goFile)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	var outs []string
	var tracers []*syncBuffer
	var cmds []interface{ Wait() error }
	for i := 0; i < 2; i++ {
		out, ready := filepath.Join(tmp, fmt.Sprintf("out%d", i)), filepath.Join(tmp, fmt.Sprintf("ready%d", i))
		tt, tout := start(t, bin, "--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
		waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
		outs, tracers, cmds = append(outs, out), append(tracers, tout), append(cmds, tt)
	}
	touch(t, goFile)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	tr := readTruth(t, truthPath)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("tttrace %d: %v\n%s", i, err, tracers[i])
		}
		wantExact(t, fmt.Sprintf("tracer %d", i), false, lastSummary(t, outs[i]), tr)
	}
}

// TestE2ERingFilled: a ring far too small for a burst: the loss is
// reported (summary, lost record, exit status 7) and is exactly what the
// workload did that tttrace did not see.
func TestE2ERingFilled(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, truthPath := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	tt, tout := start(t, bin, "--json", "-o", out, "--ring-size", "4K", "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "burst", "--events", "400000", "--threads", "2", "--truth", truthPath)
	err := tt.Wait()
	if code := exitCode(err); code != 7 {
		t.Fatalf("exit status %d, want 7 (events lost)\n%s", code, tout)
	}
	if !strings.Contains(tout.String(), "events lost: the ledger is incomplete") {
		t.Errorf("stderr does not say events were lost:\n%s", tout)
	}
	sum, tr := lastSummary(t, out), readTruth(t, truthPath)
	p := process(sum, tr.Pid)
	if p == nil || sum.Complete || sum.LostEvents == 0 {
		t.Fatalf("summary complete=%v lost=%d: want an incomplete summary", sum.Complete, sum.LostEvents)
	}
	// Each kind of probed call the loss can hit, against what the workload
	// did: the burst's calls (track_allocate, track_deallocate), the
	// BankManager::allocate_buffer before each of its allocations (the
	// truth counts no allocate_buffer calls, but every buffer of the burst
	// is a chip's DRAM or L1 buffer and none fails: one request per
	// track_allocate) and the chip's bank managers (one per type in the
	// truth's allocator).
	var at allocTruth
	if b, err := os.ReadFile(truthPath); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &at); err != nil {
		t.Fatalf("truth: %v", err)
	}
	if len(at.Failures) != 0 {
		t.Fatalf("the burst recorded %d failed allocations: its requests are not one per track_allocate", len(at.Failures))
	}
	var managers uint64
	for _, d := range at.Devices {
		managers += uint64(len(d.Allocator))
	}
	lr := sum.LostRecords
	t.Logf("lost_events %d, lost_records %v", sum.LostEvents, lr)
	unseen := map[string]uint64{
		"alloc":          tr.Calls["track_allocate"] - p.Stats.Allocs,
		"free":           tr.Calls["track_deallocate"] - p.Stats.Frees,
		"alloc_request":  tr.Calls["track_allocate"] - p.Stats.AllocRequests,
		"alloc_capacity": managers - p.Stats.AllocCapacities,
	}
	if unseen["alloc"] == 0 || unseen["free"] == 0 {
		t.Errorf("unseen allocs %d, frees %d: the ring lost none of them", unseen["alloc"], unseen["free"])
	}
	var calls, own, events uint64
	for k, want := range unseen {
		if lr[k] != want {
			t.Errorf("lost_records.%s %d, but %d such calls were not seen", k, lr[k], want)
		}
		calls += want
	}
	for k, n := range lr {
		switch k {
		case "alloc", "free", "alloc_request", "alloc_capacity":
			events += n
		case "link_map", "main_exit", "group_exit":
			// The tracer's own records of the process that did not fit.
			events += n
			own += n
		case "stack", "py_stack", "py_code", "link_object":
			// They describe an alloc, or a process's link map (sent at
			// its loader's calls when the ring is under half full, so a
			// burst may lose one): not in lost_events.
		default:
			t.Errorf("lost_records.%s %d: the burst makes no such record", k, n)
			events += n
		}
	}
	// lost_events is the total of lost event records, kind by kind.
	if events != sum.LostEvents {
		t.Errorf("the event kinds of lost_records sum to %d, lost_events is %d", events, sum.LostEvents)
	}
	// Besides the calls, at most the process's link map, main-thread and
	// group exits.
	if sum.LostEvents < calls || sum.LostEvents > calls+3 || own > 3 {
		t.Errorf("lost_events %d, but %d calls were not seen (and %d of the tracer's own records lost)", sum.LostEvents, calls, own)
	}
	b, _ := os.ReadFile(out)
	if !bytes.Contains(b, []byte(`"type":"lost"`)) && !bytes.Contains(b, []byte(`"lost_before":`)) {
		t.Error("no lost record and no lost_before in the stream")
	}
}

// childNamed finds a child of ppid whose command name is comm (0: none).
func childNamed(ppid int, comm string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) > 1 && s[open+1:end] == comm && f[1] == strconv.Itoa(ppid) {
			return pid
		}
	}
	return 0
}

// TestE2EReload: Python runs a scenario, dlcloses the library, loads it
// again and runs the scenario a second time (only that run leaks), in
// "--" and "-p" modes. On clang builds the library really leaves the
// address space (the workload says so); gcc builds carry GNU unique
// symbols, which make ld.so keep them mapped. Either way the ledger holds
// exactly the second run's state, and every call of both runs was seen.
func TestE2EReload(t *testing.T) {
	for _, c := range []struct {
		variant, mode string
		unloads       bool
	}{{"clang-O3", "cmd", true}, {"clang-O3", "pid", true}, {"gcc-O2", "cmd", false}} {
		t.Run(c.variant+"/"+c.mode, func(t *testing.T) {
			bin, replica := setup(t)
			dir := filepath.Join(replica, c.variant)
			tmp := t.TempDir()
			loadFile, ready, out, truthPath := filepath.Join(tmp, "load"), filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
			work := []string{filepath.Join(dir, "ttwork.py"), "--reload", "--scenario", "basic", "--leak", "--truth", truthPath}
			var wout *syncBuffer
			var werr error
			if c.mode == "cmd" {
				tt, tout := start(t, bin, append([]string{"--json", "-o", out, "--", "python3"}, work...)...)
				werr, wout = tt.Wait(), tout
			} else {
				w, o := start(t, "python3", append([]string{work[0], "--load-after", loadFile}, work[1:]...)...)
				waitFor(t, func() bool { return strings.Contains(o.String(), "waiting-to-load") }, "python waiting")
				tt, tout := start(t, bin, "--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
				waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
				touch(t, loadFile)
				if err := w.Wait(); err != nil {
					t.Fatalf("workload: %v\n%s", err, o)
				}
				werr, wout = tt.Wait(), o
				if werr != nil {
					t.Fatalf("tttrace: %v\n%s", werr, tout)
				}
			}
			if werr != nil {
				t.Fatalf("exit: %v\n%s", werr, wout)
			}
			want := "still-mapped"
			if c.unloads {
				want = "unloaded"
			}
			if !strings.Contains(wout.String(), want) {
				t.Fatalf("the workload did not say %q after dlclose:\n%s", want, wout)
			}
			first, second := readTruth(t, truthPath), readTruth(t, truthPath+".2")
			for _, d := range first.Devices {
				if d.LiveBuffers != 0 {
					t.Fatalf("the first run left %d buffers on chip %d: the test needs it to free everything", d.LiveBuffers, d.Device)
				}
			}
			// Both runs' calls, the second run's state. A library that stayed
			// mapped kept its ground truth, calls of the first run included.
			both := *second
			if c.unloads {
				both.Calls = map[string]uint64{}
				for _, tr := range []*truth{first, second} {
					for k, v := range tr.Calls {
						both.Calls[k] += v
					}
				}
			}
			visibleViews(t, filepath.Join(dir, "libtt_metal.so"), &both)
			sum := lastSummary(t, out)
			for _, d := range compare(run{variant: c.variant, mode: c.mode, scenario: "basic+reload"}, sum, &both) {
				t.Error(d)
			}
		})
	}
}
