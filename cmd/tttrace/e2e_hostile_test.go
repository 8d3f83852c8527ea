package main

// A local user against the root service (issue 23): a process maps
// crafted files named like shared objects while `tttrace --all --listen`
// runs. The service must refuse them, keep tracing a legitimate workload
// exactly, and answer /metrics. And `tttrace -p` of a process whose
// working directory holds a FIFO named like the library must not hang.

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/internal/crafted"
)

// hostileFiles writes issue 23's crafted shared objects into dir, each
// name suffixed with tag, and returns their paths.
func hostileFiles(t *testing.T, dir, tag string) []string {
	t.Helper()
	// A wanted TT-Metal name repeated without NULs, every repetition the
	// name of a symbol: each name runs on for tens of KB.
	const name = "_ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE"
	strs := "\x00"
	for r := 0; r < 8; r++ {
		strs += strings.Repeat(name, 1000) + "\x00"
	}
	syms := make([]byte, 24)
	for i := 1; i < len(strs); {
		if !strings.HasPrefix(strs[i:], name) {
			i++
			continue
		}
		e := make([]byte, 24)
		binary.LittleEndian.PutUint32(e, uint32(i))
		e[4], e[6] = byte(elf.STT_FUNC), 1
		syms = append(syms, e...)
		i += len(name)
	}
	note := func(b []byte) crafted.File {
		return crafted.File{Sections: []crafted.Section{{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: b}},
			Notes: []string{".note.gnu.build-id"}}
	}
	files := map[string]crafted.File{
		"libnote-loop":  note(crafted.WrapNoteLoop()),
		"libnote-panic": note(crafted.WrapNotePanic()),
		"libnote-zip": {Sections: []crafted.Section{
			{Name: ".note.z", Type: elf.SHT_NOTE, Flags: elf.SHF_COMPRESSED, Data: crafted.Compressed(1 << 30)}}},
		"libnames": {Sections: []crafted.Section{
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: syms, Link: 2, Entsize: 24},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: []byte(strs)}}},
		"libsparse": {Sections: []crafted.Section{
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: make([]byte, 48), Link: 2, Entsize: 24},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Size: 8 << 30, Offset: 1 << 20}}},
	}
	var out []string
	for n, f := range files {
		p, err := f.Write(dir, n+"-"+tag+".so")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// hostileScript maps the files of its first list, says so, waits for a
// file, maps the second list, loads a real library (a link-map change the
// tracer hears of) and waits to be killed.
const hostileScript = `
import ctypes, mmap, os, sys, time
go, first, second = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
held = []
def mapall(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        held.append(mmap.mmap(fd, min(os.fstat(fd).st_size, 4096), prot=mmap.PROT_READ))
        os.close(fd)
mapall(first)
print("mapped", flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
mapall(second)
ctypes.CDLL("libexpat.so.1")
print("loaded", flush=True)
time.sleep(3600)
`

func TestE2EHostileFiles(t *testing.T) {
	bin, replica := setup(t)
	dir := privateReplica(t, filepath.Join(replica, "gcc-O2"))
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	first, second := hostileFiles(t, tmp, "a"), hostileFiles(t, tmp, "b")
	if err := os.WriteFile(f("hostile.py"), []byte(hostileScript), 0o644); err != nil {
		t.Fatal(err)
	}
	h, hout := start(t, "python3", f("hostile.py"), f("hostile.go"), strings.Join(first, ","), strings.Join(second, ","))
	defer h.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(hout.String(), "mapped") }, "hostile process mapped its files\n"+hout.String())

	// The service starts with the crafted files mapped: --all reads every
	// process's shared objects at start.
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tt, tout := start(t, bin, "--all", "--listen", addr, "--json", "--no-events", "-o", f("out"), "--ready-file", f("ready"))
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready (the crafted files read at start)\n"+tout.String())
	// More crafted files, then a link-map change: read while tracing.
	touch(t, f("hostile.go"))
	waitFor(t, func() bool { return strings.Contains(hout.String(), "loaded") }, "hostile process loaded a library\n"+hout.String())

	// A legitimate workload, found and probed by tttrace itself, held
	// until then; its numbers must be exact.
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "mesh", "--leak", "--truth", f("truth"),
		"--go-file", f("w.go"), "--hold-file", f("w.hold"))
	mine := fmt.Sprintf("probing /proc/%d/", w.Process.Pid)
	waitFor(t, func() bool { return strings.Contains(tout.String(), mine) }, "tttrace attached to the workload's library\n"+tout.String())
	touch(t, f("w.go"))
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding\n"+wout.String())
	cur, _, _ := wantProcess(readTruth(t, f("truth")))
	pid := strconv.Itoa(w.Process.Pid)
	poll(t, "/metrics equal to the truth", func() string { return deviceMemory(addr, pid, cur) })
	touch(t, f("w.hold"))
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(f("out"))
		return strings.Contains(string(b), `"process_summary"`) || strings.Contains(tout.String(), "exited")
	}, "process report")
	h.Process.Kill()
	h.Wait()
	tt.Process.Signal(syscall.SIGINT)
	// 7: another process of the host, traced too, lost events. 11: the
	// workload's library was probed only when it was mapped (late_library);
	// tttrace cannot tell that --go-file held the workload until then.
	if err := tt.Wait(); exitCode(err) != 0 && exitCode(err) != 7 && exitCode(err) != 11 {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	wantExact(t, "hostile", true, lastSummary(t, f("out")), readTruth(t, f("truth")))
}

// TestE2EHostileFIFO: tttrace -p of a process whose working directory
// holds a FIFO named libtt_metal.so (a candidate directory) waits for the
// library and stops on SIGINT; it used to block opening the FIFO.
func TestE2EHostileFIFO(t *testing.T) {
	bin, _ := setup(t)
	tmp := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(tmp, "libtt_metal.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, _ := start(t, "sh", "-c", "cd "+tmp+" && exec sleep 600")
	defer h.Process.Kill()
	waitFor(t, func() bool {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", h.Process.Pid))
		return cwd == tmp
	}, "process in the FIFO's directory")
	ready := filepath.Join(tmp, "ready")
	tt, tout := start(t, bin, "-p", strconv.Itoa(h.Process.Pid), "--ready-file", ready)
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready\n"+tout.String())
	tt.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- tt.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		tt.Process.Kill()
		t.Fatalf("tttrace did not stop on SIGINT\n%s", tout)
	}
}
