package probes

import (
	"bufio"
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tttrace/tttrace/probes/probestest"
	"github.com/tttrace/tttrace/probes/tables"
)

// A child forked by a registered interpreter is walked from its first
// instruction with a copy of its parent's registration (bpf/python.h,
// py_fork), its code generation dropped, before user space reads its fork
// record; the copy goes when the child ends. A child of a process not
// registered gets none.
func TestPythonFork(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 20, FollowChildren: true})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if err := tr.AttachProcessEvents(); err != nil {
		t.Fatal(err)
	}
	// The parent: a shell that, told to, forks a child that sleeps and
	// says its pid.
	start := func() (*exec.Cmd, *bufio.Reader, func()) {
		sh := exec.Command("sh", "-c", `read x; sleep 0.6 & echo $!; wait`)
		in, _ := sh.StdinPipe()
		out, _ := sh.StdoutPipe()
		if err := sh.Start(); err != nil {
			t.Fatal(err)
		}
		return sh, bufio.NewReader(out), func() { in.Write([]byte("go\n")) }
	}
	childOf := func(out *bufio.Reader) uint32 {
		line, err := out.ReadString('\n')
		pid, err2 := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || err2 != nil {
			t.Fatalf("child pid %q: %v %v", line, err, err2)
		}
		return uint32(pid)
	}

	var want tttracePyProc
	want.Runtime, want.Version, want.CodeGen = 0x7f00deadbeef, 0x30b07f0, 7
	value := unsafe.Slice((*byte)(unsafe.Pointer(&want)), unsafe.Sizeof(want))
	sh, out, fork := start()
	parent := uint32(sh.Process.Pid)
	if err := tr.AddPID(parent); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetPython(parent, value); err != nil {
		t.Fatal(err)
	}
	fork()
	child := childOf(out)
	got := make([]byte, len(value))
	if err := tr.objs.PyProcs.Lookup(child, got); err != nil {
		t.Fatalf("the child has no registration: %v", err)
	}
	want.CodeGen = 0
	if !bytes.Equal(got, value) {
		t.Errorf("the child's registration:\n%x\nwant its parent's without its code generation:\n%x", got, value)
	}
	if !tr.pids.Has(child, tables.PidPython) || !tr.Traced(child) {
		t.Error("the child is not flagged as traced and registered")
	}
	if err := sh.Wait(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); tr.Traced(child) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := tr.objs.PyProcs.Lookup(child, got); err == nil || tr.pids.Has(child, tables.PidPython) {
		t.Error("the child's copy outlived it")
	}

	// A parent without a registration: its child gets none.
	sh, out, fork = start()
	if err := tr.AddPID(uint32(sh.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	fork()
	child = childOf(out)
	if err := tr.objs.PyProcs.Lookup(child, got); err == nil || tr.pids.Has(child, tables.PidPython) || !tr.Traced(child) {
		t.Error("a child of an unregistered process was registered, or not traced")
	}
	_ = sh.Wait()
}
