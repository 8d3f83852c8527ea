package main

// tttrace mcp end to end, driven by the official MCP Inspector's CLI
// (npm @modelcontextprotocol/inspector-cli, installed in build/npm by
// scripts/deps.sh test), not a client of our own: it lists the tools and
// calls each over runs of the replica, and every answer is checked against
// the replica's truth (totals, peaks, leaks, failed allocations, trace
// hazards, windows' peaks, what changed between two runs) and the saved
// run's summary; a running tttrace is read through a snapshot.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/mcpserver"
)

// inspectorCLI is the directory of the Inspector's CLI package; under CI a
// missing one fails the test.
func inspectorCLI(t *testing.T) (prefix, pkg string) {
	t.Helper()
	prefix, err := filepath.Abs("../../build/npm")
	if err != nil {
		t.Fatal(err)
	}
	pkg = filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "inspector-cli")
	if _, err := os.Stat(filepath.Join(pkg, "build", "cli.js")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the MCP Inspector's CLI is not installed (scripts/deps.sh test installs it): %v", err)
		}
		t.Skipf("the MCP Inspector's CLI is not installed (scripts/deps.sh test): %v", err)
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Fatalf("npx: %v", err)
	}
	return prefix, pkg
}

// inspector runs the Inspector's CLI (npx ... --cli) against the server
// command and returns what it printed (the JSON result).
type inspector struct {
	t           *testing.T
	prefix, pkg string
	server      []string
}

func (in *inspector) run(method string, args ...string) ([]byte, error) {
	in.t.Helper()
	argv := append([]string{"--no-install", "--prefix", in.prefix, "mcp-inspector-cli", "--cli"}, in.server...)
	argv = append(append(argv, "--method", method), args...)
	cmd := exec.Command("npx", argv...)
	// Its index.js finds its package.json as ../package.json of the
	// working directory (inspector-cli 1.0.3): run it from its build/.
	cmd.Dir = filepath.Join(in.pkg, "build")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%v: %s", err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// call calls tool with args (key=value) and decodes its structured
// content into out; it fails the test on an error answer.
func (in *inspector) call(tool string, out any, args ...string) {
	in.t.Helper()
	var targs []string
	for _, a := range args {
		targs = append(targs, "--tool-arg", a)
	}
	b, err := in.run("tools/call", append([]string{"--tool-name", tool}, targs...)...)
	if err != nil {
		in.t.Fatalf("tools/call %s %v: %v\n%s", tool, args, err, b)
	}
	var res struct {
		IsError           bool `json:"isError"`
		Content           []struct{ Text string }
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		in.t.Fatalf("tools/call %s: %v\n%s", tool, err, b)
	}
	if res.IsError || len(res.StructuredContent) == 0 {
		in.t.Fatalf("tools/call %s %v: error answer %s", tool, args, b)
	}
	if err := json.Unmarshal(res.StructuredContent, out); err != nil {
		in.t.Fatalf("tools/call %s: %v\n%s", tool, err, res.StructuredContent)
	}
	// The text content is the same JSON, for clients that read text only.
	if len(res.Content) != 1 || !json.Valid([]byte(res.Content[0].Text)) {
		in.t.Errorf("tools/call %s: content %+v", tool, res.Content)
	}
}

// callError calls tool expecting an error answer and returns its text.
func (in *inspector) callError(tool string, args ...string) string {
	in.t.Helper()
	var targs []string
	for _, a := range args {
		targs = append(targs, "--tool-arg", a)
	}
	b, err := in.run("tools/call", append([]string{"--tool-name", tool}, targs...)...)
	if err != nil {
		in.t.Fatalf("tools/call %s: %v", tool, err)
	}
	var res struct {
		IsError bool `json:"isError"`
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(b, &res); err != nil || !res.IsError || len(res.Content) != 1 {
		in.t.Fatalf("tools/call %s %v: want an error answer, got %s", tool, args, b)
	}
	return res.Content[0].Text
}

// mcpWork runs ttwork's scenario under tttrace --save into runs/NAME.ndjson
// and returns the truth it wrote.
func mcpWork(t *testing.T, bin, variant, runs, name string, work ...string) []byte {
	t.Helper()
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	args := append([]string{"--save", filepath.Join(runs, name+".ndjson"), "--lib", filepath.Join(variant, "libtt_metal.so"), "--",
		filepath.Join(variant, "ttwork"), "--truth", truthPath}, work...)
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, log.String())
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// savedSummary is the summary line of a saved run, as the file has it.
func savedSummary(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	var s map[string]any
	if err := json.Unmarshal(lines[len(lines)-1], &s); err != nil || s["type"] != "summary" {
		t.Fatalf("%s: last line: %v", path, err)
	}
	return s
}

// jsonOf is v as canonical JSON (map keys sorted).
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(x)
	return string(b)
}

func TestE2EMCP(t *testing.T) {
	bin, replica := setup(t)
	prefix, pkg := inspectorCLI(t)
	variant := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	runs := filepath.Join(tmp, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	// The diff's runs: the basic scenario, then the same leaking (the
	// known change), each in a directory of its own beneath runs.
	a, trA := diffWork(t, bin, variant, filepath.Join(runs, "a"))
	b, trB := diffWork(t, bin, variant, filepath.Join(runs, "b"), "--leak")
	oomTruth := mcpWork(t, bin, variant, runs, "oom", "--scenario", "oom")
	hazardTruth := mcpWork(t, bin, variant, runs, "hazard", "--scenario", "trace_hazard")
	windowsRun, windowsTruth := mcpWindows(t, bin, variant, runs)
	opsTruth := mcpWork(t, bin, variant, runs, "ops", "--scenario", "ops", "--leak")

	in := &inspector{t: t, prefix: prefix, pkg: pkg, server: []string{bin, "mcp", "--runs", runs}}

	t.Run("tools/list", func(t *testing.T) {
		out, err := in.run("tools/list")
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Tools []struct {
				Name         string         `json:"name"`
				Description  string         `json:"description"`
				InputSchema  map[string]any `json:"inputSchema"`
				OutputSchema map[string]any `json:"outputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(out, &l); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var names []string
		for _, tool := range l.Tools {
			names = append(names, tool.Name)
			if len(tool.Description) < 200 || tool.InputSchema["type"] != "object" || tool.OutputSchema["type"] != "object" {
				t.Errorf("tool %s: description of %d bytes, input schema %v, output schema type %v", tool.Name, len(tool.Description), tool.InputSchema["type"], tool.OutputSchema["type"])
			}
		}
		sort.Strings(names)
		want := []string{"chips", "diff_runs", "failed_allocations", "hazards", "leaks_by_site", "list_runs", "ops", "top_holders", "windows"}
		if strings.Join(names, " ") != strings.Join(want, " ") {
			t.Errorf("tools %v, want %v", names, want)
		}
	})

	t.Run("list_runs", func(t *testing.T) {
		var l mcpserver.ListAnswer
		in.call("list_runs", &l, "limit=100")
		kinds := map[string]string{}
		for _, f := range l.Files {
			kinds[f.Path] = f.Kind
		}
		for _, p := range []string{a, b, filepath.Join(runs, "oom.ndjson"), filepath.Join(runs, "hazard.ndjson"), windowsRun, filepath.Join(runs, "ops.ndjson")} {
			if kinds[p] != "ndjson" {
				t.Errorf("%s: kind %q in %+v", p, kinds[p], l.Files)
			}
		}
		if len(l.Dirs) != 1 || l.Dirs[0] != runs || l.Live {
			t.Errorf("dirs %v live %v", l.Dirs, l.Live)
		}
	})

	t.Run("chips", func(t *testing.T) {
		var c mcpserver.ChipsAnswer
		in.call("chips", &c, "run="+b)
		saved := savedSummary(t, b)
		procs := saved["processes"].([]any)
		if len(c.Processes) != 1 || len(procs) != 1 || c.Processes[0].Pid != trB.Pid || c.Run.File != b || !c.Run.Complete {
			t.Fatalf("processes %+v, run %+v", c.Processes, c.Run)
		}
		// The devices are the saved summary's, field for field.
		if got, want := jsonOf(t, c.Processes[0].Devices), jsonOf(t, procs[0].(map[string]any)["devices"]); got != want {
			t.Errorf("devices:\n%s\nsaved summary:\n%s", got, want)
		}
		// And the replica's truth: each counter at the end and its peak.
		checkChips(t, "run b", c.Processes[0].Devices, trB)
		// Chips of unknown identity are said (the replica opens no
		// /dev/tenstorrent).
		if !strings.Contains(strings.Join(c.Caveats, "\n"), "physical chip is unknown") {
			t.Errorf("caveats %q", c.Caveats)
		}
		// One chip.
		dev := c.Processes[0].Devices[len(c.Processes[0].Devices)-1].Device
		var one mcpserver.ChipsAnswer
		in.call("chips", &one, "run="+b, fmt.Sprintf("device=%d", dev))
		if len(one.Processes) != 1 || len(one.Processes[0].Devices) != 1 || one.Processes[0].Devices[0].Device != dev {
			t.Errorf("device=%d: %+v", dev, one.Processes)
		}
	})

	t.Run("top_holders", func(t *testing.T) {
		var h mcpserver.HoldersAnswer
		in.call("top_holders", &h, "run="+b, "limit=3")
		if len(h.Processes) != 1 {
			t.Fatalf("%+v", h)
		}
		p := &h.Processes[0]
		var bytes uint64
		sizes := []uint64{}
		inTruth := map[string]bool{}
		for _, l := range trB.Leaks {
			bytes += l.Size
			sizes = append(sizes, l.Size)
			inTruth[fmt.Sprintf("%d %s %d %d", l.Device, l.Type, l.Address, l.Size)] = true
		}
		sort.Slice(sizes, func(i, j int) bool { return sizes[i] > sizes[j] })
		if p.Basis != "left_at_exit" || p.BuffersCount != uint64(len(trB.Leaks)) || p.BuffersBytes != bytes || len(p.Buffers) != min(3, len(sizes)) {
			t.Fatalf("basis %s, %d buffers of %d bytes (%d given); truth: %d leaks of %d bytes", p.Basis, p.BuffersCount, p.BuffersBytes, len(p.Buffers), len(trB.Leaks), bytes)
		}
		for i, hb := range p.Buffers {
			if hb.Size != sizes[i] || !inTruth[fmt.Sprintf("%d %s %d %d", hb.Device, hb.Type, hb.Address, hb.Size)] {
				t.Errorf("buffer %d: %+v; truth sizes %v", i, hb.Leak, sizes)
			}
		}
		want := mcpserver.Cut{What: fmt.Sprintf("pid %d buffers", trB.Pid), Shown: 3, Total: uint64(len(trB.Leaks))}
		found := false
		for _, c := range h.Cut {
			found = found || c == want
		}
		if len(trB.Leaks) > 3 && !found {
			t.Errorf("cut %+v, want %+v", h.Cut, want)
		}
		var sum uint64
		for _, s := range p.Sites {
			sum += s.InUseBytes
			if s.PeakBytes == nil || s.AllocBytes == nil {
				t.Errorf("site %+v: no peak or alloc bytes though the run has its events", s)
			}
		}
		if len(p.Sites) < 3 && sum != bytes {
			t.Errorf("sites hold %d bytes, the truth's leaks %d", sum, bytes)
		}
	})

	t.Run("leaks_by_site", func(t *testing.T) {
		var l mcpserver.LeaksAnswer
		in.call("leaks_by_site", &l, "run="+b, "limit=500")
		var n, bytes uint64
		for _, lk := range trB.Leaks {
			n, bytes = n+1, bytes+lk.Size
		}
		p := &l.Processes[0]
		var sn, sb uint64
		for _, s := range p.Sites {
			sn, sb = sn+s.Count, sb+s.Bytes
			if s.Where == "" {
				t.Errorf("site %d: no where", s.Site)
			}
		}
		if p.Leaks.Count != n || p.Leaks.Bytes != bytes || sn+p.WithoutSite.Count != n || sb+p.WithoutSite.Bytes != bytes {
			t.Errorf("leaks %+v, sites %d/%d, without site %+v; truth %d leaks of %d bytes", p.Leaks, sn, sb, p.WithoutSite, n, bytes)
		}
		// The sites are the summary's leak_sites.
		saved := savedSummary(t, b)["processes"].([]any)[0].(map[string]any)["leak_sites"].([]any)
		if len(saved) != len(p.Sites) {
			t.Fatalf("%d sites, the summary %d", len(p.Sites), len(saved))
		}
		for i, s := range saved {
			m := s.(map[string]any)
			g := p.Sites[i]
			if m["site"].(float64) != float64(g.Site) || m["bytes"].(float64) != float64(g.Bytes) || m["count"].(float64) != float64(g.Count) {
				t.Errorf("site %d: %+v; summary %v", i, g, m)
			}
		}
		// Run a left nothing.
		var none mcpserver.LeaksAnswer
		in.call("leaks_by_site", &none, "run="+a)
		if p := none.Processes[0]; p.Leaks.Count != uint64(len(trA.Leaks)) || len(trA.Leaks) != 0 || len(p.Sites) != 0 {
			t.Errorf("run a: %+v", p)
		}
	})

	t.Run("failed_allocations", func(t *testing.T) {
		var tr struct {
			Failures []struct {
				Device int32  `json:"device"`
				Type   string `json:"type"`
				Size   uint64 `json:"size"`
				Cause  string `json:"cause"`
				Before struct {
					Allocated   uint64 `json:"total_allocated_bytes"`
					Free        uint64 `json:"total_free_bytes"`
					LargestFree uint64 `json:"largest_free_block_bytes"`
				} `json:"before"`
			} `json:"alloc_failures"`
		}
		if err := json.Unmarshal(oomTruth, &tr); err != nil || len(tr.Failures) == 0 {
			t.Fatalf("truth: %v %s", err, oomTruth)
		}
		var f mcpserver.FailuresAnswer
		in.call("failed_allocations", &f, "run=oom.ndjson")
		if len(f.Processes) != 1 || f.Processes[0].Count != uint64(len(tr.Failures)) || len(f.Processes[0].Failures) != len(tr.Failures) {
			t.Fatalf("%+v; truth %d failures", f.Processes, len(tr.Failures))
		}
		for i, x := range f.Processes[0].Failures {
			w := tr.Failures[i]
			if x.Device == nil || *x.Device != w.Device || x.BufferType != w.Type || x.Size != w.Size || x.Cause != w.Cause ||
				x.TotalAllocated == nil || *x.TotalAllocated != w.Before.Allocated || *x.TotalFree != w.Before.Free || *x.LargestFree != w.Before.LargestFree {
				t.Errorf("failure %d: %+v; truth %+v", i, x.AllocFailure, w)
			}
			if lead := map[string]string{"exhausted": "exhausted: ", "fragmented": "fragmented: ", "larger_than_bank": "larger than a bank: "}[w.Cause]; lead == "" || !strings.HasPrefix(x.Explanation, lead) {
				t.Errorf("failure %d (%s): explanation %q", i, w.Cause, x.Explanation)
			}
			if w.Cause != "larger_than_bank" && (x.HoldersCount == 0 || len(x.Holders) == 0) {
				t.Errorf("failure %d (%s): no holders", i, w.Cause)
			}
		}
	})

	t.Run("hazards", func(t *testing.T) {
		var tr struct {
			Hazards []struct {
				Device  int32  `json:"device"`
				Type    string `json:"buffer_type"`
				Address uint64 `json:"address"`
				Size    uint64 `json:"size"`
				Replay  uint64 `json:"replay"`
			} `json:"trace_hazards"`
		}
		if err := json.Unmarshal(hazardTruth, &tr); err != nil || len(tr.Hazards) == 0 {
			t.Fatalf("truth: %v", err)
		}
		var h mcpserver.HazardsAnswer
		in.call("hazards", &h, "run=hazard.ndjson", "limit=500")
		if len(h.Processes) != 1 || h.Processes[0].Traces == nil {
			t.Fatalf("%+v", h)
		}
		ts := h.Processes[0].Traces
		if ts.HazardCount != uint64(len(tr.Hazards)) || len(ts.Hazards) != len(tr.Hazards) || h.Processes[0].TraceProblems < uint64(len(tr.Hazards)) {
			t.Fatalf("%d hazards (%d listed), truth %d", ts.HazardCount, len(ts.Hazards), len(tr.Hazards))
		}
		got, want := []string{}, []string{}
		for i, x := range ts.Hazards {
			got = append(got, fmt.Sprintf("%d %s %d %d %d", x.Device, x.Buffer.BufferType, x.Buffer.Address, x.Buffer.Size, x.Replay))
			w := tr.Hazards[i]
			want = append(want, fmt.Sprintf("%d %s %d %d %d", w.Device, w.Type, w.Address, w.Size, w.Replay))
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("hazards:\n%s\ntruth:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("windows", func(t *testing.T) {
		var w mcpserver.WindowsAnswer
		in.call("windows", &w, "run="+windowsRun)
		if len(w.Processes) != 1 || len(w.Processes[0].Windows) != len(windowsTruth) {
			t.Fatalf("%+v; truth has %d windows", w.Processes, len(windowsTruth))
		}
		for i, win := range w.Processes[0].Windows {
			tw := windowsTruth[i]
			if win.Index != i || win.Name != tw.Name {
				t.Errorf("window %d: %d %q; truth %q", i, win.Index, win.Name, tw.Name)
			}
			for _, td := range tw.Devices {
				var d *devices.WindowDevice
				for j := range win.Devices {
					if win.Devices[j].Device == td.Device {
						d = &win.Devices[j]
					}
				}
				if d == nil {
					t.Errorf("window %d: no chip %d", i, td.Device)
					continue
				}
				for typ, counter := range memStatsTypes {
					if pk := td.Peaks[counter]; d.Peaks[counter].Value != pk || (pk > 0 && d.MemoryStats[typ].PeakBytesInUse != pk) {
						t.Errorf("window %d chip %d %s: peak %d, memory_stats %+v; truth %d", i, td.Device, counter, d.Peaks[counter].Value, d.MemoryStats[typ], pk)
					}
				}
			}
		}
	})

	t.Run("ops", func(t *testing.T) {
		var tr struct {
			Ops []devices.OpRow `json:"ops"`
		}
		if err := json.Unmarshal(opsTruth, &tr); err != nil || len(tr.Ops) < 3 {
			t.Fatalf("truth: %v %s", err, opsTruth)
		}
		var o mcpserver.OpsAnswer
		in.call("ops", &o, "run=ops.ndjson", "limit=500")
		if len(o.Processes) != 1 || o.Processes[0].OpsCount != uint64(len(tr.Ops)) || len(o.Processes[0].Ops) != len(tr.Ops) {
			t.Fatalf("%+v; truth %d rows", o.Processes, len(tr.Ops))
		}
		// The rows are the truth's (the replica's own op frames), most
		// bytes first.
		rows := func(rs []devices.OpRow) string {
			var out []string
			for _, r := range rs {
				out = append(out, fmt.Sprintf("%+v", r))
			}
			sort.Strings(out)
			return strings.Join(out, "\n")
		}
		got := o.Processes[0].Ops
		if rows(got) != rows(tr.Ops) {
			t.Errorf("ops rows:\n%s\ntruth:\n%s", rows(got), rows(tr.Ops))
		}
		for i := 1; i < len(got); i++ {
			if got[i].Bytes > got[i-1].Bytes {
				t.Errorf("row %d (%d bytes) after one of %d", i, got[i].Bytes, got[i-1].Bytes)
			}
		}
		// Cut to the limit, and said.
		var two mcpserver.OpsAnswer
		in.call("ops", &two, "run=ops.ndjson", "limit=2")
		want := mcpserver.Cut{What: fmt.Sprintf("pid %d ops", o.Processes[0].Pid), Shown: 2, Total: uint64(len(tr.Ops))}
		if len(two.Processes[0].Ops) != 2 || len(two.Cut) != 1 || two.Cut[0] != want || two.Processes[0].Ops[0] != got[0] {
			t.Errorf("limit=2: %+v, cut %+v", two.Processes[0].Ops, two.Cut)
		}
	})

	t.Run("diff_runs", func(t *testing.T) {
		var d mcpserver.DiffAnswer
		in.call("diff_runs", &d, "a="+a, "b="+b, "limit=500")
		if d.Diff == nil || d.Diff.Same || len(d.Diff.Processes) != 1 {
			t.Fatalf("%+v", d.Diff)
		}
		// Growth: exactly the counters the truths say grew, by as much.
		want := map[string]uint64{}
		chips := map[int32]bool{}
		for _, tr := range []*diffTruth{trA, trB} {
			for _, dv := range tr.Devices {
				chips[dv.Device] = true
			}
		}
		for dev := range chips {
			for _, name := range append(diffCounters[:6:6], l1CoreCounter) {
				ea, pa := trA.fig(dev, name)
				eb, pb := trB.fig(dev, name)
				if eb > ea {
					want[fmt.Sprintf("%d %s end", dev, name)] = eb - ea
				}
				if pb > pa {
					want[fmt.Sprintf("%d %s peak", dev, name)] = pb - pa
				}
			}
		}
		got := map[string]uint64{}
		for _, g := range d.Diff.Growth {
			got[fmt.Sprintf("%d %s %s", g.Device, g.Counter, g.At)] = g.Bytes
		}
		if jsonOf(t, got) != jsonOf(t, want) || len(want) == 0 {
			t.Errorf("growth %v\ntruths %v", got, want)
		}
		if d.A.File != a || d.B.File != b {
			t.Errorf("runs %+v %+v", d.A, d.B)
		}
	})

	t.Run("bounds", func(t *testing.T) {
		// A name that leads out of the runs is refused, in one line.
		// (mcpserver's tests try every way out; here the one an agent
		// would.)
		for _, name := range []string{"/etc/passwd"} {
			msg := in.callError("chips", "run="+name)
			if strings.Contains(msg, "\n") || !(strings.Contains(msg, "outside") || strings.Contains(msg, "no such")) {
				t.Errorf("run=%s: %q", name, msg)
			}
		}
		if err := os.Symlink("/etc/passwd", filepath.Join(runs, "link.ndjson")); err != nil {
			t.Fatal(err)
		}
		if msg := in.callError("chips", "run=link.ndjson"); !strings.Contains(msg, "leads outside") {
			t.Errorf("a link out: %q", msg)
		}
		// A truncated run: the line it stopped at.
		whole, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runs, "cut.ndjson"), whole[:len(whole)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		if msg := in.callError("chips", "run=cut.ndjson"); !strings.Contains(msg, "line ") {
			t.Errorf("a cut file: %q", msg)
		}
		// An answer over --max-answer-bytes is cut further, and says so.
		small := &inspector{t: t, prefix: prefix, pkg: pkg, server: []string{bin, "mcp", "--runs", runs, "--max-answer-bytes", "6K"}}
		var h mcpserver.HoldersAnswer
		small.call("top_holders", &h, "run="+b, "limit=100")
		if raw, _ := json.Marshal(h); len(raw) > 6<<10 || !strings.Contains(strings.Join(h.Caveats, "\n"), "lists were cut to") || len(h.Cut) == 0 {
			t.Errorf("%d bytes, caveats %q, cut %+v", len(raw), h.Caveats, h.Cut)
		}
	})

	t.Run("live", func(t *testing.T) { mcpLive(t, bin, variant, runs, pkg, prefix) })
}

// checkChips compares the chips' counters with a truth's.
func checkChips(t *testing.T, what string, got []devices.DeviceSummary, tr *diffTruth) {
	t.Helper()
	if len(got) != len(tr.Devices) {
		t.Errorf("%s: %d chips, truth %d", what, len(got), len(tr.Devices))
	}
	for _, d := range got {
		raw, _ := json.Marshal(d)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		pk := m["peaks"].(map[string]any)
		for _, name := range diffCounters {
			end, peak := tr.fig(d.Device, name)
			if uint64(m[name].(float64)) != end || uint64(pk[name].(map[string]any)["value"].(float64)) != peak {
				t.Errorf("%s chip %d %s: %v, peak %v; truth %d, %d", what, d.Device, name, m[name], pk[name], end, peak)
			}
		}
	}
}

// mcpWindows runs the windows scenario with its marks (as TestE2EWindow)
// and returns its saved run and the truth's windows.
func mcpWindows(t *testing.T, bin, variant, runs string) (string, []windowTruth) {
	t.Helper()
	tmp := t.TempDir()
	out, truthPath, winFile := filepath.Join(runs, "windows.ndjson"), filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "win")
	log := &syncBuffer{}
	cmd := exec.Command(bin, "--save", out, "--lib", filepath.Join(variant, "libtt_metal.so"), "--",
		filepath.Join(variant, "ttwork"), "--scenario", "windows", "--truth", truthPath, "--window-file", winFile)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	names := []string{"warmup", "steady"}
	defer func() {
		for n := range names {
			_ = os.WriteFile(fmt.Sprintf("%s.%d", winFile, n+1), nil, 0o644)
		}
	}()
	for i, name := range names {
		n := i + 1
		re := regexp.MustCompile(fmt.Sprintf(`window %d pid (\d+)`, n))
		waitFor(t, func() bool { return re.MatchString(log.String()) }, fmt.Sprintf("the workload at window %d", n))
		if o, err := exec.Command(bin, "mark", fmt.Sprint(cmd.Process.Pid), name).CombinedOutput(); err != nil {
			t.Fatalf("tttrace mark: %v\n%s", err, o)
		}
		waitFor(t, func() bool {
			return strings.Contains(log.String(), fmt.Sprintf("tttrace: window %d (%s) started", n, name))
		},
			fmt.Sprintf("tttrace to start window %d", n))
		if err := os.WriteFile(fmt.Sprintf("%s.%d", winFile, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, log.String())
	}
	var tr struct {
		Windows []windowTruth `json:"windows"`
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tr); err != nil || len(tr.Windows) != len(names)+1 {
		t.Fatalf("truth windows: %v %s", err, b)
	}
	return out, tr.Windows
}

// mcpLive: a tttrace tracing now, read through a snapshot (--live,
// tttrace_pid) while the workload holds: the state equals the truth at
// the hold; without --live the server refuses.
func mcpLive(t *testing.T, bin, variant, runs, pkg, prefix string) {
	tmp := t.TempDir()
	out := filepath.Join(runs, "live.ndjson")
	truthPath, hold := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "hold")
	cmd := exec.Command(bin, "--json", "-o", out, "--lib", filepath.Join(variant, "libtt_metal.so"), "--",
		filepath.Join(variant, "ttwork"), "--scenario", "basic", "--leak", "--truth", truthPath, "--hold-file", hold)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	defer os.WriteFile(hold, nil, 0o644)
	first := awaitTruth(t, truthPath)
	// Every allocation of the truth applied (a snapshot is the ledger as
	// of the records read).
	waitFor(t, func() bool {
		tmps, _ := filepath.Glob(filepath.Join(runs, ".live.ndjson.tttrace-*"))
		var n int
		for _, f := range tmps {
			if b, err := os.ReadFile(f); err == nil {
				n += bytes.Count(b, []byte(`{"type":"alloc","seq":`))
			}
		}
		return uint64(n) >= first.Calls["track_allocate"]
	}, "tttrace to read the workload's allocations")

	pid := fmt.Sprint(cmd.Process.Pid)
	off := &inspector{t: t, prefix: prefix, pkg: pkg, server: []string{bin, "mcp", "--runs", runs}}
	if msg := off.callError("chips", "tttrace_pid="+pid); !strings.Contains(msg, "without --live") {
		t.Errorf("without --live: %q", msg)
	}
	in := &inspector{t: t, prefix: prefix, pkg: pkg, server: []string{bin, "mcp", "--runs", runs, "--live"}}
	var l mcpserver.ListAnswer
	in.call("list_runs", &l)
	found := false
	for _, tr := range l.Tracers {
		found = found || (fmt.Sprint(tr.Pid) == pid && tr.Snapshots && tr.Output == out)
	}
	if !l.Live || !found {
		t.Errorf("tracers %+v", l.Tracers)
	}
	var c mcpserver.ChipsAnswer
	in.call("chips", &c, "tttrace_pid="+pid)
	if c.Run.Source != "snapshot" || fmt.Sprint(c.Run.TTtracePID) != pid || !strings.HasPrefix(c.Run.File, out+".") || len(c.Processes) != 1 {
		t.Fatalf("run %+v, %d processes", c.Run, len(c.Processes))
	}
	p := c.Processes[0]
	if p.Pid != first.Pid || p.Exited {
		t.Errorf("process %+v", p.ProcessHead)
	}
	tr := &diffTruth{Pid: first.Pid}
	for _, d := range first.Devices {
		tr.Devices = append(tr.Devices, struct {
			truthDevice
			Allocator map[string]struct {
				Allocated   uint64 `json:"total_allocated_bytes"`
				Free        uint64 `json:"total_free_bytes"`
				LargestFree uint64 `json:"largest_free_block_bytes"`
			} `json:"allocator"`
		}{truthDevice: d})
	}
	checkChips(t, "snapshot", p.Devices, tr)
	if !strings.Contains(strings.Join(c.Caveats, "\n"), "a snapshot of the tttrace running as pid "+pid) {
		t.Errorf("caveats %q", c.Caveats)
	}
	// Held now: the live buffers, not leaks.
	var h mcpserver.HoldersAnswer
	in.call("top_holders", &h, "tttrace_pid="+pid)
	if len(h.Processes) != 1 || h.Processes[0].Basis != "held_now" {
		t.Errorf("%+v", h.Processes)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, log.String())
	}
}
