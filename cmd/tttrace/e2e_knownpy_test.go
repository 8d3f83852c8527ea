package main

// Known Python stacks end to end (bpf/pyknown.h, docs/python.md): a
// thread's Python chain, once sent, comes as a token in the alloc. With
// --check-known-stacks every such stack also comes with its frames, which
// tttrace compares with the stack its token names, and the leak sites of a
// run with known stacks equal those of a run that sends every stack.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// knownPyScript calls the replica from Python on paths it takes again and
// again (two recursion depths), then from functions made with exec one
// after the other, each freed before the next: CPython gives the new code
// object the address of the freed one, and its call the same instruction
// address, on another line. Each function is called twice: the second
// call's chain is known by then, and must not be taken for the next
// function's, which has the same code object address and instruction but
// another line. The pauses let tttrace read the stacks sent before. It
// leaks on a few calls only (the replica's L1 is small).
const knownPyScript = pyWorkScript + `import gc
def deep(n, leak):
    if n == 0:
        work(leak)
    else:
        deep(n - 1, leak)
for i in range(4):
    for depth in (4, 7):
        deep(depth, i == 3)
        time.sleep(0.1)
for tag in range(6):
    src = "\n" * (tag % 5) + "def made(leak):\n    work(leak)\n"
    ns = {"work": work}
    exec(compile(src, "<made>", "exec"), ns)
    for leak in (False, True):
        ns["made"](leak)
        time.sleep(0.1)
    del ns
    gc.collect()
time.sleep(1)  # tttrace reads the maps of a process it sees load a library
`

var knownPyCounts = regexp.MustCompile(`known Python stacks checked: (\d+) sent, (\d+) known, (\d+) checked, (\d+) wrong; sent: (\d+) captured before the code objects' deallocation was probed, \d+ with a code object not yet described, (\d+) learnt`)

// pyLibScript begins the e2e tests' Python scripts that call the replica
// through ctypes (the replica build's directory in argv[1]): it waits for
// tttrace to register the interpreter and loads libttwork.so as lib.
const pyLibScript = `import ctypes, os, sys, time
time.sleep(1)  # tttrace registers the interpreter (docs/python.md)
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libttwork.so"))
lib.ttwork_main.restype = ctypes.c_int
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
`

// pyWorkScript begins the known Python stack tests' scripts: work(leak)
// runs the replica's basic scenario through ctypes, leaking its buffers
// when leak is true.
const pyWorkScript = pyLibScript + `def work(leak):
    enc = [b"ttwork", b"--scenario", b"basic"] + ([b"--leak"] if leak else [])
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    assert lib.ttwork_main(len(enc), argv) == 0
`

// pyScriptTarget writes script as name in a temporary directory and
// returns the gcc-O2 replica's library and the command that runs script
// with it (python3 SCRIPT DIR).
func pyScriptTarget(t *testing.T, name, script string) (lib string, target []string) {
	t.Helper()
	_, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "libtt_metal.so"), []string{"python3", path, dir}
}

// knownPyRun is what a --check-known-stacks run's log says of its Python
// stacks.
type knownPyRun struct{ sent, known, checked, wrong, noGen, learnt uint64 }

// checkKnownPy runs tttrace --check-known-stacks on target: every known
// Python stack is also sent with its frames and checked against its
// token; one that names another stack is an error. A run whose every call
// came before any chain was learnt (tttrace starved of CPU under load)
// knows none: such a run is tried again, twice at most. It returns the
// last run's counts.
func checkKnownPy(t *testing.T, lib string, target []string) knownPyRun {
	t.Helper()
	var c knownPyRun
	for try := 1; ; try++ {
		_, log := traceKnown(t, lib, []string{"--check-known-stacks"}, target)
		n := logCounts(t, knownPyCounts, "known Python stack", log)
		c = knownPyRun{n[0], n[1], n[2], n[3], n[4], n[5]}
		t.Logf("run %d: %d Python stacks sent (%d before the code objects' deallocation was probed, %d learnt), %d known, %d checked, %d wrong",
			try, c.sent, c.noGen, c.learnt, c.known, c.checked, c.wrong)
		if c.wrong != 0 {
			t.Errorf("%d known Python stacks are not the stack their token names:\n%s", c.wrong, log)
		}
		if c.known != 0 || try == 3 {
			return c
		}
	}
}

func TestE2EKnownPyStacks(t *testing.T) {
	lib, target := pyScriptTarget(t, "knownpy.py", knownPyScript)

	// A run whose every call came before any chain was learnt (tttrace
	// starved of CPU for the whole script under load) knows none: such a
	// run is tried again, twice at most. Known stacks that never match
	// know none in any of the three and fail.
	c := checkKnownPy(t, lib, target)
	sent, known, checked, noGen := c.sent, c.known, c.checked, c.noGen
	if known == 0 || checked != known {
		t.Errorf("%d known Python stacks, %d checked: no stack was known, or the check did not run", known, checked)
	}
	if noGen == sent {
		t.Errorf("all %d Python stacks were captured before the code objects' deallocation was probed", sent)
	}

	// The same leak sites, Python lines and all, as a run that sends
	// every stack.
	b, _ := sameLeakSites(t, lib, target)
	made := 0
	for _, s := range b {
		if strings.Contains(s, "py:made:<made>:") {
			made++
		}
	}
	if made == 0 {
		t.Errorf("no leak site in the functions made with exec:\n%s", strings.Join(b, "\n"))
	}
}
