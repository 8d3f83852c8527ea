package pyframes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// targetC is the probed library of the tests: probe_target is what the
// uprobe is on; call_back lets C call Python back.
const targetC = `__attribute__((noinline)) void probe_target(long tag) { __asm__ volatile("" ::: "memory"); }
void call_back(void (*cb)(long), long tag) { cb(tag); }
`

// scriptCalls is how many calls testdata/pyframes/stacks.py makes.
const scriptCalls = 10

// TestCapture runs bpf/python.h for real: a uprobe on a C function that
// every interpreter found calls through ctypes from known places (the main
// thread, a threading.Thread, a 90-deep recursion, a method through PyDLL,
// a 20-deep recursion, module level, a key function sorted() calls, a
// ctypes callback called from C, a generator, a coroutine). Each captured stack, symbolized, must
// be exactly the stack the script saw itself (file, function, line),
// innermost first, cut at MaxFrames with the truncated flag only when
// deeper.
func TestCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF")
	}
	interps := findInterpreters(t)
	so := targetLibrary(t)
	objs, rd, done := probeTarget(t, so, pyprobe.Options{})
	defer done()
	script := testScript("stacks.py")
	for _, py := range interps {
		t.Run(py.version, func(t *testing.T) {
			captureOne(t, py, script, so, objs, rd)
		})
	}
}

func captureOne(t *testing.T, py testInterp, script, so string, objs *pyprobe.Objects, rd *ringbuf.Reader) {
	truthFile := filepath.Join(t.TempDir(), "truth.json")
	cmd, stdin, out, proc := startScript(t, py, script, so, truthFile)
	pid := cmd.Process.Pid
	t.Logf("%s: %s, offsets from %s", proc.Interp.Path, proc.Interp.Version(), proc.Interp.Source)
	recs := runCalls(t, objs, rd, proc, pid, stdin, out, scriptCalls)
	stacks, tids := recs.stacks, recs.tids
	var truth map[string][][3]any
	b, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	if tids[2] == uint32(pid) || tids[1] != uint32(pid) {
		t.Errorf("tids: main-thread call on %d, thread call on %d (pid %d)", tids[1], tids[2], pid)
	}

	// While the process runs, with no code records: code objects are read
	// from its memory.
	live, err := ForProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	compareStacks(t, "read live", live, stacks, truth)

	// Once it has exited: only what was captured at event time is left.
	fmt.Fprintln(stdin, "exit")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("script: %v", err)
	}
	for i := range recs.codes {
		if err := proc.AddCode(&recs.codes[i]); err != nil {
			t.Errorf("code record: %v", err)
		}
	}
	t.Logf("%d code records", len(recs.codes))
	compareStacks(t, "after exit", proc, stacks, truth)
}

func compareStacks(t *testing.T, mode string, proc *Process, stacks map[int64]RawStack, truth map[string][][3]any) {
	for tag := int64(1); tag <= scriptCalls; tag++ {
		want := truth[fmt.Sprint(tag)]
		s := proc.Symbolize(stacks[tag])
		if s.Err != nil {
			t.Errorf("%s: call %d: %v", mode, tag, s.Err)
		}
		n := min(len(want), MaxFrames)
		if wantCut := len(want) > MaxFrames; s.Truncated != wantCut {
			t.Errorf("%s: call %d: truncated %v with %d frames in truth", mode, tag, s.Truncated, len(want))
		}
		if len(s.Frames) != n {
			t.Errorf("%s: call %d: %d frames, want %d", mode, tag, len(s.Frames), n)
		}
		for i := 0; i < n && i < len(s.Frames); i++ {
			w := want[i]
			f := s.Frames[i]
			if f.File != w[0].(string) || f.Function != w[1].(string) || float64(f.Line) != w[2].(float64) {
				t.Errorf("%s: call %d frame %d: %s %s:%d, want %s %s:%v", mode, tag, i, f.Function, f.File, f.Line, w[1], w[0], w[2])
			}
		}
		if len(s.Frames) > 0 {
			t.Logf("%s: call %d: %d frames (truncated %v), innermost %s %s:%d", mode, tag, len(s.Frames), s.Truncated, s.Frames[0].Function, filepath.Base(s.Frames[0].File), s.Frames[0].Line)
		}
	}
}
