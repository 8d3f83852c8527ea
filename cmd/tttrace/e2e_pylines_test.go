package main

// Python lines on allocation sites, on every CPython this machine has:
// leaks allocated from known lines of a script (the main thread, a
// threading.Thread, a 90-deep recursion) must name exactly those lines, and
// a native stack through the replica's C entry point, in "-- CMD" and "-p"
// modes. An interpreter tttrace does not support gives no Python frames at
// all (and says so in the summary), never a wrong line.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
)

// pyLeakScript calls the replica's ttwork_main (the basic scenario, 4
// leaks a call) from the lines marked LEAK-*. argv: LIBDIR [GO-FILE].
const pyLeakScript = `import ctypes, os, sys, threading, time
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libttwork.so"))
lib.ttwork_main.restype = ctypes.c_int
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]


def work():
    enc = [b"ttwork", b"--scenario", b"basic", b"--leak"]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    return lib.ttwork_main(len(enc), argv)  # LEAK-WORK


def deep(n):
    if n == 0:
        return work()  # LEAK-DEEP0
    return deep(n - 1)  # LEAK-DEEP


if len(sys.argv) > 2:
    print("ready", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.005)
work()  # LEAK-MAIN
t = threading.Thread(target=work)
t.start()
t.join()
deep(90)  # LEAK-DEEPMAIN
time.sleep(1)  # lives on a little, as programs do (docs/stacks.md: short processes)
`

// interpreters lists the CPython interpreters here: pyenv's and Debian's.
func interpreters(t *testing.T) []string {
	var out []string
	re := regexp.MustCompile(`/python\d\.\d+$`)
	pyenv, _ := filepath.Glob("/root/.pyenv/versions/*/bin/python*")
	for _, p := range pyenv {
		if re.MatchString(p) {
			out = append(out, p)
		}
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		out = append(out, "/usr/bin/python3")
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatal("no CPython interpreter found (/usr/bin/python3, pyenv)")
	}
	return out
}

// pythonVersion is the interpreter's major.minor.
func pythonVersion(t *testing.T, py string) (major, minor int) {
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])").Output()
	if err != nil {
		t.Fatalf("%s: %v", py, err)
	}
	fmt.Sscan(string(out), &major, &minor)
	return
}

func markerLines(script string) map[string]int {
	m := map[string]int{}
	for i, l := range strings.Split(script, "\n") {
		if j := strings.Index(l, "# LEAK-"); j >= 0 {
			m[strings.TrimSpace(l[j+2:])] = i + 1
		}
	}
	return m
}

func TestE2EPythonLines(t *testing.T) {
	bin, replica := setup(t)
	libdir := filepath.Join(replica, "gcc-O2")
	lines := markerLines(pyLeakScript)
	for _, py := range interpreters(t) {
		major, minor := pythonVersion(t, py)
		supported := major == 3 && minor >= 10 && minor <= 13
		modes := []string{"cmd", "pid"}
		if py == "/usr/bin/python3" {
			modes = append(modes, "all", "unit")
		}
		if !supported {
			modes = []string{"cmd"}
		}
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s_%s", strings.ReplaceAll(strings.TrimPrefix(py, "/"), "/", "_"), mode), func(t *testing.T) {
				if major < 3 {
					t.Skipf("%s is Python %d: the script needs Python 3", py, major)
				}
				tmp := t.TempDir()
				script := filepath.Join(tmp, "leaks.py")
				if err := os.WriteFile(script, []byte(pyLeakScript), 0o644); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(tmp, "out.ndjson")
				pid := runPyLeaks(t, bin, py, script, libdir, out, mode, supported)
				sum := lastSummary(t, out)
				p := procOf(t, sum, uint32(pid))
				checkPyLeaks(t, p, script, lines, supported, minor)
				checkSiteStream(t, out, p)
			})
		}
	}
}

// runPyLeaks runs the script under tttrace and returns its pid.
func runPyLeaks(t *testing.T, bin, py, script, libdir, out, mode string, supported bool) int {
	t.Helper()
	var stderr bytes.Buffer
	goFile := filepath.Join(filepath.Dir(out), "go")
	if mode == "cmd" {
		// The script allocates once tttrace has registered its
		// interpreter. A shared libpython (pyenv's) is registered when
		// ld.so maps it, through a record the consumer must read first:
		// on a loaded machine (make test runs packages side by side) a
		// script allocating at once can beat it (docs/stacks.md, Limit).
		var serr syncBuffer
		args := []string{"--json", "-o", out, "--lib", filepath.Join(libdir, "libtt_metal.so"), "--", py, script, libdir, goFile}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &serr, &serr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		waitFor(t, func() bool { return strings.Contains(serr.String(), "ready") }, "script ready")
		if supported {
			waitFor(t, func() bool { return strings.Contains(serr.String(), "runs CPython") },
				"tttrace registering the script's interpreter\n"+serr.String())
		}
		if err := os.WriteFile(goFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, serr.String())
		}
		stderr.WriteString(serr.String())
		sum := lastSummary(t, out)
		if len(sum.Processes) != 1 {
			t.Fatalf("%d processes in the summary, want 1:\n%s", len(sum.Processes), stderr.String())
		}
		return int(sum.Processes[0].Pid)
	}
	ready := filepath.Join(filepath.Dir(out), "ready")
	if mode == "all" {
		return runPyLeaksAll(t, []string{bin}, py, script, libdir, out, goFile, ready)
	}
	if mode == "unit" {
		// tttrace --all with only the capabilities the systemd unit
		// leaves it: Python lines must not vanish there.
		return runPyLeaksAll(t, append(unitCaps(t), bin), py, script, libdir, out, goFile, ready)
	}
	w := exec.Command(py, script, libdir, goFile)
	traceHeld(t, bin, w, goFile, []string{"--json", "-o", out}, &stderr, &stderr)
	return w.Process.Pid
}

// runPyLeaksAll: tttrace --all, already running, finds the script when it
// loads the library; the script allocates once tttrace said it probes it.
func runPyLeaksAll(t *testing.T, bin []string, py, script, libdir, out, goFile, ready string) int {
	t.Helper()
	var stderr syncBuffer
	tr := exec.Command(bin[0], append(bin[1:], "--all", "--json", "-o", out, "--ready-file", ready)...)
	tr.Stdout, tr.Stderr = &stderr, &stderr
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Process.Kill()
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	w := exec.Command(py, script, libdir, goFile)
	var wout syncBuffer
	w.Stdout, w.Stderr = &wout, &wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "script ready")
	said := fmt.Sprintf("pid %d runs CPython", w.Process.Pid)
	waitFor(t, func() bool { return strings.Contains(stderr.String(), said) }, "tttrace registering the script's interpreter")
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("script: %v\n%s", err, wout.String())
	}
	time.Sleep(200 * time.Millisecond)
	tr.Process.Signal(os.Interrupt)
	// Its library, which no process had mapped before, was probed only
	// after the script mapped it: the script waited, but tttrace cannot
	// know, and exits 11 (late_library) unless another test's process had
	// mapped the same file first.
	if err := tr.Wait(); err != nil && exitCode(err) != 11 {
		t.Fatalf("tttrace --all: %v\n%s", err, stderr.String())
	}
	return w.Process.Pid
}

func checkPyLeaks(t *testing.T, p *devices.ProcessSummary, script string, lines map[string]int, supported bool, minor int) {
	t.Helper()
	if len(p.Leaks) != 12 {
		t.Fatalf("%d leaks, want 12 (4 from each of 3 calls)", len(p.Leaks))
	}
	if p.LostStacks != 0 {
		t.Errorf("lost_stacks = %d", p.LostStacks)
	}
	if supported != (p.Python != nil && p.Python.Supported) {
		t.Errorf("python = %+v, supported should be %v", p.Python, supported)
	}
	if minor >= 7 && !supported && (p.Python == nil || p.Python.Error == "") {
		// 3.7 and later have _PyRuntime: tttrace knows it is a CPython
		// it does not support, and must say so.
		t.Errorf("python = %+v: an unsupported interpreter must be named, with why", p.Python)
	}
	sites := map[uint32]*devices.Site{}
	for i := range p.Sites {
		sites[p.Sites[i].Site] = &p.Sites[i]
	}
	at := func(f devices.PyFrame, fn, marker string) bool {
		return f.Function == fn && f.File == script && f.Line == lines[marker]
	}
	count := map[string]int{}
	for _, lk := range p.Leaks {
		s := sites[lk.Site]
		if s == nil {
			t.Errorf("leak %+v: no site", lk)
			continue
		}
		desc := describe(s)
		// Native: through the C entry point, from the interpreter.
		var entry, scen bool
		for _, f := range s.Native {
			entry = entry || f.Function == "ttwork_main"
			scen = scen || strings.Contains(f.Function, "scenario_basic")
		}
		if !entry || !scen {
			t.Errorf("leak seq %d: native stack not through scenario_basic and ttwork_main:\n%s", lk.Seq, desc)
		}
		if !supported {
			if len(s.Python) != 0 {
				t.Errorf("leak seq %d: Python frames from an unsupported interpreter:\n%s", lk.Seq, desc)
			}
			continue
		}
		py := s.Python
		if len(py) < 2 || !at(py[0], "work", "LEAK-WORK") {
			t.Errorf("leak seq %d: innermost Python frame is not work() at line %d:\n%s", lk.Seq, lines["LEAK-WORK"], desc)
			continue
		}
		thread := lk.Tid != p.Pid
		switch {
		case at(py[1], "<module>", "LEAK-MAIN") && len(py) == 2 && !s.Truncated && !thread:
			count["main"]++
		case (py[1].Function == "Thread.run" || (minor == 10 && py[1].Function == "run")) &&
			filepath.Base(py[1].File) == "threading.py" && thread && !s.Truncated:
			count["thread"]++
		case at(py[1], "deep", "LEAK-DEEP0") && !thread:
			// 93 frames: work, deep(0), 90 deep, <module>; the innermost 64 kept.
			ok := len(py) == 64 && s.Truncated
			for _, f := range py[2:] {
				ok = ok && at(f, "deep", "LEAK-DEEP")
			}
			if !ok {
				t.Errorf("leak seq %d: the recursion is not 62 frames of deep() at line %d, truncated:\n%s", lk.Seq, lines["LEAK-DEEP"], desc)
			}
			count["deep"]++
		default:
			t.Errorf("leak seq %d (tid %d): not called from a known line:\n%s", lk.Seq, lk.Tid, desc)
		}
	}
	if supported && (count["main"] != 4 || count["thread"] != 4 || count["deep"] != 4) {
		t.Errorf("leaks by caller: %v, want 4 each of main, thread, deep", count)
	}
}

// TestE2EDoctorPython: doctor says, for python3 on PATH, whether allocation
// sites get its Python lines, with the version the interpreter reports.
func TestE2EDoctorPython(t *testing.T) {
	bin, replica := setup(t)
	lib := filepath.Join(replica, "gcc-O2", "libtt_metal.so")
	for _, py := range interpreters(t) {
		major, minor := pythonVersion(t, py)
		if major < 3 {
			continue
		}
		t.Run(strings.ReplaceAll(strings.TrimPrefix(py, "/"), "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(py, filepath.Join(dir, "python3")); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "doctor", "--json", lib)
			cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("doctor: %v\n%s", err, out)
			}
			var rep struct {
				Python *struct {
					Version   string `json:"version"`
					Supported bool   `json:"supported"`
					Error     string `json:"error"`
				} `json:"python"`
			}
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatal(err)
			}
			supported := major == 3 && minor >= 10 && minor <= 13
			p := rep.Python
			switch {
			case minor < 7 && (p == nil || !p.Supported && p.Error != ""):
				// 3.6 and older have no _PyRuntime: at most "not a CPython
				// interpreter tttrace knows".
			case p == nil:
				t.Errorf("doctor says nothing of %s", py)
			case p.Supported != supported || !strings.HasPrefix(p.Version, fmt.Sprintf("%d.%d.", major, minor)):
				t.Errorf("doctor on %s (%d.%d): %+v", py, major, minor, *p)
			case !supported && p.Error == "":
				t.Errorf("doctor on %s: unsupported without a reason", py)
			}
		})
	}
}

// unitCaps is the command prefix that runs a command as root with the
// capability bounding set of contrib/systemd/tttrace.service.
func unitCaps(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "contrib", "systemd", "tttrace.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapabilityBoundingSet="); ok {
			set := "-all"
			for _, c := range strings.Fields(v) {
				set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
			}
			if _, err := exec.LookPath("setpriv"); err != nil {
				t.Skip("no setpriv")
			}
			return []string{"setpriv", "--bounding-set", set, "--"}
		}
	}
	t.Fatal("the unit has no CapabilityBoundingSet")
	return nil
}
