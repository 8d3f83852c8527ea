package pyframes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// targetLibrary builds targetC into a shared object in a temporary
// directory and returns its path.
func targetLibrary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	so := filepath.Join(dir, "libtarget.so")
	src := filepath.Join(dir, "target.c")
	if err := os.WriteFile(src, []byte(targetC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

// probeTarget loads the test program with opts and puts its uprobe on
// probe_target in so; rd reads its ring. done closes all of it.
func probeTarget(t *testing.T, so string, opts pyprobe.Options) (objs *pyprobe.Objects, rd *ringbuf.Reader, done func()) {
	t.Helper()
	objs, err := pyprobe.LoadWith(opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	ex, err := link.OpenExecutable(so)
	if err != nil {
		objs.Close()
		t.Fatal(err)
	}
	l, err := ex.Uprobe("probe_target", objs.Program(), nil)
	if err != nil {
		objs.Close()
		t.Fatal(err)
	}
	if rd, err = ringbuf.NewReader(objs.Records()); err != nil {
		l.Close()
		objs.Close()
		t.Fatal(err)
	}
	return objs, rd, func() { rd.Close(); l.Close(); objs.Close() }
}

// startScript runs script with args under py, waits for its "ready" line
// and finds its interpreter (ForProcess). The process is killed, and the
// Process closed, when the test ends.
func startScript(t *testing.T, py testInterp, script string, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, lines *bufio.Reader, proc *Process) {
	t.Helper()
	cmd = exec.Command(py.path, append([]string{script}, args...)...)
	stdin, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	lines = bufio.NewReader(stdout)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if line, err := lines.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("script: %q, %v", line, err)
	}
	proc, err := ForProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Close() })
	return cmd, stdin, lines, proc
}

// testScript is testdata/pyframes/name.
func testScript(name string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "../testdata/pyframes", name)
}

type testInterp struct {
	path    string // the executable
	version string // major.minor.micro, from the interpreter itself
	minor   int
}

// allInterpreters lists every CPython 3 the machine has: the pyenv
// versions and the system's python3, with the version each reports.
func allInterpreters(t *testing.T) []testInterp {
	t.Helper()
	paths, _ := filepath.Glob("/root/.pyenv/versions/*/bin/python3")
	paths = append(paths, "/usr/bin/python3")
	var out []testInterp
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		v, err := exec.Command(real, "-c", "import sys;print('%d.%d.%d' % sys.version_info[:3])").Output()
		if err != nil {
			continue
		}
		ti := testInterp{path: real, version: strings.TrimSpace(string(v))}
		fmt.Sscanf(ti.version, "3.%d", &ti.minor)
		out = append(out, ti)
	}
	return out
}

// findInterpreters lists the interpreters of the supported versions
// (3.10 to 3.13); the test fails when the machine has none.
func findInterpreters(t *testing.T) []testInterp {
	t.Helper()
	var out []testInterp
	for _, ti := range allInterpreters(t) {
		if ti.minor >= 10 && ti.minor <= 13 {
			out = append(out, ti)
		}
	}
	if len(out) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("no CPython 3.10-3.13 found")
		}
		t.Skip("no CPython 3.10-3.13 found")
	}
	return out
}

// runtimeFile is the file of an interpreter that defines _PyRuntime: the
// executable, or the libpython it links.
func runtimeFile(t *testing.T, exe string) string {
	t.Helper()
	if _, err := Detect(exe); err == nil {
		return exe
	}
	out, err := exec.Command("ldd", exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && strings.HasPrefix(f[0], "libpython3") {
			return f[2]
		}
	}
	t.Fatalf("%s: no _PyRuntime in it or a libpython it links", exe)
	return ""
}

// probeRecords sorts the records of the test program (pyprobe, the records
// of bpf/wire.h) of process pid: its code records, and its stacks by the
// tag of the call (the records' seq).
type probeRecords struct {
	pid    uint32
	codes  []events.PyCode
	stacks map[int64]RawStack
	tids   map[int64]uint32
}

func newProbeRecords(pid int) *probeRecords {
	return &probeRecords{pid: uint32(pid), stacks: map[int64]RawStack{}, tids: map[int64]uint32{}}
}

func (r *probeRecords) add(t testing.TB, b []byte) {
	t.Helper()
	h, err := events.Peek(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Pid != r.pid {
		return
	}
	switch h.Kind {
	case events.KindPyCode:
		w, err := events.DecodePyCode(b)
		if err != nil {
			t.Fatal(err)
		}
		r.codes = append(r.codes, w.Code)
	case events.KindPyStack:
		w, err := events.DecodePyStack(b)
		if err != nil {
			t.Fatal(err)
		}
		r.stacks[int64(h.Seq)] = NewRawStack(&w.Stack)
		r.tids[int64(h.Seq)] = h.Tid
	default:
		t.Fatalf("record of kind %s", h.Kind)
	}
}

// runCalls registers proc (its script started by startScript, pid) with
// the test program, tells the script to go, and reads the program's
// records until calls stacks of pid are in, then the script's "done" line.
// The registration goes with the test.
func runCalls(t *testing.T, objs *pyprobe.Objects, rd *ringbuf.Reader, proc *Process, pid int, stdin io.Writer, lines *bufio.Reader, calls int) *probeRecords {
	t.Helper()
	val, err := proc.ProcValue()
	if err != nil {
		t.Fatal(err)
	}
	key := uint32(pid)
	if err := objs.Procs().Put(&key, val); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Procs().Delete(&key) })
	fmt.Fprintln(stdin, "go")
	recs := newProbeRecords(pid)
	deadline := time.Now().Add(30 * time.Second)
	for len(recs.stacks) < calls {
		rd.SetDeadline(deadline)
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("only %d of %d calls seen", len(recs.stacks), calls)
		}
		if err != nil {
			t.Fatal(err)
		}
		recs.add(t, rec.RawSample)
	}
	if line, err := lines.ReadString('\n'); err != nil || line != "done\n" {
		t.Fatalf("script: %q, %v", line, err)
	}
	return recs
}
