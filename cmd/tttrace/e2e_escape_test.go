package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EEscapedArgv: under --all (the service), a process whose argv
// carries terminal escapes is reported with them shown escaped: neither the
// report nor the log writes an escape sequence to root's terminal.
func TestE2EEscapedArgv(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	ready := filepath.Join(tmp, "ready")
	tt, tout := start(t, bin, "--all", "--interval", "0", "--ready-file", ready, "--lib", filepath.Join(dir, "libtt_metal.so"))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	const evil = "\x1b]2;owned\x07\x1b[2J\u009b31m"
	// The workload stays alive a while after its calls (--hold-file), so
	// tttrace has read its command line before it ends, however loaded the
	// machine is.
	hold := filepath.Join(tmp, "hold")
	w, wout := start(t, "bash", "-c", `exec -a "$0" "$1" --scenario basic --leak --hold-file "$2"`, evil, filepath.Join(dir, "ttwork"), hold)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding\n"+wout.String())
	time.Sleep(time.Second)
	touch(t, hold)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	waitFor(t, func() bool { return strings.Contains(tout.String(), "exited with code 0") }, "the workload's report\n"+tout.String())
	tt.Process.Signal(syscall.SIGINT)
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	text := tout.String()
	if !strings.Contains(text, `\x1b]2;owned\x07\x1b[2J\u009b31m`) {
		t.Errorf("the command is not shown escaped:\n%s", text)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(text, bad) {
			t.Errorf("%q written raw:\n%q", bad, text)
		}
	}
}
