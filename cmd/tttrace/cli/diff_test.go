package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks/diff"
)

func TestGrowthLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want diff.Limit
		str  string
		bad  bool
	}{
		{in: "0", want: diff.Limit{}, str: "0"},
		{in: "64K", want: diff.Limit{Bytes: 64 << 10}, str: "64K"},
		{in: "1M", want: diff.Limit{Bytes: 1 << 20}, str: "1M"},
		{in: "5%", want: diff.Limit{Pct: 5, IsPct: true}, str: "5%"},
		{in: "2.5 %", want: diff.Limit{Pct: 2.5, IsPct: true}, str: "2.5%"},
		{in: "-1%", bad: true}, {in: "NaN%", bad: true}, {in: "x", bad: true}, {in: "%", bad: true}, {in: "-5", bad: true},
	} {
		var g growthLimit
		err := g.Set(c.in)
		switch {
		case c.bad && err == nil:
			t.Errorf("%q: taken as %+v", c.in, g.l)
		case !c.bad && (err != nil || g.l != c.want || g.String() != c.str):
			t.Errorf("%q: %+v %q %v, want %+v %q", c.in, g.l, g.String(), err, c.want, c.str)
		}
	}
}

// writeSummary writes a summary alone (--no-events) of one process whose
// chip 0 holds dram bytes.
func writeSummary(t *testing.T, path string, pid uint32, dram uint64) {
	t.Helper()
	s := devices.Summary{Type: "summary", Complete: true, Events: 10, Processes: []devices.ProcessSummary{{
		Pid: pid, Command: "./work", Exited: true,
		Devices: []devices.DeviceSummary{{Device: 0, DRAMBytes: dram, Peaks: devices.Peaks{DRAMBytes: devices.Peak{Value: dram, TsNs: 5}}}},
		Leaks:   []devices.Leak{}, LeakGroups: []devices.LeakGroup{}, UnplacedLeaks: []devices.Leak{}, Sites: []devices.Site{}, LeakSites: []devices.LeakSite{},
		L1Clashes: []devices.Notice{}, AllocFailures: []devices.AllocFailure{}, Meshes: []devices.MeshAllocator{},
		AnomalyCounts: map[string]uint64{}, Anomalies: []devices.Anomaly{}}}}
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDiffCommand(t *testing.T) {
	dir := t.TempDir()
	a, b, cut := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson"), filepath.Join(dir, "cut.ndjson")
	writeSummary(t, a, 10, 4096)
	writeSummary(t, b, 20, 4096+1000)
	if err := os.WriteFile(cut, []byte(`{"type":"alloc","seq":1`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "diff.json")
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{args: []string{a, b}},
		{args: []string{a, b, "--fail-on-growth", "1000"}},
		{args: []string{a, b, "--fail-on-growth", "999"}, code: ExitGrowth, stderr: "2 memory counter(s) grew more than --fail-on-growth 999 allows; the most: pid 10 (A) / 20 (B) chip 0 dram_bytes at the end, 4096 -> 5096 bytes"},
		{args: []string{a, b, "--fail-on-growth", "24%"}, code: ExitGrowth},
		{args: []string{a, b, "--fail-on-growth", "25%"}},
		{args: []string{b, a, "--fail-on-growth", "0"}},
		{args: []string{a, b, "--json", "-o", out}},
		{args: []string{a}, code: ExitUsage, stderr: "Usage: tttrace diff A B"},
		{args: []string{a, b, "--fail-on-growth", "lots"}, code: ExitUsage, stderr: `"lots" is neither a number of bytes nor a percentage`},
		{args: []string{a, filepath.Join(dir, "none")}, code: ExitError, stderr: "no such file"},
		{args: []string{a, cut}, code: ExitError, stderr: "cut.ndjson: line 1: the last line has no end"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(append([]string{"diff"}, c.args...), &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("diff %s: exit %d, stderr %q; want %d, %q", strings.Join(c.args, " "), code, stderr.String(), c.code, c.stderr)
		}
	}
	j, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r diff.Result
	if err := json.Unmarshal(j, &r); err != nil {
		t.Fatal(err)
	}
	if r.Same || len(r.Processes) != 1 || r.SitesBy != "leaks" || !r.A.SummaryOnly || len(r.Growth) != 2 || r.Growth[0].Bytes != 1000 {
		t.Errorf("%s", j)
	}
}
