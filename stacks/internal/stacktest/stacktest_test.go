package stacktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/stacks"
)

// These tests need root (BPF). The truth is the call chain the program in
// stacks/testdata/chain is built to have.

const captureSym = "_ZN5chain7captureEPKc"

func needRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF")
	}
}

// build compiles the chain program with cxx into a new directory.
func build(t testing.TB, cxx string) (exe, lib string) {
	t.Helper()
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("%s not installed (scripts/deps.sh build installs it)", cxx)
	}
	src, err := filepath.Abs("../../testdata/chain")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	flags := []string{"-O2", "-fomit-frame-pointer", "-I" + src}
	for _, args := range [][]string{
		append(flags, "-shared", "-fPIC", "-o", "libchain.so", filepath.Join(src, "lib.cpp")),
		append(flags, "-o", "chain", filepath.Join(src, "main.cpp"), "-L.", "-lchain", "-Wl,-rpath,$ORIGIN"),
	} {
		cmd := exec.Command(cxx, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cxx, err, out)
		}
	}
	return filepath.Join(dir, "chain"), filepath.Join(dir, "libchain.so")
}

// load loads the test programs, failing with the verifier's log.
func load(t testing.TB) *stacktestObjects {
	t.Helper()
	var objs stacktestObjects
	if err := loadStacktestObjects(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("verifier: %+v", ve)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// The record layout Go decodes is the C one.
func TestRecordLayout(t *testing.T) {
	var r stacktestStackRecord
	if off := unsafe.Offsetof(r.Data); off != events.StackWireSize {
		t.Errorf("data at %d, header is %d bytes", off, events.StackWireSize)
	}
	if n := len(r.Data); n != 16384 {
		t.Errorf("copy size %d", n)
	}
}

// Every program, and so stack_capture(), passes the verifier.
func TestVerifier(t *testing.T) {
	needRoot(t)
	load(t)
}

// While a capture owns this CPU's record (as when its thread is preempted
// before the output), another capture gets nothing; after the release the
// record is available again.
func TestCaptureGuard(t *testing.T) {
	needRoot(t)
	exe, lib := build(t, "g++")
	objs := load(t)
	l, err := link.OpenExecutable(lib)
	if err != nil {
		t.Fatal(err)
	}
	up, err := l.Uprobe("_ZN5chain12probe_targetEi", objs.CaptureGuard, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if out, err := exec.Command(exe, "bench", "1", "0").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r uint32
	if err := objs.GuardResult.Get(&r); err != nil {
		t.Fatal(err)
	}
	if r != 7 {
		t.Errorf("guard result %#b: bit 0 first capture, 1 nested capture refused, 2 capture after release", r)
	}
}

type record struct {
	seq, ip, sp, bp uint64
	pid, tid, size  uint32
	kind, flags     uint8
	data            []byte
}

// decodeStack decodes a stack record with package events, as tttrace
// does, and checks that the record is exactly as long as it says.
func decodeStack(b []byte) (record, error) {
	var s events.StackRecord
	if err := events.DecodeStack(b, &s); err != nil {
		return record{}, err
	}
	if len(s.Data) != len(b)-events.StackWireSize {
		return record{}, fmt.Errorf("stack record of %d bytes says %d of stack", len(b), len(s.Data))
	}
	h, _ := events.Peek(b)
	return record{seq: s.Seq, ip: s.IP, sp: s.SP, bp: s.BP, pid: s.Pid, tid: s.Tid, size: uint32(len(s.Data)),
		kind: uint8(h.Kind), flags: s.Flags, data: s.Data}, nil
}

// A uprobe on chain::capture's entry captures a stack that unwinds to
// exactly the known chain, with the same return addresses as the
// program's own capture from inside capture().
func TestCaptureUnwindsKnownChain(t *testing.T) {
	needRoot(t)
	for _, cxx := range []string{"g++", "clang++"} {
		t.Run(cxx, func(t *testing.T) {
			exe, lib := build(t, cxx)
			objs := load(t)
			l, err := link.OpenExecutable(lib)
			if err != nil {
				t.Fatal(err)
			}
			up, err := l.Uprobe(captureSym, objs.RecordWithStack, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()

			out := t.TempDir()
			cmd := exec.Command(exe, out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			rd.SetDeadline(time.Now().Add(5 * time.Second))
			plain, err := rd.Read()
			if err != nil {
				t.Fatal(err)
			}
			raw, err := rd.Read()
			if err != nil {
				t.Fatal(err)
			}
			rec, err := decodeStack(raw.RawSample)
			if err != nil {
				t.Fatal(err)
			}
			if seq := binary.LittleEndian.Uint64(plain.RawSample); rec.seq != seq || rec.kind != uint8(events.KindStack) {
				t.Errorf("stack seq %d kind %d, its record's seq %d", rec.seq, rec.kind, seq)
			}
			if int(rec.pid) != cmd.Process.Pid || rec.tid != rec.pid {
				t.Errorf("pid %d tid %d, ran %d", rec.pid, rec.tid, cmd.Process.Pid)
			}
			t.Logf("captured %d bytes, flags %#x", rec.size, rec.flags)

			mapsText, err := os.ReadFile(filepath.Join(out, "maps"))
			if err != nil {
				t.Fatal(err)
			}
			maps, err := procfs.ParseMaps(mapsText)
			if err != nil {
				t.Fatal(err)
			}
			c := stacks.NewCache()
			mods := c.Bind(maps, func(m procfs.Mapping) (*os.File, error) { return os.Open(m.Path) })
			locs, trunc := stacks.Unwind(mods, stacks.Regs{IP: rec.ip, SP: rec.sp, BP: rec.bp}, rec.data, 0, nil)
			frames := stacks.Symbolize(locs)
			for i, f := range frames {
				t.Logf("#%d %s", i, f)
			}
			if trunc {
				t.Errorf("truncated")
			}
			want := []string{"chain::capture(char const*)", "chain::f2(long, char const*)",
				"chain::Holder<int>::f1(int, char const*)", "chain::lib_entry(int, char const*)", "main"}
			if len(frames) < len(want)+2 {
				t.Fatalf("%d frames", len(frames))
			}
			for i, w := range want {
				if frames[i].Function != w {
					t.Errorf("#%d %q, want %q", i, frames[i].Function, w)
				}
			}
			if frames[0].Offset != 0 {
				t.Errorf("the probe is at capture+%#x, not its entry", frames[0].Offset)
			}
			if last := frames[len(frames)-1]; last.Function != "_start" {
				t.Errorf("outermost %s, want _start", last)
			}

			// The program's own copy, from inside capture: the same callers.
			own := readOwn(t, out)
			ownLocs, _ := stacks.Unwind(mods, own.regs, own.stack, 0, nil)
			if len(ownLocs) != len(locs) {
				t.Fatalf("own capture: %d frames, BPF: %d", len(ownLocs), len(locs))
			}
			for i := 1; i < len(locs); i++ {
				if ownLocs[i].PC != locs[i].PC {
					t.Errorf("#%d own %#x, BPF %#x", i, ownLocs[i].PC, locs[i].PC)
				}
			}
		})
	}
}

type ownCapture struct {
	regs  stacks.Regs
	stack []byte
}

func readOwn(t *testing.T, dir string) ownCapture {
	hdr, err := os.ReadFile(filepath.Join(dir, "regs"))
	if err != nil || len(hdr) != 32 {
		t.Fatalf("regs: %v", err)
	}
	stack, err := os.ReadFile(filepath.Join(dir, "stack"))
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	return ownCapture{regs: stacks.Regs{IP: le.Uint64(hdr), SP: le.Uint64(hdr[8:]), BP: le.Uint64(hdr[16:])}, stack: stack}
}

// BenchmarkProbeCost measures, per call of a probed function, the uprobe
// doing nothing, emitting a struct event (bpf/wire.h), and emitting it plus a
// stack: the call is 80 frames of 256 bytes deep (a full 16 KiB copy) or
// at main's depth (the partial, page-by-page copy up to the stack's end).
// ns/call is the traced loop's own time per call; prog-ns/hit the BPF
// program's run time from the kernel's statistics. A reader drains the
// ring meanwhile, as tttrace does. docs/stacks.md has the figures.
func BenchmarkProbeCost(b *testing.B) {
	needRoot(b)
	exe, lib := build(b, "g++")
	objs := load(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	l, err := link.OpenExecutable(lib)
	if err != nil {
		b.Fatal(err)
	}
	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	var bytesRead, records atomic.Uint64
	go func() {
		var r ringbuf.Record
		for {
			rd.SetDeadline(time.Now().Add(5 * time.Millisecond))
			err := rd.ReadInto(&r)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				return
			}
			bytesRead.Add(uint64(len(r.RawSample)))
			records.Add(1)
		}
	}()
	for _, c := range []struct {
		name  string
		prog  *ebpf.Program
		depth string
	}{
		{"no-probe", nil, "80"}, {"empty", objs.Empty, "80"}, {"record", objs.RecordOnly, "80"},
		{"record+stack", objs.RecordWithStack, "80"}, {"record+partial-stack", objs.RecordWithStack, "0"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var before *ebpf.ProgramStats
			if c.prog != nil {
				up, err := l.Uprobe("_ZN5chain12probe_targetEi", c.prog, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer up.Close()
				if before, err = c.prog.Stats(); err != nil {
					b.Fatal(err)
				}
			}
			bytes0, recs0 := bytesRead.Load(), records.Load()
			n := max(b.N, 1000)
			out, err := exec.Command(exe, "bench", strconv.Itoa(n), c.depth).Output()
			if err != nil {
				b.Fatal(err)
			}
			ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(ns, "ns/call")
			b.ReportMetric(0, "ns/op")
			if c.prog != nil {
				after, err := c.prog.Stats()
				if err != nil {
					b.Fatal(err)
				}
				if hits := after.RunCount - before.RunCount; hits > 0 {
					b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(hits), "prog-ns/hit")
				}
			}
			time.Sleep(200 * time.Millisecond) // let the reader catch up
			if r := records.Load() - recs0; r > 0 {
				b.ReportMetric(float64(bytesRead.Load()-bytes0)/float64(n), "ring-B/call")
			}
		})
	}
	var lostTotal uint64
	var per []uint64
	if err := objs.Lost.Lookup(uint32(0), &per); err == nil {
		for _, v := range per {
			lostTotal += v
		}
	}
	b.Logf("lost records %d", lostTotal)
}

// interpreters are the CPythons to measure with, where installed.
var interpreters = []string{
	"/root/.pyenv/versions/3.10.13/bin/python3.10", "/usr/bin/python3.11",
	"/root/.pyenv/versions/3.12.1/bin/python3.12", "/root/.pyenv/versions/3.13.0/bin/python3.13",
}

// The replica's track_allocate, reached from Python through ctypes at the
// bottom of a 40-deep Python recursion: every stack captured at its entry
// unwinds through libtt_metal, libttwork, libffi/ctypes and the interpreter
// down to _start, or holds at least 64 frames. The log gives, per
// interpreter, the frames found with the copy cut to 4, 8 and 16 KiB (the
// figures of docs/stacks.md). Needs TTTRACE_REPLICA: a built replica
// variant whose track_allocate is called out of line (gcc-O2, clang-O3,
// ...; not the INLINE_TRACKER ones), or the directory of variants, where
// gcc-O2 is used.
func TestReplicaFromPython(t *testing.T) {
	needRoot(t)
	dir := os.Getenv("TTTRACE_REPLICA")
	if dir == "" {
		t.Skip("TTTRACE_REPLICA unset (make build/replica/gcc-O2/libtt_metal.so)")
	}
	lib := filepath.Join(dir, "libtt_metal.so")
	if _, err := os.Stat(lib); err != nil {
		dir = filepath.Join(dir, "gcc-O2")
		lib = filepath.Join(dir, "libtt_metal.so")
	}
	driver := filepath.Join(t.TempDir(), "driver.py")
	// The driver waits for a line on stdin before it calls the replica:
	// the probe is attached for its pid only, so the library's other users
	// (the end-to-end tests of other packages run at the same time) neither
	// fill the ring nor reach this test's records.
	src := `import runpy, sys
sys.stdin.readline()
def rec(n):
    if n == 0:
        sys.argv = [sys.argv[1], "--scenario", "basic"]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit:
            pass
        print("done", flush=True)
        sys.stdin.read()
    else:
        rec(n - 1)
rec(40)
`
	if err := os.WriteFile(driver, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, py := range interpreters {
		if _, err := os.Stat(py); err != nil {
			continue
		}
		ran++
		t.Run(filepath.Base(py), func(t *testing.T) {
			objs := load(t)
			cmd := exec.Command(py, driver, filepath.Join(dir, "ttwork.py"))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			l, err := link.OpenExecutable(lib)
			if err != nil {
				t.Fatal(err)
			}
			up, err := l.Uprobe("_ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE", objs.RecordWithStack,
				&link.UprobeOptions{PID: cmd.Process.Pid})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			rd, err := ringbuf.NewReader(objs.Events)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			var got []byte
			for !strings.Contains(string(got), "done") {
				n, err := stdout.Read(buf)
				if err != nil {
					t.Fatalf("driver: %v (%s)", err, got)
				}
				got = append(got, buf[:n]...)
			}
			// The process waits: its maps are what its pcs mean.
			c := stacks.NewCache()
			mods, err := c.Snapshot(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			var recs []record
			rd.SetDeadline(time.Now().Add(2 * time.Second))
			for {
				r, err := rd.Read()
				if err != nil {
					break
				}
				if h, err := events.Peek(r.RawSample); err == nil && h.Kind == events.KindAlloc {
					continue // the plain record
				}
				rec, err := decodeStack(r.RawSample)
				if err != nil {
					t.Fatal(err)
				}
				if rec.pid != uint32(cmd.Process.Pid) {
					t.Fatalf("seq %d: a stack of pid %d, not of the driver (%d): the probe's pid filter failed", rec.seq, rec.pid, cmd.Process.Pid)
				}
				recs = append(recs, rec)
			}
			if len(recs) == 0 {
				t.Fatal("no stack captured")
			}
			var frames [3]int
			var deepest []stacks.Frame
			for _, rec := range recs {
				regs := stacks.Regs{IP: rec.ip, SP: rec.sp, BP: rec.bp}
				locs, trunc := stacks.Unwind(mods, regs, rec.data, 0, nil)
				if trunc && len(locs) < 64 {
					t.Errorf("seq %d: truncated at %d frames (%d bytes copied)", rec.seq, len(locs), rec.size)
					for i, f := range stacks.Symbolize(locs) {
						t.Logf("  #%d %s %s", i, filepath.Base(f.Module), f)
					}
					continue
				}
				for i, n := range []int{4096, 8192, 16384} {
					l, _ := stacks.Unwind(mods, regs, rec.data[:min(n, len(rec.data))], 0, nil)
					frames[i] = max(frames[i], len(l))
				}
				fr := stacks.Symbolize(locs)
				if len(fr) > len(deepest) {
					deepest = fr
				}
				if fr[0].Function != "tt::tt_metal::GraphTracker::track_allocate(tt::tt_metal::Buffer const*)" ||
					!hasFunction(fr, "ttwork_main") || !hasFunction(fr, "ffi_call") || (!trunc && fr[len(fr)-1].Function != "_start") {
					t.Errorf("seq %d: the stack does not go from track_allocate through ttwork_main and ffi_call to _start", rec.seq)
				}
			}
			t.Logf("%d stacks; the deepest has %d frames; frames found with 4/8/16 KiB copies: %v", len(recs), len(deepest), frames)
			for i, f := range deepest {
				t.Logf("  #%d %s %s", i, filepath.Base(f.Module), f)
			}
		})
	}
	if ran == 0 {
		t.Skip("no CPython found")
	}
}

func hasFunction(fr []stacks.Frame, name string) bool {
	for _, f := range fr {
		if f.Function == name {
			return true
		}
	}
	return false
}
