package main

// End-to-end test of --otlp: a real OpenTelemetry Collector (its otlp
// receiver and file exporter, built from the collector's Go modules by
// `make otelcol`, internal/otelcol) receives what tttrace --listen ...
// --otlp exports while replica workloads hold their memory, a MeshDevice
// with its own allocator and Metal traces. What it wrote is read back
// through docs/otlp.md's tables (sinks/otlp/otlptest): the export made just
// after a scrape of /metrics must carry the same series with the same
// values, and the memory, mesh allocator and Metal trace series must equal
// the replica's truth.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/tttrace/tttrace/sinks/otlp/otlptest"
)

// findOtelcol is the collector `make otelcol` builds: TTTRACE_OTELCOL (set
// by make test), or build/otelcol/otelcol of this tree; "" and why when
// there is none, except where it must be: under CI, or named by
// TTTRACE_OTELCOL (then the test fails, saying how to build it).
func findOtelcol(t *testing.T) (string, string) {
	t.Helper()
	p := os.Getenv("TTTRACE_OTELCOL")
	set := p != ""
	if !set {
		p, _ = filepath.Abs("../../build/otelcol/otelcol")
	}
	if _, err := os.Stat(p); err != nil {
		if set || os.Getenv("CI") == "true" {
			t.Fatalf("no OpenTelemetry Collector at %s (%v): `make otelcol` builds it into build/otelcol/ and `make test` passes it as TTTRACE_OTELCOL", p, err)
		}
		return "", fmt.Sprintf("no OpenTelemetry Collector at %s: `make otelcol` builds it (or set TTTRACE_OTELCOL)", p)
	}
	return p, ""
}

// otelcolBin is findOtelcol's collector; without one the test skips.
func otelcolBin(t *testing.T) string {
	t.Helper()
	p, why := findOtelcol(t)
	if p == "" {
		t.Skip(why)
	}
	return p
}

// startCollector runs the collector with its OTLP/HTTP receiver on a
// loopback port and its file exporter writing every request it receives
// (OTLP JSON, a line each) to file; it returns the receiver's URL once it
// accepts connections. Its own telemetry is off (no port of its own).
func startCollector(t *testing.T, bin, file string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [file]
`, addr, file)
	cfgFile := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	col, out := start(t, bin, "--config", cfgFile)
	poll(t, "the collector listening on "+addr, func() string {
		if col.ProcessState != nil {
			return "it exited:\n" + out.String()
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err.Error() + "\n" + out.String()
		}
		c.Close()
		return ""
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the collector said:\n%s", out)
		}
	})
	return "http://" + addr
}

// scrapeSeries reads addr's /metrics as otlptest keys its points:
// name{label="value",...}, labels sorted, empty ones left out.
func scrapeSeries(addr string) (map[string]float64, error) {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			var ls []string
			for _, lp := range m.Label {
				if lp.GetValue() != "" {
					ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out, nil
}

// collectedAt is when the SDK read an export's values, about: the time of
// its earliest point (each instrument's points are stamped once the
// values are read).
func collectedAt(req *colmetricspb.ExportMetricsServiceRequest) (time.Time, error) {
	var ts uint64
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				var ps []*metricspb.NumberDataPoint
				switch d := m.GetData().(type) {
				case *metricspb.Metric_Gauge:
					ps = d.Gauge.GetDataPoints()
				case *metricspb.Metric_Sum:
					ps = d.Sum.GetDataPoints()
				}
				for _, p := range ps {
					if ts == 0 || p.GetTimeUnixNano() < ts {
						ts = p.GetTimeUnixNano()
					}
				}
			}
		}
	}
	if ts == 0 {
		return time.Time{}, fmt.Errorf("an export without points")
	}
	return time.Unix(0, int64(ts)), nil
}

// otlpSeries are an export's series (otlptest's keys).
type otlpSeries map[string]float64

// parseSeriesKey splits name{a="x",b="y"} into its name and labels.
func parseSeriesKey(k string) (string, map[string]string, error) {
	name, rest, ok := strings.Cut(k, "{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", nil, fmt.Errorf("series %q", k)
	}
	rest = strings.TrimSuffix(rest, "}")
	ls := map[string]string{}
	for rest != "" {
		l, r, ok := strings.Cut(rest, "=")
		if !ok {
			return "", nil, fmt.Errorf("series %q", k)
		}
		q, err := strconv.QuotedPrefix(r)
		if err != nil {
			return "", nil, fmt.Errorf("series %q: %v", k, err)
		}
		ls[l], _ = strconv.Unquote(q)
		rest = strings.TrimPrefix(r[len(q):], ",")
	}
	return name, ls, nil
}

// sum adds up the series of metric name whose labels include where, by
// the labels by: "l1=v1,l2=v2" in by's order ("" with no by).
func (s otlpSeries) sum(t *testing.T, name string, where map[string]string, by ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
next:
	for k, v := range s {
		n, ls, err := parseSeriesKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if n != name {
			continue
		}
		for l, want := range where {
			if ls[l] != want {
				continue next
			}
		}
		var key []string
		for _, b := range by {
			key = append(key, b+"="+ls[b])
		}
		out[strings.Join(key, ",")] += v
	}
	return out
}

// pids are the pid labels of the series.
func (s otlpSeries) pids(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for k := range s {
		_, ls, err := parseSeriesKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := ls["pid"]; ok {
			out[p] = true
		}
	}
	return out
}

// readExports reads what the collector wrote so far (a last line being
// written is left for the next read).
func readExports(file string) ([]*colmetricspb.ExportMetricsServiceRequest, error) {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := strings.LastIndexByte(string(b), '\n'); i+1 < len(b) {
		// A line being written: read the complete ones.
		tmp := file + ".complete"
		if err := os.WriteFile(tmp, b[:i+1], 0o644); err != nil {
			return nil, err
		}
		file = tmp
	}
	return otlptest.ReadFile(file)
}

// exportAfterScrape scrapes addr's /metrics, waits for the first export the
// collector received (in file) whose values were surely read after the
// scrape, and scrapes again; when both scrapes agree (nothing changed meanwhile)
// it returns the scrape and that export, mapped back through docs/otlp.md.
// Every point must follow the tables.
func exportAfterScrape(t *testing.T, addr, file string, m *otlptest.Mapping) (scrape map[string]float64, export otlpSeries, req *colmetricspb.ExportMetricsServiceRequest) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		s1, err := scrapeSeries(addr)
		if err != nil {
			t.Fatal(err)
		}
		scraped := time.Now()
		req = nil
		poll(t, "an export after the scrape", func() string {
			reqs, err := readExports(file)
			if err != nil {
				return err.Error()
			}
			// The SDK reads the values, stamps the points, sends them and
			// only then waits for the next interval: the export after
			// the first one stamped after the scrape read its values
			// after the scrape.
			for i, r := range reqs {
				at, err := collectedAt(r)
				if err != nil {
					return err.Error()
				}
				if at.After(scraped) && i+1 < len(reqs) {
					req = reqs[i+1]
					return ""
				}
			}
			return fmt.Sprintf("%d exports, not two stamped after %v", len(reqs), scraped)
		})
		s2, err := scrapeSeries(addr)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameSamples(s2, s1); d != "" {
			if attempt == 20 {
				t.Fatalf("/metrics never held still across an export: %s", d)
			}
			continue
		}
		got, problems := m.Series(req)
		for _, p := range problems {
			t.Errorf("the export does not follow docs/otlp.md: %s", p)
		}
		return s1, got, req
	}
}

// wantTraceSeries is what the Metal trace series of a process must be, by
// its truth: every capture and replay it made (the replays TT-Metal
// refused are trace_replay_invalid records instead), a release for every
// trace it released (the scenarios release each trace once), none of the
// traces captured before tracing, each record the truth has, no bound
// exceeded.
func wantTraceSeries(tt *traceTruth) map[string]float64 {
	var replays, released float64
	for _, tr := range tt.Traces {
		replays += float64(tr.Replays)
		if tr.Released {
			released++
		}
	}
	return map[string]float64{
		"tttrace_trace_captures_total":                             float64(len(tt.Traces)),
		"tttrace_trace_replays_total":                              replays,
		"tttrace_trace_releases_total":                             released,
		"tttrace_trace_unknown_replays_total":                      0,
		"tttrace_trace_records_total,record=trace_hazard":          float64(len(tt.Hazards)),
		"tttrace_trace_records_total,record=trace_replay_invalid":  float64(len(tt.Invalid)),
		"tttrace_trace_records_total,record=trace_region_hazard":   float64(len(tt.Regions)),
		"tttrace_trace_records_total,record=trace_capture_alloc":   float64(len(tt.CaptureAllocs)),
		"tttrace_trace_bounds_exceeded_total,bound=traces_dropped": 0,
		"tttrace_trace_bounds_exceeded_total,bound=captured_lost":  0,
		"tttrace_trace_bounds_exceeded_total,bound=cb_cores_lost":  0,
	}
}

// traceSeries is what s has of wantTraceSeries' series for pid.
func (s otlpSeries) traceSeries(t *testing.T, pid string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, n := range []string{"tttrace_trace_captures_total", "tttrace_trace_replays_total", "tttrace_trace_releases_total", "tttrace_trace_unknown_replays_total"} {
		for _, v := range s.sum(t, n, map[string]string{"pid": pid}) {
			out[n] = v
		}
	}
	for _, by := range []struct{ name, label string }{{"tttrace_trace_records_total", "record"}, {"tttrace_trace_bounds_exceeded_total", "bound"}} {
		for k, v := range s.sum(t, by.name, map[string]string{"pid": pid}, by.label) {
			out[by.name+","+k] = v
		}
	}
	return out
}

// wantMeshSeries is what the mesh allocator series of a process must be:
// each open MeshDevice of its truth, its chips and its own allocator's
// get_statistics (banks x per-bank bytes), by mesh_device and type.
func wantMeshSeries(at *allocTruth) map[string]map[string]float64 {
	out := map[string]map[string]float64{"tttrace_mesh_chips": {}, "tttrace_mesh_capacity_bytes": {},
		"tttrace_mesh_free_bytes": {}, "tttrace_mesh_largest_free_block_bytes": {}}
	for _, m := range at.Meshes {
		out["tttrace_mesh_chips"]["mesh_device="+m.MeshDevice] = float64(len(m.Chips))
		for typ, a := range m.Allocator {
			k := "mesh_device=" + m.MeshDevice + ",type=" + contractType(typ)
			b := float64(a.Banks)
			out["tttrace_mesh_capacity_bytes"][k] = b * float64(a.Allocatable)
			out["tttrace_mesh_free_bytes"][k] = b * float64(a.Free)
			out["tttrace_mesh_largest_free_block_bytes"][k] = b * float64(a.LargestBlock)
		}
	}
	return out
}

// wantChipAllocator is what the free and largest-block series of a
// process's chips must be: its chips' allocators' get_statistics.
func wantChipAllocator(at *allocTruth) map[string]map[string]float64 {
	out := map[string]map[string]float64{"tttrace_device_free_bytes": {}, "tttrace_device_largest_free_block_bytes": {}}
	for _, d := range at.Devices {
		for typ, a := range d.Allocator {
			k := fmt.Sprintf("chip=%d,type=%s", d.Device, contractType(typ))
			out["tttrace_device_free_bytes"][k] = float64(a.Banks) * float64(a.Free)
			out["tttrace_device_largest_free_block_bytes"][k] = float64(a.Banks) * float64(a.LargestBlock)
		}
	}
	return out
}

// sameLeaks says how got, the leaked bytes by chip and type, differs from
// the leaks of the ended processes' truths: every leak counted, and the
// series at 0 of the chips seen only (a chip no process holds any more,
// such as one a workload closed, has none: its series were forgotten).
func sameLeaks(got map[string]float64, ended []*truth, seen ...*truth) string {
	want := leakedBytes(&truth{}, seen...)
	for _, tr := range ended {
		for k, v := range leakedBytes(tr) {
			want[k] += v
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok && v == 0 {
			delete(want, k)
		}
	}
	return sameSamples(got, want)
}

// TestE2EOTLPCollector: tttrace --listen --otlp -p A -p B, A an n300's
// chips and a MeshDevice with its own allocator (alloc --shape n300 --mesh
// --leak), B every Metal trace scenario (traces --leak); the collector
// receives the exports. While both hold, after A ended (its series gone,
// its leaks counted), and at the end (the last export: every leak).
func TestE2EOTLPCollector(t *testing.T) {
	bin, replica := setup(t)
	colBin := otelcolBin(t)
	m, err := otlptest.ReadDoc("../../docs/otlp.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	exports := f("exports.jsonl")
	url := startCollector(t, colBin, exports)

	type workload struct {
		cmd        *exec.Cmd
		out        *syncBuffer
		pid, truth string
		goF, hld   string
	}
	var ws []*workload
	for i, args := range [][]string{
		{"--scenario", "alloc", "--shape", "n300", "--mesh", "--leak"},
		{"--scenario", "traces", "--leak"},
	} {
		n := strconv.Itoa(i)
		w := &workload{truth: f(n + ".truth"), goF: f(n + ".go"), hld: f(n + ".hold")}
		w.cmd, w.out = start(t, filepath.Join(dir, "ttwork"), append(args, "--truth", w.truth, "--go-file", w.goF, "--hold-file", w.hld)...)
		w.pid = strconv.Itoa(w.cmd.Process.Pid)
		ws = append(ws, w)
	}
	a, b := ws[0], ws[1]
	for _, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "ready") }, "workload ready")
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tt := exec.Command(bin, "--lib", filepath.Join(dir, "libtt_metal.so"), "--json", "--no-events", "-o", f("out"),
		"--ready-file", f("ready"), "--listen", metricsAddr, "--host", "node-a",
		"--otlp", url, "--otlp-interval", "500ms", "-p", a.pid, "-p", b.pid)
	// The resource gains what OTEL_RESOURCE_ATTRIBUTES says (the Helm
	// chart's node name).
	tt.Env = append(os.Environ(), "OTEL_RESOURCE_ATTRIBUTES=k8s.node.name=node-7,service.instance.id=tttrace-abcde")
	tout := &syncBuffer{}
	tt.Stdout, tt.Stderr = tout, tout
	tt.WaitDelay = 5 * time.Second
	if err := tt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if tt.ProcessState == nil {
			tt.Process.Kill()
			tt.Wait()
		}
	})
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready\n"+tout.String())
	for _, w := range ws {
		touch(t, w.goF)
	}
	for _, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "holding") }, "workload holding\n"+w.out.String())
	}
	ta, tb := readTruth(t, a.truth), readTruth(t, b.truth)
	aa, ba := readAllocTruth(t, a.truth), readAllocTruthAny(t, b.truth)
	at, bt := readTraceTruth(t, a.truth), readTraceTruth(t, b.truth)
	if len(aa.Meshes) != 1 || len(bt.Traces) == 0 || len(bt.Hazards) == 0 {
		t.Fatalf("the workloads hold %d meshes and made %d traces with %d hazards: want 1 and some, the test proves nothing",
			len(aa.Meshes), len(bt.Traces), len(bt.Hazards))
	}

	// Wait for /metrics to show what the workloads hold (tttrace has
	// handled their calls), then compare an export with its scrape.
	poll(t, "/metrics equal to the truth", func() string {
		s, err := scrapeSeries(metricsAddr)
		if err != nil {
			return err.Error()
		}
		var d []string
		for _, w := range []struct {
			pid string
			tr  *truth
		}{{a.pid, ta}, {b.pid, tb}} {
			cur, _, _ := wantProcess(w.tr)
			if x := sameSamples(otlpSeries(s).sum(t, "tttrace_device_memory_bytes", map[string]string{"pid": w.pid}, "chip", "type"), cur); x != "" {
				d = append(d, "pid "+w.pid+": "+x)
			}
		}
		return strings.Join(d, "\n")
	})
	scrape, export, req := exportAfterScrape(t, metricsAddr, exports, m)
	if d := sameSamples(export, scrape); d != "" {
		t.Errorf("the export after a scrape differs from it: %s", d)
	}
	res := otlptest.Resource(req)
	for k, v := range map[string]string{"service.name": "tttrace", "host.name": "node-a", "k8s.node.name": "node-7", "service.instance.id": "tttrace-abcde"} {
		if res[k] != v {
			t.Errorf("resource %s = %q, want %q (resource %v)", k, res[k], v, res)
		}
	}

	// What the collector received against the replica's truth.
	for _, w := range []struct {
		pid   string
		tr    *truth
		alloc *allocTruth
		trace *traceTruth
	}{{a.pid, ta, aa, at}, {b.pid, tb, ba, bt}} {
		pid := map[string]string{"pid": w.pid}
		cur, peak, live := wantProcess(w.tr)
		for _, c := range []struct {
			name string
			got  map[string]float64
			want map[string]float64
		}{
			{"memory", export.sum(t, "tttrace_device_memory_bytes", pid, "chip", "type"), cur},
			{"peaks", export.sum(t, "tttrace_device_memory_peak_bytes", pid, "chip", "type"), peak},
			{"live buffers", export.sum(t, "tttrace_live_buffers", pid, "chip"), live},
			{"Metal traces", export.traceSeries(t, w.pid), wantTraceSeries(w.trace)},
		} {
			if d := sameSamples(c.got, c.want); d != "" {
				t.Errorf("pid %s: %s: %s", w.pid, c.name, d)
			}
		}
		for name, want := range wantMeshSeries(w.alloc) {
			by := []string{"mesh_device", "type"}
			if name == "tttrace_mesh_chips" {
				by = by[:1]
			}
			if d := sameSamples(export.sum(t, name, pid, by...), want); d != "" {
				t.Errorf("pid %s: %s: %s", w.pid, name, d)
			}
		}
		if w.pid != a.pid {
			// traces closes chips and leaves allocators unread:
			// TestE2EAllocator checks those of alloc.
			continue
		}
		for name, want := range wantChipAllocator(w.alloc) {
			if d := sameSamples(export.sum(t, name, pid, "chip", "type"), want); d != "" {
				t.Errorf("pid %s: %s: %s", w.pid, name, d)
			}
		}
	}
	if d := sameSamples(export.sum(t, "tttrace_events_total", map[string]string{"kind": "alloc"}),
		map[string]float64{"": float64(ta.Calls["track_allocate"] + tb.Calls["track_allocate"])}); d != "" {
		t.Errorf("alloc events: %s", d)
	}
	if d := sameSamples(export.sum(t, "tttrace_lost_events_total", nil), map[string]float64{"": 0}); d != "" {
		t.Errorf("lost events: %s", d)
	}

	// A ends: its series go, its leaks are counted, in the export as in
	// the scrape.
	touch(t, a.hld)
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("workload a: %v\n%s", err, a.out)
	}
	poll(t, "pid "+a.pid+" gone from /metrics", func() string {
		s, err := scrapeSeries(metricsAddr)
		if err != nil {
			return err.Error()
		}
		if otlpSeries(s).pids(t)[a.pid] {
			return "still there"
		}
		return ""
	})
	scrape, export, _ = exportAfterScrape(t, metricsAddr, exports, m)
	if d := sameSamples(export, scrape); d != "" {
		t.Errorf("after a ended, the export after a scrape differs from it: %s", d)
	}
	if pids := export.pids(t); pids[a.pid] || !pids[b.pid] {
		t.Errorf("after a ended, the export has the pids %v, want %s alone", pids, b.pid)
	}
	if d := sameLeaks(export.sum(t, "tttrace_leaked_bytes_total", nil, "chip", "type"), []*truth{ta}, ta, tb); d != "" {
		t.Errorf("leaked bytes after a ended: %s", d)
	}
	if d := sameSamples(export.traceSeries(t, b.pid), wantTraceSeries(bt)); d != "" {
		t.Errorf("pid %s after a ended: Metal traces: %s", b.pid, d)
	}

	// B ends, tracing ends: the last export carries every leak.
	touch(t, b.hld)
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("workload b: %v\n%s", err, b.out)
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	var last otlpSeries
	poll(t, "the last export", func() string {
		reqs, err := readExports(exports)
		if err != nil || len(reqs) == 0 {
			return fmt.Sprintf("%d exports, %v", len(reqs), err)
		}
		s, problems := m.Series(reqs[len(reqs)-1])
		if len(problems) != 0 {
			return strings.Join(problems, "; ")
		}
		last = s
		if d := sameLeaks(last.sum(t, "tttrace_leaked_bytes_total", nil, "chip", "type"), []*truth{ta, tb}, ta, tb); d != "" {
			return "leaked bytes: " + d
		}
		if pids := last.pids(t); len(pids) != 0 {
			return fmt.Sprintf("series of the ended processes %v", pids)
		}
		return ""
	})
	if strings.Contains(tout.String(), "otlp:") {
		// A loaded machine may let an export time out: the next one
		// carries everything (docs/otlp.md), as the comparisons show.
		t.Logf("tttrace said:\n%s", tout)
	}
}

// readAllocTruthAny is readAllocTruth for a workload that made no failed
// allocation on purpose.
func readAllocTruthAny(t *testing.T, path string) *allocTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr allocTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("truth: %v", err)
	}
	return &tr
}
