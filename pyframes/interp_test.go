package pyframes

import (
	"debug/elf"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestDetect detects every interpreter of the machine: 3.10-3.13 are
// supported with offsets equal to their DWARF where they have some (3.13:
// _Py_DebugOffsets read against DWARF), older ones are refused with a
// reason, and a file that is no interpreter is told apart.
func TestDetect(t *testing.T) {
	seen := 0
	for _, py := range allInterpreters(t) {
		file := py.path
		if _, err := Detect(file); errors.Is(err, ErrNotPython) {
			file = runtimeFile(t, py.path)
		}
		in, err := Detect(file)
		if py.minor < 10 && errors.Is(err, ErrNotPython) {
			t.Logf("%s: refused: %v", py.version, err) // before 3.7: no _PyRuntime
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if in.Version() != py.version {
			t.Errorf("%s: version %s, the interpreter says %s", file, in.Version(), py.version)
		}
		if py.minor < 10 {
			if in.Err == nil {
				t.Errorf("%s (%s) is reported supported", file, py.version)
			}
			t.Logf("%s: unsupported: %v", py.version, in.Err)
			continue
		}
		if in.Err != nil {
			t.Errorf("%s (%s): %v", file, py.version, in.Err)
			continue
		}
		seen++
		t.Logf("%s %s: offsets from %s", file, py.version, in.Source)
		// The evaluation loop, where native stacks of Python threads end
		// (EvalFrame): where nm(1) puts _PyEval_EvalFrameDefault.
		if lo, hi := nmFunc(t, file, "_PyEval_EvalFrameDefault"); in.evalLo != lo || in.evalHi != hi || lo == 0 {
			t.Errorf("%s: _PyEval_EvalFrameDefault at [%#x, %#x), nm says [%#x, %#x)", file, in.evalLo, in.evalHi, lo, hi)
		}
		// The BPF side reads a frame's fields in one window and hashes
		// 32 bytes holding the code object's three pointers.
		o := &in.Offsets
		if frameWindow(o) < 0 {
			t.Errorf("%s: frame fields do not fit one window", file)
		}
		if start := codeIDStart(o); min(o.CodeFilename, o.nameOffset(), o.CodeLinetable) < start ||
			max(o.CodeFilename, o.nameOffset(), o.CodeLinetable)+8 > start+32 {
			t.Errorf("%s: identity window at %d misses a pointer", file, start)
		}
		ef, err := elf.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		dw, err := offsetsFromDWARF(ef, py.minor, in.Offsets)
		ef.Close()
		if err != nil {
			t.Errorf("%s: %v", file, err)
		} else if dw == nil {
			t.Logf("%s: no DWARF to compare with", file)
		} else if d := diffOffsets(in.Offsets, *dw); d != "" {
			t.Errorf("%s: offsets differ from DWARF: %s", file, d)
		}
	}
	if seen == 0 {
		t.Skip("no CPython 3.10-3.13")
	}
	if _, err := Detect("/bin/true"); !errors.Is(err, ErrNotPython) {
		t.Errorf("/bin/true: %v, want ErrNotPython", err)
	}
}

// nmFunc is where nm(1) puts function name in file (its dynamic symbols,
// then its own): [lo, hi), or 0, 0.
func nmFunc(t *testing.T, file, name string) (lo, hi uint64) {
	t.Helper()
	for _, args := range [][]string{{"-D", "-S", "--defined-only", file}, {"-S", "--defined-only", file}} {
		out, err := exec.Command("nm", args...).Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 4 && f[3] == name && (f[2] == "T" || f[2] == "t") {
				a, err1 := strconv.ParseUint(f[0], 16, 64)
				n, err2 := strconv.ParseUint(f[1], 16, 64)
				if err1 == nil && err2 == nil {
					return a, a + n
				}
			}
		}
	}
	return 0, 0
}
