package pyframes

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// deallocScript overwrites its own PyCode_Type.tp_dealloc with an address
// in the middle of another function of the interpreter when told to
// "forge" (what a hostile user's process can do), says "ready ORIG FORGED",
// and puts the slot back before it exits (no code object is freed while it
// waits).
const deallocScript = `import ctypes, sys
slot = ctypes.c_void_p.from_address(id(type((lambda: 0).__code__)) + 48)
orig = slot.value
forged = ctypes.cast(ctypes.pythonapi.PyLong_FromLong, ctypes.c_void_p).value + 1
if sys.argv[1] == "forge":
    slot.value = forged
sys.stdout.write("ready %d %d\n" % (orig, forged))
sys.stdout.flush()
sys.stdin.readline()
slot.value = orig
`

// startDealloc runs deallocScript under py in mode and returns the
// process, the tp_dealloc it started with and the forged one.
func startDealloc(t *testing.T, py testInterp, mode string) (*Process, uint64, uint64) {
	t.Helper()
	cmd := exec.Command(py.path, "-c", deallocScript, mode)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var orig, forged uint64
	if _, perr := fmt.Sscanf(line, "ready %d %d\n", &orig, &forged); err != nil || perr != nil {
		t.Fatalf("python: %q, %v, %v", line, err, perr)
	}
	p, err := ForProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, orig, forged
}

// fileOffsetOf turns a link-time address of path into a file offset.
func fileOffsetOf(t *testing.T, path string, at uint64) uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, pr := range ef.Progs {
		if pr.Type == elf.PT_LOAD && at >= pr.Vaddr && at < pr.Vaddr+pr.Filesz {
			return at - pr.Vaddr + pr.Off
		}
	}
	t.Fatalf("%#x is not in %s", at, path)
	return 0
}

// TestCodeDealloc: CodeDealloc gives the file offset of code_dealloc,
// PyCode_Type's tp_dealloc: the process's own (read here from the
// process, unforged), and, where the interpreter's symbol table names
// code_dealloc, that symbol's. The file handed back is the very file the
// process maps.
func TestCodeDealloc(t *testing.T) {
	for _, py := range findInterpreters(t) {
		t.Run(py.version, func(t *testing.T) {
			p, orig, _ := startDealloc(t, py, "honest")
			f, off, err := p.CodeDealloc()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if want := fileOffsetOf(t, p.Interp.Path, orig-p.Bias); off != want {
				t.Errorf("the process's tp_dealloc is at file offset %#x, CodeDealloc says %#x", want, off)
			}
			if sym := symbolValue(t, p.Interp.Path, "code_dealloc"); sym != 0 {
				if want := fileOffsetOf(t, p.Interp.Path, sym); off != want {
					t.Errorf("code_dealloc at file offset %#x, CodeDealloc says %#x", want, off)
				}
			}
			var a, b syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &a); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Stat(p.Interp.Path, &b); err != nil {
				t.Fatal(err)
			}
			if a.Dev != b.Dev || a.Ino != b.Ino {
				t.Errorf("CodeDealloc opened %d/%d, the interpreter is %d/%d", a.Dev, a.Ino, b.Dev, b.Ino)
			}
		})
	}
}

// TestCodeDeallocForged: a process that points its PyCode_Type.tp_dealloc
// into the middle of another function never chooses where the probe goes
// (it would go there in every process running the interpreter): CodeDealloc
// refuses it, and never names the forged place.
func TestCodeDeallocForged(t *testing.T) {
	for _, py := range findInterpreters(t) {
		t.Run(py.version, func(t *testing.T) {
			p, _, forged := startDealloc(t, py, "forge")
			f, off, err := p.CodeDealloc()
			if err == nil {
				f.Close()
				t.Fatalf("CodeDealloc accepted a forged tp_dealloc: offset %#x (forged: %#x)", off, fileOffsetOf(t, p.Interp.Path, forged-p.Bias))
			}
			if !strings.Contains(err.Error(), "not its file's") {
				t.Errorf("refused for another reason than the forged pointer: %v", err)
			}
		})
	}
}

// symbolValue is the value of the function symbol name in path's .symtab,
// 0 when there is none.
func symbolValue(t *testing.T, path, name string) uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value
		}
	}
	return 0
}

// TestCodeDeallocFromFile: the file alone says where code objects are
// deallocated, and a file whose PyCode_Type names anything but a
// function's start is refused. Each interpreter's file is copied and its
// PyCode_Type.tp_dealloc moved one byte into the function (its relocation's
// addend in a position-independent file, the pointer's bytes in a
// fixed-address one), then stripped of its symbols.
func TestCodeDeallocFromFile(t *testing.T) {
	for _, py := range findInterpreters(t) {
		t.Run(py.version, func(t *testing.T) {
			path := runtimeFile(t, py.path)
			in, err := Detect(path)
			if err != nil || in.Err != nil {
				t.Fatalf("%s: %v %v", path, err, in.Err)
			}
			if in.codeDeallocErr != nil {
				t.Fatalf("%s: %v", path, in.codeDeallocErr)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			at, ok := slotBytes(t, path, in.CodeType+typeDealloc)
			if !ok {
				t.Fatalf("%s: no bytes for PyCode_Type.tp_dealloc", path)
			}
			if got := binary.LittleEndian.Uint64(data[at:]); got != in.codeDealloc {
				t.Fatalf("the file's tp_dealloc bytes say %#x, Detect %#x", got, in.codeDealloc)
			}
			binary.LittleEndian.PutUint64(data[at:], in.codeDealloc+1)
			moved := filepath.Join(t.TempDir(), filepath.Base(path))
			if err := os.WriteFile(moved, data, 0o755); err != nil {
				t.Fatal(err)
			}
			// With .symtab, code_dealloc's symbol disagrees; stripped, no
			// FDE or function symbol starts there.
			stripped := moved + ".stripped"
			if out, err := exec.Command("strip", "--strip-all", "-o", stripped, moved).CombinedOutput(); err != nil {
				t.Fatalf("strip: %v: %s", err, out)
			}
			for file, want := range map[string]string{moved: "not the file's code_dealloc", stripped: "not where a function starts"} {
				if file == moved && symbolValue(t, path, "code_dealloc") == 0 {
					want = "not where a function starts"
				}
				bad, err := Detect(file)
				if err != nil {
					t.Fatal(err)
				}
				if bad.codeDeallocErr == nil || !strings.Contains(bad.codeDeallocErr.Error(), want) {
					t.Errorf("%s: tp_dealloc moved into code_dealloc: %v, want %q", filepath.Base(file), bad.codeDeallocErr, want)
				}
			}
		})
	}
}

// slotBytes is where in path's bytes the pointer at link-time address at
// is given: the addend of its relative relocation, else the data there.
func slotBytes(t *testing.T, path string, at uint64) (int, bool) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if s := ef.Section(".rela.dyn"); s != nil {
		rela, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+24 <= len(rela); i += 24 {
			if binary.LittleEndian.Uint64(rela[i:]) == at && uint32(binary.LittleEndian.Uint64(rela[i+8:])) == 8 {
				return int(s.Offset) + i + 16, true
			}
		}
	}
	for _, pr := range ef.Progs {
		if pr.Type == elf.PT_LOAD && at >= pr.Vaddr && at+8 <= pr.Vaddr+pr.Filesz {
			return int(at - pr.Vaddr + pr.Off), true
		}
	}
	return 0, false
}
