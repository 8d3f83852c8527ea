package pyframes

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// TestCaptureCost measures what a capture costs in BPF (the kernel's own
// run-time statistics of the program) for stacks of 1, 20 and 60 Python
// frames on every interpreter, and checks the program ran once per call.
// A measurement for docs/python.md: it runs with PYFRAMES_COST=1.
func TestCaptureCost(t *testing.T) {
	if os.Getenv("PYFRAMES_COST") == "" {
		t.Skip("set PYFRAMES_COST=1 to measure")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	dir := t.TempDir()
	so := filepath.Join(dir, "libtarget.so")
	src := filepath.Join(dir, "target.c")
	os.WriteFile(src, []byte(targetC), 0o644)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "../testdata/pyframes/cost.py")
	const calls = 20000
	for _, py := range findInterpreters(t) {
		for _, run := range []struct {
			depth   int
			noCodes bool
		}{{0, false}, {1, false}, {20, false}, {20, true}, {60, false}, {60, true}} {
			// Depth 0: the same calls from 1 frame, no capture: the floor.
			depth := run.depth
			objs, err := pyprobe.LoadWith(pyprobe.Options{NoCapture: depth == 0, NoCodes: run.noCodes, NoWakeup: true})
			if err != nil {
				t.Fatal(err)
			}
			ex, _ := link.OpenExecutable(so)
			l, err := ex.Uprobe("probe_target", objs.Program(), nil)
			if err != nil {
				t.Fatal(err)
			}
			rd, _ := ringbuf.NewReader(objs.Records())
			go func() {
				for {
					if _, err := rd.Read(); err != nil {
						return
					}
				}
			}()
			cmd := exec.Command(py.path, script, so, fmt.Sprint(max(depth, 1)), fmt.Sprint(calls))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Start()
			bufio.NewReader(stdout).ReadString('\n')
			proc, err := ForProcess(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			val, _ := proc.ProcValue()
			key := uint32(cmd.Process.Pid)
			objs.Procs().Put(&key, val)
			start := time.Now()
			fmt.Fprintln(stdin, "go")
			cmd.Wait()
			wall := time.Since(start)
			st, err := objs.Program().Stats()
			if err != nil {
				t.Fatal(err)
			}
			rt, n := st.Runtime, st.RunCount
			if n != calls {
				t.Errorf("%s depth %d: program ran %d times for %d calls", py.version, depth, n, calls)
			}
			t.Logf("%s depth %2d (code records %5v): %6.2f µs per capture in BPF (%d runs), script wall %v", py.version, depth, !run.noCodes, float64(rt.Nanoseconds())/float64(max(n, 1))/1000, n, wall.Round(time.Millisecond))
			proc.Close()
			rd.Close()
			l.Close()
			objs.Close()
		}
	}
}
