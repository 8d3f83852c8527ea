package main

// End-to-end test of --listen: the real Prometheus server (Debian's
// prometheus package) scrapes tttrace's /metrics on 127.0.0.1 while replica
// workloads hold their memory; every value Prometheus stores must equal the
// replica's ground truth, promtool must find nothing wrong with the
// exposition, and an ended process's series must give way to its leaks.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

	"github.com/tttrace/tttrace/devices"
)

// requireTool returns the path of a program the test needs; it skips
// without it, except under CI, where the test must run.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found: install Debian's %s package", name, pkg)
	}
	t.Skipf("%s not found (apt-get install %s)", name, pkg)
	return ""
}

// freePort returns a port on 127.0.0.1 nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// poll calls cond every 200 ms until it returns "" (done) or 30 s pass;
// then it fails with cond's last word.
func poll(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// promQuery runs an instant query against the Prometheus at base and
// returns each sample by its labels ("chip=0,type=dram", sorted, without
// __name__, instance and job).
func promQuery(base, q string) (map[string]float64, error) {
	resp, err := httpClient.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var ls []string
		for k, v := range s.Metric {
			if k != "__name__" && k != "instance" && k != "job" {
				ls = append(ls, k+"="+v)
			}
		}
		sort.Strings(ls)
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v", q, s.Value[1])
		}
		out[strings.Join(ls, ",")] = v
	}
	return out, nil
}

// sameSamples says how got differs from want ("" if not at all).
func sameSamples(got, want map[string]float64) string {
	var d []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("%s missing (want %v)", k, w))
		} else if g != w {
			d = append(d, fmt.Sprintf("%s = %v, want %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("unexpected %s = %v", k, g))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

var truthTypes = []struct{ label, field string }{
	{"dram", "dram_bytes"}, {"l1", "l1_bytes"}, {"l1_small", "l1_small_bytes"},
	{"trace", "trace_bytes"}, {"system_memory", "system_memory_bytes"}, {"cb", "cb_bytes"},
}

// wantProcess is what the per-process metrics of a holding workload must
// be: its truth, current and peak, on every chip it touched.
func wantProcess(tr *truth) (cur, peak, live map[string]float64) {
	cur, peak, live = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for i := range tr.Devices {
		d := &tr.Devices[i]
		for _, ty := range truthTypes {
			k := fmt.Sprintf("chip=%d,type=%s", d.Device, ty.label)
			cur[k] = float64(d.total(ty.field))
			peak[k] = float64(d.Peaks[ty.field])
		}
		live[fmt.Sprintf("chip=%d", d.Device)] = float64(d.LiveBuffers)
	}
	return cur, peak, live
}

// cbMeasures are the CB measures exported beside type="cb" as metrics of
// their own (tttrace_device_M_bytes, ..._peak_bytes, tttrace_chip_M_bytes),
// with the truth's fields.
var cbMeasures = []struct{ metric, field string }{
	{"cb_registered", "cb_registered_bytes"}, {"cb_resident_total", "cb_resident_total_bytes"},
}

// wantCB is what the CB measure m of a holding workload must be, per chip
// ("chip=N"): its truth, current and peak.
func wantCB(tr *truth, field string) (cur, peak map[string]float64) {
	cur, peak = map[string]float64{}, map[string]float64{}
	for i := range tr.Devices {
		d := &tr.Devices[i]
		k := fmt.Sprintf("chip=%d", d.Device)
		cur[k] = float64(d.total(field))
		peak[k] = float64(d.Peaks[field])
	}
	return cur, peak
}

// leakedBytes sums the leaks of ended's truth per chip and type; every
// buffer type of every chip seen (in seen's truths) has its series, from 0.
func leakedBytes(ended *truth, seen ...*truth) map[string]float64 {
	out := map[string]float64{}
	for _, tr := range seen {
		for _, d := range tr.Devices {
			for _, typ := range []string{"dram", "l1", "l1_small", "trace", "system_memory"} {
				out[fmt.Sprintf("chip=%d,type=%s", d.Device, typ)] = 0
			}
		}
	}
	for _, l := range ended.Leaks {
		out[fmt.Sprintf("chip=%d,type=%s", l.Device, strings.ToLower(l.Type))] += float64(l.Size)
	}
	return out
}

// TestE2EPrometheus: three workloads hold their memory under
// tttrace -p A -p B -p C --listen (C: cb_cache, whose programs' CBs are
// resident per core); Prometheus scrapes it. Then A ends: its series go,
// its leaks are counted; then B and C end and the endpoint with it.
func TestE2EPrometheus(t *testing.T) {
	bin, replica := setup(t)
	promBin := requireTool(t, "prometheus", "prometheus")
	promtool := requireTool(t, "promtool", "prometheus")
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }

	// The workloads: allocated what their scenario leaves, then hold it.
	type workload struct {
		cmd      *exec.Cmd
		out      *syncBuffer
		pid      string
		truth    string
		goF, hld string
	}
	var ws []*workload
	for _, sc := range []string{"mesh", "basic", "cb_cache"} {
		w := &workload{truth: f(sc + ".truth"), goF: f(sc + ".go"), hld: f(sc + ".hold")}
		w.cmd, w.out = start(t, filepath.Join(dir, "ttwork"), "--scenario", sc, "--leak", "--truth", w.truth, "--go-file", w.goF, "--hold-file", w.hld)
		w.pid = strconv.Itoa(w.cmd.Process.Pid)
		ws = append(ws, w)
	}
	a, b, c := ws[0], ws[1], ws[2]
	for _, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "ready") }, "workload ready")
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tt, tout := start(t, bin, "--lib", filepath.Join(dir, "libtt_metal.so"), "--json", "--no-events", "-o", f("out"),
		"--ready-file", f("ready"), "--listen", metricsAddr, "--host", "node-a", "-p", a.pid, "-p", b.pid, "-p", c.pid)
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready")
	for _, w := range ws {
		touch(t, w.goF)
	}
	for _, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "holding") }, "workload holding")
	}
	ta, tb, tc := readTruth(t, a.truth), readTruth(t, b.truth), readTruth(t, c.truth)

	// Our own Prometheus, scraping tttrace every second.
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tttrace\n    static_configs:\n      - targets: ['%s']\n", metricsAddr)
	if err := os.WriteFile(f("prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pout := start(t, promBin, "--config.file", f("prometheus.yml"), "--storage.tsdb.path", t.TempDir(),
		"--web.listen-address", promAddr)
	base := "http://" + promAddr
	poll(t, "prometheus ready", func() string {
		resp, err := httpClient.Get(base + "/-/ready")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status + "\n" + pout.String()
		}
		return ""
	})

	// query polls until q gives want (a scrape after the change must land).
	query := func(what, q string, want map[string]float64) {
		t.Helper()
		poll(t, what, func() string {
			got, err := promQuery(base, q)
			if err != nil {
				return err.Error()
			}
			return sameSamples(got, want)
		})
	}
	for _, w := range []struct {
		w  *workload
		tr *truth
	}{{a, ta}, {b, tb}, {c, tc}} {
		cur, peak, live := wantProcess(w.tr)
		sel := fmt.Sprintf(`{pid=%q}`, w.w.pid)
		query("pid "+w.w.pid+" bytes", `sum by (chip, type) (tttrace_device_memory_bytes`+sel+`)`, cur)
		query("pid "+w.w.pid+" peaks", `sum by (chip, type) (tttrace_device_memory_peak_bytes`+sel+`)`, peak)
		query("pid "+w.w.pid+" live buffers", `sum by (chip) (tttrace_live_buffers`+sel+`)`, live)
		for _, m := range cbMeasures {
			cur, peak := wantCB(w.tr, m.field)
			query("pid "+w.w.pid+" "+m.metric, `sum by (chip) (tttrace_device_`+m.metric+`_bytes`+sel+`)`, cur)
			query("pid "+w.w.pid+" "+m.metric+" peaks", `sum by (chip) (tttrace_device_`+m.metric+`_peak_bytes`+sel+`)`, peak)
		}
		// The command label is the command line tttrace read.
		got, err := promQuery(base, `count by (command) (tttrace_live_buffers`+sel+`)`)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !strings.Contains(fmt.Sprint(got), "ttwork --scenario") {
			t.Errorf("pid %s: command labels %v", w.w.pid, got)
		}
	}
	// No /dev/tenstorrent here: the chips' physical identity is not
	// known, so each process's chip is its own host-wide series.
	chips := func(trs ...*truth) map[string]float64 {
		out := map[string]float64{}
		for _, tr := range trs {
			cur, _, _ := wantProcess(tr)
			for k, v := range cur {
				chip, typ, _ := strings.Cut(k, ",")
				out[fmt.Sprintf("%s,host=node-a,pid=%d,%s", chip, tr.Pid, typ)] = v
			}
		}
		return out
	}
	query("chip totals", `tttrace_chip_memory_bytes`, chips(ta, tb, tc))
	cbChips := func(field string, trs ...*truth) map[string]float64 {
		out := map[string]float64{}
		for _, tr := range trs {
			cur, _ := wantCB(tr, field)
			for k, v := range cur {
				out[fmt.Sprintf("%s,host=node-a,pid=%d", k, tr.Pid)] = v
			}
		}
		return out
	}
	for _, m := range cbMeasures {
		query("chip "+m.metric, `tttrace_chip_`+m.metric+`_bytes`, cbChips(m.field, ta, tb, tc))
	}
	// cb_cache tells the CB measures apart: a program cache registering
	// more than any core holds.
	differ := false
	for _, d := range tc.Devices {
		differ = differ || d.Peaks["cb_registered_bytes"] > d.Peaks["cb_bytes"]
	}
	if !differ {
		t.Error("cb_cache: no chip registered more CB bytes than its busiest core held: the CB measures are not told apart")
	}
	query("alloc events", `tttrace_events_total{kind="alloc"}`,
		map[string]float64{"kind=alloc": float64(ta.Calls["track_allocate"] + tb.Calls["track_allocate"] + tc.Calls["track_allocate"])})
	query("lost events", `tttrace_lost_events_total`, map[string]float64{"": 0})
	query("no leaks yet", `tttrace_leaked_bytes_total`, leakedBytes(&truth{}, ta, tb, tc))

	// The exposition itself passes promtool's lint.
	resp, err := httpClient.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	lint := exec.Command(promtool, "check", "metrics")
	lint.Stdin = strings.NewReader(string(body))
	if out, err := lint.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics: %v\n%s\nexposition:\n%.2000s", err, out, body)
	}

	// A ends: its series go, what it left is counted as leaked; B stays.
	touch(t, a.hld)
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("workload a: %v\n%s", err, a.out)
	}
	query("pid "+a.pid+" series gone", fmt.Sprintf(`{__name__=~"tttrace_.*",pid=%q}`, a.pid), map[string]float64{})
	query("leaked bytes", `tttrace_leaked_bytes_total`, leakedBytes(ta, ta, tb, tc))
	query("chip totals after a ended", `tttrace_chip_memory_bytes`, chips(tb, tc))
	for _, m := range cbMeasures {
		query("chip "+m.metric+" after a ended", `tttrace_chip_`+m.metric+`_bytes`, cbChips(m.field, tb, tc))
	}

	// B and C end, tracing ends, and the endpoint with it.
	for _, w := range []*workload{b, c} {
		touch(t, w.hld)
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("workload %s: %v\n%s", w.pid, err, w.out)
		}
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	if c, err := net.DialTimeout("tcp", metricsAddr, time.Second); err == nil {
		c.Close()
		t.Error("the metrics endpoint outlived tttrace")
	}
	// The report agrees with the truth too (the scrape changed nothing).
	sum := lastSummary(t, f("out"))
	for _, tr := range []*truth{ta, tb, tc} {
		wantExact(t, "prometheus", true, &devices.Summary{Type: sum.Type, Complete: sum.Complete, Processes: []devices.ProcessSummary{*process(sum, tr.Pid)}}, tr)
	}
}

// deviceMemory says how tttrace_device_memory_bytes of pid, fetched from
// addr's /metrics, differs from want ("chip=C,type=T" -> bytes).
func deviceMemory(addr, pid string, want map[string]float64) string {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return err.Error()
	}
	got := map[string]float64{}
	if f := fams["tttrace_device_memory_bytes"]; f != nil {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["pid"] == pid {
				got["chip="+l["chip"]+",type="+l["type"]] = m.GetGauge().GetValue()
			}
		}
	}
	return sameSamples(got, want)
}

// TestE2EListenModes: --listen with -- CMD and the human report, and with
// --all; a busy or malformed address is refused before anything is traced
// or started.
func TestE2EListenModes(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }

	t.Run("cmd", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		tt, tout := start(t, bin, "--lib", filepath.Join(dir, "libtt_metal.so"), "--listen", addr,
			"--", filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak", "--truth", f("truth"), "--hold-file", f("hold"))
		waitFor(t, func() bool { return strings.Contains(tout.String(), "holding") }, "workload holding")
		tr := readTruth(t, f("truth"))
		cur, _, _ := wantProcess(tr)
		pid := strconv.Itoa(int(tr.Pid))
		poll(t, "/metrics equal to the truth", func() string { return deviceMemory(addr, pid, cur) })
		touch(t, f("hold"))
		if err := tt.Wait(); err != nil {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
		if !strings.Contains(tout.String(), "tttrace report: 1 process(es)") {
			t.Errorf("no human report with --listen:\n%s", tout)
		}
	})

	t.Run("all", func(t *testing.T) {
		// Other processes of the host may be traced too: only the
		// workload's own series are compared.
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		tt, tout := start(t, bin, "--all", "--lib", filepath.Join(dir, "libtt_metal.so"), "--listen", addr,
			"--json", "--no-events", "-o", f("all.out"), "--ready-file", f("all.ready"))
		waitFor(t, func() bool { _, err := os.Stat(f("all.ready")); return err == nil }, "tttrace ready")
		w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "mesh", "--leak", "--truth", f("all.truth"), "--hold-file", f("all.hold"))
		waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding")
		cur, _, _ := wantProcess(readTruth(t, f("all.truth")))
		pid := strconv.Itoa(w.Process.Pid)
		poll(t, "/metrics equal to the truth", func() string { return deviceMemory(addr, pid, cur) })
		touch(t, f("all.hold"))
		if err := w.Wait(); err != nil {
			t.Fatalf("workload: %v\n%s", err, wout)
		}
		poll(t, "the workload's series gone", func() string { return deviceMemory(addr, pid, map[string]float64{}) })
		tt.Process.Signal(os.Interrupt)
		// 7, 11: another process of the host, traced too, lost events or
		// was probed late.
		if err := tt.Wait(); exitCode(err) != 0 && exitCode(err) != 7 && exitCode(err) != 11 {
			t.Fatalf("tttrace: %v\n%s", err, tout)
		}
	})

	t.Run("refused", func(t *testing.T) {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		for _, c := range []struct{ addr, says string }{
			{busy.Addr().String(), "address already in use"},
			{"9464", "is not HOST:PORT"},
			{"127.0.0.1:99999", "the port must be a number"},
		} {
			marker := f("started")
			cmd := exec.Command(bin, "--listen", c.addr, "--", "touch", marker)
			out, err := cmd.CombinedOutput()
			if code := exitCode(err); code != 2 {
				t.Errorf("--listen %s: exit status %d, want 2\n%s", c.addr, code, out)
			}
			if !strings.Contains(string(out), "--listen") || !strings.Contains(string(out), c.says) {
				t.Errorf("--listen %s: error does not say %q:\n%s", c.addr, c.says, out)
			}
			if strings.Contains(string(out), "tracing (") {
				t.Errorf("--listen %s: tracing started:\n%s", c.addr, out)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("--listen %s: the command ran", c.addr)
			}
		}
	})
}
