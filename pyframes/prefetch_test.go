package pyframes

import (
	"bufio"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// Prefetch reads a running interpreter's files in the background, calls
// done once per read it started or joined, and once all are read says
// there is nothing left (false) and ForProcess finds the interpreter. A
// process whose files were read already (by another test, say) gives
// false at once.
func TestPrefetch(t *testing.T) {
	interps := allInterpreters(t)
	if len(interps) == 0 {
		t.Skip("no CPython 3 here")
	}
	for _, in := range interps {
		t.Run(in.version, func(t *testing.T) {
			cmd := exec.Command(in.path, "-c", "import sys,time; print('up', flush=True); time.sleep(30)")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			if line, _ := bufio.NewReader(out).ReadString('\n'); line != "up\n" {
				t.Fatalf("%s said %q", in.path, line)
			}
			pid := cmd.Process.Pid
			// Each call starts (or joins) the reads of the files not read
			// yet and gets a done per read; called again after each done,
			// it ends saying there is nothing left to read.
			fin := make(chan struct{}, 16)
			rounds := 0
			for Prefetch(pid, func() { fin <- struct{}{} }) {
				if rounds++; rounds > 4 {
					t.Fatal("Prefetch still reading after 4 rounds")
				}
				select {
				case <-fin:
				case <-time.After(time.Minute):
					t.Fatal("done never called")
				}
			}
			p, err := ForProcess(pid)
			if in.minor < 7 {
				// No _PyRuntime before 3.7: not an interpreter (docs/python.md).
				if !errors.Is(err, ErrNoInterpreter) {
					t.Errorf("Python %s: %v, want ErrNoInterpreter", in.version, err)
				}
				return
			}
			if err != nil && (p == nil || p.Interp == nil) {
				t.Fatalf("ForProcess after Prefetch: %v", err)
			}
			p.Close()
			if p.Interp.Version() != in.version {
				t.Errorf("version %s, the interpreter says %s", p.Interp.Version(), in.version)
			}
		})
	}
}
