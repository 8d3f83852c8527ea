package main

// The thread's memo of its Python chain (bpf/pyknown.h, py_memo_token): a
// capture whose innermost frame is where the memo's was checks the chain's
// frames in place instead of walking them. A memo hit must name exactly
// the stack the walk would have found, also where another chain lies at
// the very same frame addresses.

import (
	"strings"
	"testing"
)

// pyMemoScript calls the replica through chains that share their frame
// addresses pairwise, one right after the other, so that each capture
// meets the memo its thread kept of the other: line() from one call site
// to either of its lines (the same code objects at the same addresses, one
// frame's instruction differs), a recursion that returns and enters again
// at the same addresses to reach either line, and two functions from one
// call site (a code object differs). Each chain is sent once first and
// learnt (the pauses of the first round); the last round leaks one buffer
// from each chain.
const pyMemoScript = pyWorkScript + `def line(k, leak):
    if k:
        work(leak)
    else:
        work(leak)
def via_a(leak):
    work(leak)
def via_b(leak):
    work(leak)
def deep(n, k, leak):
    if n == 0:
        line(k, leak)
    else:
        deep(n - 1, k, leak)
for r in range(21):
    leak = r == 20
    for k in (0, 1):
        line(k, leak)
        if r == 0:
            time.sleep(0.1)
    for k in (0, 1):
        deep(3, k, leak)
        if r == 0:
            time.sleep(0.1)
    for f in (via_a, via_b):
        f(leak)
        if r == 0:
            time.sleep(0.1)
time.sleep(1)  # tttrace reads the maps of a process it sees load a library
`

func TestE2EKnownPyMemo(t *testing.T) {
	lib, target := pyScriptTarget(t, "pymemo.py", pyMemoScript)

	// Every known stack also sent with its frames, walked: a memo hit
	// that names another chain's token is counted wrong. A run that knew
	// none (tttrace starved of CPU) is tried again, twice at most.
	c := checkKnownPy(t, lib, target)
	known, checked := c.known, c.checked
	if known == 0 || checked != known {
		t.Errorf("%d known Python stacks, %d checked: no stack was known, or the check did not run", known, checked)
	}

	// Without the check a memo hit sends no walk at all: the leak sites,
	// Python lines and all, are those of a run that sends every stack.
	a, _ := sameLeakSites(t, lib, target)
	// The reference tells the chains apart: both lines of line(), both
	// functions at the same depth.
	for _, want := range []string{"py:line:pymemo.py:12", "py:line:pymemo.py:14", "py:via_a:", "py:via_b:"} {
		if !strings.Contains(strings.Join(a, "\n"), want) {
			t.Errorf("no leak site with %q:\n%s", want, strings.Join(a, "\n"))
		}
	}
}
