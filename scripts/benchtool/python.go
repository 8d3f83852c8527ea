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
	// Rows 8b: the same burst from a pytest test function, as TT-NN's
	// tests run (Debian's python3 and its pytest: 34 Python frames, and
	// native frames through pytest's calls made from C).
	test := filepath.Join(c.work, "test_pyburst.py")
	if err := os.WriteFile(test, []byte(pytestDriver), 0o644); err == nil {
		tw := []string{"/usr/bin/python3", "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test}
		env := "TTWORK_DIR=" + c.replica
		runEnv := func(name string, args ...string) costRun {
			r, _ := runBurstEnv([]string{env, "TTWORK_EVENTS=" + strconv.Itoa(pyEvents)}, "", name, args...)
			return r
		}
		ms = append(ms,
			mode{pytestUntraced, func(*config, int) costRun { return runEnv(tw[0], tw[1:]...) }},
			mode{pytestOn, func(*config, int) costRun {
				return runEnv(c.tttrace, append([]string{"--json", "-o", "/dev/null", "--lib", lib, "--"}, tw...)...)
			}},
			mode{pytestOff, func(*config, int) costRun {
				return runEnv(c.tttrace, append([]string{"--json", "-o", "/dev/null", "--no-stacks", "--lib", lib, "--"}, tw...)...)
			}})
	} else {
		logf("python: %v", err)
	}
	return runRounds(c, "python", 44, ms)
}

const (
	pytestUntraced = "untraced (pytest)"
	pytestOn       = "tttrace --json -o /dev/null (pytest)"
	pytestOff      = "tttrace --json -o /dev/null --no-stacks (pytest)"
)

// pytestDriver runs the burst from a pytest test function.
const pytestDriver = `import ctypes, os, time
def test_burst():
    time.sleep(1)
    lib = ctypes.CDLL(os.path.join(os.environ["TTWORK_DIR"], "libttwork.so"))
    lib.ttwork_main.restype = ctypes.c_int
    lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    enc = [b"ttwork", b"--scenario", b"burst", b"--threads", b"0", b"--events", os.environ["TTWORK_EVENTS"].encode()]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    assert lib.ttwork_main(len(enc), argv) == 0
`

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
	rows := []row{
		{"8", fmt.Sprintf("allocation sites on a Python thread: the burst (%d events) run from a Python function %d calls deep "+
			"(ttwork --scenario burst --threads 0 through ctypes), per allocation and its free", pyEvents, pyDepth),
			fmt.Sprintf("floor added **%.2f µs**; tttrace --no-stacks **%.2f µs = %.2fx floor**; with sites (default) **%.2f µs = %.2fx floor = %.2fx --no-stacks**: "+
				"the native and Python stacks (%d Python frames) cost %.2f µs per allocation%s",
				f, off, off/f, on, on/f, on/off, pyDepth+2, on-off, spreadFlag(perRound(pyFloor), perRound(pyOff), perRound(pyOn))),
			// Issue #33 part 2: Python sites at the cost of a known native stack.
			"sites ≤ 1.3x --no-stacks", yesNo(off > 0 && on/off <= 1.3)},
	}
	if len(secs[pytestUntraced]) > 0 && len(secs[pytestOn]) > 0 && len(secs[pytestOff]) > 0 {
		pu := median(values(secs[pytestUntraced]))
		pAdded := func(mode string) float64 { return (median(values(secs[mode])) - pu) / n * 1e6 }
		pOn, pOff := pAdded(pytestOn), pAdded(pytestOff)
		pRound := func(mode string) []float64 {
			var v []float64
			for round, s := range secs[mode] {
				if uu, ok := secs[pytestUntraced][round]; ok {
					v = append(v, (s-uu)/n*1e6)
				}
			}
			return v
		}
		rows = append(rows, row{"8b", fmt.Sprintf("the same burst (%d events) from a pytest test function (/usr/bin/python3 -m pytest: Debian's CPython and pytest), per allocation and its free", pyEvents),
			fmt.Sprintf("untraced %.3f s; tttrace --no-stacks added **%.2f µs**; with sites (default) **%.2f µs = %.2fx --no-stacks**: the stacks cost %.2f µs per allocation%s",
				pu, pOff, pOn, pOn/pOff, pOn-pOff, spreadFlag(pRound(pytestOff), pRound(pytestOn))),
			"sites ≤ 1.3x --no-stacks", yesNo(pOff > 0 && pOn/pOff <= 1.3)})
	} else if len(bad[pytestOn]) > 0 || len(bad[pytestUntraced]) > 0 {
		rows = append(rows, row{"8b", "the burst from a pytest test function", "no successful run: " + strings.Join(append(bad[pytestUntraced], bad[pytestOn]...), "; "), "", "**no**"})
	}
	return rows
}
