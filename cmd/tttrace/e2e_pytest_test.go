package main

// A pytest run's leaks grouped by test id: each test of a test module leaks
// through the replica, and leak_sites must name the test (pytest's own id
// shape, FILE::[Class::]test) of every leak, with its exact count.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pytestModule: test_alpha leaks 4 buffers through a helper, the method
// TestBeta.test_gamma 4 directly, test_clean none.
const pytestModule = `import ctypes, os, time

lib = ctypes.CDLL(os.path.join(os.environ["TTWORK_LIBDIR"], "libttwork.so"))
lib.ttwork_main.restype = ctypes.c_int
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]


def work():
    enc = [b"ttwork", b"--scenario", b"basic", b"--leak"]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    return lib.ttwork_main(len(enc), argv)


def helper():
    return work()


def test_alpha():
    assert helper() == 0


class TestBeta:
    def test_gamma(self):
        assert work() == 0


def test_clean():
    # leaks nothing; the run lives on a second, as test suites do
    # (docs/stacks.md: short processes)
    time.sleep(1)
`

func TestE2EPytestGroups(t *testing.T) {
	bin, replica := setup(t)
	const py = "/usr/bin/python3" // Debian's, with python3-pytest
	if err := exec.Command(py, "-c", "import pytest").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s has no pytest (Debian python3-pytest): %v", py, err)
		}
		t.Skipf("%s has no pytest (apt-get install python3-pytest): %v", py, err)
	}
	libdir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	mod := filepath.Join(tmp, "test_leaky.py")
	if err := os.WriteFile(mod, []byte(pytestModule), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out.ndjson")
	args := []string{"--json", "-o", out, "--lib", filepath.Join(libdir, "libtt_metal.so"), "--",
		py, "-m", "pytest", "-q", "-p", "no:cacheprovider", mod}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TTWORK_LIBDIR="+libdir)
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "3 passed") {
		t.Fatalf("pytest did not pass its 3 tests:\n%s", stderr.String())
	}
	sum := lastSummary(t, out)
	if len(sum.Processes) != 1 {
		t.Fatalf("%d processes in the summary, want 1", len(sum.Processes))
	}
	ps := &sum.Processes[0]
	if len(ps.Leaks) != 8 {
		t.Fatalf("%d leaks, want 8 (4 from each of 2 tests)", len(ps.Leaks))
	}
	byTest := map[string]uint64{}
	var leaked uint64
	for _, ls := range ps.LeakSites {
		byTest[ls.Test] += ls.Count
		leaked += ls.Count
	}
	want := map[string]uint64{mod + "::test_alpha": 4, mod + "::TestBeta::test_gamma": 4}
	if leaked != 8 || len(byTest) != len(want) {
		t.Errorf("leak_sites by test: %v, want %v", byTest, want)
	}
	for k, n := range want {
		if byTest[k] != n {
			t.Errorf("leak_sites by test: %v, want %v", byTest, want)
			break
		}
	}
}
