package pyframes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
)

// relocScript puts in its own PyCode_Type.tp_dealloc what the slot holds
// before the dynamic loader relocates the interpreter (0, or the
// link-time address it is given), each in turn when told, then the real
// pointer back: "state VALUE" after each change.
const relocScript = `import ctypes, sys
slot = ctypes.c_void_p.from_address(id(type((lambda: 0).__code__)) + 48)
orig = slot.value
for v in sys.argv[1:]:
    slot.value = int(v) or None
    sys.stdout.write("state %d\n" % (slot.value or 0))
    sys.stdout.flush()
    sys.stdin.readline()
slot.value = orig
sys.stdout.write("state %d\n" % orig)
sys.stdout.flush()
sys.stdin.readline()
`

// TestCodeDeallocNotRelocated: a process registered as it starts, its
// interpreter mapped but not yet relocated, reads 0 (or, where the file is
// not at its link-time address, that address) in PyCode_Type.tp_dealloc:
// CodeDealloc says ErrNotRelocated, which the session asks again (it used
// to refuse the slot as forged, and the process kept no code generation
// for its whole run: no known Python stack), and once the slot holds the
// real pointer it gives code_dealloc.
func TestCodeDeallocNotRelocated(t *testing.T) {
	for _, py := range findInterpreters(t) {
		t.Run(py.version, func(t *testing.T) {
			in, err := Detect(runtimeFile(t, py.path))
			if err != nil || in.Err != nil || in.codeDeallocErr != nil {
				t.Skipf("no code_dealloc in %s: %v %v %v", py.path, err, in.Err, in.codeDeallocErr)
			}
			cmd := exec.Command(py.path, "-c", relocScript, "0", fmt.Sprint(in.codeDealloc))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stdin.Close(); cmd.Wait() })
			r := bufio.NewReader(stdout)
			state := func() uint64 {
				t.Helper()
				var v uint64
				line, err := r.ReadString('\n')
				if _, perr := fmt.Sscanf(line, "state %d\n", &v); err != nil || perr != nil {
					t.Fatalf("python: %q, %v, %v", line, err, perr)
				}
				return v
			}
			if v := state(); v != 0 {
				t.Fatalf("the slot holds %#x, want 0", v)
			}
			p, err := ForProcess(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, _, err := p.CodeDealloc(); !errors.Is(err, ErrNotRelocated) {
				t.Errorf("tp_dealloc 0: %v, want ErrNotRelocated", err)
			}
			io.WriteString(stdin, "\n")
			v := state()
			_, _, err = p.CodeDealloc()
			if p.Bias != 0 && !errors.Is(err, ErrNotRelocated) {
				t.Errorf("tp_dealloc %#x (its link-time address, the file at %#x): %v, want ErrNotRelocated", v, p.Bias, err)
			}
			if p.Bias == 0 && err != nil {
				t.Errorf("tp_dealloc %#x in a file at its link-time address: %v", v, err)
			}
			io.WriteString(stdin, "\n")
			state()
			f, _, err := p.CodeDealloc()
			if err != nil {
				t.Fatalf("relocated: %v", err)
			}
			f.Close()
		})
	}
}
