package main

// Deep known Python stacks (bpf/pyknown.h, docs/python.md): chains of up
// to PY_KEY_FRAMES = 64 frames are known, as deep as pytest makes a TT-NN
// test's (34 frames for a test function calling the library, 40-60 for a
// model's), compared whole: two chains that differ only past their 40th
// frame are two stacks.

import (
	"strings"
	"testing"
)

// pyDeepScript calls the replica through a recursion 45 calls deep from
// two functions, outer_a and outer_b (48 frames: work, deep 45 times, the
// outer function, the module), whose chains differ only in their two
// outermost frames, one right after the other at the same frame addresses
// (each capture meets the other's memo), and through a recursion 57 calls
// deep from the module (59 frames). Each chain is sent once first and
// learnt (the pauses of the first round); the last round leaks one buffer
// from each chain.
const pyDeepScript = pyWorkScript + `def deep(n, leak):
    if n == 0:
        work(leak)
    else:
        deep(n - 1, leak)
def outer_a(leak):
    deep(44, leak)
def outer_b(leak):
    deep(44, leak)
for r in range(21):
    leak = r == 20
    for f in (outer_a, outer_b):
        f(leak)
        if r == 0:
            time.sleep(0.1)
    deep(56, leak)
    if r == 0:
        time.sleep(0.1)
time.sleep(1)  # tttrace reads the maps of a process it sees load a library
`

func TestE2EKnownPyDeep(t *testing.T) {
	lib, target := pyScriptTarget(t, "pydeep.py", pyDeepScript)

	// Every known stack also sent with its frames, walked: a token that
	// names another chain (one that differs only in its outermost
	// frames) is counted wrong. A run that knew none (tttrace starved of
	// CPU) is tried again, twice at most.
	c := checkKnownPy(t, lib, target)
	known, checked := c.known, c.checked
	if known == 0 || checked != known {
		t.Errorf("%d known Python stacks, %d checked: no stack of 48 or 59 frames was known, or the check did not run", known, checked)
	}

	// Without the check: the leak sites, Python lines and all, are those
	// of a run that sends every stack.
	a, _ := sameLeakSites(t, lib, target)
	// The reference has the three chains, whole.
	depth := map[string]int{"py:outer_a:": 45, "py:outer_b:": 45, "py:<module>:pydeep.py:25": 57}
	for want, n := range depth {
		found := false
		for _, s := range a {
			if strings.Contains(s, want) && strings.Count(s, "py:deep:pydeep.py:") == n {
				found = true
			}
		}
		if !found {
			t.Errorf("no leak site with %q and %d frames of deep():\n%s", want, n, strings.Join(a, "\n"))
		}
	}
}
