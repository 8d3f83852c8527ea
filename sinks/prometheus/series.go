package prometheus

import (
	"strconv"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// The series: what the ledger's state, as last published, is as metrics.
// Walk turns a snapshot into values of Families, and both outputs read
// them: /metrics (Describe, Collect: a Family is a prom.Desc) and --otlp
// (sinks/otlp: a Family is an OpenTelemetry instrument), so a scrape and an
// export of the same snapshot carry the same series with the same values.

// Kind is what a Family's values are.
type Kind uint8

const (
	// Gauge: a value now (bytes held, a peak, a count of buffers).
	Gauge Kind = iota
	// Counter: a total that only grows while its series lives.
	Counter
)

// Family is one metric: its name, help, kind and label names, in the
// order Walk gives their values.
type Family struct {
	Name, Help string
	Kind       Kind
	Labels     []string
	desc       *prom.Desc
}

// families are the metrics of an Exporter; the per-process ones carry the
// chosen process labels.
type families struct {
	mem, peak, live, chip, leaked, events, lost *Family
	// The CB measures beside type="cb" (cbMeasures): per process, now and
	// peak, and the host-wide sums.
	cbMem, cbPeak, cbChip [len(cbMeasures)]*Family
	// L1 per core: the busiest worker core's L1 now, at its peak, and a
	// core's L1 size (docs/ttmetal.md §12).
	l1Core, l1CorePeak, l1CoreSize *Family
	// The allocator's view (docs/prometheus.md).
	capacity, free, largest, failures *Family
	// The own allocators of the live MeshDevices of a process.
	meshCapacity, meshFree, meshLargest, meshChips *Family
	// Metal trace: a process's calls, the records its checks found, what
	// went past the bounds.
	traceCalls   [len(traceCalls)]*Family
	traceChecked *Family
	traceRecords *Family
	traceBounds  *Family

	all []*Family // every one, in Describe order
}

// traceCalls are the Metal trace calls counted per process, the metric
// names' middle parts.
var traceCalls = [...]string{"captures", "replays", "releases", "unknown_replays"}

// traceRecords are the record values of tttrace_trace_records_total: the
// NDJSON records a process's Metal trace checks found.
var traceRecords = [...]string{"trace_hazard", "trace_replay_invalid", "trace_region_hazard", "trace_capture_alloc"}

// traceBounds are the bound values of tttrace_trace_bounds_exceeded_total
// (docs/ndjson.md, "Bounds"): the summary's traces fields of the same names.
var traceBounds = [...]string{"traces_dropped", "captured_lost", "cb_cores_lost"}

func newFamilies(procLabels []string) families {
	var fs families
	fam := func(kind Kind, name, help string, labels ...string) *Family {
		f := &Family{Name: name, Help: help, Kind: kind, Labels: labels}
		f.desc = prom.NewDesc(name, help, labels, nil)
		fs.all = append(fs.all, f)
		return f
	}
	with := func(ls ...string) []string { return append(ls, procLabels...) }
	// A host-wide series is one physical chip (chip_uid, pci, and its
	// place: tray, asic_location), or, when its identity is not known, one
	// process's chip (chip, pid).
	phys := func(ls ...string) []string {
		return append([]string{"host", "chip_uid", "pci", "tray", "asic_location", "chip", "pid"}, ls...)
	}
	fs.mem = fam(Gauge, "tttrace_device_memory_bytes",
		"Device memory a traced process holds on a chip now, by type (dram, l1, l1_small, trace, system_memory, cb: the circular buffers resident on the chip's busiest core).",
		with("chip", "chip_uid", "pci", "tray", "asic_location", "type")...)
	fs.peak = fam(Gauge, "tttrace_device_memory_peak_bytes",
		"Highest device memory a traced process held on a chip since tracing began, by type.",
		with("chip", "chip_uid", "pci", "tray", "asic_location", "type")...)
	fs.live = fam(Gauge, "tttrace_live_buffers",
		"Buffers a traced process holds on a chip now (a mesh buffer counts on each chip it holds memory on).",
		with("chip", "chip_uid", "pci", "tray", "asic_location")...)
	fs.chip = fam(Gauge, "tttrace_chip_memory_bytes",
		"Device memory all traced processes of this host hold on a physical chip now (chip_uid), by type; a chip of unknown identity has its own series per process (chip, pid).",
		phys("type")...)
	cbHelp := [len(cbMeasures)]string{
		"the per-core sizes of the circular buffers of every program holding CBs, summed (what type=\"cb\" counted before it became the busiest core's resident CBs; TT-NN's program cache makes it exceed L1)",
		"the circular-buffer bytes resident on the chip's cores (each core: the program last dispatched there), summed over the cores",
	}
	for i, m := range cbMeasures {
		fs.cbMem[i] = fam(Gauge, "tttrace_device_"+m+"_bytes",
			"A traced process's chip now: "+cbHelp[i]+".",
			with("chip", "chip_uid", "pci", "tray", "asic_location")...)
		fs.cbPeak[i] = fam(Gauge, "tttrace_device_"+m+"_peak_bytes",
			"The highest, since tracing began, of "+cbHelp[i]+".",
			with("chip", "chip_uid", "pci", "tray", "asic_location")...)
		fs.cbChip[i] = fam(Gauge, "tttrace_chip_"+m+"_bytes",
			"All traced processes of this host on a physical chip now (chip_uid; a chip of unknown identity: per process, chip and pid): "+cbHelp[i]+".",
			phys()...)
	}
	fs.l1Core = fam(Gauge, "tttrace_l1_core_bytes",
		"What the busiest worker core of a traced process's chip holds in L1 now: its L1 buffers (the lockstep ones' span per bank, which every core holds, and the per-core ones of its bank) and its resident circular buffers (l1_busiest_core.total_bytes; an upper bound when the busiest per-core bank and the busiest CB core may be two cores); absent while nothing is known.",
		with("chip", "chip_uid", "pci", "tray", "asic_location")...)
	fs.l1CorePeak = fam(Gauge, "tttrace_l1_core_peak_bytes",
		"The highest, since tracing began, of what the busiest worker core of a traced process's chip held in L1 (peak_l1_busiest_core.total_bytes).",
		with("chip", "chip_uid", "pci", "tray", "asic_location")...)
	fs.l1CoreSize = fam(Gauge, "tttrace_l1_core_size_bytes",
		"A worker core's L1 on a traced process's chip: the L1 allocator's base and bank size and the L1_SMALL region above (l1_size); absent while the chip's L1 bank manager was not seen made.",
		with("chip", "chip_uid", "pci", "tray", "asic_location")...)
	fs.leaked = fam(Counter, "tttrace_leaked_bytes_total",
		"Device memory buffers still held when their process ended, summed over ended processes, by chip (the processes' id, and the physical chip when known: chip_uid, pci) and buffer type (0 from a chip's first sight).",
		"chip", "chip_uid", "pci", "type")
	fs.events = fam(Counter, "tttrace_events_total",
		"Events tttrace received, by kind (the NDJSON event types).",
		"kind")
	fs.lost = fam(Counter, "tttrace_lost_events_total",
		"Events the BPF ring buffer could not take: while non-zero the numbers are incomplete.")
	fs.capacity = fam(Gauge, "tttrace_device_capacity_bytes",
		"Bytes TT-Metal's allocator can allocate on a physical chip (chip_uid; a chip of unknown identity: per process, chip and pid), by type (dram, l1, l1_small, trace): banks x allocatable bytes per bank.",
		phys("type")...)
	fs.free = fam(Gauge, "tttrace_device_free_bytes",
		"Bytes free in a traced process's allocator of a chip, by type: banks x free bytes per bank (get_statistics' total_free_bytes); absent while not known.",
		with("chip", "chip_uid", "pci", "tray", "asic_location", "type")...)
	fs.largest = fam(Gauge, "tttrace_device_largest_free_block_bytes",
		"The largest interleaved allocation that fits now in a traced process's allocator of a chip, by type: banks x the largest free block per bank; absent while not known.",
		with("chip", "chip_uid", "pci", "tray", "asic_location", "type")...)
	fs.failures = fam(Counter, "tttrace_alloc_failures_total",
		"Failed device allocations (TT-Metal's Out of Memory) by chip, type and cause (exhausted, fragmented, larger_than_bank, unknown); 0 from a chip's first allocator.",
		"chip", "chip_uid", "pci", "type", "cause")
	fs.meshCapacity = fam(Gauge, "tttrace_mesh_capacity_bytes",
		"Bytes the own allocator of a traced process's live MeshDevice (mesh_device: the MeshDevice*, hex) can allocate, by type: banks x allocatable bytes per bank. Mesh buffers are allocated there, once for every chip of the mesh, never in their chips' allocators.",
		with("mesh_device", "type")...)
	fs.meshFree = fam(Gauge, "tttrace_mesh_free_bytes",
		"Bytes free in the own allocator of a traced process's live MeshDevice, by type: banks x free bytes per bank; absent while not known.",
		with("mesh_device", "type")...)
	fs.meshLargest = fam(Gauge, "tttrace_mesh_largest_free_block_bytes",
		"The largest interleaved mesh buffer that fits now in a live MeshDevice's own allocator, by type: banks x the largest free block per bank; absent while not known.",
		with("mesh_device", "type")...)
	fs.meshChips = fam(Gauge, "tttrace_mesh_chips",
		"The chips of a traced process's live MeshDevice known so far (learned from its buffers' views).",
		with("mesh_device")...)
	callHelp := [len(traceCalls)]string{
		"Metal traces a traced process captured (begin_trace / begin_mesh_trace).",
		"Replays by a traced process of Metal traces it captured while traced (replay_trace / replay_mesh_trace); a replay that cannot run is a trace_replay_invalid record instead.",
		"Metal traces a traced process released (release_trace / release_mesh_trace).",
		"Replays of traces captured before tttrace attached (not checked).",
	}
	for i, c := range traceCalls {
		fs.traceCalls[i] = fam(Counter, "tttrace_trace_"+c+"_total", callHelp[i], procLabels...)
	}
	fs.traceChecked = fam(Counter, "tttrace_trace_checked_buffers_total",
		"Buffers allocated after a Metal trace's capture, alive at one of its replays, found to overlap nothing it captured (counted at each replay that checked them).",
		procLabels...)
	fs.traceRecords = fam(Counter, "tttrace_trace_records_total",
		"Records a traced process's Metal trace checks found, by record (trace_hazard: a replay overwrites a live buffer; trace_replay_invalid; trace_region_hazard; trace_capture_alloc), written or past the bounds.",
		with("record")...)
	fs.traceBounds = fam(Counter, "tttrace_trace_bounds_exceeded_total",
		"What a traced process's Metal traces made tttrace forget past its bounds, by bound (traces_dropped: traces and active captures; captured_lost: buffers allocated during captures; cb_cores_lost: cores of a capture's CB peak): the checks are incomplete while non-zero.",
		with("bound")...)
	return fs
}

// Families are the exporter's metrics, in the order Describe sends them.
func (e *Exporter) Families() []*Family { return e.fams.all }

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prom.Desc) {
	for _, f := range e.fams.all {
		ch <- f.desc
	}
}

// Collect builds the metrics from the latest snapshot.
func (e *Exporter) Collect(ch chan<- prom.Metric) {
	e.Walk(func(f *Family, v uint64, labels []string) {
		t := prom.GaugeValue
		if f.Kind == Counter {
			t = prom.CounterValue
		}
		ch <- prom.MustNewConstMetric(f.desc, t, float64(v), labels...)
	})
}

// Walk calls emit with the value of every series of the latest published
// snapshot, and the values of its family's labels (valid during the call
// only). Two walks of one snapshot give the same series and values.
func (e *Exporter) Walk(emit func(f *Family, v uint64, labels []string)) {
	s := e.snap.Load()
	fs := &e.fams
	// Host-wide sums go by physical chip (chip_uid), joined across
	// processes (devices.ChipJoin: a chip named by its PCI address in one
	// process and by its unique id in another is one chip); a chip whose
	// identity is not known is never added to another process's: it has
	// its own series, named by pid and chip id.
	type physKey struct{ uid, pci, tray, loc, chip, pid string }
	join := devices.NewChipJoin()
	for _, p := range s.procs {
		for i := range p.devs {
			join.Add(&p.devs[i].ChipIdentity)
		}
	}
	type chipTotals struct {
		k   physKey
		sum [len(memTypes)]uint64
		cb  [len(cbMeasures)]uint64
	}
	var chips []chipTotals // in order of first appearance
	index := map[physKey]int{}
	type capKey struct {
		k   physKey
		typ string
	}
	capacity := map[capKey]uint64{} // the most any process's allocator has
	var capOrder []capKey
	labels := make([]string, 0, 8+len(e.opt.Labels))
	for _, p := range s.procs {
		procLabels := func(ls ...string) []string {
			labels = append(append(labels[:0], ls...), p.labels...)
			return labels
		}
		for i := range p.devs {
			d := &p.devs[i]
			chip := strconv.FormatInt(int64(d.Device), 10)
			id := join.Resolve(d.ChipIdentity)
			tray, loc := devices.PlaceLabels(&id)
			pk := physKey{pci: d.PCI, chip: chip, pid: p.pid}
			switch {
			case id.UniqueID != "":
				pk = physKey{uid: id.UniqueID, pci: join.PCIOf(id.UniqueID), tray: tray, loc: loc}
			case id.UID != nil:
				pk = physKey{uid: *id.UID, pci: d.PCI}
			}
			cur, peak := values(d)
			for t, name := range memTypes {
				emit(fs.mem, cur[t], procLabels(chip, pk.uid, d.PCI, tray, loc, name))
				emit(fs.peak, peak[t], procLabels(chip, pk.uid, d.PCI, tray, loc, name))
			}
			emit(fs.live, d.LiveBuffers, procLabels(chip, pk.uid, d.PCI, tray, loc))
			cbCur, cbPeak := cbValues(d)
			for t := range cbMeasures {
				emit(fs.cbMem[t], cbCur[t], procLabels(chip, pk.uid, d.PCI, tray, loc))
				emit(fs.cbPeak[t], cbPeak[t], procLabels(chip, pk.uid, d.PCI, tray, loc))
			}
			// Absent while nothing is known held (only buffers whose span
			// per bank is unknown).
			if c := d.L1BusiestCore; c != nil && c.TotalBytes > 0 {
				emit(fs.l1Core, c.TotalBytes, procLabels(chip, pk.uid, d.PCI, tray, loc))
			}
			if c := d.PeakL1BusiestCore; c != nil {
				emit(fs.l1CorePeak, c.TotalBytes, procLabels(chip, pk.uid, d.PCI, tray, loc))
			}
			for _, c := range [...]*devices.L1Core{d.L1BusiestCore, d.PeakL1BusiestCore} {
				if c != nil && c.L1Size != nil {
					emit(fs.l1CoreSize, *c.L1Size, procLabels(chip, pk.uid, d.PCI, tray, loc))
					break
				}
			}
			for _, t := range devices.AllocatorTypes() {
				at := d.Allocator.Type(t)
				if at == nil {
					continue
				}
				typ := devices.AllocatorKey(t)
				k := capKey{pk, typ}
				if _, seen := capacity[k]; !seen {
					capOrder = append(capOrder, k)
				}
				capacity[k] = max(capacity[k], devices.SatMul(uint64(at.Banks), at.BankSize))
				st, ok := at.Stats()
				if !ok {
					continue
				}
				emit(fs.free, devices.SatMul(uint64(at.Banks), st.TotalFree), procLabels(chip, pk.uid, d.PCI, tray, loc, typ))
				emit(fs.largest, devices.SatMul(uint64(at.Banks), st.LargestFreeBlock), procLabels(chip, pk.uid, d.PCI, tray, loc, typ))
			}
			j, ok := index[pk]
			if !ok {
				j = len(chips)
				index[pk] = j
				chips = append(chips, chipTotals{k: pk})
			}
			for t := range memTypes {
				chips[j].sum[t] = devices.SatAdd(chips[j].sum[t], cur[t])
			}
			for t := range cbMeasures {
				chips[j].cb[t] = devices.SatAdd(chips[j].cb[t], cbCur[t])
			}
		}
		for i := range p.meshes {
			m := &p.meshes[i]
			emit(fs.meshChips, uint64(len(m.Chips)), procLabels(m.MeshDevice))
			for _, t := range devices.AllocatorTypes() {
				at := m.Allocator.Type(t)
				if at == nil {
					continue
				}
				typ := devices.AllocatorKey(t)
				emit(fs.meshCapacity, devices.SatMul(uint64(at.Banks), at.BankSize), procLabels(m.MeshDevice, typ))
				st, ok := at.Stats()
				if !ok {
					continue
				}
				emit(fs.meshFree, devices.SatMul(uint64(at.Banks), st.TotalFree), procLabels(m.MeshDevice, typ))
				emit(fs.meshLargest, devices.SatMul(uint64(at.Banks), st.LargestFreeBlock), procLabels(m.MeshDevice, typ))
			}
		}
		// Every traced process has its trace series, from 0: a counter
		// that appeared with its first capture would hide that capture
		// from increase().
		tr := p.traces
		if tr == nil {
			tr = &devices.TraceSummary{}
		}
		calls := [len(traceCalls)]uint64{tr.Captures, tr.Replays, tr.Releases, tr.UnknownReplays}
		for i := range traceCalls {
			emit(fs.traceCalls[i], calls[i], procLabels())
		}
		emit(fs.traceChecked, tr.Checked, procLabels())
		recs := [len(traceRecords)]uint64{
			devices.SatAdd(tr.HazardCount, tr.HazardsSuppressed),
			devices.SatAdd(tr.InvalidReplayCount, tr.InvalidReplaysSuppressed),
			devices.SatAdd(tr.RegionHazardCount, tr.RegionHazardsSuppressed),
			devices.SatAdd(tr.CaptureAllocCount, tr.CaptureAllocsSuppressed),
		}
		for i, r := range traceRecords {
			emit(fs.traceRecords, recs[i], procLabels(r))
		}
		bounds := [len(traceBounds)]uint64{tr.TracesDropped, tr.CapturedLost, tr.CBCoresLost}
		for i, b := range traceBounds {
			emit(fs.traceBounds, bounds[i], procLabels(b))
		}
	}
	host := e.opt.Host
	for _, c := range chips {
		for t, name := range memTypes {
			emit(fs.chip, c.sum[t], append(labels[:0], host, c.k.uid, c.k.pci, c.k.tray, c.k.loc, c.k.chip, c.k.pid, name))
		}
		for t := range cbMeasures {
			emit(fs.cbChip[t], c.cb[t], append(labels[:0], host, c.k.uid, c.k.pci, c.k.tray, c.k.loc, c.k.chip, c.k.pid))
		}
	}
	for k, v := range s.leaked {
		emit(fs.leaked, v, append(labels[:0], k.chip, k.uid, k.pci, k.typ))
	}
	for _, k := range capOrder {
		emit(fs.capacity, capacity[k], append(labels[:0], host, k.k.uid, k.k.pci, k.k.tray, k.k.loc, k.k.chip, k.k.pid, k.typ))
	}
	for k, v := range s.failed {
		emit(fs.failures, v, append(labels[:0], k.chip, k.uid, k.pci, k.typ, k.cause))
	}
	// A kind's series appears with its first event, as with a CounterVec.
	for k, n := range s.kinds {
		if n > 0 {
			emit(fs.events, n, append(labels[:0], events.Kind(k).String()))
		}
	}
	emit(fs.lost, s.lost, labels[:0])
}
