package session

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes/probestest"
)

// TestCloserHoldsUntilReleased: the holder startCloser starts keeps the
// descriptors it was handed until release, and lets them go after it.
// The descriptor handed here is a pipe's write end: its read end sees EOF
// only once every copy is closed, the holder's too. A holder that ends at
// once (true(1)) fails the first read: the tracer's own references to the
// links would then be the last ones, and closing them would wait for the
// kernel's grace periods, one after the other.
func TestCloserHoldsUntilReleased(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	release, err := startCloser([]*os.File{w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	// Held: nothing to read, no EOF either.
	if err := r.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before release: read %d bytes, %v: the holder let the descriptor go", n, err)
	}
	release()
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); err != io.EOF {
		t.Fatalf("after release: read %d bytes, %v; want EOF (the holder ended)", n, err)
	}
}

// TestCloserIsACopy: the holder is a copy of this program (the holder
// name in its argv), which closes the links together, not cat(1), whose
// exit closes them one grace period after the other.
func TestCloserIsACopy(t *testing.T) {
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	release, err := startCloser([]*os.File{w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		found = append(found, strings.TrimRight(string(cmdline), "\x00"))
	}
	if !slices.Contains(found, holderName) {
		t.Fatalf("children of this process: %q; want one named %q (the holder)", found, holderName)
	}
}

// TestHolderClosesLinks: BPF links handed to the holder are gone once it
// is released, and only its BPF links are closed by closeBPFLinks.
func TestHolderClosesLinks(t *testing.T) {
	probestest.RequireRoot(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Kprobe, AttachType: ebpf.AttachTraceUprobeMulti, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	// A file nobody runs: its probes are installed in no process.
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "true")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	var ids []link.ID
	for i := range 25 {
		l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{uint64(0x1000 + 16*i)}})
		if err != nil {
			t.Fatal(err)
		}
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
		fd, err := unix.FcntlInt(uintptr(l.(interface{ FD() int }).FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, os.NewFile(uintptr(fd), "bpf-link"))
		l.Close()
	}
	release, err := startCloser(files)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		l, err := link.NewFromID(id)
		if err != nil {
			t.Fatalf("link %d gone before release: %v", id, err)
		}
		l.Close()
	}
	release()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			l, err := link.NewFromID(id)
			if err != nil {
				break
			}
			l.Close()
			if time.Now().After(deadline) {
				t.Fatalf("link %d still there 20 s after release", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
