package pyframes

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// The depths testdata/pyframes/copies.py calls probe_target from: the
// main thread's frames from a few hundred bytes to a few KiB of its data
// stack, all in its first chunk, whose hint (py_thread.copy_lo) the copy
// of each capture after the first starts from.
const copiesLo, copiesHi = 4, 40

// TestCaptureCopies: of a thread's captures, only the first may copy its
// data stack from memory that is not all mapped (a read that faults and is
// made again, ~1 µs here); the others start from its last walk's hint, its
// outermost frame's line, never below that line's page. A thread's first
// chunk is a mapping of its own whose frames start a few bytes into its
// first page, and the page below it is often not mapped: copies started
// up to 63 bytes below the hint, and where that crossed into such a page
// every capture of the thread paid the fault (docs/python.md): 30 of 72
// with CPython 3.12 and 3.13 here in two runs of three. Each stack
// must still be whole: one frame more per depth, the same at both calls
// of a depth, no flag.
func TestCaptureCopies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF")
	}
	interps := findInterpreters(t)
	so := targetLibrary(t)
	objs, rd, done := probeTarget(t, so, pyprobe.Options{NoCodes: true})
	defer done()
	script := testScript("copies.py")
	calls := 2 * (copiesHi - copiesLo)
	for _, py := range interps {
		t.Run(py.version, func(t *testing.T) {
			before, err := objs.CopyMissed()
			if err != nil {
				t.Fatal(err)
			}
			cmd, stdin, out, proc := startScript(t, py, script, so, strconv.Itoa(copiesLo), strconv.Itoa(copiesHi))
			recs := runCalls(t, objs, rd, proc, cmd.Process.Pid, stdin, out, calls)
			fmt.Fprintln(stdin, "exit")
			_ = cmd.Wait()
			after, err := objs.CopyMissed()
			if err != nil {
				t.Fatal(err)
			}
			// 3.10 has no data stack: its frames are heap objects, and
			// what lies below one is the allocator's business.
			if missed := after - before; missed > 1 && py.minor >= 11 {
				t.Errorf("%d of %d captures copied the data stack from memory not all mapped; only a thread's first may", missed, calls)
			}
			base := -1
			for i := 0; i < copiesHi-copiesLo; i++ {
				a, b := recs.stacks[int64(2*i+1)], recs.stacks[int64(2*i+2)]
				if a.Flags != 0 || b.Flags != 0 {
					t.Errorf("depth %d: flags %#x and %#x", copiesLo+i, a.Flags, b.Flags)
				}
				if len(a.Frames) != len(b.Frames) {
					t.Errorf("depth %d: %d and %d frames", copiesLo+i, len(a.Frames), len(b.Frames))
				}
				if base < 0 {
					base = len(a.Frames) - i
				}
				if len(a.Frames) != base+i {
					t.Errorf("depth %d: %d frames, want %d", copiesLo+i, len(a.Frames), base+i)
				}
			}
			t.Logf("%d calls, %d frames at depth %d, %d first copies not all mapped", calls, base, copiesLo, after-before)
		})
	}
}
