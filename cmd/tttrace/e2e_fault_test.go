package main

// The fault matrix: tttrace falling behind, being killed, the traced
// process being killed, exec and fork, two tracers at once, the ring filled
// on purpose. Each case checks the ledger against the replica's truth
// where there is one, and that the workload's own output and exit status
// are what they are untraced.

import (
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
