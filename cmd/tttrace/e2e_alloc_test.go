package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// The allocator's view (issue 22) against the replica's truth: the replica's
// `alloc` scenario on chips shaped like a Wormhole n150, n300, Galaxy and a
// Blackhole, with three caught out-of-memory failures (larger than a bank,
// exhausted, fragmented) or the last one uncaught. Every number of the
// summary's "allocator" objects and of the "alloc_failed" records must equal
// what the replica's own allocators held (BankManager::get_statistics) and
// recorded at each failure.

// allocTruth is the allocator part of the replica's truth (README "Ground truth").
type allocTruth struct {
	Pid     uint32 `json:"pid"`
	Devices []struct {
		Device    int32                          `json:"device"`
		Shape     string                         `json:"shape"`
		Allocator map[string]allocTruthAllocator `json:"allocator"`
	} `json:"devices"`
	// Meshes: every open MeshDevice and its own allocator.
	Meshes []struct {
		MeshID     int32                          `json:"mesh_id"`
		MeshDevice string                         `json:"mesh_device"`
		Chips      []int32                        `json:"chips"`
		Allocator  map[string]allocTruthAllocator `json:"allocator"`
	} `json:"meshes"`
	Failures []allocTruthFailure `json:"alloc_failures"`
}

type allocTruthStats struct {
	Allocatable  uint64 `json:"total_allocatable_size_bytes"`
	Allocated    uint64 `json:"total_allocated_bytes"`
	Free         uint64 `json:"total_free_bytes"`
	LargestBlock uint64 `json:"largest_free_block_bytes"`
}

type allocTruthAllocator struct {
	Banks    uint32 `json:"banks"`
	BankSize uint64 `json:"bank_size"`
	allocTruthStats
	PerCoreBuffers uint64 `json:"per_core_buffers"`
	PerCoreBytes   uint64 `json:"per_core_bytes"`
}

type allocTruthFailure struct {
	Tid         uint32          `json:"tid"`
	Device      int32           `json:"device"`
	Mesh        *int32          `json:"mesh"`        // -1 or absent: a chip's bank manager refused
	MeshDevice  string          `json:"mesh_device"` // the mesh's, when Mesh >= 0
	Type        string          `json:"type"`
	Size        uint64          `json:"size"`
	PageSize    uint64          `json:"page_size"`
	Banks       uint32          `json:"banks"`
	SizePerBank uint64          `json:"size_per_bank"`
	BankSize    uint64          `json:"bank_size"`
	Cause       string          `json:"cause"`
	Before      allocTruthStats `json:"before"`
	// Callers: the return addresses above BankManager::allocate_buffer.
	Callers []uint64 `json:"callers"`
}

// allocOut is what tttrace wrote: the alloc_failed records and the last summary, as JSON.
type allocOut struct {
	failures []map[string]any
	allocs   []map[string]any // the alloc events
	summary  map[string]any
}

func readAllocOut(t *testing.T, path string) allocOut {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var o allocOut
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("NDJSON line %.200s: %v", sc.Bytes(), err)
		}
		switch m["type"] {
		case "alloc_failed":
			o.failures = append(o.failures, m)
		case "alloc":
			o.allocs = append(o.allocs, m)
		case "summary":
			o.summary = m
		}
	}
	if o.summary == nil {
		t.Fatal("no summary line")
	}
	return o
}

// num reads m[key] as an unsigned integer (JSON numbers decode as float64;
// the byte counts here stay below 2^53).
func num(m map[string]any, key string) (uint64, bool) {
	v, ok := m[key].(float64)
	if !ok || v < 0 {
		return 0, false
	}
	return uint64(v), true
}

// contractType is the summary's key of a truth type name ("L1_SMALL" -> "l1_small").
func contractType(t string) string { return strings.ToLower(t) }

// compareAlloc lists every difference between tttrace's allocator view and the truth
// (every type from the probes).
func compareAlloc(name string, o allocOut, tr *allocTruth) (diffs []string) {
	return compareAllocFrom(name, o, tr, "probe", nil)
}

// compareAllocFrom is compareAlloc with the source every type must have, and the types
// tttrace cannot know (absent: true), which must be null.
func compareAllocFrom(name string, o allocOut, tr *allocTruth, source string, absent func(chip int32, typ string) bool) (diffs []string) {
	errorf := func(format string, args ...any) { diffs = append(diffs, name+": "+fmt.Sprintf(format, args...)) }
	var proc map[string]any
	procs, _ := o.summary["processes"].([]any)
	for _, p := range procs {
		if pm, ok := p.(map[string]any); ok {
			if pid, _ := num(pm, "pid"); uint32(pid) == tr.Pid {
				proc = pm
			}
		}
	}
	if proc == nil {
		errorf("summary has no process %d", tr.Pid)
		return diffs
	}
	devs := map[int32]map[string]any{}
	ds, _ := proc["devices"].([]any)
	for _, d := range ds {
		if dm, ok := d.(map[string]any); ok {
			id, _ := dm["device"].(float64)
			devs[int32(id)] = dm
		}
	}
	for _, td := range tr.Devices {
		if td.Allocator == nil {
			continue
		}
		d := devs[td.Device]
		if d == nil {
			errorf("chip %d missing from the summary", td.Device)
			continue
		}
		got, _ := d["allocator"].(map[string]any)
		if got == nil {
			errorf("chip %d: allocator is %v (allocator_why: %v)", td.Device, d["allocator"], d["allocator_why"])
			continue
		}
		for typ, want := range td.Allocator {
			g, _ := got[contractType(typ)].(map[string]any)
			if absent != nil && absent(td.Device, typ) {
				if g != nil {
					errorf("chip %d: allocator has %s (%v), which tttrace cannot know", td.Device, contractType(typ), g)
				}
				continue
			}
			if g == nil {
				errorf("chip %d: allocator has no %s", td.Device, contractType(typ))
				continue
			}
			checkStats(errorf, fmt.Sprintf("chip %d", td.Device), typ, g, want, source)
		}
	}
	meshes := map[string]map[string]any{}
	ms, _ := proc["meshes"].([]any)
	for _, m := range ms {
		if mm, ok := m.(map[string]any); ok {
			ptr, _ := mm["mesh_device"].(string)
			meshes[ptr] = mm
		}
	}
	for _, tm := range tr.Meshes {
		m := meshes[tm.MeshDevice]
		if m == nil {
			errorf("mesh %d (%s) missing from the summary's meshes %v", tm.MeshID, tm.MeshDevice, ms)
			continue
		}
		var chips []int32
		for _, c := range m["chips"].([]any) {
			chips = append(chips, int32(c.(float64)))
		}
		if fmt.Sprint(chips) != fmt.Sprint(tm.Chips) {
			errorf("mesh %d: chips %v, want %v", tm.MeshID, chips, tm.Chips)
		}
		got, _ := m["allocator"].(map[string]any)
		if got == nil {
			errorf("mesh %d: allocator is %v (allocator_why: %v)", tm.MeshID, m["allocator"], m["allocator_why"])
			continue
		}
		for typ, want := range tm.Allocator {
			g, _ := got[contractType(typ)].(map[string]any)
			if g == nil {
				errorf("mesh %d: allocator has no %s", tm.MeshID, contractType(typ))
				continue
			}
			checkStats(errorf, fmt.Sprintf("mesh %d", tm.MeshID), typ, g, want, "probe")
		}
	}
	if len(ms) != len(tr.Meshes) {
		errorf("summary lists %d meshes, the replica has %d open", len(ms), len(tr.Meshes))
	}
	if len(o.failures) != len(tr.Failures) {
		errorf("%d alloc_failed records, the replica failed %d allocations", len(o.failures), len(tr.Failures))
		return diffs
	}
	for i, want := range tr.Failures {
		g := o.failures[i]
		if g["cause"] != want.Cause || g["buffer_type"] != want.Type {
			errorf("failure %d: cause %v type %v, want %s %s", i, g["cause"], g["buffer_type"], want.Cause, want.Type)
		}
		if want.Mesh != nil && *want.Mesh >= 0 {
			// A mesh's own allocator refused: the record names the mesh, and
			// holds the mesh's buffers only.
			if g["device_kind"] != "mesh" || g["mesh_device"] != want.MeshDevice || g["device"] != nil {
				errorf("failure %d (%s): device_kind %v mesh_device %v device %v, want mesh %s", i, want.Cause, g["device_kind"], g["mesh_device"], g["device"], want.MeshDevice)
			}
			hs, _ := g["holders"].([]any)
			for _, h := range hs {
				if hm, _ := h.(map[string]any); hm["mesh"] != true || hm["mesh_device"] != want.MeshDevice {
					errorf("failure %d (%s): holder %v is not the mesh's", i, want.Cause, h)
				}
			}
		} else {
			if g["device_kind"] != "chip" {
				errorf("failure %d (%s): device_kind %v, want chip", i, want.Cause, g["device_kind"])
			}
			if v, ok := num(g, "device"); !ok || int32(v) != want.Device {
				errorf("failure %d (%s): device = %v, want %d", i, want.Cause, g["device"], want.Device)
			}
			hs, _ := g["holders"].([]any)
			for _, h := range hs {
				if hm, _ := h.(map[string]any); hm["mesh"] != false {
					errorf("failure %d (%s): holder %v is a mesh buffer, which the chip's allocator does not hold", i, want.Cause, h)
				}
			}
		}
		for _, f := range []struct {
			key  string
			want uint64
		}{
			{"pid", uint64(tr.Pid)}, {"tid", uint64(want.Tid)},
			{"size", want.Size}, {"page_size", want.PageSize}, {"banks", uint64(want.Banks)},
			{"size_per_bank", want.SizePerBank}, {"bank_size", want.BankSize},
			{"total_allocated_bytes", want.Before.Allocated}, {"total_free_bytes", want.Before.Free},
			{"largest_free_block_bytes", want.Before.LargestBlock},
		} {
			if v, ok := num(g, f.key); !ok || v != f.want {
				errorf("failure %d (%s): %s = %v, want %d", i, want.Cause, f.key, g[f.key], f.want)
			}
		}
	}
	failures, _ := proc["alloc_failures"].([]any)
	if len(failures) != len(tr.Failures) {
		errorf("summary lists %d alloc_failures, want %d", len(failures), len(tr.Failures))
	}
	return diffs
}

// checkStats compares one type's statistics in tttrace's allocator view of
// a chip or mesh (label) with the replica's get_statistics, and its source.
func checkStats(errorf func(string, ...any), label, typ string, got map[string]any, want allocTruthAllocator, source string) {
	for _, f := range []struct {
		key  string
		want uint64
	}{
		{"banks", uint64(want.Banks)}, {"bank_size", want.BankSize},
		{"total_allocatable_size_bytes", want.Allocatable}, {"total_allocated_bytes", want.Allocated},
		{"total_free_bytes", want.Free}, {"largest_free_block_bytes", want.LargestBlock},
	} {
		if v, ok := num(got, f.key); !ok || v != f.want {
			errorf("%s %s %s = %v, want %d", label, typ, f.key, got[f.key], f.want)
		}
	}
	if got["source"] != source {
		errorf("%s %s source = %v, want %s", label, typ, got["source"], source)
	}
}

func readAllocTruth(t *testing.T, path string) *allocTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr allocTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("truth: %v", err)
	}
	want := 3
	if len(tr.Meshes) != 0 {
		want = 6 // alloc --mesh: the mesh's three too
	}
	if len(tr.Failures) != want {
		t.Fatalf("the replica recorded %d failed allocations, want %d: the test proves nothing", len(tr.Failures), want)
	}
	return &tr
}

// TestE2EAllocator: every chip shape, in "-- CMD", "-p" attached before the
// chips open, and Python (the library loaded after start).
func TestE2EAllocator(t *testing.T) {
	for _, shape := range []string{"n150", "n300", "galaxy", "blackhole"} {
		for _, mode := range []string{"cmd", "pid", "python"} {
			if mode != "cmd" && shape != "n300" {
				continue
			}
			var out string
			r := run{variant: "gcc-O2", mode: mode, scenario: "alloc", args: []string{"--shape", shape, "--leak"},
				peaks: true, out: &out}
			t.Run(strings.ReplaceAll(r.name(), "/", "_")+"_"+shape, func(t *testing.T) {
				sum, tr := trace(t, r)
				for _, d := range compare(r, sum, tr) {
					t.Error(d)
				}
				atr := readAllocTruth(t, truthPathOf(t, out))
				for _, d := range compareAlloc(r.name(), readAllocOut(t, out), atr) {
					t.Error(d)
				}
			})
		}
	}
}

// TestE2EAllocatorMesh: a MeshDevice's own allocator (alloc --mesh): every
// number of the summary's "meshes" equals the replica's get_statistics of
// the mesh's bank managers, the chips' allocators leave the mesh buffers out
// (their numbers equal the chips' truth), and the mesh's three failed
// allocations (larger than a bank, exhausted, fragmented) are alloc_failed
// records naming the mesh, with the mesh's state and buffers; in "-- CMD",
// "-p" and Python.
func TestE2EAllocatorMesh(t *testing.T) {
	for _, shape := range []string{"n300", "galaxy"} {
		for _, mode := range []string{"cmd", "pid", "python"} {
			if mode != "cmd" && shape != "n300" {
				continue
			}
			var out string
			r := run{variant: "gcc-O2", mode: mode, scenario: "alloc", args: []string{"--shape", shape, "--mesh", "--leak"},
				peaks: true, out: &out}
			t.Run(strings.ReplaceAll(r.name(), "/", "_")+"_"+shape, func(t *testing.T) {
				sum, tr := trace(t, r)
				for _, d := range compare(r, sum, tr) {
					t.Error(d)
				}
				atr := readAllocTruth(t, truthPathOf(t, out))
				if len(atr.Meshes) != 1 {
					t.Fatalf("the replica has %d open meshes, want 1", len(atr.Meshes))
				}
				for _, d := range compareAlloc(r.name(), readAllocOut(t, out), atr) {
					t.Error(d)
				}
			})
		}
	}
}

// truthPathOf is the truth written beside the NDJSON by trace().
func truthPathOf(t *testing.T, out string) string {
	t.Helper()
	return filepath.Join(filepath.Dir(out), "truth.json")
}

// TestE2EAllocatorUncaught: the fragmented OOM is not caught; the process
// aborts (SIGABRT). tttrace exits with the command's status and still
// reports the failure, and --fail-on-oom does not change that status.
func TestE2EAllocatorUncaught(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out.ndjson")
	truthPath := filepath.Join(tmp, "truth.json")
	cmd := exec.Command(bin, "--json", "-o", out, "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150", "--uncaught", "--truth", truthPath)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 134 {
		t.Fatalf("tttrace -- ttwork --uncaught: %v, want exit status 134 (SIGABRT)\n%s", err, stderr.String())
	}
	for _, d := range compareAlloc("uncaught", readAllocOut(t, out), readAllocTruth(t, truthPath)) {
		t.Error(d)
	}
}

// TestE2EAllocatorFailOnOOM: --fail-on-oom exits 9 when the traced command
// caught its out-of-memory failures and exited 0.
func TestE2EAllocatorFailOnOOM(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	cmd := exec.Command(bin, "--fail-on-oom", "-o", filepath.Join(t.TempDir(), "report.txt"), "--lib",
		filepath.Join(dir, "libtt_metal.so"), "--", filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 9 {
		t.Fatalf("tttrace --fail-on-oom: %v, want exit status 9\n%s", err, stderr.String())
	}
}

// TestE2EAllocatorAll: --all with the workload started after tttrace (the
// library probed through --lib before it runs): the same numbers, a mesh's
// own allocator's included.
func TestE2EAllocatorAll(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	ready, out, truthPath := filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
	tt, tout := start(t, bin, "--all", "--json", "-o", out, "--ready-file", ready, "--lib", filepath.Join(dir, "libtt_metal.so"))
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	// --mesh: a MeshDevice's own allocator too (its numbers and failures).
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "blackhole", "--mesh", "--leak", "--truth", truthPath)
	if err := w.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, wout)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Contains(b, []byte(`"process_summary"`)) || strings.Contains(tout.String(), "exited")
	}, "process report")
	tt.Process.Signal(syscall.SIGINT)
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	for _, d := range compareAlloc("all", readAllocOut(t, out), readAllocTruth(t, truthPath)) {
		t.Error(d)
	}
}

// TestE2EAllocatorAttachAfterOpen: -p after the chips opened: their
// BankManagers were made before tttrace attached. Each chip's allocator is
// either read from the process (source "memory", numbers equal to the
// truth's) or null with a reason; never numbers from nowhere. Failures of a
// chip whose allocator is unknown say so (null statistics and a why).
func TestE2EAllocatorAttachAfterOpen(t *testing.T) {
	var out string
	r := run{variant: "gcc-O2", mode: "pid", scenario: "alloc", args: []string{"--shape", "n300", "--open-before-go", "--leak"}, out: &out}
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	atr := readAllocTruth(t, truthPathOf(t, out))
	o := readAllocOut(t, out)
	procs, _ := o.summary["processes"].([]any)
	checked := 0
	for _, p := range procs {
		pm, _ := p.(map[string]any)
		if pid, _ := num(pm, "pid"); uint32(pid) != atr.Pid {
			continue
		}
		ds, _ := pm["devices"].([]any)
		for _, d := range ds {
			dm, _ := d.(map[string]any)
			switch a := dm["allocator"].(type) {
			case nil:
				if why, _ := dm["allocator_why"].(string); why == "" {
					t.Errorf("chip %v: allocator null without allocator_why", dm["device"])
				}
				checked++
			case map[string]any:
				for typ, v := range a {
					if g, _ := v.(map[string]any); g != nil && g["source"] != "memory" {
						t.Errorf("chip %v %s: source %v for an allocator made before attach", dm["device"], typ, g["source"])
					}
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no chip of the process in the summary")
	}
	if len(o.failures) != len(atr.Failures) {
		t.Errorf("%d alloc_failed records, the replica failed %d allocations", len(o.failures), len(atr.Failures))
	}
	for i, f := range o.failures {
		if i < len(atr.Failures) {
			if tid, _ := num(f, "tid"); uint32(tid) != atr.Failures[i].Tid {
				t.Errorf("failure %d: tid %v, want %d", i, f["tid"], atr.Failures[i].Tid)
			}
		}
	}
}

// TestE2EAllocatorSite: each failed allocation names its site, taken on
// BankManager::allocate_buffer's out-of-memory path (the instruction that
// loads its message, found from the library's code): the innermost frame is
// allocate_buffer, and every caller frame is the return address the
// replica's own unwinder (libgcc's _Unwind_Backtrace, in the truth) found
// above allocate_buffer, up to ttwork_main; from Python, the innermost
// Python frame is ttwork.py's call of ttwork_main.
func TestE2EAllocatorSite(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd"},
		{variant: "gcc-O2", mode: "python"},
		{variant: "clang-O3", mode: "cmd"},
		{variant: "gcc-O3-dwarf-zstd", mode: "cmd"},
	} {
		r.scenario = "alloc"
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			var out string
			r.out = &out
			r.args = []string{"--shape", "n150"}
			// The process keeps living after its failures, as a real one
			// does: tttrace reads its maps to unwind the stacks.
			holdForSites(t, &r)
			sum, tr := trace(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			atr := readAllocTruth(t, truthPathOf(t, out))
			for _, d := range compareAlloc(r.name(), readAllocOut(t, out), atr) {
				t.Error(d)
			}
			p := procOf(t, sum, tr.Pid)
			sites := map[uint32]*devices.Site{}
			for i := range p.Sites {
				sites[p.Sites[i].Site] = &p.Sites[i]
			}
			if len(p.AllocFailures) != len(atr.Failures) {
				t.Fatalf("%d alloc_failures, the replica failed %d", len(p.AllocFailures), len(atr.Failures))
			}
			if p.Stats.AllocOOMs != uint64(len(atr.Failures)) {
				t.Errorf("alloc_ooms = %d, want %d (one per failure)", p.Stats.AllocOOMs, len(atr.Failures))
			}
			pyLine := 0
			if r.mode == "python" {
				pyLine = lineOf(t, filepath.Join(replicaRoot, r.variant, "ttwork.py"), "return lib.ttwork_main(len(enc), argv)")
			}
			for i, f := range p.AllocFailures {
				want := atr.Failures[i]
				if !f.Thrown {
					t.Errorf("failure %d (%s): thrown = false: its out-of-memory path was not seen", i, want.Cause)
				}
				s := sites[f.Site]
				if f.Site == 0 || s == nil {
					t.Errorf("failure %d (%s): site %d not described", i, want.Cause, f.Site)
					continue
				}
				desc := describe(s)
				nat := s.Native
				if len(nat) < 2 || !strings.HasPrefix(nat[0].Function, "tt::tt_metal::BankManager::allocate_buffer(") {
					t.Errorf("failure %d (%s): innermost frame is not BankManager::allocate_buffer:\n%s", i, want.Cause, desc)
					continue
				}
				if len(want.Callers) == 0 {
					t.Fatalf("failure %d: the truth has no callers", i)
				}
				main := -1
				for j := 1; j < len(nat) && j-1 < len(want.Callers); j++ {
					if nat[j].PC != want.Callers[j-1] {
						t.Errorf("failure %d (%s): frame %d pc %#x, the replica's unwinder has %#x:\n%s", i, want.Cause, j, nat[j].PC, want.Callers[j-1], desc)
						break
					}
					if nat[j].Function == "ttwork_main" {
						main = j
						break
					}
				}
				if main < 0 {
					t.Errorf("failure %d (%s): the frames equal to the truth's do not reach ttwork_main:\n%s", i, want.Cause, desc)
				}
				if r.mode == "python" {
					if len(s.Python) == 0 || filepath.Base(s.Python[0].File) != "ttwork.py" || s.Python[0].Line != pyLine {
						t.Errorf("failure %d (%s): innermost Python frame is not ttwork.py:%d:\n%s", i, want.Cause, pyLine, desc)
					}
				}
			}
		})
	}
}

// lineOf is the line of path that holds text (exactly once).
func lineOf(t *testing.T, path, text string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			if line != 0 {
				t.Fatalf("%q is on lines %d and %d of %s", text, line, i+1, path)
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("%q is not in %s", text, path)
	}
	return line
}

// TestE2EAllocatorInlined: a build whose BankManager::allocate_buffer is
// inlined into its caller (INLINE_ALLOCATOR=1: the exported copy is never
// called). The plan says the allocator's requests are not seen, the size_
// totals stay exact, and no chip gives allocator numbers other than the
// truth's: each type either equals it or is null with a why (a chip whose
// managers were seen made says it allocated without a
// BankManager::allocate_buffer record; one whose constructors were inlined
// too has a null allocator with its why).
func TestE2EAllocatorInlined(t *testing.T) {
	var out string
	r := run{variant: "inline-alloc-gcc-O2", mode: "cmd", scenario: "alloc", args: []string{"--shape", "n300", "--leak"}, out: &out}
	bin, replica := setup(t)
	doc, err := exec.Command(bin, "doctor", filepath.Join(replica, r.variant, "libtt_metal.so")).CombinedOutput()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, doc)
	}
	if !bytes.Contains(doc, []byte("BankManager::allocate_buffer has no caller in this library")) {
		t.Errorf("doctor does not say allocate_buffer is not called:\n%s", doc)
	}
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	atr := readAllocTruth(t, truthPathOf(t, out))
	o := readAllocOut(t, out)
	truthOf := map[int32]map[string]allocTruthAllocator{}
	for _, d := range atr.Devices {
		truthOf[d.Device] = d.Allocator
	}
	procs, _ := o.summary["processes"].([]any)
	unknown := 0
	for _, p := range procs {
		pm, _ := p.(map[string]any)
		ds, _ := pm["devices"].([]any)
		for _, d := range ds {
			dm, _ := d.(map[string]any)
			id, _ := dm["device"].(float64)
			a, _ := dm["allocator"].(map[string]any)
			if a == nil {
				// The bank managers' constructors inlined as well (the
				// build lets the compiler inline within the file).
				if why, _ := dm["allocator_why"].(string); why == "" {
					t.Errorf("chip %v: allocator null without allocator_why", id)
				}
				unknown++
				continue
			}
			for typ, v := range a {
				g, _ := v.(map[string]any)
				if g == nil {
					continue
				}
				if g["total_allocated_bytes"] == nil {
					why, _ := g["why"].(string)
					if why == "" {
						t.Errorf("chip %v %s: numbers null without a why", id, typ)
					}
					if int32(id) == 0 && typ == "dram" && !strings.Contains(why, "without a BankManager::allocate_buffer record") {
						t.Errorf("chip 0 dram: why %q", why)
					}
					unknown++
					continue
				}
				want, ok := truthOf[int32(id)][strings.ToUpper(typ)]
				if !ok {
					t.Errorf("chip %v %s: numbers %v, the truth has none", id, typ, g)
					continue
				}
				for _, f := range []struct {
					key  string
					want uint64
				}{{"total_allocated_bytes", want.Allocated}, {"total_free_bytes", want.Free}, {"largest_free_block_bytes", want.LargestBlock}} {
					if v, ok := num(g, f.key); !ok || v != f.want {
						t.Errorf("chip %v %s %s = %v, the truth has %d", id, typ, f.key, g[f.key], f.want)
					}
				}
			}
		}
	}
	if unknown == 0 {
		t.Error("no chip type says its numbers are unknown: the test proves nothing")
	}
}

// TestE2EAllocatorFromMemory: "-p" attached after the chips opened and after
// allocations, frees and a fragmented DRAM list (ttwork --alloc-before-go).
// With the library's DWARF, every open chip's bank managers are found at
// attach from the process's root of its devices (g_instances ->
// MetalContext -> DeviceManager -> Device -> its allocator) and read from
// its memory ("source": "memory"), the types and the chip (--idle-chip: the
// last one, which only frees, after the attach, a buffer allocated before
// it: the list read must hold it) that allocate nothing after the attach
// included; the live model
// goes on from there: every number equals the replica's get_statistics at
// the end, and the three failures after the attach are explained with the
// allocator's exact state. Without DWARF, each chip says why it has no
// allocator view.
func TestE2EAllocatorFromMemory(t *testing.T) {
	t.Run("dwarf", func(t *testing.T) {
		var out string
		r := run{variant: "gcc-O3-dwarf-zstd", mode: "pid", scenario: "alloc",
			args: []string{"--shape", "n300", "--alloc-before-go", "--idle-chip", "--leak"}, out: &out}
		sum, tr := trace(t, r)
		for _, d := range compare(r, sum, tr) {
			t.Error(d)
		}
		atr := readAllocTruth(t, truthPathOf(t, out))
		held, idle := false, false
		for _, d := range atr.Devices {
			if a, ok := d.Allocator["DRAM"]; ok && d.Device == 0 && a.Allocated != 0 {
				held = true
			}
			idle = idle || d.Device == 1 && d.Allocator != nil
		}
		if !held || !idle {
			t.Fatalf("the replica's chip 0 holds no DRAM at the end, or chip 1 has no allocator (%v, %v): the test proves nothing", held, idle)
		}
		o := readAllocOut(t, out)
		if len(o.allocs) == 0 {
			t.Fatal("no alloc event: the test proves nothing")
		}
		for _, e := range o.allocs {
			if dev, ok := num(e, "device"); !ok || dev == 1 {
				t.Fatalf("an alloc on chip 1, or on no chip, after the attach (%v): not idle, the test proves less than it says", e)
			}
		}
		for _, d := range compareAllocFrom(r.name(), o, atr, "memory", nil) {
			t.Error(d)
		}
	})
	t.Run("no-dwarf", func(t *testing.T) {
		var out string
		r := run{variant: "gcc-O2", mode: "pid", scenario: "alloc",
			args: []string{"--shape", "n300", "--alloc-before-go", "--leak"}, out: &out}
		trace(t, r)
		atr := readAllocTruth(t, truthPathOf(t, out))
		o := readAllocOut(t, out)
		chips := 0
		for _, p := range o.summary["processes"].([]any) {
			pm := p.(map[string]any)
			if pid, _ := num(pm, "pid"); uint32(pid) != atr.Pid {
				continue
			}
			for _, d := range pm["devices"].([]any) {
				dm := d.(map[string]any)
				chips++
				why, _ := dm["allocator_why"].(string)
				if dm["allocator"] != nil || !strings.Contains(why, "DWARF") {
					t.Errorf("chip %v: allocator %v, allocator_why %q; want null and why, naming the missing DWARF", dm["device"], dm["allocator"], why)
				}
			}
		}
		if chips != 2 {
			t.Errorf("%d chips of the process in the summary, want 2", chips)
		}
		if len(o.failures) != len(atr.Failures) {
			t.Errorf("%d alloc_failed records, the replica failed %d allocations", len(o.failures), len(atr.Failures))
		}
		for _, f := range o.failures {
			if f["cause"] != nil || f["why"] == nil {
				t.Errorf("failure without a known allocator: cause %v why %v", f["cause"], f["why"])
			}
		}
	})
}

// TestE2EAllocatorHybrid: chips in AllocatorMode::HYBRID with per-core L1
// buffers (ttwork alloc --hybrid: one BankManager::allocate_buffer call per
// shard core, allocator id bank + 1, each at its own address; a lockstep
// buffer after them avoids their ranges). The per-core buffers are counted
// apart (per_core_buffers, per_core_bytes), never in the lockstep list, their
// calls are not failures, and every lockstep number and failure equals the
// replica's get_statistics(L1), which reports allocator 0 only.
func TestE2EAllocatorHybrid(t *testing.T) {
	var out string
	r := run{variant: "gcc-O2", mode: "cmd", scenario: "alloc", args: []string{"--shape", "n150", "--hybrid", "--leak"},
		peaks: true, out: &out}
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	atr := readAllocTruth(t, truthPathOf(t, out))
	o := readAllocOut(t, out)
	for _, d := range compareAlloc(r.name(), o, atr) {
		t.Error(d)
	}
	want := atr.Devices[0].Allocator["L1"]
	if want.PerCoreBuffers == 0 {
		t.Fatal("the replica holds no per-core buffer at the end: the test proves nothing")
	}
	for _, p := range o.summary["processes"].([]any) {
		pm := p.(map[string]any)
		if pid, _ := num(pm, "pid"); uint32(pid) != atr.Pid {
			continue
		}
		for _, d := range pm["devices"].([]any) {
			dm := d.(map[string]any)
			if id, _ := num(dm, "device"); id != 0 {
				continue
			}
			l1, _ := dm["allocator"].(map[string]any)["l1"].(map[string]any)
			if n, _ := num(l1, "per_core_buffers"); n != want.PerCoreBuffers {
				t.Errorf("per_core_buffers = %v, the truth has %d", l1["per_core_buffers"], want.PerCoreBuffers)
			}
			if n, _ := num(l1, "per_core_bytes"); n != want.PerCoreBytes {
				t.Errorf("per_core_bytes = %v, the truth has %d", l1["per_core_bytes"], want.PerCoreBytes)
			}
		}
	}
}
