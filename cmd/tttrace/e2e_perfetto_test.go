package main

// --perfetto end to end: the timeline file of a real traced replica run,
// decoded independently (perfettotest), against the replica's own truth.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// truthFields maps a counter track's memory type to the truth's field names.
var truthFields = map[string]string{
	"DRAM": "dram_bytes", "L1": "l1_bytes", "L1_SMALL": "l1_small_bytes", "TRACE": "trace_bytes",
	"SYSTEM_MEMORY": "system_memory_bytes", "CB": "cb_bytes",
	"CB_REGISTERED": "cb_registered_bytes", "CB_RESIDENT_TOTAL": "cb_resident_total_bytes",
}

// l1CoreTrack is the track of L1 per core (the busiest core's total).
const l1CoreTrack = "L1_BUSIEST_CORE"

// l1CoreTotals reads, per chip, the truth's L1 per core: the busiest
// core's total_bytes now and at its peak (l1_busiest_core,
// peak_l1_busiest_core; 0 where null).
func l1CoreTotals(t *testing.T, tr *truth) map[int32][2]uint64 {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var lt struct {
		Devices []struct {
			Device int32        `json:"device"`
			Now    *l1CoreTruth `json:"l1_busiest_core"`
			Peak   *l1CoreTruth `json:"peak_l1_busiest_core"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &lt); err != nil {
		t.Fatalf("truth: %v", err)
	}
	out := map[int32][2]uint64{}
	for _, d := range lt.Devices {
		var v [2]uint64
		if d.Now != nil {
			v[0] = d.Now.TotalBytes
		}
		if d.Peak != nil {
			v[1] = d.Peak.TotalBytes
		}
		out[d.Device] = v
	}
	return out
}

// checkTimeline compares the counter tracks of the traced process with the
// truth: for every chip and memory type, the track's last value (in time
// order) is the final total and its maximum the peak; L1_BUSIEST_CORE's
// are the truth's L1 per core (l1_busiest_core's total_bytes now and at
// its peak). A type that never held memory has no track (both 0).
func checkTimeline(t *testing.T, name, path string, tr *truth) *perfettotest.Trace {
	t.Helper()
	tl, err := perfettotest.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %s: %v", name, path, err)
	}
	ps := tl.ProcessesOf(tr.Pid)
	if len(ps) != 1 {
		t.Fatalf("%s: %d process tracks for pid %d, want 1 (%d in all)", name, len(ps), tr.Pid, len(tl.Processes))
	}
	p := ps[0]
	if p.ProcessName != "ttwork" {
		t.Errorf("%s: process named %q, want ttwork", name, p.ProcessName)
	}
	counters, err := tl.Counters(p)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[perfettotest.ChipType]bool{}
	held := 0
	l1c := l1CoreTotals(t, tr)
	for i := range tr.Devices {
		d := &tr.Devices[i]
		want := map[string][2]uint64{l1CoreTrack: l1c[d.Device]}
		for typ, field := range truthFields {
			want[typ] = [2]uint64{d.total(field), d.Peaks[field]}
		}
		for typ, w := range want {
			k := perfettotest.ChipType{Chip: d.Device, Type: typ}
			seen[k] = true
			var last, peak int64
			if c := counters[k]; c != nil {
				last, peak = c.Last(), c.Max()
				held++
			}
			if uint64(last) != w[0] || uint64(peak) != w[1] {
				t.Errorf("%s: chip %d %s: track ends at %d, peaks at %d; truth: total %d, peak %d",
					name, d.Device, typ, last, peak, w[0], w[1])
			}
		}
	}
	for k := range counters {
		if !seen[k] {
			t.Errorf("%s: a track for chip %d %s, which the truth does not have", name, k.Chip, k.Type)
		}
	}
	if held == 0 {
		t.Fatalf("%s: no counter track: the scenario held no memory?", name)
	}
	return tl
}

func countNamed(tl *perfettotest.Trace, prefix string) int {
	n := 0
	for _, in := range tl.Instants {
		if strings.HasPrefix(in.Name, prefix) {
			n++
		}
	}
	return n
}

// -- CMD with --json: the mesh scenario (a mesh buffer charges every chip
// of its mesh), leaving memory allocated so final totals are not all zero;
// cb_cache (a program cache registering more CBs than any core holds):
// the CB, CB_REGISTERED and CB_RESIDENT_TOTAL tracks each end at and peak
// at the truth's, and L1_BUSIEST_CORE (L1 buffers and resident CBs of the
// busiest core) at the truth's L1 per core.
func TestE2EPerfettoCmd(t *testing.T) {
	for _, scenario := range []string{"mesh", "cb_cache"} {
		t.Run(scenario, func(t *testing.T) {
			pf := filepath.Join(t.TempDir(), "trace.pftrace")
			r := run{variant: "gcc-O2", mode: "cmd", scenario: scenario, args: []string{"--leak"}, peaks: true,
				flags: []string{"--perfetto", pf}}
			sum, tr := trace(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			tl := checkTimeline(t, r.name(), pf, tr)
			if n := countNamed(tl, "exit 0"); n != 1 {
				t.Errorf("%d exit instants, want 1", n)
			}
			if scenario != "cb_cache" {
				return
			}
			apart := false
			for _, d := range tr.Devices {
				pk := d.Peaks
				apart = apart || pk["cb_bytes"] > 0 && pk["cb_registered_bytes"] > pk["cb_bytes"] && pk["cb_resident_total_bytes"] > pk["cb_bytes"]
			}
			if !apart {
				t.Error("cb_cache: no chip whose truth tells the CB measures apart")
			}
			both := false
			for dev, v := range l1CoreTotals(t, tr) {
				for _, d := range tr.Devices {
					both = both || d.Device == dev && d.Peaks["cb_bytes"] > 0 && v[1] > d.Peaks["cb_bytes"]
				}
			}
			if !both {
				t.Error("cb_cache: no chip whose L1 per core peak holds L1 buffers beside CBs")
			}
		})
	}
}

// -p with the human report: the close scenario (Device::close and
// MeshDevice::close release what is left on their chips); each close is an
// instant on its thread.
func TestE2EPerfettoPid(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	pf := filepath.Join(tmp, "trace.pftrace")
	truthPath := filepath.Join(tmp, "truth.json")
	goFile := filepath.Join(tmp, "go")
	w := exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "close", "--leak", "--truth", truthPath, "--go-file", goFile)
	var report, stderr bytes.Buffer
	traceHeld(t, bin, w, goFile, []string{"--perfetto", pf}, &report, &stderr)
	if !strings.Contains(report.String(), fmt.Sprintf("process %d ", w.Process.Pid)) {
		t.Errorf("the human report is missing or does not name the process:\n%s", report.String())
	}
	var tr truth
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	tr.path = truthPath
	tl := checkTimeline(t, "pid/close", pf, &tr)
	for _, kind := range []string{"device_close", "mesh_close"} {
		if n, want := countNamed(tl, kind), int(tr.Calls[kind]); n != want || n == 0 {
			t.Errorf("%d %s instants, %d calls", n, kind, want)
		}
	}
	for _, in := range tl.Instants {
		if strings.HasSuffix(strings.Fields(in.Name)[0], "_close") && !tl.Tracks[in.Track].IsThread {
			t.Errorf("%s at %d is not on a thread track", in.Name, in.Ts)
		}
	}
}

// The timelines of two real runs, decoded by Debian's protoc with
// Perfetto's official perfetto_trace.proto (vendored): no unknown field, a
// clock snapshot, the sparse chips (0, 2, 7, 15, 31, 35, 63, 100: by name
// "chip 100" would come before "chip 15"), their memory types then their
// allocator counters in tttrace's order; the two files concatenated declare no uuid twice.
func TestE2EPerfettoSchema(t *testing.T) {
	pc := requireTool(t, "protoc", "protobuf-compiler")
	var files [][]byte
	var descs []map[uint64]*perfettotest.Desc
	total := 0
	for _, scenario := range []string{"sparse", "galaxy"} {
		pf := filepath.Join(t.TempDir(), "trace.pftrace")
		r := run{variant: "gcc-O2", mode: "cmd", scenario: scenario, args: []string{"--leak"}, flags: []string{"--perfetto", pf}}
		_, tr := trace(t, r)
		checkTimeline(t, r.name(), pf, tr)
		b, err := os.ReadFile(pf)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := perfettotest.Protoc(pc, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range perfettotest.CheckSchema(ps) {
			t.Errorf("%s: %s", scenario, p)
		}
		chips, allocs := 0, 0
		for _, d := range perfettotest.Descriptors(ps) {
			if strings.HasPrefix(d.Name, `"chip `) && !d.Counter {
				chips++
			}
			if d.Counter && strings.HasSuffix(d.Name, ` free"`) {
				allocs++
			}
		}
		if chips < len(tr.Devices) {
			t.Errorf("%s: %d chip tracks, the truth has %d chips", scenario, chips, len(tr.Devices))
		}
		// The allocator's counters are among the chips' ordered tracks.
		if allocs == 0 {
			t.Errorf("%s: no allocator counter track (chip N TYPE free)", scenario)
		}
		files = append(files, b)
		descs = append(descs, perfettotest.Descriptors(ps))
		total += len(ps)
	}
	for u := range descs[0] {
		if descs[1][u] != nil {
			t.Errorf("uuid %d is declared in both files", u)
		}
	}
	ps, err := perfettotest.Protoc(pc, append(append([]byte{}, files[0]...), files[1]...))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != total {
		t.Errorf("cat a b: %d packets, the files have %d", len(ps), total)
	}
	for _, p := range perfettotest.CheckSchema(ps) {
		t.Errorf("cat a b: %s", p)
	}
}
