package main

// End-to-end tests: the real tttrace binary, the real BPF path, the
// replica of libtt_metal.so (testdata/replica) running real workloads.
// Each run compares tttrace's summary with the ground truth the replica
// keeps from its own allocators, field for field.
//
// TTTRACE_BIN and TTTRACE_REPLICA (a directory of replica builds, one
// subdirectory per variant) are set by `make test`; without them the test
// builds both into a temporary directory.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/probes/probestest"
)

var (
	buildOnce               sync.Once
	buildErr                error
	tttraceBin, replicaRoot string
)

// setup returns the tttrace binary and the replica build directory.
func setup(t *testing.T) (bin, replica string) {
	t.Helper()
	probestest.RequireRoot(t)
	buildOnce.Do(func() {
		tttraceBin = os.Getenv("TTTRACE_BIN")
		replicaRoot = os.Getenv("TTTRACE_REPLICA")
		dir, err := os.MkdirTemp("", "tttrace-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		if tttraceBin == "" {
			tttraceBin = filepath.Join(dir, "tttrace")
			if out, err := exec.Command("go", "build", "-o", tttraceBin, ".").CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build: %v\n%s", err, out)
				return
			}
		}
		if replicaRoot == "" {
			replicaRoot = filepath.Join(dir, "replica")
			out, err := exec.Command("make", "-s", "-C", "../../testdata/replica", "OUT="+filepath.Join(replicaRoot, "gcc-O2")).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("build replica: %v\n%s", err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return tttraceBin, replicaRoot
}

// truth is what the replica writes with --truth.
type truth struct {
	Pid              uint32        `json:"pid"`
	Devices          []truthDevice `json:"devices"`
	Leaks            []truthLeak   `json:"leaks"`
	UnknownFrees     uint64        `json:"unknown_frees"`
	UnknownFreeBytes uint64        `json:"unknown_free_bytes"`
	Calls            map[string]uint64
	// path: the file it was read from.
	path string
}

type truthDevice struct {
	Device            int32  `json:"device"`
	DRAMBytes         uint64 `json:"dram_bytes"`
	L1Bytes           uint64 `json:"l1_bytes"`
	L1SmallBytes      uint64 `json:"l1_small_bytes"`
	TraceBytes        uint64 `json:"trace_bytes"`
	SystemMemoryBytes uint64 `json:"system_memory_bytes"`
	CBBytes           uint64 `json:"cb_bytes"`
	LiveBuffers       uint64 `json:"live_buffers"`
	// cb_bytes: resident on the busiest core; registered: summed over the
	// programs holding CBs; resident total: summed over the cores.
	CBRegisteredBytes    uint64            `json:"cb_registered_bytes"`
	CBResidentTotalBytes uint64            `json:"cb_resident_total_bytes"`
	Peaks                map[string]uint64 `json:"peaks"`
}

// total is the current bytes of the truth field named field (dram_bytes, ...).
func (d *truthDevice) total(field string) uint64 {
	switch field {
	case "dram_bytes":
		return d.DRAMBytes
	case "l1_bytes":
		return d.L1Bytes
	case "l1_small_bytes":
		return d.L1SmallBytes
	case "trace_bytes":
		return d.TraceBytes
	case "system_memory_bytes":
		return d.SystemMemoryBytes
	case "cb_bytes":
		return d.CBBytes
	case "cb_registered_bytes":
		return d.CBRegisteredBytes
	case "cb_resident_total_bytes":
		return d.CBResidentTotalBytes
	}
	panic(field)
}

type truthLeak struct {
	Device  int32  `json:"device"`
	Type    string `json:"type"`
	Address uint64 `json:"address"`
	Size    uint64 `json:"size"`
}

// run is one traced workload.
type run struct {
	variant  string
	mode     string // "cmd" (tttrace -- ttwork), "pid" (tttrace -p), "python" (tttrace -- python3 ttwork.py)
	scenario string
	args     []string
	peaks    bool     // single-threaded: peaks must equal the truth's too
	flags    []string // extra tttrace flags
	noLib    bool     // let tttrace find the library itself (no --lib)
	out      *string  // receives the path of the NDJSON tttrace wrote (valid during the test)
	// loadWhen (python mode): the script loads TT-Metal only once tttrace
	// has said this (ttwork.py --load-after), as a real script does after
	// its imports.
	loadWhen string
	// holdFile: the workload holds until this file exists (holdForSites);
	// trace writes it (releaseHold).
	holdFile string
}

func (r run) name() string {
	return fmt.Sprintf("%s/%s/%s", r.variant, r.mode, r.scenario)
}

// holdForSites makes the traced process live on after its work, as a real
// program does, until tttrace has handled its allocations: tttrace unwinds
// a stack with the maps of the process it came from, read while the process
// lives, and one that exits before tttrace got there (a few milliseconds
// after its work, or a second on a loaded machine whose tracer lags) has no
// stacks (docs/stacks.md). The replica holds after writing its truth until
// the hold file exists; trace writes it once tttrace's output (flushed at
// each tick) has as many allocations and failed allocations as the truth
// says the workload made (releaseHold). In python mode the interpreter is
// registered for Python lines once its files are read (in the background;
// seconds on a loaded machine or behind a shim such as pyenv's, which runs
// dozens of processes first): the script loads TT-Metal once tttrace says
// it runs CPython, as a real one does after its imports.
func holdForSites(t *testing.T, r *run) {
	t.Helper()
	r.holdFile = filepath.Join(t.TempDir(), "hold")
	r.args = append(append([]string{}, r.args...), "--hold-file", r.holdFile)
	if r.mode == "python" {
		r.loadWhen = "runs CPython"
	}
}

// releaseHold writes hold once the output file out (being written) has an alloc line per
// track_allocate and an alloc_failed line per failed allocation of the
// truth at truthPath (written before the replica holds): every stack was
// then unwound while the process lived. It gives up after a minute, or when
// done is closed, and writes hold then too.
func releaseHold(hold, truthPath, out string, done <-chan struct{}) {
	defer os.WriteFile(hold, nil, 0o644)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
		var tr struct {
			Calls    map[string]uint64 `json:"calls"`
			Failures []json.RawMessage `json:"alloc_failures"`
		}
		b, err := os.ReadFile(truthPath)
		if err != nil || json.Unmarshal(b, &tr) != nil {
			continue // not written yet, or being written
		}
		// Until tracing ends, the output is a temporary file beside out
		// (cli/outfile.go), renamed over it at the end.
		tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tttrace-*"))
		var o []byte
		for _, f := range append(tmps, out) {
			if b, err := os.ReadFile(f); err == nil {
				o = append(o, b...)
			}
		}
		allocs := bytes.Count(o, []byte(`{"type":"alloc","seq":`))
		failed := bytes.Count(o, []byte(`"type":"alloc_failed"`))
		if uint64(allocs) >= tr.Calls["track_allocate"] && failed >= len(tr.Failures) {
			return
		}
	}
}

// trace runs r and returns tttrace's summary and the replica's truth.
func trace(t *testing.T, r run) (*devices.Summary, *truth) {
	t.Helper()
	bin, replica := setup(t)
	dir := filepath.Join(replica, r.variant)
	lib := filepath.Join(dir, "libtt_metal.so")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out.ndjson")
	truthPath := filepath.Join(tmp, "truth.json")
	work := append([]string{"--scenario", r.scenario, "--truth", truthPath}, r.args...)
	stderr := &syncBuffer{}

	switch r.mode {
	case "cmd", "python":
		var target []string
		if r.mode == "cmd" {
			target = append([]string{filepath.Join(dir, "ttwork")}, work...)
		} else {
			target = append([]string{"python3", filepath.Join(dir, "ttwork.py")}, work...)
			if r.loadWhen != "" {
				load := filepath.Join(tmp, "load")
				target = append(target, "--load-after", load)
				done := make(chan struct{})
				defer close(done)
				go func() {
					defer os.WriteFile(load, nil, 0o644)
					for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
						select {
						case <-done:
							return
						case <-time.After(20 * time.Millisecond):
						}
						if strings.Contains(stderr.String(), r.loadWhen) {
							return
						}
					}
				}()
			}
		}
		if r.holdFile != "" {
			done := make(chan struct{})
			defer close(done)
			go releaseHold(r.holdFile, truthPath, out, done)
		}
		flags := []string{"--json", "-o", out}
		if !r.noLib {
			flags = append(flags, "--lib", lib)
		}
		args := append(append(flags, r.flags...), append([]string{"--"}, target...)...)
		cmd := exec.Command(bin, args...)
		cmd.Stderr = stderr
		cmd.Stdout = stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: tttrace %s: %v\n%s", r.name(), strings.Join(args, " "), err, stderr.String())
		}
	case "pid":
		goFile := filepath.Join(tmp, "go")
		w := exec.Command(filepath.Join(dir, "ttwork"), append(work, "--go-file", goFile)...)
		traceHeld(t, bin, w, goFile, append([]string{"--json", "-o", out}, r.flags...), stderr, stderr)
	default:
		t.Fatalf("unknown mode %q", r.mode)
	}
	if r.out != nil {
		*r.out = out
	}
	sum := lastSummary(t, out)
	var tr truth
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatalf("%s: truth: %v\ntttrace said:\n%s", r.name(), err, stderr.String())
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: truth: %v", r.name(), err)
	}
	tr.path = truthPath
	visibleViews(t, lib, &tr)
	return sum, &tr
}

// visibleViews makes the truth's view count the views tttrace can see in
// lib: where Buffer::view inlines Buffer::create(device, address, ...)
// (clang), the views it makes never reach a probe (doctor says so; totals
// are unaffected), so the truth's view creations less its Buffer::view
// calls are what the ledger must count.
func visibleViews(t *testing.T, lib string, tr *truth) {
	t.Helper()
	if viewsInlined(t, lib) {
		tr.Calls["buffer_create_view"] -= tr.Calls["buffer_view"]
	}
}

// traceHeld runs tttrace -p on w, a workload not yet started that says
// "ready" and then waits for goFile to exist: w is started, tttrace
// attached to it with flags, goFile created, and both must exit 0.
// tttrace writes to stdout and stderr.
func traceHeld(t *testing.T, bin string, w *exec.Cmd, goFile string, flags []string, stdout, stderr io.Writer) {
	t.Helper()
	ready := goFile + ".ready"
	wout := &syncBuffer{}
	w.Stdout, w.Stderr = wout, wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	args := append(append([]string{}, flags...), "--ready-file", ready, "-p", fmt.Sprint(w.Process.Pid))
	tr := exec.Command(bin, args...)
	tr.Stdout, tr.Stderr = stdout, stderr
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Process.Kill()
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("workload %s: %v\n%s", strings.Join(w.Args, " "), err, wout.String())
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lastSummary reads the NDJSON file: every line must be JSON with a type,
// and the last must be the summary.
func lastSummary(t *testing.T, path string) *devices.Summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	var last []byte
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(line, &head); err != nil || head.Type == "" {
			t.Fatalf("line %d of the NDJSON is not a typed JSON object: %.200s", n+1, line)
		}
		last = append(last[:0], line...)
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var sum devices.Summary
	if err := json.Unmarshal(last, &sum); err != nil || sum.Type != "summary" {
		t.Fatalf("last NDJSON line is not the summary: %.300s", last)
	}
	return &sum
}

// compare lists every difference between the summary of the traced
// process and the truth.
func compare(r run, sum *devices.Summary, tr *truth) (diffs []string) {
	errorf := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if sum.LostEvents != 0 || !sum.Complete {
		errorf("%s: lost_events = %d, complete = %v", r.name(), sum.LostEvents, sum.Complete)
	}
	var p *devices.ProcessSummary
	for i := range sum.Processes {
		// A process in its own pid namespace knows itself by its ns pid.
		if q := &sum.Processes[i]; q.Pid == tr.Pid || (q.NsPid != 0 && q.NsPid == tr.Pid) {
			p = q
		}
	}
	if p == nil {
		errorf("%s: summary has no process %d (has %d processes)", r.name(), tr.Pid, len(sum.Processes))
		return diffs
	}
	if !p.Exited {
		errorf("%s: process not reported as exited", r.name())
	}
	got := map[int32]devices.DeviceSummary{}
	for _, d := range p.Devices {
		got[d.Device] = d
	}
	want := map[int32]truthDevice{}
	for _, d := range tr.Devices {
		want[d.Device] = d
	}
	chips := map[int32]bool{}
	for c := range got {
		chips[c] = true
	}
	for c, d := range want {
		chips[c] = true
		if _, ok := got[c]; !ok && d.Peaks["live_buffers"] > 0 {
			errorf("%s: chip %d held buffers but is missing from the summary", r.name(), c)
		}
	}
	ids := make([]int, 0, len(chips))
	for c := range chips {
		ids = append(ids, int(c))
	}
	sort.Ints(ids)
	for _, id := range ids {
		c := int32(id)
		g, w := got[c], want[c]
		pairs := []struct {
			name      string
			got, want uint64
		}{
			{"dram_bytes", g.DRAMBytes, w.DRAMBytes},
			{"l1_bytes", g.L1Bytes, w.L1Bytes},
			{"l1_small_bytes", g.L1SmallBytes, w.L1SmallBytes},
			{"trace_bytes", g.TraceBytes, w.TraceBytes},
			{"system_memory_bytes", g.SystemMemoryBytes, w.SystemMemoryBytes},
			{"cb_bytes", g.CBBytes, w.CBBytes},
			{"live_buffers", g.LiveBuffers, w.LiveBuffers},
			{"cb_registered_bytes", g.CBRegisteredBytes, w.CBRegisteredBytes},
			{"cb_resident_total_bytes", g.CBResidentTotalBytes, w.CBResidentTotalBytes},
		}
		if r.peaks {
			pk := g.Peaks
			pairs = append(pairs, []struct {
				name      string
				got, want uint64
			}{
				{"peak dram_bytes", pk.DRAMBytes.Value, w.Peaks["dram_bytes"]},
				{"peak l1_bytes", pk.L1Bytes.Value, w.Peaks["l1_bytes"]},
				{"peak l1_small_bytes", pk.L1SmallBytes.Value, w.Peaks["l1_small_bytes"]},
				{"peak trace_bytes", pk.TraceBytes.Value, w.Peaks["trace_bytes"]},
				{"peak system_memory_bytes", pk.SystemMemoryBytes.Value, w.Peaks["system_memory_bytes"]},
				{"peak cb_bytes", pk.CBBytes.Value, w.Peaks["cb_bytes"]},
				{"peak live_buffers", pk.LiveBuffers.Value, w.Peaks["live_buffers"]},
				{"peak cb_registered_bytes", pk.CBRegisteredBytes.Value, w.Peaks["cb_registered_bytes"]},
				{"peak cb_resident_total_bytes", pk.CBResidentTotalBytes.Value, w.Peaks["cb_resident_total_bytes"]},
			}...)
		}
		for _, pr := range pairs {
			if pr.got != pr.want {
				errorf("%s: chip %d %s = %d, truth %d", r.name(), c, pr.name, pr.got, pr.want)
			}
		}
	}
	// Leaks: the same multiset of (device, type, address, size).
	key := func(d int32, typ string, a, s uint64) string { return fmt.Sprintf("%d/%s/%#x/%d", d, typ, a, s) }
	var gl, wl []string
	for _, l := range p.Leaks {
		gl = append(gl, key(l.Device, l.Type, l.Address, l.Size))
	}
	for _, l := range tr.Leaks {
		wl = append(wl, key(l.Device, l.Type, l.Address, l.Size))
	}
	sort.Strings(gl)
	sort.Strings(wl)
	if strings.Join(gl, " ") != strings.Join(wl, " ") {
		errorf("%s: leaks differ:\n got  %d: %.600v\n want %d: %.600v", r.name(), len(gl), gl, len(wl), wl)
	}
	if p.UnknownFrees != tr.UnknownFrees || p.UnknownFreeBytes != tr.UnknownFreeBytes {
		errorf("%s: unknown frees %d (%d B), truth %d (%d B)", r.name(), p.UnknownFrees, p.UnknownFreeBytes, tr.UnknownFrees, tr.UnknownFreeBytes)
	}
	if p.DoubleFrees != 0 {
		errorf("%s: %d double frees reported; the replica never frees twice", r.name(), p.DoubleFrees)
	}
	// Every probed call was seen exactly once.
	st := p.Stats
	for _, c := range []struct {
		name string
		got  uint64
	}{
		{"track_allocate", st.Allocs},
		{"track_deallocate", st.Frees},
		{"track_allocate_cb", st.CBAllocs},
		{"track_deallocate_cb", st.CBFrees},
		{"buffer_create_view", st.Views},
		{"allocate_circular_buffers", st.CBLayouts},
		{"deallocate_circular_buffers", st.CBTeardowns},
		{"program_destroy", st.ProgramDestroys},
		{"device_close", st.DeviceCloses},
		{"mesh_close", st.MeshCloses},
		{"mark_as_deallocated", st.MarkDeallocated},
	} {
		if w, ok := tr.Calls[c.name]; !ok {
			errorf("%s: truth has no call count %q", r.name(), c.name)
		} else if c.got != w {
			errorf("%s: %s seen %d times, called %d times", r.name(), c.name, c.got, w)
		}
	}
	for kind, n := range p.AnomalyCounts {
		if n != 0 {
			errorf("%s: anomaly %s x%d: %+v", r.name(), kind, n, p.Anomalies)
		}
	}
	return diffs
}

func check(t *testing.T, r run) {
	t.Helper()
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
}

// TestE2EComparisonCatchesWrongNumbers: the same run with the size read at
// the wrong offset must not pass the comparison.
func TestE2EComparisonCatchesWrongNumbers(t *testing.T) {
	layout := filepath.Join(t.TempDir(), "wrong.json")
	os.WriteFile(layout, []byte(`{"name":"wrong","buffer_impl_ptr":-1,"device":16,"size":88,"buffer_type":32,`+
		`"owns_data":43,"allocation_status":72,"hooked_allocation":73,"address":80,"page_size":24,"device_id":8}`), 0o644)
	r := run{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, flags: []string{"--layout", layout}}
	mustBeCaught(t, r, "sizes read at the page_size offset")
}

// mustBeCaught traces r, which reads wrong numbers by construction, and
// fails unless the comparison with the ground truth finds differences.
func mustBeCaught(t *testing.T, r run, what string) {
	t.Helper()
	sum, tr := trace(t, r)
	diffs := compare(r, sum, tr)
	if len(diffs) == 0 {
		t.Fatalf("%s passed the ground-truth comparison", what)
	}
	t.Logf("caught, as it should: %d differences, e.g. %s", len(diffs), diffs[0])
}

// TestE2EFoundation: the foundation scenarios in "-- CMD" and "-p" modes.
func TestE2EFoundation(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "pid", scenario: "basic", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "python", scenario: "basic", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "threads", args: []string{"--leak", "--threads", "4", "--seed", "7"}},
		{variant: "gcc-O2", mode: "pid", scenario: "threads", args: []string{"--leak", "--threads", "4", "--seed", "8"}},
		{variant: "gcc-O2", mode: "cmd", scenario: "oom", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "pid", scenario: "oom", peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "burst", args: []string{"--events", "1000000", "--threads", "2"}},
		{variant: "gcc-O2", mode: "pid", scenario: "burst", args: []string{"--events", "1000000", "--threads", "2"}},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) { check(t, r) })
	}
}

// TestE2ELifecycle: every lifecycle case of TT-Metal, exact against the
// replica's ground truth: meshes (T3K, sub-meshes, a mesh id equal to a chip
// id), 32 chips, sparse ids up to 100, circular buffers (2026 and legacy
// behaviour), closes with live memory, graph capture, a DRAM and an L1
// buffer at one address, and the whole sequence in one process.
func TestE2ELifecycle(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "galaxy", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "sparse", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "cb", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "cb_legacy", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "sametype", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "mark", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "pid", scenario: "mark", peaks: true},
		{variant: "gcc-O2", mode: "pid", scenario: "mesh", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "python", scenario: "all", args: []string{"--leak"}, peaks: true},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) { check(t, r) })
	}
}

// TestE2EAttachMidRun: -p after the workload allocated. Frees of buffers
// allocated before attach are unknown frees with their bytes, no total goes
// negative, and the summary says the ledger started late.
func TestE2EAttachMidRun(t *testing.T) {
	r := run{variant: "gcc-O2", mode: "pid", scenario: "midrun", args: []string{"--leak"}}
	sum, tr := trace(t, r)
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	if tr.UnknownFrees == 0 {
		t.Fatal("the midrun scenario freed nothing allocated before attach: the test proves nothing")
	}
	for _, p := range sum.Processes {
		if p.Pid == tr.Pid && !p.AttachedMidRun {
			t.Error("attached_mid_run = false for a process attached after it loaded the library")
		}
	}
}

// TestE2EConcurrent: threads allocating and freeing on shared chips while
// others run and destroy programs with CBs and create mesh buffers; exact
// over repeated runs with different seeds.
func TestE2EConcurrent(t *testing.T) {
	for seed := 1; seed <= 3; seed++ {
		r := run{variant: "gcc-O2", mode: "cmd", scenario: "concurrent", args: []string{"--leak", "--threads", "4", "--seed", fmt.Sprint(seed)}}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { check(t, r) })
	}
}
