package probes

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes/probestest"
	"github.com/tttrace/tttrace/ttmetal"
)

// opsLibSrc is a library of many op functions (op_gen_N, as a TT-NN
// library has thousands) and a few whose calls make the frames the
// scenarios below check. -fno-inline keeps every call a call; op_tail_top
// tail-calls op_tail_dev (a device op's launch) at -O2.
const opsLibSrc = `
#include <setjmp.h>
#define OP __attribute__((noinline, visibility("default")))
OP int op_leaf(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
OP int op_outer(int x) { int a = op_leaf(x); __asm__ volatile("" ::: "memory"); int b = op_leaf(a); __asm__ volatile("" ::: "memory"); return b + 1; }
OP int plain(int x) { int a = op_leaf(x); __asm__ volatile("" ::: "memory"); return a + 1; }
OP void op_jump(jmp_buf *env) { op_leaf(1); longjmp(*env, 1); }
OP int op_tail_dev(int x) { __asm__ volatile("" ::: "memory"); return x * 3; }
OP int op_tail_top(int x) { return op_tail_dev(x + 1); }
`

// opsProgSrc runs the scenarios, each op_enter's expected frame count in
// a comment (the test's want list follows the same order).
const opsProgSrc = `
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
int op_leaf(int), op_outer(int), plain(int), op_tail_top(int), op_gen_1234(int);
void op_jump(jmp_buf *);
static void *thread(void *arg) { op_outer(1); return arg; }
int main(void) {
	static jmp_buf env;
	volatile int s = 0;
	s += op_outer(1);        /* outer 1, leaf 2, leaf 2 */
	s += op_leaf(2);         /* leaf 1: outer returned, its slot holds this call's return */
	s += plain(3);           /* leaf 1: the slot of the leaf before holds plain's return */
	if (!setjmp(env))
		op_jump(&env);   /* jump 1, leaf 2 */
	s += op_leaf(4);         /* leaf 1: jump was left by longjmp */
	s += op_tail_top(5);     /* tail_top 1, tail_dev 2 (a tail call nests) */
	s += op_tail_top(6);     /* tail_top 1, tail_dev 2 */
	s += op_gen_1234(7);     /* gen_1234 1 */
	pthread_t t;
	pthread_create(&t, 0, thread, 0);
	pthread_join(t, 0);      /* on the thread: outer 1, leaf 2, leaf 2 */
	printf("%d\n", s);
	return 0;
}
`

// opsWant: the op_enter records of opsProgSrc in order: function, frames.
var opsWant = []struct {
	fn     string
	frames uint8
}{
	{"op_outer", 1}, {"op_leaf", 2}, {"op_leaf", 2},
	{"op_leaf", 1},
	{"op_leaf", 1},
	{"op_jump", 1}, {"op_leaf", 2},
	{"op_leaf", 1},
	{"op_tail_top", 1}, {"op_tail_dev", 2},
	{"op_tail_top", 1}, {"op_tail_dev", 2},
	{"op_gen_1234", 1},
	{"op_outer", 1}, {"op_leaf", 2}, {"op_leaf", 2},
}

const opsGenerated = 4000

// buildOpsTarget compiles the op library (with opsGenerated more op
// functions) and the program calling it into dir.
func buildOpsTarget(t *testing.T, dir string) (lib, prog string) {
	var src strings.Builder
	src.WriteString(opsLibSrc)
	for i := range opsGenerated {
		fmt.Fprintf(&src, "OP int op_gen_%d(int x) { __asm__ volatile(\"\" ::: \"memory\"); return x + %d; }\n", i, i)
	}
	lib, prog = filepath.Join(dir, "libops.so"), filepath.Join(dir, "opsprog")
	for _, c := range []struct {
		args []string
		src  string
	}{
		{[]string{"-O2", "-fPIC", "-shared", "-fno-inline", "-o", lib, "-x", "c", "-"}, src.String()},
		{[]string{"-O2", "-o", prog, "-x", "c", "-", "-L" + dir, "-lops", "-Wl,-rpath," + dir, "-pthread"}, opsProgSrc},
	} {
		cmd := exec.Command("cc", c.args...)
		cmd.Stdin = strings.NewReader(c.src)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", c.args, err, out)
		}
	}
	return lib, prog
}

// opPointsFromSymbols is the op table of the test library, as nm lists
// it: every op_* function, op_tail_dev a device op's launch; ids from 1
// in symbol order.
func opPointsFromSymbols(t *testing.T, lib string) (points []OpPoint, names map[uint32]string) {
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	names = map[uint32]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || !strings.HasPrefix(s.Name, "op_") {
			continue
		}
		var off uint64
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Memsz {
				off = s.Value - p.Vaddr + p.Off
			}
		}
		id := uint32(len(points) + 1)
		points = append(points, OpPoint{Addr: s.Value, Offset: off, ID: id, Device: s.Name == "op_tail_dev"})
		names[id] = s.Name
	}
	return points, names
}

// TestOpFrames attaches the op probes of a library of thousands of op
// functions in one link and runs calls whose frames the BPF side must
// count: nested, sibling, a non-op function calling an op where an op had
// returned at the same depth, a frame left by longjmp (as by a C++
// exception), a top-level op tail-calling its device op's launch, and a
// second thread. (The pure stack-pointer rule fails the third and later:
// a returned frame whose slot was reused stays live.)
func TestOpFrames(t *testing.T) {
	probestest.RequireRoot(t)
	dir := t.TempDir()
	libPath, prog := buildOpsTarget(t, dir)
	points, names := opPointsFromSymbols(t, libPath)
	if len(points) < opsGenerated {
		t.Fatalf("%d op functions found", len(points))
	}
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			points := points
			if single {
				// Classic uprobes: one link per function, ~2 ms each to
				// attach and far more to close: the scenario's functions.
				var few []OpPoint
				for _, p := range points {
					if !strings.HasPrefix(names[p.ID], "op_gen_") || names[p.ID] == "op_gen_1234" {
						few = append(few, p)
					}
				}
				points = few
			}
			tr, err := Load(Options{RingSize: 1 << 20, AllProcesses: true, Ops: true, SingleUprobes: single})
			if err != nil {
				t.Fatalf("load: %+v", err)
			}
			defer tr.Close()
			lib, err := ttmetal.OpenLibrary(libPath)
			if err != nil {
				t.Fatal(err)
			}
			defer lib.Close()
			start := time.Now()
			res, err := tr.AttachOps(lib, points)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d op functions attached in %v (uprobe_multi: %v)", res.Probed, took, tr.UsesUprobeMulti())
			if res.Probed != len(points) || len(res.Unprobeable) != 0 || !single && res.Probed < opsGenerated {
				t.Fatalf("attached %+v, want all %d", res, len(points))
			}
			if again, err := tr.AttachOps(lib, points); err != nil || again.Probed != 0 {
				t.Errorf("attaching the same file again: %+v, %v; want nothing done", again, err)
			}
			cmd := exec.Command(prog)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", prog, err, out)
			}
			pid := uint32(cmd.Process.Pid)
			var got []string
			tids := map[uint32]bool{}
			rd := tr.Reader()
			var buf []byte
			for deadline := time.Now().Add(5 * time.Second); len(got) < len(opsWant) && time.Now().Before(deadline); {
				rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
				rec, err := rd.Read(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				buf = rec
				w, err := events.As[events.OpEnterWire](rec)
				if err != nil || w.Hdr.Pid != pid {
					continue
				}
				if w.Device != 0 != (names[w.Op] == "op_tail_dev") || w.Flags != 0 || w.Sp == 0 || w.Ret == 0 {
					t.Errorf("record %+v", *w)
				}
				tids[w.Hdr.Tid] = true
				got = append(got, fmt.Sprintf("%s %d", names[w.Op], w.Hdr.OpFrames))
			}
			var want []string
			for _, w := range opsWant {
				want = append(want, fmt.Sprintf("%s %d", w.fn, w.frames))
			}
			if strings.Join(got, ", ") != strings.Join(want, ", ") {
				t.Errorf("op entries and their frames:\n got %s\nwant %s", strings.Join(got, ", "), strings.Join(want, ", "))
			}
			if len(tids) != 2 {
				t.Errorf("op entries on %d threads, want 2", len(tids))
			}
		})
	}
}
