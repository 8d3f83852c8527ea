package main

// The native stacks of a Python thread end at the interpreter's evaluation
// loop (stacks.Table.SetStops, session/sites.go evalStops, docs/stacks.md):
// the native frames past its first _PyEval_EvalFrameDefault frame are the
// interpreter's, which the Python stack names. However deep the Python
// code, the native chain then stays short enough for the kernel to know it
// (at most 32 return addresses): before, a chain through a deep Python
// stack was never known and every allocation sent its 16 KiB stack (a
// pytest run: 68 native frames, 0 of 50,000 stacks known).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// stopScript allocates 30 Python calls deep, each call made from C (map
// and sum call the next level), so that in every CPython version the
// evaluation loop nests once per level on the native stack.
const stopScript = `import ctypes, os, sys, time
time.sleep(1)  # tttrace registers the interpreter (docs/python.md)
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libttwork.so"))
lib.ttwork_main.restype = ctypes.c_int
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
def work():
    enc = [b"ttwork", b"--scenario", b"burst", b"--threads", b"0", b"--events", b"6000", b"--leak"]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    assert lib.ttwork_main(len(enc), argv) == 0
def deep(n):
    if n == 0:
        work()
        return 0
    return sum(map(deep, [n - 1]))
deep(30)
`

func TestE2EPythonNativeStop(t *testing.T) {
	_, replica := setup(t)
	script := filepath.Join(t.TempDir(), "stop.py")
	if err := os.WriteFile(script, []byte(stopScript), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	for _, py := range interpreters(t) {
		if _, minor := pythonVersion(t, py); minor < 10 || minor > 13 {
			continue
		}
		t.Run(strings.TrimPrefix(py, "/"), func(t *testing.T) {
			target := []string{py, script, dir}
			_, log := traceKnown(t, lib, []string{"--check-known-stacks"}, target)
			copied, known, checked, wrong := knownCountsOf(t, log)
			t.Logf("%d stacks copied, %d known, %d checked", copied, known, checked)
			// 3,000 allocations: a few are copied until the first is learnt.
			if wrong != 0 || checked != known || known < 2000 {
				t.Errorf("%d copied, %d known, %d checked, %d wrong: want most known, all checked, none wrong\n%s", copied, known, checked, wrong, log)
			}
			// The leaked buffer's site: native frames up to the first
			// evaluation loop frame, then the Python frames, all 30 levels.
			_, got := sameLeakSites(t, lib, target)
			checkStopSite(t, got)
		})
	}
}

// checkStopSite: every leak's site ends its native frames at its first
// _PyEval_EvalFrameDefault frame and has the Python frames of all levels.
func checkStopSite(t *testing.T, sum *devices.Summary) {
	t.Helper()
	seen := 0
	for i := range sum.Processes {
		p := &sum.Processes[i]
		for _, s := range p.Sites {
			if len(s.Native) == 0 {
				continue
			}
			seen++
			evals := 0
			for _, f := range s.Native {
				if f.Function == "_PyEval_EvalFrameDefault" {
					evals++
				}
			}
			last := s.Native[len(s.Native)-1]
			deep := 0
			for _, f := range s.Python {
				if f.Function == "deep" {
					deep++
				}
			}
			if evals != 1 || last.Function != "_PyEval_EvalFrameDefault" || s.Truncated || deep != 31 {
				t.Errorf("site %d: %d native frames ending in %q (%d evaluation loop frames), truncated %v, %d Python frames of deep: want the native frames to end at the first evaluation loop frame and 31 of deep",
					s.Site, len(s.Native), last.Function, evals, s.Truncated, deep)
			}
		}
	}
	if seen == 0 {
		t.Error("no site with native frames")
	}
}
