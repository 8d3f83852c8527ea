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
	"slices"
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

// CB measures beside cb_bytes (type="cb", the busiest core's resident
// CBs), each a metric of its own and not a "type": a CB is counted by
// each of them, and the types of a chip are summed (sum by (chip) of
// tttrace_device_memory_bytes), which must not count a CB three times
// (docs/prometheus.md).
var cbMeasures = [...]string{"cb_registered", "cb_resident_total"}

// cbValues returns d's current bytes and peaks in cbMeasures order.
func cbValues(d *devices.DeviceSummary) (cur, peak [len(cbMeasures)]uint64) {
	cur = [...]uint64{d.CBRegisteredBytes, d.CBResidentTotalBytes}
	peak = [...]uint64{d.Peaks.CBRegisteredBytes.Value, d.Peaks.CBResidentTotalBytes.Value}
	return cur, peak
}

// UnplacedChip is the chip label of leaked bytes of mesh buffers whose
// mesh's chips were never learned (devices.ProcessSummary.UnplacedLeaks).
const UnplacedChip = "unknown"

// Labels a per-process series may carry (Options.Labels), in exposition
// order. pid tells processes apart and is always there; command is the
// command line, which may hold secrets given as arguments; host, rank,
// mesh_id and mesh_host_rank are the process's devices.Placement ("" when
// not set); pod, namespace and container its Kubernetes pod's
// (docs/kubernetes.md; "" when not in a pod or not known).
var ProcessLabels = []string{"pid", "command", "host", "rank", "mesh_id", "mesh_host_rank", "pod", "namespace", "container"}

// Defaults of Options.
const (
	DefaultMaxConns          = 64
	DefaultMaxConnsPerPeer   = 8
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	// DefaultMaxLeakChips bounds the chips with tttrace_leaked_bytes_total
	// series: chip ids come from traced processes, which may make up as
	// many as they like over the life of a service.
	DefaultMaxLeakChips = 1024
)

// OtherChip is the chip label of leaked bytes on chips past MaxLeakChips.
const OtherChip = "other"

// Options configure an Exporter. The zero value means the defaults.
type Options struct {
	// Labels: the per-process labels of the per-process series, a subset
	// of ProcessLabels that holds "pid" (nil: all of ProcessLabels).
	Labels []string
	// MaxConns: connections served at once; MaxConnsPerPeer: of them,
	// those of one peer (a remote IP address; an IPv6 /64). A connection
	// past them takes the place of one waiting for a request, or is closed
	// at once (conns.go).
	MaxConns, MaxConnsPerPeer int
	// Timeouts of the HTTP server (see net/http.Server).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxLeakChips: chips with their own leaked series; leaks on more
	// chips go to chip="other".
	MaxLeakChips int
	// Host: the host label of the host-wide series (--host).
	Host string
}

// CheckLabels tells whether labels is a valid Options.Labels.
func CheckLabels(labels []string) error {
	pid := false
	for _, l := range labels {
		if !slices.Contains(ProcessLabels, l) {
			return fmt.Errorf("%q is not a label (%s)", l, strings.Join(ProcessLabels, ", "))
		}
		pid = pid || l == "pid"
	}
	if !pid {
		return errors.New("pid is needed: it tells processes apart")
	}
	return nil
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxConnsPerPeer <= 0 {
		o.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if o.MaxLeakChips <= 0 {
		o.MaxLeakChips = DefaultMaxLeakChips
	}
	if o.Labels == nil {
		o.Labels = ProcessLabels
	}
	return o
}

// Exporter is the sink serving /metrics. Create it with Listen.
type Exporter struct {
	sinks.Base

	// Owned by the sink goroutine.
	kinds  [256]uint64 // events by kind
	leaked map[leakKey]uint64
	chips  map[chipKey]bool // chips remembered, whose leaked series exist (at 0 at first); false: counted as "other"
	own    int              // chips of chips with series of their own (at most MaxLeakChips)
	procs  []procSnap       // the last published processes
	// Who keeps a chip remembered: each traced process (live) and each
	// ended one the ledger still keeps in full (ended; the last of a pid's
	// incarnations), by pid; refs counts them per chip. A chip no one
	// holds is forgotten with its series (forgetUnheld), so the chips
	// remembered are those of the processes the ledger holds: at most
	// (traced + --keep-ended) x --max-chips.
	live, ended map[uint32]*holder
	refs        map[chipKey]int
	unheld      []chipKey // chips whose refs fell to 0 since the last forgetUnheld
	lost        uint64
	// failed: failed allocations by chip, type and cause; allocChips: the
	// chips whose failure series exist.
	failed     map[failKey]uint64
	allocChips map[chipLabels]bool

	snap atomic.Pointer[snapshot] // what scrapes read; never changed once stored

	opt  Options
	fams families
	ln   net.Listener
	srv  *http.Server
	done chan error
}

// chipKey is a chip as the counters tell chips apart: the process's id and
// the physical chip behind it (uid, pci; "" when not known), so processes
// that each call their chip 0 count apart when their chips are known.
type chipKey struct {
	id       int32
	uid, pci string
}

// holder is what one process keeps remembered.
type holder struct {
	chips map[chipKey]struct{} // counted in Exporter.refs
	// failed: the chips of its failed allocations, held for as long as the
	// process is, also once closed: their counters have its failures.
	failed map[chipKey]struct{}
}

// holds tells whether a process's chip d keeps the chip remembered: a chip
// closed with nothing left (Device::close, MeshDevice::close) does not.
func holds(d *devices.DeviceSummary) bool {
	cur, _ := values(d)
	cb, _ := cbValues(d)
	return !d.Closed || d.LiveBuffers != 0 || cur != [len(memTypes)]uint64{} || cb != [len(cbMeasures)]uint64{}
}

// keyOf is the chipKey of chip id with identity ci.
func keyOf(id int32, ci devices.ChipIdentity) chipKey {
	k := chipKey{id: id, pci: ci.PCI}
	if ci.UID != nil {
		k.uid = *ci.UID
	}
	return k
}

// chipLabels are a counter's chip, chip_uid and pci label values.
type chipLabels struct{ chip, uid, pci string }

type leakKey struct {
	chipLabels
	typ string
}

type failKey struct {
	chipLabels
	typ, cause string
}

// Causes of a failed allocation, the "cause" label values ("unknown": the
// allocator's state was not known).
var causes = [...]string{"exhausted", "fragmented", "larger_than_bank", "unknown"}

// snapshot is the state a scrape turns into metrics.
type snapshot struct {
	procs  []procSnap
	kinds  [256]uint64
	lost   uint64
	leaked map[leakKey]uint64
	failed map[failKey]uint64
}

type procSnap struct {
	pid    string
	labels []string // values of Options.Labels
	devs   []devices.DeviceSummary
	// meshes: the own allocators of its live MeshDevices; traces: its
	// Metal trace counts (nil before its first trace call).
	meshes []devices.MeshAllocator
	traces *devices.TraceSummary
	// window: its current window (tttrace mark), for /v1/memory_stats
	// (memstats.go).
	window devices.Window
}

// Listen binds addr (host:port) at once, so a bad or busy address fails
// before tracing starts, and serves /metrics from then until Close.
func Listen(addr string, o Options) (*Exporter, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	if o.Labels != nil {
		if err := CheckLabels(o.Labels); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serve(ln, o), nil
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

func serve(ln net.Listener, o Options) *Exporter {
	e := New(o)
	o = e.opt
	reg := prom.NewRegistry()
	reg.MustRegister(e)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/v1/memory_stats", e.memoryStats)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "tttrace: device memory metrics are at /metrics\n")
	})
	e.ln = ln
	// Every phase of a connection is bounded in time and the connections
	// in number, per peer too, and a connection waiting for a request
	// gives way to a new one (conns.go): nobody can hold the endpoint's
	// sockets or goroutines, or keep a scrape out (idle keep-alives, slow
	// headers, slow bodies, answers not read).
	pl := newPeerListener(ln, o.MaxConns, o.MaxConnsPerPeer)
	srv := &http.Server{
		Handler:           noBody(mux),
		ConnState:         pl.connState,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
	done := make(chan error, 1)
	e.srv, e.done = srv, done
	go func() { done <- srv.Serve(pl) }()
	return e
}

// New returns an exporter that serves nothing: register it in a
// prometheus.Registry (tests, or an embedding program). o.Labels must pass
// CheckLabels.
func New(o Options) *Exporter {
	o = o.withDefaults()
	e := &Exporter{leaked: map[leakKey]uint64{}, chips: map[chipKey]bool{}, failed: map[failKey]uint64{}, allocChips: map[chipLabels]bool{},
		live: map[uint32]*holder{}, ended: map[uint32]*holder{}, refs: map[chipKey]int{},
		opt: o, fams: newFamilies(o.Labels)}
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

// Tick publishes the traced processes' current totals and peaks, and
// forgets the chips no process the ledger still holds keeps remembered.
func (e *Exporter) Tick(v *sinks.View) {
	procs := make([]procSnap, 0, len(v.Procs))
	traced := make(map[uint32]struct{}, len(v.Procs))
	for _, p := range v.Procs {
		ps := procSnap{
			pid:    strconv.FormatUint(uint64(p.Pid), 10),
			labels: make([]string, len(e.opt.Labels)),
			devs:   v.Ledger.Devices(p.Pid),
		}
		ps.window, _ = v.Ledger.CurrentWindow(p.Pid)
		ps.meshes = v.Ledger.MeshAllocators(p.Pid)
		ps.traces = v.Ledger.TraceCounts(p.Pid)
		for i, l := range e.opt.Labels {
			switch l {
			case "pid":
				ps.labels[i] = ps.pid
			case "command":
				ps.labels[i] = commandLabel(p.Command)
			case "host":
				ps.labels[i] = strings.ToValidUTF8(p.Placement.Host, "\uFFFD")
			case "rank":
				ps.labels[i] = optInt(p.Placement.Rank)
			case "mesh_id":
				ps.labels[i] = optInt(p.Placement.MeshID)
			case "mesh_host_rank":
				ps.labels[i] = optInt(p.Placement.MeshHostRank)
			case "pod":
				ps.labels[i] = p.Placement.Pod
			case "namespace":
				ps.labels[i] = p.Placement.Namespace
			case "container":
				ps.labels[i] = p.Placement.Container
			}
		}
		h := e.holderOf(p.Pid)
		held := make(map[chipKey]struct{}, len(ps.devs)+len(h.failed))
		for k := range h.failed {
			held[k] = struct{}{}
		}
		for i := range ps.devs {
			if !holds(&ps.devs[i]) {
				continue
			}
			k := keyOf(ps.devs[i].Device, ps.devs[i].ChipIdentity)
			e.seeChip(k)
			held[k] = struct{}{}
			if ps.devs[i].Allocator != nil {
				e.seeAllocChip(e.leakChip(k))
			}
		}
		e.setHeld(h, held)
		traced[p.Pid] = struct{}{}
		procs = append(procs, ps)
	}
	e.procs = procs
	e.lost = v.Ledger.LostEvents()
	e.release(v.Ledger, traced)
	e.forgetUnheld()
	e.publish()
}

// holderOf is the holder of traced process pid.
func (e *Exporter) holderOf(pid uint32) *holder {
	h := e.live[pid]
	if h == nil {
		h = &holder{chips: map[chipKey]struct{}{}, failed: map[chipKey]struct{}{}}
		e.live[pid] = h
	}
	return h
}

// setHeld makes h hold the chips of held, and only them.
func (e *Exporter) setHeld(h *holder, held map[chipKey]struct{}) {
	for k := range h.chips {
		if _, still := held[k]; !still {
			e.unref(k)
		}
	}
	for k := range held {
		if _, already := h.chips[k]; !already {
			e.refs[k]++
		}
	}
	h.chips = held
}

func (e *Exporter) unref(k chipKey) {
	if e.refs[k]--; e.refs[k] <= 0 {
		delete(e.refs, k)
		e.unheld = append(e.unheld, k)
	}
}

// drop lets h's chips go.
func (e *Exporter) drop(h *holder) {
	for k := range h.chips {
		e.unref(k)
	}
	h.chips = nil
}

// release drops the holders of the processes the ledger no longer holds
// (retention trimmed them, --keep-ended) and are not traced now.
func (e *Exporter) release(l *devices.Ledger, traced map[uint32]struct{}) {
	if l == nil || (len(e.ended) == 0 && len(e.live) == len(traced)) {
		return
	}
	kept := l.Processes() // sorted
	gone := func(pid uint32) bool {
		_, ok := slices.BinarySearch(kept, pid)
		return !ok
	}
	for pid, h := range e.live {
		if _, ok := traced[pid]; !ok && gone(pid) {
			e.drop(h)
			delete(e.live, pid)
		}
	}
	for pid, h := range e.ended {
		if gone(pid) {
			e.drop(h)
			delete(e.ended, pid)
		}
	}
}

// forgetUnheld forgets the chips no process holds any more: their leaked
// and failure series go (chip="other" and "unknown" stay).
func (e *Exporter) forgetUnheld() {
	for _, k := range e.unheld {
		if e.refs[k] > 0 {
			continue // held again since
		}
		own, seen := e.chips[k]
		if !seen {
			continue
		}
		if own {
			cl := e.leakChip(k)
			for lk := range e.leaked {
				if lk.chipLabels == cl {
					delete(e.leaked, lk)
				}
			}
			for fk := range e.failed {
				if fk.chipLabels == cl {
					delete(e.failed, fk)
				}
			}
			delete(e.allocChips, cl)
			e.own--
		}
		delete(e.chips, k)
	}
	e.unheld = e.unheld[:0]
}

// seeChip creates the leaked series of a chip seen for the first time, at
// 0: a counter that appeared with its first leak would hide that leak
// from increase() and rate(). Past MaxLeakChips chips, the chip's leaks
// go to chip="other" (leakChip), whose series appear then.
func (e *Exporter) seeChip(k chipKey) {
	if _, seen := e.chips[k]; seen {
		return
	}
	own := e.own < e.opt.MaxLeakChips
	e.chips[k] = own
	if own {
		e.own++
	}
	cl := e.leakChip(k)
	for t := events.BufferType(0); t < events.NumBufferTypes; t++ {
		e.leaked[leakKey{cl, typeOf(t.String())}] += 0
	}
}

// seeAllocChip creates the failure series of a chip (a leakChip label) at
// 0, for the same reason as seeChip.
func (e *Exporter) seeAllocChip(cl chipLabels) {
	if e.allocChips[cl] {
		return
	}
	e.allocChips[cl] = true
	for _, t := range devices.AllocatorTypes() {
		for _, c := range causes {
			e.failed[failKey{cl, devices.AllocatorKey(t), c}] += 0
		}
	}
}

// Notice counts failed allocations.
func (e *Exporter) Notice(n *devices.Notice) {
	f := n.AllocFailed
	if n.Type != devices.NoticeAllocFailed || f == nil {
		return
	}
	cl := chipLabels{chip: UnplacedChip}
	if f.Device != nil {
		k := keyOf(*f.Device, f.Physical)
		e.seeChip(k)
		cl = e.leakChip(k)
		// The process keeps the chip, and its counters, remembered.
		h := e.holderOf(n.Pid)
		if _, ok := h.failed[k]; !ok {
			h.failed[k] = struct{}{}
			if _, ok := h.chips[k]; !ok {
				h.chips[k] = struct{}{}
				e.refs[k]++
			}
		}
	}
	e.seeAllocChip(cl)
	cause := f.Cause
	if cause == "" {
		cause = "unknown"
	}
	typ := strings.ToLower(f.BufferType)
	k := failKey{cl, typ, cause}
	e.failed[k] = devices.SatAdd(e.failed[k], 1)
	e.publish()
}

// leakChip is the chip labels of chip k's counters: chip="other" past
// MaxLeakChips.
func (e *Exporter) leakChip(k chipKey) chipLabels {
	if own, seen := e.chips[k]; seen && !own {
		return chipLabels{chip: OtherChip}
	}
	return chipLabels{chip: strconv.FormatInt(int64(k.id), 10), uid: k.uid, pci: k.pci}
}

// ProcessEnded removes the process's series and adds what it left
// allocated to the leaked totals. Its chips stay remembered while the
// ledger keeps it in full (release).
func (e *Exporter) ProcessEnded(one *devices.Summary, _ bool) {
	e.lost = one.LostEvents
	for i := range one.Processes {
		p := &one.Processes[i]
		pid := strconv.FormatUint(uint64(p.Pid), 10)
		kept := make([]procSnap, 0, len(e.procs))
		for _, q := range e.procs {
			if q.pid != pid {
				kept = append(kept, q)
			}
		}
		e.procs = kept
		held := map[chipKey]struct{}{}
		if h := e.live[p.Pid]; h != nil {
			for k := range h.failed {
				held[k] = struct{}{}
			}
		}
		keys := make(map[int32]chipKey, len(p.Devices))
		for i := range p.Devices {
			d := &p.Devices[i]
			keys[d.Device] = keyOf(d.Device, d.ChipIdentity)
			if holds(d) {
				e.seeChip(keys[d.Device])
				held[keys[d.Device]] = struct{}{}
			}
		}
		for _, g := range p.LeakGroups {
			ck, ok := keys[g.Device]
			if !ok {
				ck = chipKey{id: g.Device}
			}
			e.seeChip(ck)
			held[ck] = struct{}{}
			k := leakKey{e.leakChip(ck), typeOf(g.Type)}
			e.leaked[k] = devices.SatAdd(e.leaked[k], g.Bytes)
		}
		// The last incarnation of a pid holds for it.
		h := &holder{chips: map[chipKey]struct{}{}}
		e.setHeld(h, held)
		if old := e.ended[p.Pid]; old != nil {
			e.drop(old)
		}
		e.ended[p.Pid] = h
		if lh := e.live[p.Pid]; lh != nil {
			e.drop(lh)
			delete(e.live, p.Pid)
		}
		for l := range p.AllUnplacedLeaks() {
			k := leakKey{chipLabels{chip: UnplacedChip}, typeOf(l.Type)}
			e.leaked[k] = devices.SatAdd(e.leaked[k], l.Size)
		}
	}
	e.forgetUnheld()
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
	failed := make(map[failKey]uint64, len(e.failed))
	for k, v := range e.failed {
		failed[k] = v
	}
	e.snap.Store(&snapshot{procs: e.procs, kinds: e.kinds, lost: e.lost, leaked: leaked, failed: failed})
}

// optInt is a rank as a label value ("" when not set).
func optInt(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
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
