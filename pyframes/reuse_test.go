package pyframes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// reuseCalls is how many functions testdata/pyframes/reuse.py makes and
// calls, each at the address of the one before, nearly always.
const reuseCalls = 20

// TestCaptureCodeReuse: with the code objects' deallocation probed, a code
// object's identity is read once per generation (bpf/python.h, py_codes),
// yet a code object made at the address of a freed one is described anew:
// every captured stack, symbolized from the code records alone (the
// process gone), is the stack the script saw. Without the probe, the same
// run under a generation gives wrong lines: what the probe is for, and
// proof that the script does reuse addresses.
func TestCaptureCodeReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root for BPF")
		}
		t.Skip("needs root for BPF")
	}
	interps := findInterpreters(t)
	so := targetLibrary(t)
	script := testScript("reuse.py")
	for _, py := range interps {
		t.Run(py.version, func(t *testing.T) {
			wrong := reuseOne(t, py, script, so, true)
			if wrong != 0 {
				t.Errorf("%d of %d stacks wrong with the deallocation probed", wrong, reuseCalls)
			}
			if wrong = reuseOne(t, py, script, so, false); wrong == 0 {
				t.Errorf("no stack wrong without the deallocation probed: the script did not make a code object where a freed one was")
			}
		})
	}
}

// reuseOne runs reuse.py under the test program with a code generation,
// the deallocation of code objects probed or not, and says how many of its
// stacks symbolize to another than the script's.
func reuseOne(t *testing.T, py testInterp, script, so string, probed bool) int {
	objs, rd, done := probeTarget(t, so, pyprobe.Options{})
	defer done()

	out := filepath.Join(t.TempDir(), "reuse.json")
	cmd, stdin, lines, proc := startScript(t, py, script, so, out, strconv.Itoa(reuseCalls))
	pid := cmd.Process.Pid
	if probed {
		file, off, err := proc.CodeDealloc()
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", file.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		dl, err := ex.Uprobe("", objs.CodeDealloc(), &link.UprobeOptions{Address: off, PID: pid})
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
	}
	proc.CodeGen = 1
	recs := runCalls(t, objs, rd, proc, pid, stdin, lines, reuseCalls)
	var got struct {
		Truth map[string][][3]any
		IDs   map[string]uint64
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "exit")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v", err)
	}
	for i := range recs.codes {
		if err := proc.AddCode(&recs.codes[i]); err != nil {
			t.Errorf("code record: %v", err)
		}
	}
	reused := 0
	for tag := 2; tag <= reuseCalls; tag++ {
		if got.IDs[strconv.Itoa(tag)] == got.IDs[strconv.Itoa(tag-1)] {
			reused++
		}
	}
	wrong := 0
	for tag := int64(1); tag <= reuseCalls; tag++ {
		want := got.Truth[strconv.FormatInt(tag, 10)]
		s := proc.Symbolize(recs.stacks[tag])
		ok := s.Err == nil && len(s.Frames) == len(want)
		for i := 0; ok && i < len(want); i++ {
			f := s.Frames[i]
			ok = f.File == want[i][0].(string) && f.Function == want[i][1].(string) && float64(f.Line) == want[i][2].(float64)
		}
		if !ok {
			wrong++
			if probed {
				t.Errorf("call %d: %+v (err %v), want %v", tag, s.Frames, s.Err, want)
			}
		}
	}
	t.Logf("probed %v: %d of %d functions at the address of the one before, %d code records, %d stacks wrong", probed, reused, reuseCalls-1, len(recs.codes), wrong)
	return wrong
}
