package probes

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes/probestest"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/ttmetal"
)

// heirScript: a Python process that loads libttwork.so (argv[1]), waits
// for the file argv[2], forks a child and says its pid; the child waits
// for argv[3], runs the basic scenario (allocations), says "allocated" and
// waits for argv[4] before it exits. With argv[5] == "exec" the parent
// execs sleep right after the fork, else it waits for the child.
const heirScript = `import ctypes, os, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
def wait(f):
    while not os.path.exists(f):
        time.sleep(0.005)
print("ready", flush=True)
wait(sys.argv[2])
pid = os.fork()
if pid == 0:
    wait(sys.argv[3])
    args = [b"ttwork", b"--scenario", b"basic"]
    code = lib.ttwork_main(len(args), (ctypes.c_char_p * (len(args) + 1))(*args, None))
    print("allocated", flush=True)
    wait(sys.argv[4])
    os._exit(code)
print(pid, flush=True)
if sys.argv[5] == "exec":
    os.execv("/bin/sleep", ["sleep", "10"])
os.waitpid(pid, 0)
`

// A child forked by a traced process before its interpreter was
// registered takes its parent's registration at its first capture after
// it (bpf/pyheir.h): it is an heir from its fork, its allocations come
// with Python stacks once its parent is registered, and it then has its
// parent's entry without its code generation, no longer an heir. A child
// whose parent exec'ed after the fork runs another image than the one
// registered: it takes nothing, and stops being an heir.
func TestPythonHeir(t *testing.T) {
	probestest.RequireRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := probestest.Replica(t, "gcc-O2")
	lib, err := ttmetal.OpenLibrary(filepath.Join(dir, "libtt_metal.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	syms, err := ttmetal.ResolveSymbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := ttmetal.ResolveLayout(lib, syms, ttmetal.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := ttmetal.ChoosePlan(lib, syms, layout.Layout, ttmetal.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Load(Options{RingSize: 1 << 24, Stacks: true, FollowChildren: true})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if err := tr.AttachPlan(lib, syms, plan, layout.Layout); err != nil {
		t.Fatal(err)
	}
	if err := tr.AttachProcessEvents(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	script := filepath.Join(tmp, "heir.py")
	if err := os.WriteFile(script, []byte(heirScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var want tttracePyProc
	want.Runtime, want.Version, want.CodeGen = 0x7f00deadbeef, 0x30b07f0, 7
	value := unsafe.Slice((*byte)(unsafe.Pointer(&want)), unsafe.Sizeof(want))
	touch := func(f string) {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, mode := range []string{"stay", "exec"} {
		t.Run(mode, func(t *testing.T) {
			files := make([]string, 3)
			for i := range files {
				files[i] = filepath.Join(tmp, mode+strconv.Itoa(i))
			}
			cmd := exec.Command(py, append([]string{script, filepath.Join(dir, "libttwork.so")}, append(files, mode)...)...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			lines := bufio.NewReader(out)
			// expect reads the script's next line, or with want its lines up
			// to want (ttwork's own come before "allocated").
			expect := func(want string) string {
				t.Helper()
				for {
					line, err := lines.ReadString('\n')
					if err != nil {
						t.Fatalf("the script said %q (%v), want %q", line, err, want)
					}
					if line = strings.TrimSpace(line); want == "" || line == want {
						return line
					}
				}
			}
			expect("ready")
			parent := uint32(cmd.Process.Pid)
			if err := tr.AddPID(parent); err != nil {
				t.Fatal(err)
			}
			touch(files[0])
			n, err := strconv.Atoi(expect(""))
			if err != nil {
				t.Fatal(err)
			}
			child := uint32(n)
			got := make([]byte, len(value))
			if !tr.pids.Has(child, tables.PidHeir) || tr.pids.Has(child, tables.PidPython) || tr.objs.PyProcs.Lookup(child, got) == nil {
				t.Fatal("the child of an unregistered process is not an heir, or has a registration")
			}
			if mode == "exec" {
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if exe, _ := os.Readlink("/proc/" + strconv.Itoa(int(parent)) + "/exe"); strings.HasSuffix(exe, "/sleep") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the parent did not exec")
					}
				}
			}
			if err := tr.SetPython(parent, value); err != nil {
				t.Fatal(err)
			}
			touch(files[1])
			expect("allocated")
			allocs, pyStacks := heirRecords(t, tr, child)
			if allocs == 0 {
				t.Fatal("no allocation of the child was recorded")
			}
			err = tr.objs.PyProcs.Lookup(child, got)
			if mode == "exec" {
				if pyStacks != 0 || err == nil || tr.pids.Has(child, tables.PidPython|tables.PidHeir) {
					t.Errorf("a child whose parent exec'ed after the fork: %d Python stacks of %d allocations, registration error %v, heir %v; want none, and no heir",
						pyStacks, allocs, err, tr.pids.Has(child, tables.PidHeir))
				}
			} else {
				want.CodeGen = 0
				if pyStacks != allocs {
					t.Errorf("%d Python stacks for %d allocations of the heir", pyStacks, allocs)
				}
				if err != nil || !bytes.Equal(got, value) {
					t.Errorf("the heir's registration (%v):\n%x\nwant its parent's without its code generation:\n%x", err, got, value)
				}
				want.CodeGen = 7
				if !tr.pids.Has(child, tables.PidPython) || tr.pids.Has(child, tables.PidHeir) {
					t.Error("the heir is not flagged registered, or still flagged an heir")
				}
			}
			touch(files[2])
		})
	}
}

// heirRecords counts the allocations of pid in the ring, and the Python
// stacks that came with them.
func heirRecords(t *testing.T, tr *Tracer, pid uint32) (allocs, pyStacks int) {
	t.Helper()
	pidRecords(t, tr, pid, func(h *events.Header, _ []byte) {
		switch h.Kind {
		case events.KindAlloc:
			allocs++
		case events.KindPyStack:
			pyStacks++
		}
	})
	return allocs, pyStacks
}
