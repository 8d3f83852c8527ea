// Package prometheus is tttrace's Prometheus endpoint: a sink that serves
// the ledger's per-process, per-chip device memory in the text exposition
// format at /metrics (docs/prometheus.md), through the official client
// library.
//
// Cost: the runtime feeds the sink from its one goroutine at millions of
// events per second, and scrapes come from HTTP goroutines. Event only
// bumps a per-kind counter the sink goroutine owns; at every Tick (about
// ten per second) and at every process end the sink builds an immutable
// snapshot and publishes it with one atomic store. A scrape reads the
// latest snapshot and builds the metrics from it, so neither side locks
// and the event path allocates nothing.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// MaxCommand bounds the command label: a long Python command line would
// make every series of the process unwieldy in Grafana legends.
const MaxCommand = 120

// Memory types, the "type" label values, in exposition order.
var memTypes = [...]string{"dram", "l1", "l1_small", "trace", "system_memory", "cb"}

// typeOf maps a buffer type's name (devices.Leak.Type) to its label value.
func typeOf(bufferType string) string { return strings.ToLower(bufferType) }

// values returns d's current bytes and peaks in memTypes order.
func values(d *devices.DeviceSummary) (cur, peak [len(memTypes)]uint64) {
	p := &d.Peaks
	cur = [...]uint64{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBBytes}
	peak = [...]uint64{p.DRAMBytes.Value, p.L1Bytes.Value, p.L1SmallBytes.Value, p.TraceBytes.Value, p.SystemMemoryBytes.Value, p.CBBytes.Value}
	return cur, peak
}

// UnplacedChip is the chip label of leaked bytes of mesh buffers whose
// mesh's chips were never learned (devices.ProcessSummary.UnplacedLeaks).
const UnplacedChip = "unknown"

var (
	descMem = prom.NewDesc("tttrace_device_memory_bytes",
		"Device memory a traced process holds on a chip now, by type (dram, l1, l1_small, trace, system_memory, cb).",
		[]string{"chip", "type", "pid", "command"}, nil)
	descPeak = prom.NewDesc("tttrace_device_memory_peak_bytes",
		"Highest device memory a traced process held on a chip since tracing began, by type.",
		[]string{"chip", "type", "pid", "command"}, nil)
	descLive = prom.NewDesc("tttrace_live_buffers",
		"Buffers a traced process holds on a chip now (a mesh buffer counts on each chip it holds memory on).",
		[]string{"chip", "pid", "command"}, nil)
	descChip = prom.NewDesc("tttrace_chip_memory_bytes",
		"Device memory all traced processes of this host hold on a chip now, by type.",
		[]string{"chip", "type"}, nil)
	descLeaked = prom.NewDesc("tttrace_leaked_bytes_total",
		"Device memory buffers still held when their process ended, summed over ended processes, by chip and buffer type (0 from a chip's first sight).",
		[]string{"chip", "type"}, nil)
	descEvents = prom.NewDesc("tttrace_events_total",
		"Events tttrace received, by kind (the NDJSON event types).",
		[]string{"kind"}, nil)
	descLost = prom.NewDesc("tttrace_lost_events_total",
		"Events the BPF ring buffer could not take: while non-zero the numbers are incomplete.",
		nil, nil)
)

// Exporter is the sink serving /metrics. Create it with Listen.
type Exporter struct {
	sinks.Base

	// Owned by the sink goroutine.
	kinds  [256]uint64 // events by kind
	leaked map[leakKey]uint64
	chips  map[int32]bool // chips seen, whose leaked series exist (at 0 at first)
	procs  []procSnap     // the last published processes
	lost   uint64

	snap atomic.Pointer[snapshot] // what scrapes read; never changed once stored

	ln   net.Listener
	srv  *http.Server
	done chan error
}

type leakKey struct{ chip, typ string }

// snapshot is the state a scrape turns into metrics.
type snapshot struct {
	procs  []procSnap
	kinds  [256]uint64
	lost   uint64
	leaked map[leakKey]uint64
}

type procSnap struct {
	pid, command string // label values
	devs         []devices.DeviceSummary
}

// Listen binds addr (host:port) at once, so a bad or busy address fails
// before tracing starts, and serves /metrics from then until Close.
func Listen(addr string) (*Exporter, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serve(ln), nil
}

// CheckAddr tells whether addr has the host:port form Listen needs.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 127.0.0.1:9464, or :9464 for every interface)", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535", addr)
	}
	return nil
}

func serve(ln net.Listener) *Exporter {
	e := New()
	reg := prom.NewRegistry()
	reg.MustRegister(e)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "tttrace: device memory metrics are at /metrics\n")
	})
	e.ln = ln
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	e.srv, e.done = srv, done
	go func() { done <- srv.Serve(ln) }()
	return e
}

// New returns an exporter that serves nothing: register it in a
// prometheus.Registry (tests, or an embedding program).
func New() *Exporter {
	e := &Exporter{leaked: map[leakKey]uint64{}, chips: map[int32]bool{}}
	e.publish()
	return e
}

// Addr is the address the endpoint listens on (nil without Listen).
func (e *Exporter) Addr() net.Addr {
	if e.ln == nil {
		return nil
	}
	return e.ln.Addr()
}

// Event counts ev by kind.
func (e *Exporter) Event(ev *events.Event) { e.kinds[ev.Kind]++ }

// Tick publishes the traced processes' current totals and peaks.
func (e *Exporter) Tick(v *sinks.View) {
	procs := make([]procSnap, 0, len(v.Procs))
	for _, p := range v.Procs {
		ps := procSnap{
			pid:     strconv.FormatUint(uint64(p.Pid), 10),
			command: commandLabel(p.Command),
			devs:    v.Ledger.Devices(p.Pid),
		}
		for i := range ps.devs {
			e.seeChip(ps.devs[i].Device)
		}
		procs = append(procs, ps)
	}
	e.procs = procs
	e.lost = v.Ledger.LostEvents()
	e.publish()
}

// seeChip creates the leaked series of a chip seen for the first time, at
// 0: a counter that appeared with its first leak would hide that leak
// from increase() and rate().
func (e *Exporter) seeChip(id int32) {
	if e.chips[id] {
		return
	}
	e.chips[id] = true
	chip := strconv.FormatInt(int64(id), 10)
	for t := events.BufferType(0); t < events.NumBufferTypes; t++ {
		e.leaked[leakKey{chip, typeOf(t.String())}] += 0
	}
}

// ProcessEnded removes the process's series and adds what it left
// allocated to the leaked totals.
func (e *Exporter) ProcessEnded(one *devices.Summary, _ bool) {
	e.lost = one.LostEvents
	for i := range one.Processes {
		p := &one.Processes[i]
		pid := strconv.FormatUint(uint64(p.Pid), 10)
		kept := e.procs[:0:0]
		for _, q := range e.procs {
			if q.pid != pid {
				kept = append(kept, q)
			}
		}
		e.procs = kept
		for _, d := range p.Devices {
			e.seeChip(d.Device)
		}
		for _, g := range p.LeakGroups {
			k := leakKey{strconv.FormatInt(int64(g.Device), 10), typeOf(g.Type)}
			e.leaked[k] = devices.SatAdd(e.leaked[k], g.Bytes)
		}
		for l := range p.AllUnplacedLeaks() {
			k := leakKey{UnplacedChip, typeOf(l.Type)}
			e.leaked[k] = devices.SatAdd(e.leaked[k], l.Size)
		}
	}
	e.publish()
}

// Summary publishes the final event and loss counts; the processes still
// traced keep their last series until the endpoint closes.
func (e *Exporter) Summary(s *devices.Summary) error {
	e.lost = s.LostEvents
	e.publish()
	return nil
}

// Close stops the endpoint: tracing is over. A scrape in progress gets a
// second to finish. Closing again does nothing.
func (e *Exporter) Close() error {
	if e.srv == nil {
		return nil
	}
	srv := e.srv
	e.srv = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-e.done; !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("metrics endpoint: %w", serr)
	}
	return err
}

// publish makes the sink's state what scrapes see.
func (e *Exporter) publish() {
	leaked := make(map[leakKey]uint64, len(e.leaked))
	for k, v := range e.leaked {
		leaked[k] = v
	}
	e.snap.Store(&snapshot{procs: e.procs, kinds: e.kinds, lost: e.lost, leaked: leaked})
}

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{descMem, descPeak, descLive, descChip, descLeaked, descEvents, descLost} {
		ch <- d
	}
}

// Collect builds the metrics from the latest snapshot.
func (e *Exporter) Collect(ch chan<- prom.Metric) {
	s := e.snap.Load()
	gauge := func(d *prom.Desc, v uint64, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prom.Desc, v uint64, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(v), labels...)
	}
	type chipTotals struct {
		chip string
		sum  [len(memTypes)]uint64
	}
	var chips []chipTotals // in order of first appearance; few chips
	for _, p := range s.procs {
		for i := range p.devs {
			d := &p.devs[i]
			chip := strconv.FormatInt(int64(d.Device), 10)
			cur, peak := values(d)
			for t, name := range memTypes {
				gauge(descMem, cur[t], chip, name, p.pid, p.command)
				gauge(descPeak, peak[t], chip, name, p.pid, p.command)
			}
			gauge(descLive, d.LiveBuffers, chip, p.pid, p.command)
			j := 0
			for j < len(chips) && chips[j].chip != chip {
				j++
			}
			if j == len(chips) {
				chips = append(chips, chipTotals{chip: chip})
			}
			for t := range memTypes {
				chips[j].sum[t] = devices.SatAdd(chips[j].sum[t], cur[t])
			}
		}
	}
	for _, c := range chips {
		for t, name := range memTypes {
			gauge(descChip, c.sum[t], c.chip, name)
		}
	}
	for k, v := range s.leaked {
		counter(descLeaked, v, k.chip, k.typ)
	}
	// A kind's series appears with its first event, as with a CounterVec.
	for k, n := range s.kinds {
		if n > 0 {
			counter(descEvents, n, events.Kind(k).String())
		}
	}
	counter(descLost, s.lost)
}

// commandLabel is the command as a label value: valid UTF-8, at most
// MaxCommand bytes (cut at a character boundary, marked with "...").
func commandLabel(c string) string {
	c = strings.ToValidUTF8(c, "\uFFFD")
	if len(c) <= MaxCommand {
		return c
	}
	cut := MaxCommand - len("...")
	for cut > 0 && !utf8.RuneStart(c[cut]) {
		cut--
	}
	return c[:cut] + "..."
}
