package main

// End-to-end tests of following the processes users run: libraries mapped
// after attach, forked workers, --all, pid and mount namespaces, and every
// way tracing ends. Exact against the replica's ground truth.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
)

// syncBuffer is a bytes.Buffer safe for a process writing while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs name args... with combined output captured.
func start(t *testing.T, name string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A process it leaves behind (tttrace stopped before its command) must
	// not keep Wait reading the shared output forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// privateReplica copies a replica build (its workload, libraries and
// script) to a directory of the test's own, so that no other process maps
// the same inodes; the workload finds its libraries by $ORIGIN.
func privateReplica(t *testing.T, dir string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ttwork", "ttwork.py", "libttwork.so", "libtt_metal.so"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTruth(t *testing.T, path string) *truth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr truth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &tr
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func process(sum *devices.Summary, pid uint32) *devices.ProcessSummary {
	for i := range sum.Processes {
		if sum.Processes[i].Pid == pid {
			return &sum.Processes[i]
		}
	}
	return nil
}

func wantExact(t *testing.T, name string, peaks bool, sum *devices.Summary, tr *truth) {
	t.Helper()
	for _, d := range compare(run{variant: "gcc-O2", mode: name, scenario: "", peaks: peaks}, sum, tr) {
		t.Error(d)
	}
}

// TestE2ELateLoad: Python loads the library after tttrace attached, in
// "--" and "-p" modes, with and without --lib: traced from the first call.
func TestE2ELateLoad(t *testing.T) {
	t.Run("cmd_python_nolib", func(t *testing.T) {
		r := run{variant: "gcc-O2", mode: "python", scenario: "basic", args: []string{"--leak"}, peaks: true, noLib: true}
		sum, tr := trace(t, r)
		for _, d := range compare(r, sum, tr) {
			t.Error(d)
		}
		if p := process(sum, tr.Pid); p != nil && p.AttachedMidRun {
			t.Error("a library probed before it was loaded is reported as attached mid-run")
		}
	})
	for _, withLib := range []bool{true, false} {
		t.Run(fmt.Sprintf("pid_python_lib=%v", withLib), func(t *testing.T) {
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
			touch(t, loadFile)
			if err := w.Wait(); err != nil {
				t.Fatalf("workload: %v\n%s", err, wout)
			}
			if err := tt.Wait(); err != nil {
				t.Fatalf("tttrace: %v\n%s", err, tout)
			}
			sum, tr := lastSummary(t, out), readTruth(t, truthPath)
			wantExact(t, "pid-python", true, sum, tr)
			if p := process(sum, tr.Pid); p != nil && p.AttachedMidRun {
				t.Errorf("attached_mid_run for a process that loaded the library after attach\n%s", tout)
			}
		})
	}
	// A renamed copy that is no candidate: found by its symbols when ld.so
	// maps it, attached then, and the process is marked as attached late.
	t.Run("renamed_found_by_symbols", func(t *testing.T) {
		bin, replica := setup(t)
		dir := filepath.Join(replica, "gcc-O2")
		tmp := t.TempDir()
		renamed := filepath.Join(tmp, "elsewhere", "_ttnn.so")
		os.MkdirAll(filepath.Dir(renamed), 0o755)
		lib, err := os.ReadFile(filepath.Join(dir, "libtt_metal.so"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(renamed, lib, 0o755)
		goFile, out, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
		tt, tout := start(t, bin, "--json", "-o", out, "--", "python3", filepath.Join(dir, "ttwork.py"),
			"--preload", renamed, "--scenario", "basic", "--leak", "--truth", truthPath, "--go-file", goFile)
		waitFor(t, func() bool { return strings.Contains(tout.String(), "not probed in advance") }, "late attach of the renamed copy")
		touch(t, goFile)
		// The command waited, but tttrace cannot know it: incomplete, 11.
		if err := tt.Wait(); exitCode(err) != 11 {
			t.Fatalf("tttrace: %v, want exit status 11 (late_library)\n%s", err, tout)
		}
		sum, tr := lastSummary(t, out), readTruth(t, truthPath)
		wantExact(t, "renamed", true, sum, tr)
		if p := process(sum, tr.Pid); p == nil || !p.AttachedMidRun || !p.LateLibrary {
			t.Error("a library attached only after it was mapped is not reported as attached mid-run, late_library")
		}
	})
}

// TestE2EFollowWorkers: a parent forks 4 workers that each load the
// library and run a multi-threaded workload (pytest-xdist shape): each
// worker has its own exact ledger; threads are not processes.
func TestE2EFollowWorkers(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, truthBase := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	cmd := exec.Command(bin, "--json", "-o", out, "--", "python3", filepath.Join(dir, "ttwork.py"),
		"--workers", "4", "--scenario", "threads", "--threads", "3", "--leak", "--truth", truthBase)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, b)
	}
	sum := lastSummary(t, out)
	truths, _ := filepath.Glob(truthBase + ".*")
	if len(truths) != 4 {
		t.Fatalf("%d worker truths, want 4", len(truths))
	}
	if len(sum.Processes) != 5 {
		t.Errorf("%d processes in the summary, want the parent and 4 workers", len(sum.Processes))
	}
	parent := uint32(0)
	for _, p := range sum.Processes {
		if len(p.Devices) == 0 {
			parent = p.Pid
		}
	}
	for _, tp := range truths {
		tr := readTruth(t, tp)
		wantExact(t, "worker", false, sum, tr)
		if p := process(sum, tr.Pid); p != nil && (p.Parent != parent || parent == 0) {
			t.Errorf("worker %d: ppid %d, want the parent %d", p.Pid, p.Parent, parent)
		}
	}
	// Each worker ended while the parent was traced: its report came at once.
	b, _ := os.ReadFile(out)
	if n := strings.Count(string(b), `"type":"process_summary"`); n != 4 {
		t.Errorf("%d process_summary lines, want one per worker", n)
	}
}

// TestE2EAll: --all catches a process started after tttrace.
func TestE2EAll(t *testing.T) {
	for _, withLib := range []bool{true, false} {
		t.Run(fmt.Sprintf("lib=%v", withLib), func(t *testing.T) {
			bin, replica := setup(t)
			dir := filepath.Join(replica, "gcc-O2")
			tmp := t.TempDir()
			if !withLib {
				// A copy of its own: the shared build is mapped by the
				// tests running beside this one, and --all would have
				// probed it for them before this workload loads it.
				dir = privateReplica(t, dir)
			}
			ready, out, truthPath, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
			args := []string{"--all", "--json", "--no-events", "-o", out, "--ready-file", ready}
			if withLib {
				args = append(args, "--lib", filepath.Join(dir, "libtt_metal.so"))
			}
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
			wargs := []string{"--scenario", "mesh", "--leak", "--truth", truthPath}
			if !withLib {
				// Started after tttrace, but no copy was probed in advance:
				// hold the workload until tttrace has attached.
				wargs = append(wargs, "--go-file", goFile)
			}
			w, wout := start(t, filepath.Join(dir, "ttwork"), wargs...)
			if !withLib {
				mine := fmt.Sprintf("probing /proc/%d/", w.Process.Pid)
				waitFor(t, func() bool { return strings.Contains(tout.String(), mine) }, "tttrace attached to the workload's library\n"+tout.String())
				touch(t, goFile)
			}
			if err := w.Wait(); err != nil {
				t.Fatalf("workload: %v\n%s", err, wout)
			}
			// The workload's end is reported before tttrace is stopped.
			waitFor(t, func() bool {
				b, _ := os.ReadFile(out)
				return bytes.Contains(b, []byte(`"process_summary"`)) || strings.Contains(tout.String(), "exited")
			}, "process report")
			tt.Process.Signal(syscall.SIGINT)
			err := tt.Wait()
			// Without --lib the workload's library was probed only after it
			// mapped it: held here, it missed nothing, but tttrace cannot
			// know that, and says it is incomplete (late_library, exit 11).
			want := 0
			if !withLib {
				want = 11
			}
			if code := exitCode(err); code != want {
				t.Fatalf("tttrace: exit status %d, want %d\n%s", code, want, tout)
			}
			sum := lastSummary(t, out)
			wantExact(t, "all", true, sum, readTruth(t, truthPath))
			if p := process(sum, uint32(w.Process.Pid)); p == nil || p.LateLibrary == withLib || p.AttachedMidRun == withLib {
				t.Errorf("summary %+v: late_library and attached_mid_run must be %v", p, !withLib)
			}
		})
	}
}

// TestE2EAllShortLateLibrary: under --all, a short process loads a
// TT-Metal library no process had mapped before: tttrace probes it only
// once the process has mapped it, so calls made before are missed. The
// summary (late_library, attached_mid_run), the report, the log and the exit
// status (11) say it is incomplete. The workload waits (--go-file) until
// tttrace has read its maps: a process that ends before tttrace reads them
// is not known to have loaded TT-Metal at all (docs/ndjson.md, late_library).
func TestE2EAllShortLateLibrary(t *testing.T) {
	bin, replica := setup(t)
	dir := privateReplica(t, filepath.Join(replica, "gcc-O2"))
	tmp := t.TempDir()
	ready, out, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "go")
	tt, tout := start(t, bin, "--all", "--json", "--no-events", "-o", out, "--ready-file", ready)
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak", "--go-file", goFile)
	mine := fmt.Sprintf("pid %d loaded ", w.Process.Pid)
	waitFor(t, func() bool { return strings.Contains(tout.String(), mine) }, "tttrace noting the workload's late library\n"+tout.String())
	touch(t, goFile)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	time.Sleep(300 * time.Millisecond)
	tt.Process.Signal(syscall.SIGINT)
	err := tt.Wait()
	if code := exitCode(err); code != 11 {
		t.Fatalf("tttrace: exit status %d, want 11\n%s", code, tout)
	}
	sum := lastSummary(t, out)
	p := process(sum, uint32(w.Process.Pid))
	if p == nil || !p.LateLibrary || !p.AttachedMidRun {
		t.Fatalf("summary %+v: want late_library and attached_mid_run", p)
	}
	t.Logf("the ledger saw %d allocs of the workload", p.Stats.Allocs)
}

// TestE2ENamespaces: a workload in its own pid and mount namespace, whose
// library path exists only inside its mount namespace, traced by host pid.
func TestE2ENamespaces(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	inside := filepath.Join(tmp, "mnt") // empty on the host; the replica is bind-mounted there inside
	os.MkdirAll(inside, 0o755)
	ready, out, truthPath, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
	script := fmt.Sprintf("mount --bind %s %s && exec %s/ttwork --scenario basic --leak --truth %s --go-file %s", dir, inside, inside, truthPath, goFile)
	u, uout := start(t, "unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c", script)
	waitFor(t, func() bool { return strings.Contains(uout.String(), "ready") }, "namespaced workload ready")
	child := childOf(t, u.Process.Pid)
	tt, tout := start(t, bin, "--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(child))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	touch(t, goFile)
	if err := u.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, uout)
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	sum, tr := lastSummary(t, out), readTruth(t, truthPath)
	if tr.Pid != 1 {
		t.Fatalf("the workload is pid %d in its namespace, want 1", tr.Pid)
	}
	wantExact(t, "netns", true, sum, tr)
	p := process(sum, uint32(child))
	if p == nil || p.NsPid != 1 {
		t.Errorf("summary has no process with host pid %d and ns pid 1: %+v", child, sum.Processes)
	}
}

// childOf returns the only child of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	var kids []string
	waitFor(t, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		kids = strings.Fields(string(b))
		return len(kids) == 1
	}, "namespace child")
	n, _ := strconv.Atoi(kids[0])
	return n
}

// TestE2EEndings: every way tracing ends.
func TestE2EEndings(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")

	// SIGTERM to tttrace: the summary is printed, the probes go, and the
	// workload carries on and finishes normally.
	t.Run("sigterm_detaches", func(t *testing.T) {
		tmp := t.TempDir()
		ready, out, truthPath, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
		w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "burst", "--events", "4000000", "--truth", truthPath, "--go-file", goFile)
		waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
		tt, tout := start(t, bin, "--json", "--no-events", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
		waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
		touch(t, goFile)
		time.Sleep(500 * time.Millisecond)
		tt.Process.Signal(syscall.SIGTERM)
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace after SIGTERM: %v\n%s", err, tout)
		}
		sum := lastSummary(t, out)
		p := process(sum, uint32(w.Process.Pid))
		if p == nil || p.Exited || p.Stats.Allocs == 0 {
			t.Errorf("summary after SIGTERM: want the live, partly traced workload; got %+v", p)
		}
		if err := w.Wait(); err != nil {
			t.Fatalf("workload after tttrace stopped: %v\n%s", err, wout)
		}
		if tr := readTruth(t, truthPath); tr.Calls["track_allocate"] != 2000000 {
			t.Errorf("workload made %d allocations, want 2000000", tr.Calls["track_allocate"])
		}
	})

	// -- CMD: a first SIGINT (Ctrl-C reaches the command too) keeps tracing
	// until the command exits, exactly; a second stops at once.
	t.Run("cmd_sigint_waits_for_command", func(t *testing.T) {
		tmp := t.TempDir()
		out, truthPath, goFile := filepath.Join(tmp, "out"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
		tt, tout := start(t, bin, "--json", "-o", out, "--lib", lib, "--", filepath.Join(dir, "ttwork"),
			"--scenario", "basic", "--leak", "--truth", truthPath, "--go-file", goFile)
		waitFor(t, func() bool { return strings.Contains(tout.String(), "ready") }, "workload ready")
		tt.Process.Signal(syscall.SIGINT)
		waitFor(t, func() bool { return strings.Contains(tout.String(), "tracing until") }, "tttrace noting the interrupt")
		touch(t, goFile)
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		wantExact(t, "sigint", true, lastSummary(t, out), readTruth(t, truthPath))

		tt2, tout2 := start(t, bin, "--json", "-o", out, "--lib", lib, "--", filepath.Join(dir, "ttwork"),
			"--scenario", "basic", "--go-file", filepath.Join(tmp, "never"))
		waitFor(t, func() bool { return strings.Contains(tout2.String(), "ready") }, "workload ready")
		tt2.Process.Signal(syscall.SIGINT)
		waitFor(t, func() bool { return strings.Contains(tout2.String(), "tracing until") }, "tttrace noting the interrupt")
		tt2.Process.Signal(syscall.SIGINT)
		if err := tt2.Wait(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
			t.Fatalf("tttrace after a second SIGINT: %v\n%s", err, tout2)
		}
		p := lastSummary(t, out).Processes
		if len(p) != 1 || p[0].Exited {
			t.Fatalf("after a second SIGINT: want the summary of the still running command, got %+v", p)
		}
		syscall.Kill(int(p[0].Pid), syscall.SIGKILL)
	})

	// SIGKILL of tttrace mid-burst: the workload finishes correctly.
	t.Run("sigkill_midburst", func(t *testing.T) {
		tmp := t.TempDir()
		ready, truthPath, goFile := filepath.Join(tmp, "ready"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "go")
		w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "burst", "--events", "4000000", "--truth", truthPath, "--go-file", goFile)
		waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
		tt, _ := start(t, bin, "--json", "-o", "/dev/null", "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
		waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
		touch(t, goFile)
		time.Sleep(500 * time.Millisecond)
		tt.Process.Kill()
		tt.Wait()
		if err := w.Wait(); err != nil {
			t.Fatalf("workload after SIGKILL of tttrace: %v\n%s", err, wout)
		}
		tr := readTruth(t, truthPath)
		if tr.Calls["track_allocate"] != 2000000 || tr.Calls["track_deallocate"] != 2000000 {
			t.Errorf("workload calls %v, want 2000000 allocations and frees", tr.Calls)
		}
	})

	// A traced command killed by a signal: reported as such, and tttrace
	// exits as a shell would (128+N).
	t.Run("cmd_killed_by_signal", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(bin, "--json", "-o", out, "--lib", lib, "--", "sh", "-c", "kill -SEGV $$")
		err := cmd.Run()
		if code := exitCode(err); code != 128+int(syscall.SIGSEGV) {
			t.Errorf("exit status %d, want %d", code, 128+int(syscall.SIGSEGV))
		}
		sum := lastSummary(t, out)
		if len(sum.Processes) != 1 || sum.Processes[0].ExitSignal != int(syscall.SIGSEGV) {
			t.Errorf("summary: %+v, want one process killed by SIGSEGV", sum.Processes)
		}
	})
	t.Run("pid_killed_by_signal", func(t *testing.T) {
		tmp := t.TempDir()
		ready, out := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out")
		w, _ := start(t, filepath.Join(dir, "ttwork"), "--scenario", "basic", "--go-file", filepath.Join(tmp, "never"))
		tt, tout := start(t, bin, "--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid))
		waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
		w.Process.Signal(syscall.SIGKILL)
		w.Wait()
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		p := process(lastSummary(t, out), uint32(w.Process.Pid))
		if p == nil || !p.Exited || p.ExitSignal != int(syscall.SIGKILL) {
			t.Errorf("summary: %+v, want the process reported killed by SIGKILL", p)
		}
	})

	// Bad targets: one clear line each and a distinct exit status; the
	// output files given are left as they were.
	t.Run("errors", func(t *testing.T) {
		sleeper := exec.Command("sleep", "30")
		sleeper.Start()
		defer sleeper.Process.Kill()
		for _, c := range []struct {
			name     string
			args     []string
			asNobody bool
			code     int
			says     string
		}{
			{"no_such_pid", []string{"-p", "999999999"}, false, 4, "no such process"},
			{"never_loads", []string{"-p", strconv.Itoa(sleeper.Process.Pid), "--wait", "300ms"}, false, 5, "did not load libtt_metal.so"},
			{"not_root", []string{"-p", "1"}, true, 3, "root"},
			{"no_command", []string{"--lib", lib, "--", "/nonexistent/cmd"}, false, 127, "command not found"},
			{"not_ttmetal", []string{"--lib", "/bin/true", "--", "true"}, false, 6, "not a TT-Metal library"},
			{"bad_flag", []string{"--frobnicate"}, false, 2, "unknown flag"},
		} {
			t.Run(c.name, func(t *testing.T) {
				args := c.args
				name := bin
				var outs []string
				if !c.asNobody && c.name != "bad_flag" {
					tmp := t.TempDir()
					outs = []string{filepath.Join(tmp, "out.json"), filepath.Join(tmp, "out.pftrace")}
					for _, o := range outs {
						os.WriteFile(o, []byte("the previous run's\n"), 0o644)
					}
					args = append([]string{"--json", "-o", outs[0], "--perfetto", outs[1]}, args...)
				}
				if c.asNobody {
					name, args = "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)
				}
				var stderr bytes.Buffer
				cmd := exec.Command(name, args...)
				cmd.Stderr = &stderr
				err := cmd.Run()
				if code := exitCode(err); code != c.code {
					t.Errorf("exit status %d, want %d; stderr:\n%s", code, c.code, stderr.String())
				}
				if !strings.Contains(stderr.String(), c.says) {
					t.Errorf("stderr does not say %q:\n%s", c.says, stderr.String())
				}
				for _, o := range outs {
					if b, _ := os.ReadFile(o); string(b) != "the previous run's\n" {
						t.Errorf("%s: %q after a run that could not start, want it untouched", filepath.Base(o), b)
					}
				}
			})
		}
	})
}
