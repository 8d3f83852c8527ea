package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Rows 8: what an allocation site costs where users allocate, on a Python
// thread. The replica's burst runs on the thread of a Python function
// pyDepth calls deep (ttwork --scenario burst --threads 0 through ctypes,
// as import ttnn loads TT-Metal), so each allocation's Python stack has
// pyDepth+2 frames, walked in BPF per allocation (bpf/python.h). Each
// round runs, in rotating order: untraced, the floor, and tttrace with
// allocation sites (the default) and without (--no-stacks).

const (
	pyDepth  = 20
	pyEvents = 100000
	pyFloor  = floorMode + " (Python)"
	pyOn     = "tttrace --json -o /dev/null (Python)"
	pyOff    = "tttrace --json -o /dev/null --no-stacks (Python)"
)

// pyDriver calls ttwork_main from a Python function depth calls deep. The
// first second lets tttrace register the interpreter (docs/python.md).
const pyDriver = `import ctypes, os, sys, time
time.sleep(1)
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libttwork.so"))
lib.ttwork_main.restype = ctypes.c_int
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
def work(n):
    enc = [b"ttwork", b"--scenario", b"burst", b"--threads", b"0", b"--events", n.encode()]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    sys.exit(lib.ttwork_main(len(enc), argv))
def deep(d, n):
    if d == 0:
        work(n)
    deep(d - 1, n)
deep(int(sys.argv[2]), sys.argv[3])
`

func runPython(c *config) []costRun {
	python, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	script := filepath.Join(c.work, "pyburst.py")
	if err == nil {
		err = os.WriteFile(script, []byte(pyDriver), 0o644)
	}
	if err != nil {
		logf("python: %v", err)
		return []costRun{{Mode: "python", Err: err.Error()}}
	}
	work := []string{strings.TrimSpace(string(python)), script, c.replica, strconv.Itoa(pyDepth), strconv.Itoa(pyEvents)}
	lib := filepath.Join(c.replica, "libtt_metal.so")
	run := func(name string, args ...string) costRun {
		r, _ := runBurst("", name, args...)
		return r
	}
	ms := []mode{
		{"untraced", func(*config, int) costRun { return run(work[0], work[1:]...) }},
		{pyFloor, func(*config, int) costRun {
			return run(c.self, append([]string{"-floor-lib", lib, "--"}, work...)...)
		}},
		{pyOn, func(*config, int) costRun {
			return run(c.tttrace, append([]string{"--json", "-o", "/dev/null", "--lib", lib, "--"}, work...)...)
		}},
		{pyOff, func(*config, int) costRun {
			return run(c.tttrace, append([]string{"--json", "-o", "/dev/null", "--no-stacks", "--lib", lib, "--"}, work...)...)
		}},
	}
	return runRounds(c, "python", 44, ms)
}

func (r *results) pythonRows() []row {
	if len(r.Python) == 0 {
		return nil
	}
	secs, bad := byModeOf(r.Python)
	for _, m := range []string{"untraced", pyFloor, pyOn, pyOff} {
		if len(secs[m]) == 0 {
			return []row{{"8", "allocation sites on a Python thread", "no successful run of " + m + ": " + strings.Join(bad[m], "; "), "", "**no**"}}
		}
	}
	// Per allocation and its free: twice the added cost per event.
	n := float64(pyEvents) / 2
	u := median(values(secs["untraced"]))
	added := func(mode string) float64 { return (median(values(secs[mode])) - u) / n * 1e6 }
	f, on, off := added(pyFloor), added(pyOn), added(pyOff)
	// Each mode's added cost per round, over its round's untraced run.
	perRound := func(mode string) []float64 {
		var v []float64
		for round, s := range secs[mode] {
			if uu, ok := secs["untraced"][round]; ok {
				v = append(v, (s-uu)/n*1e6)
			}
		}
		return v
	}
	return []row{
		{"8", fmt.Sprintf("allocation sites on a Python thread: the burst (%d events) run from a Python function %d calls deep "+
			"(ttwork --scenario burst --threads 0 through ctypes), per allocation and its free", pyEvents, pyDepth),
			fmt.Sprintf("floor added **%.2f µs**; tttrace --no-stacks **%.2f µs = %.2fx floor**; with sites (default) **%.2f µs = %.2fx floor = %.2fx --no-stacks**: "+
				"the native and Python stacks (%d Python frames) cost %.2f µs per allocation%s",
				f, off, off/f, on, on/f, on/off, pyDepth+2, on-off, spreadFlag(perRound(pyFloor), perRound(pyOff), perRound(pyOn))),
			// Issue #33 part 2: Python sites at the cost of a known native stack.
			"sites ≤ 1.3x --no-stacks", yesNo(off > 0 && on/off <= 1.3)},
	}
}
