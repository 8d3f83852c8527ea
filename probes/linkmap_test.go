package probes

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes/probestest"
	"github.com/tttrace/tttrace/procfs"
)

// The link map BPF sends at _dl_debug_state (bpf/linkmap.h), checked
// against the kernel's own account of the process, /proc/PID/maps, read
// while the process waits after its dlopen: every object's file is the one
// mapped at its dynamic section, its name opens that file, its load bias
// puts its first segment where the kernel mapped it, and every executable
// file mapping of the process is one of the objects. A list longer than
// the bound is cut and says so, a name longer than its room is cut and
// says so; nothing is sent at RT_ADD, nor without stacks. The objects of
// another namespace (dlmopen) follow the default one's.

const linkTarget = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(void) {
	static char line[8192];
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = 0;
		if (strncmp(line, "ns ", 3) == 0 ? !dlmopen(LM_ID_NEWLM, line + 3, RTLD_NOW) : !dlopen(line, RTLD_NOW | RTLD_GLOBAL))
			printf("error %s\n", dlerror());
		else
			printf("loaded\n");
		fflush(stdout);
	}
	return 0;
}
`

// linkProc is the target process: it dlopens each line it reads (a line
// "ns PATH": dlmopen in a new namespace).
type linkProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	pid uint32
}

func startLinkProc(t *testing.T, exe string) *linkProc {
	t.Helper()
	cmd := exec.Command(exe)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &linkProc{cmd: cmd, in: in, out: bufio.NewReader(out), pid: uint32(cmd.Process.Pid)}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	p.expect(t, "ready")
	return p
}

func (p *linkProc) expect(t *testing.T, want string) {
	t.Helper()
	line, err := p.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		t.Fatalf("target said %q (%v), want %q", line, err, want)
	}
}

func (p *linkProc) dlopen(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, path); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "loaded")
}

// pidRecords reads the ring until it is quiet (300 ms without a record)
// and gives each record of pid, with its header, to each.
func pidRecords(t *testing.T, tr *Tracer, pid uint32, each func(h *events.Header, rec []byte)) {
	t.Helper()
	rd := tr.Reader()
	var buf []byte
	for {
		rd.SetDeadline(time.Now().Add(300 * time.Millisecond))
		rec, err := rd.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		buf = rec
		if h, err := events.Peek(rec); err == nil && h.Pid == pid {
			each(h, rec)
		}
	}
}

// linkRecords reads the ring until it is quiet: pid's link objects (by
// walk) and its link-map records.
func linkRecords(t *testing.T, tr *Tracer, pid uint32) (walks [][]events.LinkObject, linkMaps int) {
	t.Helper()
	bySeq := map[uint64]int{}
	pidRecords(t, tr, pid, func(h *events.Header, rec []byte) {
		switch h.Kind {
		case events.KindLinkMap:
			linkMaps++
		case events.KindLinkObject:
			if h.OpFrames != events.OpFramesUnchecked {
				t.Errorf("a link object says %d op frames: it carries no op", h.OpFrames)
			}
			var o events.LinkObject
			if err := events.DecodeLinkObject(rec, &o); err != nil {
				t.Fatal(err)
			}
			o.Name = append([]byte(nil), o.Name...)
			i, ok := bySeq[o.Seq]
			if !ok {
				i = len(walks)
				bySeq[o.Seq] = i
				walks = append(walks, nil)
			}
			walks[i] = append(walks[i], o)
		}
	})
	return walks, linkMaps
}

// mapsID parses a maps line's device ("fd:01", hex) into st_dev.
func mapsID(t *testing.T, m procfs.Mapping) uint64 {
	t.Helper()
	maj, min, _ := strings.Cut(m.Dev, ":")
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("device %q", m.Dev)
	}
	return unix.Mkdev(uint32(a), uint32(b))
}

func statID(t *testing.T, path string) (uint64, uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev, st.Ino
}

// checkWalk compares a whole walk with pid's maps, read now; exe is the
// path pid was executed by.
func checkWalk(t *testing.T, walk []events.LinkObject, pid uint32, exe string) {
	t.Helper()
	maps, err := procfs.Maps(int(pid))
	if err != nil {
		t.Fatal(err)
	}
	type id struct{ dev, ino uint64 }
	listed := map[id]bool{}
	exeDev, exeIno := statID(t, fmt.Sprintf("/proc/%d/exe", pid))
	for i, o := range walk {
		if o.Index != uint32(i) || (o.Flags&events.LinkObjectLast != 0) != (i == len(walk)-1) {
			t.Fatalf("record %d: index %d flags %#x", i, o.Index, o.Flags)
		}
		if o.Flags&(events.LinkObjectsCut|events.LinkObjectNone|events.LinkObjectNameCut|events.LinkObjectVmaBusy) != 0 ||
			(o.Flags&events.LinkObjectExecfn != 0) != (i == 0) {
			t.Errorf("object %d %q: flags %#x", i, o.Name, o.Flags)
		}
		var at *procfs.Mapping
		for j := range maps {
			if maps[j].Start <= o.Ld && o.Ld < maps[j].End {
				at = &maps[j]
			}
		}
		if at == nil {
			t.Errorf("object %d %q: its dynamic section %#x is in no mapping", i, o.Name, o.Ld)
			continue
		}
		if o.Flags&events.LinkObjectNoFile != 0 {
			if at.Path != "[vdso]" || o.Dev != 0 || o.Ino != 0 {
				t.Errorf("object %d %q: no file, at %q (%d:%d)", i, o.Name, at.Path, o.Dev, o.Ino)
			}
			continue
		}
		if o.Dev != mapsID(t, *at) || o.Ino != at.Inode {
			t.Errorf("object %d %q: device %#x inode %d; the mapping at its dynamic section: %s %d %s", i, o.Name, o.Dev, o.Ino, at.Dev, at.Inode, at.Path)
		}
		listed[id{o.Dev, o.Ino}] = true
		name := string(o.Name)
		if i == 0 {
			// The main program, named by the path it was executed by.
			if name != exe || o.Dev != exeDev || o.Ino != exeIno {
				t.Errorf("object 0: %q %d:%d, want the main program %s %d:%d", name, o.Dev, o.Ino, exe, exeDev, exeIno)
			}
		} else if d, ino := statID(t, name); d != o.Dev || ino != o.Ino {
			t.Errorf("object %d: %q opens %d:%d, not the file mapped", i, name, d, ino)
		}
		// Its first segment is where the kernel mapped the file's start.
		ef, err := elf.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		var first uint64
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD {
				first = p.Vaddr &^ 4095
				break
			}
		}
		ef.Close()
		// (A file loaded in two namespaces is mapped twice: its copy's
		// lowest mapping is its highest at file offset 0 below its
		// dynamic section.)
		low := ^uint64(0)
		for _, m := range maps {
			if m.Inode == o.Ino && mapsID(t, m) == o.Dev && m.Offset == 0 && m.Start <= o.Ld && (low == ^uint64(0) || m.Start > low) {
				low = m.Start
			}
		}
		if o.Addr+first != low {
			t.Errorf("object %d %q: bias %#x + first segment %#x, the file's mapping below its dynamic section at %#x", i, name, o.Addr, first, low)
		}
	}
	for _, m := range maps {
		if m.Exec() && m.File() && !listed[id{mapsID(t, m), m.Inode}] {
			t.Errorf("executable mapping of %s is no object of the link map", m.Path)
		}
	}
}

func TestLinkMapObjects(t *testing.T) {
	probestest.RequireRoot(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	build := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	src := filepath.Join(dir, "target.c")
	if err := os.WriteFile(src, []byte(linkTarget), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	build("-O2", "-o", target, src, "-ldl")
	one := filepath.Join(dir, "one.c")
	if err := os.WriteFile(one, []byte("int one(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "libsmall.so")
	build("-shared", "-fPIC", "-O2", "-o", small, one)
	nsLib := filepath.Join(dir, "libns.so")
	build("-shared", "-fPIC", "-O2", "-o", nsLib, one)

	// Many objects in one dlopen (the per-process budget of link-map
	// records would drop hundreds of dlopens): a library needing more
	// copies than a walk sends, the first of them under a path longer
	// than a name's room.
	many := filepath.Join(dir, "many")
	long := many
	for len(long) < events.LinkNameMax+100 {
		long = filepath.Join(long, strings.Repeat("d", 60))
	}
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	copyTo := func(dst string) {
		b, err := os.ReadFile(small)
		if err == nil {
			err = os.WriteFile(dst, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	longLib := filepath.Join(long, "liblong.so")
	copyTo(longLib)
	args := []string{"-shared", "-fPIC", "-o", filepath.Join(dir, "libmany.so"), one, "-Wl,--no-as-needed", longLib, "-L" + many}
	for i := range events.LinkObjectsMax {
		copyTo(filepath.Join(many, fmt.Sprintf("libc%d.so", i)))
		args = append(args, fmt.Sprintf("-lc%d", i))
	}
	build(append(args, "-Wl,-rpath,"+many)...)

	// The program's run time per call, from the kernel's statistics.
	if st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
		defer st.Close()
	}
	cost := func(tr *Tracer, what string) {
		if s, err := tr.progs[progDlDebugState].Stats(); err == nil && s.RunCount > 0 {
			t.Logf("%s: %d calls, %v in the program", what, s.RunCount, s.Runtime)
		}
	}
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			p := startLinkProc(t, target)
			tr, err := Load(Options{RingSize: 1 << 24, Stacks: true, SingleUprobes: single})
			if err != nil {
				t.Fatalf("load: %+v", err)
			}
			defer tr.Close()
			if err := tr.AddPID(p.pid); err != nil {
				t.Fatal(err)
			}
			if err := tr.AttachLoaderTo("/lib64/ld-linux-x86-64.so.2", int(p.pid)); err != nil {
				t.Fatal(err)
			}
			p.dlopen(t, small)
			walks, linkMaps := linkRecords(t, tr, p.pid)
			// dlopen calls _dl_debug_state at RT_ADD and at RT_CONSISTENT:
			// one walk, two link-map records.
			if len(walks) != 1 || linkMaps != 2 {
				t.Fatalf("%d walks, %d link-map records; want 1, 2", len(walks), linkMaps)
			}
			cost(tr, "a dlopen, a walk of 5 objects")
			checkWalk(t, walks[0], p.pid, target)
			walk0 := walks[0]
			found := false
			for _, o := range walks[0] {
				found = found || string(o.Name) == small
			}
			if !found {
				t.Errorf("the library dlopen'ed is not in the walk")
			}

			// A copy of it in a namespace of its own, after the default
			// namespace's objects; its walk only at RT_CONSISTENT.
			if _, err := fmt.Fprintln(p.in, "ns "+nsLib); err != nil {
				t.Fatal(err)
			}
			p.expect(t, "loaded")
			walks, linkMaps = linkRecords(t, tr, p.pid)
			if len(walks) != 1 || linkMaps != 2 {
				t.Fatalf("dlmopen: %d walks, %d link-map records; want 1, 2", len(walks), linkMaps)
			}
			checkWalk(t, walks[0], p.pid, target)
			nsAt := -1
			for i, o := range walks[0] {
				if string(o.Name) == nsLib {
					nsAt = i
				}
			}
			if nsAt < len(walk0) {
				t.Errorf("the library dlmopen'ed is object %d of the walk, want one after the %d of the default namespace", nsAt, len(walk0))
			}

			p.dlopen(t, filepath.Join(dir, "libmany.so"))
			walks, _ = linkRecords(t, tr, p.pid)
			if len(walks) != 1 || len(walks[0]) != events.LinkObjectsMax {
				t.Fatalf("%d walks, the first of %d records; want 1 of %d", len(walks), len(walks[0]), events.LinkObjectsMax)
			}
			cost(tr, "and a dlopen of 513 objects, a walk cut at 512")
			w := walks[0]
			if last := w[len(w)-1]; last.Flags&(events.LinkObjectLast|events.LinkObjectsCut) != events.LinkObjectLast|events.LinkObjectsCut {
				t.Errorf("the last record of a cut list: flags %#x", last.Flags)
			}
			cut := 0
			for _, o := range w {
				if o.Flags&events.LinkObjectNameCut == 0 {
					continue
				}
				cut++
				if len(o.Name) != events.LinkNameMax-1 || !strings.HasPrefix(longLib, string(o.Name)) {
					t.Errorf("a cut name: %d bytes %q", len(o.Name), o.Name)
				}
				if d, ino := statID(t, longLib); o.Dev != d || o.Ino != ino {
					t.Errorf("the long-named object: %d:%d, want %d:%d", o.Dev, o.Ino, d, ino)
				}
			}
			if cut != 1 {
				t.Errorf("%d names cut, want 1 (%s)", cut, longLib)
			}
		})
	}

	// Without stacks the loader probe sends its records, no objects.
	p := startLinkProc(t, target)
	tr, err := Load(Options{RingSize: 1 << 20})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if err := tr.AddPID(p.pid); err != nil {
		t.Fatal(err)
	}
	if err := tr.AttachLoaderTo("/lib64/ld-linux-x86-64.so.2", int(p.pid)); err != nil {
		t.Fatal(err)
	}
	p.dlopen(t, small)
	if walks, linkMaps := linkRecords(t, tr, p.pid); len(walks) != 0 || linkMaps != 2 {
		t.Errorf("without stacks: %d walks, %d link-map records; want 0, 2", len(walks), linkMaps)
	}
}

// The cookie places _r_debug from the probe's address: their distance,
// modulo 2^64 (ld.so may put either first); none without the symbol.
func TestLoaderCookie(t *testing.T) {
	if got := loaderCookie(0x2060, 0x34118); got != 0x34118-0x2060 {
		t.Errorf("cookie %#x", got)
	}
	if got := loaderCookie(0x34118, 0x2060); 0x34118+got != 0x2060 {
		t.Errorf("a negative distance: cookie %#x", got)
	}
	if loaderCookie(0x2060, 0) != 0 {
		t.Error("a cookie without _r_debug")
	}
}
