package otlp

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/otlp/otlptest"
	promexport "github.com/tttrace/tttrace/sinks/prometheus"
)

// receiver is an OTLP/HTTP endpoint on 127.0.0.1 keeping every request.
type receiver struct {
	mu      sync.Mutex
	reqs    []*colmetricspb.ExportMetricsServiceRequest
	headers []http.Header
	status  int // answered (0: 200)
	srv     *http.Server
	url     string
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{url: "http://" + ln.Addr().String()}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(q.Body, 64<<20))
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.status != 0 {
			w.WriteHeader(r.status)
			return
		}
		if q.URL.Path != "/v1/metrics" {
			t.Errorf("request to %s", q.URL.Path)
		}
		req, err := otlptest.Decode(body)
		if err != nil {
			t.Errorf("a request that does not decode: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.reqs = append(r.reqs, req)
		r.headers = append(r.headers, q.Header.Clone())
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func (r *receiver) last() (*colmetricspb.ExportMetricsServiceRequest, http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		return nil, nil
	}
	return r.reqs[len(r.reqs)-1], r.headers[len(r.headers)-1]
}

// walked is what /metrics serves of src's current snapshot, keyed as
// otlptest keys the export's points (empty labels are no labels).
func walked(src *promexport.Exporter) map[string]float64 {
	out := map[string]float64{}
	src.Walk(func(f *promexport.Family, v uint64, labels []string) {
		var ls []string
		for i, l := range labels {
			if l != "" {
				ls = append(ls, fmt.Sprintf("%s=%q", f.Labels[i], l))
			}
		}
		sort.Strings(ls)
		out[f.Name+"{"+strings.Join(ls, ",")+"}"] = float64(v)
	})
	return out
}

func diff(got, want map[string]float64) []string {
	var d []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("missing %s (want %v)", k, w))
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
	return d
}

// feed makes a ledger with two processes: chips of known identity and not,
// CBs, a mesh with its own allocator, Metal traces with a hazard, a
// failed allocation, a leak of a process that ended; and hands it to src.
func feed(t *testing.T, src *promexport.Exporter) {
	t.Helper()
	l := devices.NewLedger(devices.Options{Notices: src})
	var seq uint64
	send := func(pid uint32, ev events.Event) {
		seq++
		ev.Seq, ev.TsNs, ev.Pid = seq, seq*1000, pid
		if ev.Tid == 1 {
			ev.Tid = pid
		}
		l.Apply(&ev)
		src.Event(&ev)
	}
	hostChips := []devices.PCIChip{{Num: 0, PCI: "0000:01:00.0", DeviceID: "0x401e"}, {Num: 1, PCI: "0000:02:00.0", DeviceID: "0x401e"}}
	l.SetProcessInfo(100, devices.ProcessInfo{Command: "python3 -m pytest", Chips: devices.NewChipMap(func(string) (string, bool) { return "", false }, hostChips, nil),
		Placement: devices.Placement{Host: "node-a", Pod: "trainer-0", Namespace: "ml", Container: "worker"}})
	l.SetProcessInfo(200, devices.ProcessInfo{Command: "./w"})
	const mib = 1 << 20
	send(100, devicestest.Capacity(0, events.DRAM, 0xd0, 12, mib, 32, 0x40))
	send(100, devicestest.Request(1, 0xd0, 12*4096, 4096, true))
	send(100, devicestest.AllocPage(1, 0xa0, 0, events.DRAM, 0x40, 12*4096, 4096))
	send(100, devicestest.Request(1, 0xd0, 12*2*mib, 2*mib, true)) // larger than a bank: failed
	send(100, devicestest.Alloc(1, 0xa1, 1, events.L1, 0x1000, 8192))
	send(100, devicestest.Trace(1, events.TraceBegin, 0, 0, 3))
	send(100, devicestest.Alloc(1, 0xa2, 0, events.L1, 0x2000, 4096))
	send(100, devicestest.Free(1, 0xa2, 0))
	send(100, devicestest.Trace(1, events.TraceEnd, 0, 0, 3))
	send(100, devicestest.Alloc(1, 0xa3, 0, events.L1, 0x2000, 4096))
	send(100, devicestest.Trace(1, events.TraceReplay, 0, 0, 3))
	// Chip 1's L1 bank manager: a core's L1 size (tttrace_l1_core_size_bytes).
	send(100, devicestest.Capacity(1, events.L1, 0xd2, 64, mib, 32, 0x18000))
	send(100, devicestest.CBLayout(1, devicestest.ProgP, 1))
	send(100, devicestest.CBOn(1, 1, 0x100, 2048, [4]uint16{0, 0, 1, 1}))
	send(100, devicestest.Dispatch(1, devicestest.ProgP, 1))
	for _, c := range []struct {
		t   events.BufferType
		mgr uint64
	}{{events.DRAM, 0x100}, {events.L1, 0x102}} {
		send(100, devicestest.Capacity(-1, c.t, c.mgr, 12, mib, 32, 0x40))
	}
	send(100, devicestest.Request(1, 0x100, 12*8192, 8192, true))
	send(100, devicestest.MeshAlloc(1, 0xb0, devicestest.MeshA, events.DRAM, 0x40, 12*8192))
	send(100, devicestest.View(1, 0, 0x40))
	send(100, devicestest.View(1, 1, 0x40))
	send(200, devicestest.Alloc(1, 0xc0, 5, events.DRAM, 0x40, 65536))
	send(200, devicestest.Alloc(1, 0xc1, 5, events.Trace, 0x40, 1024))
	tick := func(pids ...uint32) {
		v := sinks.View{Now: time.Now(), Ledger: l}
		for _, pid := range pids {
			v.Procs = append(v.Procs, sinks.Proc{Pid: pid, Command: map[uint32]string{100: "python3 -m pytest", 200: "./w"}[pid], Placement: devices.Placement{Host: "node-a", Pod: "trainer-0", Namespace: "ml", Container: "worker"}})
		}
		src.Tick(&v)
	}
	tick(100, 200)
	send(200, devicestest.Exit(0, 0))
	one, _ := l.ProcessSummary(200)
	src.ProcessEnded(&one, true)
	tick(100)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The export is /metrics: every series of the snapshot, read back through
// docs/otlp.md's tables, with the same value; the resource names tttrace
// and its host; the headers given are sent.
func TestExportEqualsMetrics(t *testing.T) {
	m, err := otlptest.ReadDoc("../../docs/otlp.md")
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t)
	src := promexport.New(promexport.Options{Host: "node-a"})
	x, err := Start(src, true, Options{Endpoint: r.url, Interval: 100 * time.Millisecond, Host: "node-a", Version: "1.2.3",
		Headers: map[string]string{"Authorization": "Bearer t0ken", "X-Scope-OrgID": "tenant-1"}, Compression: "gzip"})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	feed(t, src)
	n := r.count()
	waitFor(t, "two exports after the feed", func() bool { return r.count() >= n+2 })
	req, h := r.last()
	got, problems := m.Series(req)
	for _, p := range problems {
		t.Error(p)
	}
	want := walked(src)
	for _, d := range diff(got, want) {
		t.Error(d)
	}
	// Every family of /metrics is in the snapshot's walk.
	fams := map[string]bool{}
	for k := range want {
		fams[k[:strings.IndexByte(k, '{')]] = true
	}
	for _, f := range src.Families() {
		if !fams[f.Name] {
			t.Errorf("the test's ledger gives %s no series: it checks nothing of it", f.Name)
		}
	}
	res := otlptest.Resource(req)
	if res["service.name"] != "tttrace" || res["host.name"] != "node-a" || res["service.version"] != "1.2.3" {
		t.Errorf("resource %v", res)
	}
	if res["k8s.pod.name"] != "" {
		t.Errorf("a traced process's pod on the resource: %v", res)
	}
	if h.Get("Authorization") != "Bearer t0ken" || h.Get("X-Scope-OrgID") != "tenant-1" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("headers %v", h)
	}
	// A value worked out by hand: the process's L1 on chip 1, and the
	// mesh buffer's DRAM on chip 0 beside its own.
	for k, v := range map[string]float64{
		`tttrace_device_memory_bytes{chip="1",chip_uid="0000:02:00.0",command="python3 -m pytest",container="worker",host="node-a",namespace="ml",pci="0000:02:00.0",pid="100",pod="trainer-0",type="l1"}`: 8192,
		`tttrace_chip_memory_bytes{chip_uid="0000:01:00.0",host="node-a",pci="0000:01:00.0",type="dram"}`:                                                                                                  12*4096 + 12*8192,
		`tttrace_trace_records_total{command="python3 -m pytest",container="worker",host="node-a",namespace="ml",pid="100",pod="trainer-0",record="trace_hazard"}`:                                         1,
		`tttrace_leaked_bytes_total{chip="5",type="dram"}`: 65536,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// A failing endpoint is said on the log once per interval, not once per
// failure, and its recovery once.
func TestFailuresSaidOncePerInterval(t *testing.T) {
	r := newReceiver(t)
	r.status = http.StatusBadRequest // not retryable: each export fails at once
	var log syncBuffer
	src := promexport.New(promexport.Options{})
	x, err := Start(src, true, Options{Endpoint: r.url, Interval: 100 * time.Millisecond, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	waitFor(t, "exports", func() bool { total, _ := x.Exports(); return total >= 5 })
	// The log's own limit, past the reader's: many failures in one interval
	// make one line.
	fl := &failLog{w: &log, every: time.Hour, target: "t"}
	for range 100 {
		fl.result(fmt.Errorf("boom"))
	}
	fl.result(nil)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	var export, boom, again int
	for _, l := range lines {
		switch {
		case strings.Contains(l, "exporting to "+r.url+"/v1/metrics") && strings.Contains(l, "400"):
			export++
		case strings.Contains(l, "exporting to t: boom"):
			boom++
		case strings.Contains(l, "exporting to t works again (100 failed)"):
			again++
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	total, failed := x.Exports()
	if export == 0 || export > int(failed) || boom != 1 || again != 1 || failed != total {
		t.Errorf("%d export lines for %d failed of %d exports, %d boom, %d works again:\n%s", export, failed, total, boom, again, log.String())
	}
	// Recovery is said once.
	r.mu.Lock()
	r.status = 0
	r.mu.Unlock()
	waitFor(t, "works again", func() bool { return strings.Contains(log.String(), "exporting to "+r.url+"/v1/metrics works again") })
}

// Close returns within the timeout when nothing answers, and tracing is
// not failed for it.
func TestCloseBoundedWhenNothingAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepts into the backlog, never answers
	src := promexport.New(promexport.Options{})
	x, err := Start(src, true, Options{Endpoint: "http://" + ln.Addr().String(), Interval: time.Hour, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := x.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a 500ms timeout", d)
	}
}

// Every /metrics family has its row in names.go; the names are valid
// OpenTelemetry instrument names, none twice, none the namespace of
// another.
func TestEveryFamilyMapped(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.\-/]{0,254}$`)
	names := map[string]string{}
	for _, f := range promexport.New(promexport.Options{}).Families() {
		m, ok := mappings[f.Name]
		if !ok {
			t.Errorf("%s has no OpenTelemetry name (names.go, docs/otlp.md)", f.Name)
			continue
		}
		if !valid.MatchString(m.name) {
			t.Errorf("%s: %q is not an instrument name", f.Name, m.name)
		}
		if other, dup := names[m.name]; dup {
			t.Errorf("%s and %s are both %s", f.Name, other, m.name)
		}
		names[m.name] = f.Name
		if (m.kind == counter) != (f.Kind == promexport.Counter) {
			t.Errorf("%s: a %v exported as instrument kind %d", f.Name, f.Kind, m.kind)
		}
		for _, l := range f.Labels {
			if _, ok := attrKeys[l]; !ok {
				t.Errorf("%s: label %s has no attribute", f.Name, l)
			}
		}
	}
	for a := range names {
		for b := range names {
			if strings.HasPrefix(b, a+".") {
				t.Errorf("%s is a metric and the namespace of %s", a, b)
			}
		}
	}
	if len(names) != len(mappings) {
		t.Errorf("names.go maps %d families, /metrics has %d", len(mappings), len(names))
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Target
		bad  string
	}{
		{in: "http://127.0.0.1:4318", want: Target{HostPort: "127.0.0.1:4318", Path: "/v1/metrics", Plain: true}},
		{in: "http://collector:4318/", want: Target{HostPort: "collector:4318", Path: "/v1/metrics", Plain: true}},
		{in: "https://otlp.example.com/otlp/v1/metrics", want: Target{HostPort: "otlp.example.com:443", Path: "/otlp/v1/metrics"}},
		{in: "http://[::1]:4318", want: Target{HostPort: "[::1]:4318", Path: "/v1/metrics", Plain: true}},
		{in: "127.0.0.1:4318", bad: "not an http:// or https:// URL"},
		{in: "grpc://c:4317", bad: "not an http:// or https:// URL"},
		{in: "http://u:p@c:4318", bad: "no user"},
		{in: "http://c:4318/?x=1", bad: "no user, query"},
		{in: "http://c:99999", bad: "the port must be"},
		{in: "", bad: "not an http"},
	} {
		got, err := ParseEndpoint(c.in)
		switch {
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%q: %v, want an error saying %q", c.in, err, c.bad)
		case c.bad == "" && (err != nil || got != c.want):
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, k, v, bad string }{
		{in: "Authorization=Bearer a=b", k: "Authorization", v: "Bearer a=b"},
		{in: "X-Scope-OrgID=", k: "X-Scope-OrgID", v: ""},
		{in: "novalue", bad: "not KEY=VALUE"},
		{in: "=v", bad: "not KEY=VALUE"},
		{in: "Bad Name=v", bad: "not an HTTP header name"},
		{in: "X=a\r\nInjected: 1", bad: "control character"},
	} {
		k, v, err := ParseHeader(c.in)
		switch {
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%q: %v, want an error saying %q", c.in, err, c.bad)
		case c.bad == "" && (err != nil || k != c.k || v != c.v):
			t.Errorf("%q: %q %q %v", c.in, k, v, err)
		}
	}
}

// Counting an event allocates nothing, as the Prometheus sink's.
func TestEventAllocatesNothing(t *testing.T) {
	src := promexport.New(promexport.Options{})
	x, err := Start(src, true, Options{Endpoint: "http://127.0.0.1:9", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ev := events.Event{Kind: events.KindAlloc, Pid: 1, Size: 64}
	if n := testing.AllocsPerRun(1000, func() { x.Event(&ev) }); n != 0 {
		t.Fatalf("Event allocates %v times", n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
