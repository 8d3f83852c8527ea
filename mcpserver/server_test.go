package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// buf is a buffer of the crafted run: allocated, maybe freed.
type buf struct {
	id    uint64
	chip  int32
	typ   events.BufferType
	addr  uint64
	size  uint64
	site  uint32
	freed bool
}

// crafted is a run made here: pid 7 allocates bufs (in order), frees the
// freed ones, loses lost records, exits. Sites 1..3 are described.
func crafted(t *testing.T, path string, bufs []buf, lost uint64) {
	t.Helper()
	var out bytes.Buffer
	nd := sinks.NewNDJSON(&out, false)
	l := devices.NewLedger(devices.Options{})
	l.SetProcessInfo(7, devices.ProcessInfo{Command: "python3 work.py"})
	ts := uint64(0)
	emit := func(ev events.Event) {
		ts += 1000
		ev.Pid, ev.TsNs, ev.Seq = 7, ts, ts
		if ev.Tid == 0 {
			ev.Tid = 7
		}
		l.Apply(&ev)
		nd.Event(&ev)
	}
	announced := map[uint32]bool{}
	for _, b := range bufs {
		if b.site != 0 && !announced[b.site] {
			announced[b.site] = true
			s := devices.Site{Site: b.site, Native: []devices.NativeFrame{{PC: 0x1000, Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::GraphTracker::track_allocate"}},
				Python: []devices.PyFrame{{Function: "test_model", File: "tests/test_model.py", Line: int(b.site) * 10}}}
			nd.Site(7, &s)
		}
		ev := devicestest.Alloc(7, b.id, b.chip, b.typ, b.addr, b.size)
		ev.Site = b.site
		emit(ev)
	}
	for _, b := range bufs {
		if b.freed {
			emit(devicestest.Free(7, b.id, b.chip))
		}
	}
	if lost > 0 {
		emit(devicestest.Lost(lost))
	}
	emit(devicestest.Exit(0, 0))
	sum := l.Summary()
	if err := nd.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// client connects a client to a server made with o.
func client(t *testing.T, o Options) *mcp.ClientSession {
	t.Helper()
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t1, t2 := mcp.NewInMemoryTransports()
	if _, err := srv.Connect(ctx, t1, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, t2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls tool and decodes its structured answer into out; it returns
// the error text of an error answer ("" otherwise).
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		return res.Content[0].(*mcp.TextContent).Text
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v\n%s", tool, err, b)
	}
	return ""
}

var runBufs = []buf{
	{id: 1, chip: 0, typ: events.DRAM, addr: 0x10000, size: 4096, site: 1},
	{id: 2, chip: 0, typ: events.DRAM, addr: 0x20000, size: 65536, site: 2, freed: true},
	{id: 3, chip: 0, typ: events.DRAM, addr: 0x40000, size: 8192, site: 1},
	{id: 4, chip: 3, typ: events.L1, addr: 0x8000, size: 2048, site: 2},
	{id: 5, chip: 3, typ: events.L1, addr: 0x9000, size: 32768, site: 3},
	{id: 6, chip: 0, typ: events.L1, addr: 0x9000, size: 1024},
}

// The tools' answers are the crafted run's figures, computed here from
// what it did.
func TestToolsAnswerTheRun(t *testing.T) {
	dir := t.TempDir()
	crafted(t, filepath.Join(dir, "run.ndjson"), runBufs, 0)
	cs := client(t, Options{Dirs: []string{dir}})

	// Truth: what is left, per chip and type, per site; the peak of chip
	// 0's DRAM (4096 + 65536 + 8192, before the free).
	left := map[string]uint64{}
	bySite := map[uint32][2]uint64{}
	var leaks []buf
	for _, b := range runBufs {
		if !b.freed {
			left[fmt.Sprintf("%d %s", b.chip, b.typ)] += b.size
			v := bySite[b.site]
			bySite[b.site] = [2]uint64{v[0] + 1, v[1] + b.size}
			leaks = append(leaks, b)
		}
	}
	sort.Slice(leaks, func(i, j int) bool { return leaks[i].size > leaks[j].size })

	var c ChipsAnswer
	if msg := call(t, cs, "chips", map[string]any{"run": "run.ndjson"}, &c); msg != "" {
		t.Fatal(msg)
	}
	if len(c.Processes) != 1 || len(c.Processes[0].Devices) != 2 || c.Run.File != filepath.Join(dir, "run.ndjson") || c.Run.Source != "file" {
		t.Fatalf("%+v", c)
	}
	for _, d := range c.Processes[0].Devices {
		if d.DRAMBytes != left[fmt.Sprintf("%d DRAM", d.Device)] || d.L1Bytes != left[fmt.Sprintf("%d L1", d.Device)] {
			t.Errorf("chip %d: dram %d l1 %d; left %v", d.Device, d.DRAMBytes, d.L1Bytes, left)
		}
		if d.Device == 0 && d.Peaks.DRAMBytes.Value != 4096+65536+8192 {
			t.Errorf("chip 0 dram peak %d", d.Peaks.DRAMBytes.Value)
		}
	}

	var h HoldersAnswer
	call(t, cs, "top_holders", map[string]any{"run": "run.ndjson", "limit": 2}, &h)
	p := h.Processes[0]
	if p.Basis != "left_at_exit" || p.BuffersCount != uint64(len(leaks)) || len(p.Buffers) != 2 ||
		p.Buffers[0].Size != leaks[0].size || p.Buffers[1].Size != leaks[1].size || p.Buffers[0].Where != "tests/test_model.py:30 in test_model" {
		t.Errorf("holders %+v", p)
	}
	if len(h.Cut) != 2 || h.Cut[0] != (Cut{What: "pid 7 buffers", Shown: 2, Total: uint64(len(leaks))}) {
		t.Errorf("cut %+v", h.Cut)
	}
	for _, s := range p.Sites {
		if s.PeakBytes == nil || s.AllocBytes == nil {
			t.Errorf("site %+v: the run's events were read, its peak and alloc bytes are known", s)
		}
	}

	var l LeaksAnswer
	call(t, cs, "leaks_by_site", map[string]any{"run": "run.ndjson"}, &l)
	lp := l.Processes[0]
	got := map[uint32][2]uint64{}
	for _, s := range lp.Sites {
		got[s.Site] = [2]uint64{s.Count, s.Bytes}
		if s.Test != "tests/test_model.py::test_model" {
			t.Errorf("site %d: test %q", s.Site, s.Test)
		}
	}
	got[0] = [2]uint64{lp.WithoutSite.Count, lp.WithoutSite.Bytes}
	if fmt.Sprint(got) != fmt.Sprint(bySite) || lp.Sites[0].Bytes < lp.Sites[len(lp.Sites)-1].Bytes || len(lp.SiteDescs) != len(lp.Sites) {
		t.Errorf("leaks by site %v; truth %v", got, bySite)
	}

	// One chip: only its leaks.
	var one LeaksAnswer
	call(t, cs, "leaks_by_site", map[string]any{"run": "run.ndjson", "device": 3}, &one)
	if lf := one.Processes[0].Leaks; lf.Count != 2 || lf.Bytes != 2048+32768 || len(one.Processes[0].LeakGroups) != 1 {
		t.Errorf("device 3: %+v", one.Processes[0])
	}

	// The same run diffed with itself: nothing changed.
	var d DiffAnswer
	call(t, cs, "diff_runs", map[string]any{"a": "run.ndjson", "b": filepath.Join(dir, "run.ndjson")}, &d)
	if d.Diff == nil || !d.Diff.Same || d.Diff.Unchanged != 1 {
		t.Errorf("diff %+v", d.Diff)
	}
}

// Lost events, an untrusted layout... are said in every answer.
func TestCaveats(t *testing.T) {
	dir := t.TempDir()
	crafted(t, filepath.Join(dir, "lost.ndjson"), runBufs[:2], 5)
	cs := client(t, Options{Dirs: []string{dir}})
	var c ChipsAnswer
	if msg := call(t, cs, "chips", map[string]any{"run": "lost.ndjson"}, &c); msg != "" {
		t.Fatal(msg)
	}
	all := strings.Join(c.Caveats, "\n")
	if c.Run.LostEvents != 5 || c.Run.Complete || !strings.Contains(all, "5 events were lost") || !strings.Contains(all, "physical chip is unknown") {
		t.Errorf("run %+v caveats %q", c.Run, c.Caveats)
	}
}

// An answer over MaxAnswerBytes is made again with smaller lists, and
// says so; one that cannot fit is an error.
func TestAnswerBound(t *testing.T) {
	dir := t.TempDir()
	var many []buf
	for i := range 300 {
		many = append(many, buf{id: uint64(i + 1), chip: int32(i % 3), typ: events.DRAM, addr: uint64(i+1) << 16, size: uint64(1024 * (i + 1)), site: uint32(i%3 + 1)})
	}
	crafted(t, filepath.Join(dir, "many.ndjson"), many, 0)
	cs := client(t, Options{Dirs: []string{dir}, MaxAnswerBytes: 8 << 10})
	var h HoldersAnswer
	if msg := call(t, cs, "top_holders", map[string]any{"run": "many.ndjson", "limit": 500}, &h); msg != "" {
		t.Fatal(msg)
	}
	raw, _ := json.Marshal(h)
	p := h.Processes[0]
	if len(raw) > 8<<10 || len(p.Buffers) >= 300 || p.BuffersCount != 300 || !strings.Contains(strings.Join(h.Caveats, "\n"), "lists were cut to") {
		t.Errorf("%d bytes, %d buffers given of %d, caveats %q", len(raw), len(p.Buffers), p.BuffersCount, h.Caveats)
	}
	for i := 1; i < len(p.Buffers); i++ {
		if p.Buffers[i].Size > p.Buffers[i-1].Size {
			t.Errorf("buffers not largest first: %d then %d", p.Buffers[i-1].Size, p.Buffers[i].Size)
		}
	}
	if p.Buffers[0].Size != 300*1024 {
		t.Errorf("largest %d", p.Buffers[0].Size)
	}
	tiny := client(t, Options{Dirs: []string{dir}, MaxAnswerBytes: 300})
	if msg := call(t, tiny, "top_holders", map[string]any{"run": "many.ndjson"}, &h); !strings.Contains(msg, "narrow it with pid and device") {
		t.Errorf("an answer that cannot fit: %q", msg)
	}
}

// Only the files named and those beneath --runs are read; a name that
// leads out, a link out, a FIFO, a file too large, a cut file: one clear
// error each.
func TestRunsStayInside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "runs")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	crafted(t, filepath.Join(dir, "sub", "ok.ndjson"), runBufs, 0)
	crafted(t, filepath.Join(root, "outside.ndjson"), runBufs, 0)
	crafted(t, filepath.Join(root, "named.ndjson"), runBufs, 0)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(root, "outside.ndjson"), filepath.Join(dir, "out.ndjson")))
	must(os.Symlink("sub/ok.ndjson", filepath.Join(dir, "in.ndjson")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo.ndjson"), 0o600))
	whole, err := os.ReadFile(filepath.Join(dir, "sub", "ok.ndjson"))
	must(err)
	must(os.WriteFile(filepath.Join(dir, "cut.ndjson"), whole[:len(whole)/2], 0o600))
	must(os.WriteFile(filepath.Join(dir, "junk.ndjson"), []byte("not json\n"), 0o600))
	cs := client(t, Options{Dirs: []string{dir}, Files: []string{filepath.Join(root, "named.ndjson")}})

	for name, want := range map[string]string{
		"sub/ok.ndjson":                       "",
		filepath.Join(dir, "sub/ok.ndjson"):   "",
		"in.ndjson":                           "",
		"named.ndjson":                        "",
		filepath.Join(root, "named.ndjson"):   "",
		"../outside.ndjson":                   "outside",
		filepath.Join(root, "outside.ndjson"): "outside what tttrace mcp may read",
		"sub/../../outside.ndjson":            "outside",
		"out.ndjson":                          "leads outside",
		"/proc/self/environ":                  "outside what tttrace mcp may read",
		"fifo.ndjson":                         "not a regular file",
		"cut.ndjson":                          "line ",
		"junk.ndjson":                         "line 1:",
		"missing.ndjson":                      "no such file",
		"a\x00b":                              "NUL",
		"":                                    "no run named",
	} {
		var c ChipsAnswer
		msg := call(t, cs, "chips", map[string]any{"run": name}, &c)
		switch {
		case want == "" && msg != "":
			t.Errorf("run %q: %s", name, msg)
		case want == "" && (len(c.Processes) != 1 || c.Processes[0].Pid != 7):
			t.Errorf("run %q: %+v", name, c)
		case want != "" && (!strings.Contains(msg, want) || strings.Contains(msg, "\n")):
			t.Errorf("run %q: %q, want one line with %q", name, msg, want)
		}
	}
	small := client(t, Options{Dirs: []string{dir}, MaxRunBytes: 100})
	var c ChipsAnswer
	if msg := call(t, small, "chips", map[string]any{"run": "sub/ok.ndjson"}, &c); !strings.Contains(msg, "more than tttrace mcp reads") {
		t.Errorf("too large: %q", msg)
	}
	if msg := call(t, cs, "chips", map[string]any{"tttrace_pid": 1}, &c); !strings.Contains(msg, "without --live") {
		t.Errorf("tttrace_pid without Live: %q", msg)
	}

	var l ListAnswer
	call(t, cs, "list_runs", map[string]any{"limit": 100}, &l)
	kinds := map[string]string{}
	for _, f := range l.Files {
		kinds[f.Path] = f.Kind
	}
	if kinds[filepath.Join(dir, "sub", "ok.ndjson")] != "ndjson" || kinds[filepath.Join(root, "named.ndjson")] != "ndjson" ||
		kinds[filepath.Join(dir, "junk.ndjson")] != "other" {
		t.Errorf("list %v", kinds)
	}
	if _, ok := kinds[filepath.Join(root, "outside.ndjson")]; ok {
		t.Errorf("listed a file outside: %v", kinds)
	}
}

// The ops tool: each process's TT-NN ops rows, most bytes first, cut to
// the limit and said so, names made printable.
func TestOpsTool(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	l := devices.NewLedger(devices.Options{})
	l.SetProcessInfo(7, devices.ProcessInfo{Command: "python3 work.py"})
	ev := devicestest.Alloc(7, 1, 0, events.DRAM, 0x1000, 4096)
	ev.Pid, ev.Tid, ev.TsNs, ev.Seq = 7, 7, 1, 1
	l.Apply(&ev)
	sum := l.Summary()
	rows := []devices.OpRow{
		{Name: "ttnn.add", Calls: 3, Allocs: 3, Bytes: 6144},
		{Name: "ttnn.matmul", DeviceOp: "MatmulDeviceOperation", Calls: 2, Allocs: 2, Bytes: 65536, PeakDRAM: 1 << 20, LeakedBuffers: 1, LeakedBytes: 32768},
		{Name: "ttnn.\x1b[2Jevil", Calls: 1, Allocs: 1, Bytes: 100},
	}
	sum.Processes[0].Ops, sum.Processes[0].OpsDropped = rows, 5
	if err := sinks.NewNDJSON(&out, false).Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ops.ndjson"), out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := client(t, Options{Dirs: []string{dir}})
	var a OpsAnswer
	if msg := call(t, cs, "ops", map[string]any{"run": "ops.ndjson", "limit": 2}, &a); msg != "" {
		t.Fatal(msg)
	}
	if len(a.Processes) != 1 {
		t.Fatalf("%+v", a)
	}
	p := a.Processes[0]
	if p.OpsCount != 3 || p.OpsDropped != 5 || len(p.Ops) != 2 || p.Ops[0] != rows[1] || p.Ops[1] != rows[0] {
		t.Errorf("ops %+v", p)
	}
	if len(a.Cut) != 1 || a.Cut[0] != (Cut{What: "pid 7 ops", Shown: 2, Total: 3}) {
		t.Errorf("cut %+v", a.Cut)
	}
	call(t, cs, "ops", map[string]any{"run": "ops.ndjson"}, &a)
	if p := a.Processes[0]; len(p.Ops) != 3 || p.Ops[2].Name != `ttnn.\x1b[2Jevil` {
		t.Errorf("ops %+v", p.Ops)
	}
}
