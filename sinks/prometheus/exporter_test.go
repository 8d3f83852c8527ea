package prometheus

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// stream plays the runtime's part without BPF: it applies synthetic events
// to a ledger and hands them to the exporter as session does, and counts
// what it sent, independently of both.
type stream struct {
	t      *testing.T
	l      *devices.Ledger
	e      *Exporter
	procs  map[uint32]string // traced, not ended: pid -> command
	seq    uint64
	kinds  map[string]uint64
	lost   uint64
	leaked map[string]uint64 // "chip/type" -> bytes the test left allocated in ended processes
	chips  map[int32]bool    // chips the exporter was shown
	place  map[uint32]devices.Placement
}

func newStream(t *testing.T, e *Exporter) *stream {
	return &stream{t: t, l: devices.NewLedger(devices.Options{}), e: e, procs: map[uint32]string{}, kinds: map[string]uint64{}, leaked: map[string]uint64{}, chips: map[int32]bool{}}
}

// hostChips: the host of the tests, eight PCIe chips; a process that sees
// them all (no TT_VISIBLE_DEVICES) calls chip N the one at 0000:0N:00.0.
var hostChips = func() []devices.PCIChip {
	var out []devices.PCIChip
	for n := range 8 {
		out = append(out, devices.PCIChip{Num: n, PCI: fmt.Sprintf("0000:%02x:00.0", n), DeviceID: "0x401e"})
	}
	return out
}()

func noEnv(string) (string, bool) { return "", false }

// counterChip is the chip labels of a counter of chip c (decimal, or
// "other", "unknown") of a process started with start(): chips 0-7 are
// the host's PCIe chips.
func counterChip(c string) []string {
	n, err := strconv.Atoi(c)
	if err != nil || n < 0 || n >= len(hostChips) {
		return []string{"chip", c}
	}
	pci := hostChips[n].PCI
	return []string{"chip", c, "chip_uid", pci, "pci", pci}
}

func (s *stream) start(pid uint32, cmd string) {
	s.startWith(pid, cmd, devices.NewChipMap(noEnv, hostChips, nil))
}

func (s *stream) startWith(pid uint32, cmd string, chips devices.ChipMap) {
	s.procs[pid] = cmd
	s.l.SetProcessInfo(pid, devices.ProcessInfo{Command: cmd, Chips: chips})
}

func (s *stream) send(ev events.Event) {
	s.seq++
	ev.Seq, ev.TsNs = s.seq, s.seq*1000
	s.l.Apply(&ev)
	s.e.Event(&ev)
	s.kinds[ev.Kind.String()]++
	s.lost += ev.LostBefore
}

func chipPtr(chip int32) uint64 { return 0x7f0000000000 + uint64(chip)*0x1000 }

func (s *stream) alloc(pid uint32, buf uint64, chip int32, t events.BufferType, size uint64) {
	s.send(events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: t, Address: buf & 0xffffff, Size: size, PageSize: 1024, OwnsData: true, Status: 1})
}

func (s *stream) free(pid uint32, buf uint64, chip int32) {
	s.send(events.Event{Kind: events.KindFree, Pid: pid, Tid: pid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, OwnsData: true, Status: 1})
}

// meshAlloc allocates a mesh buffer whose per-chip views name chips.
func (s *stream) meshAlloc(pid uint32, buf, mesh uint64, t events.BufferType, size uint64, chips ...int32) {
	addr := buf & 0xffffff
	s.send(events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, BufferType: t, Address: addr, Size: size, PageSize: 1024, OwnsData: true, Status: 1})
	for _, c := range chips {
		s.send(events.Event{Kind: events.KindView, Pid: pid, Tid: pid, Device: chipPtr(c), DeviceKind: events.DeviceChip,
			Chip: c, Address: addr, Size: 4096})
	}
}

func (s *stream) cb(pid uint32, prog uint64, chip int32, size uint64) {
	s.send(events.Event{Kind: events.KindCBLayout, Pid: pid, Tid: pid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
	cb := events.Event{Kind: events.KindCBAlloc, Pid: pid, Tid: pid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: 0x1000, Size: size}
	cb.RangesKnown, cb.NumRanges = true, 1 // one core, (0, 0)
	s.send(cb)
	// Dispatched: resident on its core (the series' cb_bytes).
	s.send(events.Event{Kind: events.KindProgramDispatch, Pid: pid, Tid: pid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
}

// cbCores lays out program prog on chip with one CB of size bytes at addr
// on the cores of r, and dispatches it.
func (s *stream) cbCores(pid uint32, prog uint64, chip int32, addr, size uint64, r events.CoreRange) {
	s.send(events.Event{Kind: events.KindCBLayout, Pid: pid, Tid: pid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
	cb := events.Event{Kind: events.KindCBAlloc, Pid: pid, Tid: pid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: addr, Size: size}
	cb.RangesKnown, cb.NumRanges, cb.CoreRanges[0] = true, 1, r
	s.send(cb)
	s.send(events.Event{Kind: events.KindProgramDispatch, Pid: pid, Tid: pid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
}

// lint fails when promtool's lint (promlint, what promtool check metrics
// runs) finds anything in addr's /metrics.
func lint(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// tick hands the exporter a view, as session's tick does.
func (s *stream) tick() {
	v := sinks.View{Now: time.Now(), Ledger: s.l}
	for pid, cmd := range s.procs {
		v.Procs = append(v.Procs, sinks.Proc{Pid: pid, Command: cmd, Placement: s.place[pid]})
		for _, d := range s.l.Devices(pid) {
			s.chips[d.Device] = true
		}
	}
	sort.Slice(v.Procs, func(i, j int) bool { return v.Procs[i].Pid < v.Procs[j].Pid })
	s.e.Tick(&v)
}

// end ends pid as session's reapExits does: the exit event, the process
// out of the view, then ProcessEnded, then the ledger's retention.
func (s *stream) end(pid uint32) {
	s.send(events.Event{Kind: events.KindExit, Pid: pid, Chip: -1})
	delete(s.procs, pid)
	one, ok := s.l.ProcessSummary(pid)
	if !ok {
		s.t.Fatalf("ledger has no process %d", pid)
	}
	s.e.ProcessEnded(&one, len(s.procs) > 0)
	s.l.Trim()
}

// scrape fetches /metrics and returns every sample by "name{labels}", the
// labels sorted by name.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			var ls []string
			for _, lp := range m.Label {
				// An empty label is no label, to Prometheus too.
				if lp.GetValue() != "" {
					ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
			}
			sort.Strings(ls)
			key := name + "{" + strings.Join(ls, ",") + "}"
			if _, dup := out[key]; dup {
				t.Fatalf("series %s twice", key)
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			default:
				t.Fatalf("%s is neither a gauge nor a counter", key)
			}
		}
	}
	return out
}

func series(name string, labels ...string) string {
	var ls []string
	for i := 0; i+1 < len(labels); i += 2 {
		if labels[i+1] != "" {
			ls = append(ls, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// want is the exposition the ledger's current state calls for.
func (s *stream) want() map[string]float64 {
	w := map[string]float64{}
	chips := map[string]float64{}
	for pid, cmd := range s.procs {
		p := strconv.Itoa(int(pid))
		for _, d := range s.l.Devices(pid) {
			c := strconv.Itoa(int(d.Device))
			uid := ""
			if d.UID != nil {
				uid = *d.UID
			}
			pk := d.Peaks
			for _, v := range []struct {
				typ       string
				cur, peak uint64
			}{
				{"dram", d.DRAMBytes, pk.DRAMBytes.Value},
				{"l1", d.L1Bytes, pk.L1Bytes.Value},
				{"l1_small", d.L1SmallBytes, pk.L1SmallBytes.Value},
				{"trace", d.TraceBytes, pk.TraceBytes.Value},
				{"system_memory", d.SystemMemoryBytes, pk.SystemMemoryBytes.Value},
				{"cb", d.CBBytes, pk.CBBytes.Value},
			} {
				w[series("tttrace_device_memory_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "type", v.typ, "pid", p, "command", cmd)] = float64(v.cur)
				w[series("tttrace_device_memory_peak_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "type", v.typ, "pid", p, "command", cmd)] = float64(v.peak)
				if uid != "" {
					chips[series("tttrace_chip_memory_bytes", "chip_uid", uid, "pci", d.PCI, "type", v.typ)] += float64(v.cur)
				} else {
					chips[series("tttrace_chip_memory_bytes", "chip", c, "pid", p, "type", v.typ)] += float64(v.cur)
				}
			}
			w[series("tttrace_live_buffers", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(d.LiveBuffers)
			if b := d.L1BusiestCore; b != nil && b.TotalBytes > 0 {
				w[series("tttrace_l1_core_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(b.TotalBytes)
			}
			if b := d.PeakL1BusiestCore; b != nil {
				w[series("tttrace_l1_core_peak_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(b.TotalBytes)
				if b.L1Size != nil {
					w[series("tttrace_l1_core_size_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(*b.L1Size)
				}
			}
			for _, v := range []struct {
				name      string
				cur, peak uint64
			}{
				{"cb_registered", d.CBRegisteredBytes, pk.CBRegisteredBytes.Value},
				{"cb_resident_total", d.CBResidentTotalBytes, pk.CBResidentTotalBytes.Value},
			} {
				w[series("tttrace_device_"+v.name+"_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(v.cur)
				w[series("tttrace_device_"+v.name+"_peak_bytes", "chip", c, "chip_uid", uid, "pci", d.PCI, "pid", p, "command", cmd)] = float64(v.peak)
				if uid != "" {
					chips[series("tttrace_chip_"+v.name+"_bytes", "chip_uid", uid, "pci", d.PCI)] += float64(v.cur)
				} else {
					chips[series("tttrace_chip_"+v.name+"_bytes", "chip", c, "pid", p)] += float64(v.cur)
				}
			}
		}
	}
	for pid, cmd := range s.procs {
		s.wantTracesAndMeshes(w, pid, cmd)
	}
	for k, v := range chips {
		w[k] = v
	}
	// Every chip seen has its leaked series, from 0.
	for c := range s.chips {
		for _, typ := range []string{"dram", "l1", "l1_small", "trace", "system_memory"} {
			w[series("tttrace_leaked_bytes_total", append(counterChip(strconv.Itoa(int(c))), "type", typ)...)] = 0
		}
	}
	for k, v := range s.leaked {
		chip, typ, _ := strings.Cut(k, "/")
		w[series("tttrace_leaked_bytes_total", append(counterChip(chip), "type", typ)...)] = float64(v)
	}
	for k, n := range s.kinds {
		w[series("tttrace_events_total", "kind", k)] = float64(n)
	}
	w["tttrace_lost_events_total{}"] = float64(s.lost)
	return w
}

// wantTracesAndMeshes adds to w the Metal trace and mesh allocator
// series of traced process pid, from its summary: every trace counter
// from 0, each live mesh's chips and, per type, capacity, free bytes and
// largest free block (banks x the per-bank numbers).
func (s *stream) wantTracesAndMeshes(w map[string]float64, pid uint32, cmd string) {
	sum, ok := s.l.ProcessSummary(pid)
	if !ok {
		s.t.Fatalf("ledger has no process %d", pid)
	}
	ps := &sum.Processes[0]
	p := strconv.Itoa(int(pid))
	tr := ps.Traces
	if tr == nil {
		tr = &devices.TraceSummary{}
	}
	for name, v := range map[string]uint64{"captures": tr.Captures, "replays": tr.Replays, "releases": tr.Releases,
		"unknown_replays": tr.UnknownReplays, "checked_buffers": tr.Checked} {
		w[series("tttrace_trace_"+name+"_total", "pid", p, "command", cmd)] = float64(v)
	}
	for rec, v := range map[string]uint64{
		"trace_hazard":         tr.HazardCount + tr.HazardsSuppressed,
		"trace_replay_invalid": tr.InvalidReplayCount + tr.InvalidReplaysSuppressed,
		"trace_region_hazard":  tr.RegionHazardCount + tr.RegionHazardsSuppressed,
		"trace_capture_alloc":  tr.CaptureAllocCount + tr.CaptureAllocsSuppressed,
	} {
		w[series("tttrace_trace_records_total", "record", rec, "pid", p, "command", cmd)] = float64(v)
	}
	for b, v := range map[string]uint64{"traces_dropped": tr.TracesDropped, "captured_lost": tr.CapturedLost, "cb_cores_lost": tr.CBCoresLost} {
		w[series("tttrace_trace_bounds_exceeded_total", "bound", b, "pid", p, "command", cmd)] = float64(v)
	}
	for _, m := range ps.Meshes {
		w[series("tttrace_mesh_chips", "mesh_device", m.MeshDevice, "pid", p, "command", cmd)] = float64(len(m.Chips))
		if m.Allocator == nil {
			continue
		}
		for typ, at := range map[string]*devices.AllocatorType{"dram": m.Allocator.DRAM, "l1": m.Allocator.L1, "l1_small": m.Allocator.L1Small, "trace": m.Allocator.Trace} {
			if at == nil {
				continue
			}
			banks := float64(at.Banks)
			w[series("tttrace_mesh_capacity_bytes", "mesh_device", m.MeshDevice, "type", typ, "pid", p, "command", cmd)] = banks * float64(at.BankSize)
			if at.TotalFree != nil {
				w[series("tttrace_mesh_free_bytes", "mesh_device", m.MeshDevice, "type", typ, "pid", p, "command", cmd)] = banks * float64(*at.TotalFree)
				w[series("tttrace_mesh_largest_free_block_bytes", "mesh_device", m.MeshDevice, "type", typ, "pid", p, "command", cmd)] = banks * float64(*at.LargestFree)
			}
		}
	}
}

func diff(t *testing.T, when string, got, want map[string]float64) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s: missing %s (want %v)", when, k, w)
		case !wok:
			t.Errorf("%s: unexpected %s = %v", when, k, g)
		case g != w:
			t.Errorf("%s: %s = %v, want %v", when, k, g, w)
		}
	}
}

func listen(t *testing.T) *Exporter {
	t.Helper()
	return listenWith(t, Options{})
}

func listenWith(t *testing.T, o Options) *Exporter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := serve(ln, o)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// The exposition says what the ledger says, per process and chip, summed
// per chip over processes; an ended process's series disappear and what
// it left allocated is added to the leaked totals.
func TestExpositionFollowsLedger(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	s := newStream(t, e)
	s.start(100, "python3 -m pytest tests/ttnn")
	s.start(200, "./my_workload --chips 4")

	s.alloc(100, 0x1001000, 0, events.DRAM, 1<<20)
	s.alloc(100, 0x1002000, 0, events.L1, 4096)
	s.alloc(100, 0x1003000, 1, events.L1Small, 2048)
	s.alloc(100, 0x1004000, 1, events.Trace, 8192)
	s.alloc(100, 0x1005000, 0, events.SystemMemory, 512)
	s.alloc(100, 0x1006000, 0, events.DRAM, 3<<20) // raises the peak, then freed
	s.free(100, 0x1006000, 0)
	s.meshAlloc(100, 0x1007000, 0x5500a0000000, events.DRAM, 65536, 0, 1)
	s.cb(100, 0x9000, 1, 16384)
	// A second program on chip 1, 4 KiB on cores (1,0) and (2,0): the
	// busiest core (0,0) still holds 16 KiB, the programs registered
	// 16 + 4 KiB, the cores hold 16 + 2 x 4 KiB.
	s.cbCores(100, 0x9100, 1, 0x1000, 4096, events.CoreRange{X0: 1, Y0: 0, X1: 2, Y1: 0})
	s.alloc(200, 0x2001000, 0, events.DRAM, 7<<20)
	s.alloc(200, 0x2002000, 3, events.L1, 1024)
	s.send(events.Event{Kind: events.KindAlloc, Pid: 200, Tid: 200, Object: 0x2003000, Device: chipPtr(3), DeviceKind: events.DeviceChip,
		Chip: 3, BufferType: events.DRAM, Address: 0x3000, Size: 4096, PageSize: 1024, OwnsData: true, Status: 1, LostBefore: 5})
	s.free(200, 0x2003000, 3)

	s.tick()
	got := scrape(t, addr)
	diff(t, "both running", got, s.want())
	lint(t, addr)
	// Spot checks against values known independently of the ledger.
	for k, v := range map[string]float64{
		series("tttrace_device_memory_bytes", "chip", "0", "chip_uid", "0000:00:00.0", "pci", "0000:00:00.0", "type", "dram", "pid", "100", "command", "python3 -m pytest tests/ttnn"):      1<<20 + 65536,
		series("tttrace_device_memory_peak_bytes", "chip", "0", "chip_uid", "0000:00:00.0", "pci", "0000:00:00.0", "type", "dram", "pid", "100", "command", "python3 -m pytest tests/ttnn"): 4 << 20,
		series("tttrace_device_memory_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "type", "cb", "pid", "100", "command", "python3 -m pytest tests/ttnn"):        16384,
		series("tttrace_live_buffers", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):                             3,
		series("tttrace_device_cb_registered_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):               16384 + 4096,
		series("tttrace_device_cb_registered_peak_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):          16384 + 4096,
		series("tttrace_device_cb_resident_total_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):           16384 + 2*4096,
		series("tttrace_device_cb_resident_total_peak_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):      16384 + 2*4096,
		series("tttrace_chip_cb_registered_bytes", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0"):                                                                                       16384 + 4096,
		series("tttrace_chip_cb_resident_total_bytes", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0"):                                                                                   16384 + 2*4096,
		series("tttrace_chip_memory_bytes", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "type", "cb"):                                                                                16384,
		// L1 per core: chip 1's core (0,0) holds the first program's 16 KiB
		// of CBs; its L1_SMALL buffer's span per bank is not known (no
		// allocator request), so not counted.
		series("tttrace_l1_core_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"):      16384,
		series("tttrace_l1_core_peak_bytes", "chip", "1", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "pid", "100", "command", "python3 -m pytest tests/ttnn"): 16384,
		series("tttrace_chip_memory_bytes", "chip_uid", "0000:00:00.0", "pci", "0000:00:00.0", "type", "dram"):                                                        1<<20 + 65536 + 7<<20,
		"tttrace_lost_events_total{}": 5,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}

	// pid 100 ends holding all but one DRAM buffer and its CB.
	s.free(100, 0x1001000, 0)
	s.end(100)
	s.leaked["0/l1"] = 4096
	s.leaked["1/l1_small"] = 2048
	s.leaked["1/trace"] = 8192
	s.leaked["0/system_memory"] = 512
	s.leaked["0/dram"] = 65536 // the mesh buffer, on each of its chips
	s.leaked["1/dram"] = 65536
	got = scrape(t, addr) // no tick: the end alone removes the series
	diff(t, "pid 100 ended", got, s.want())
	for k := range got {
		if strings.Contains(k, `pid="100"`) {
			t.Errorf("series of the ended process remain: %s", k)
		}
	}

	// A second ending adds to the totals; the last process leaves no series.
	s.tick()
	s.end(200)
	s.leaked["0/dram"] += 7 << 20
	s.leaked["3/l1"] = 1024
	s.tick()
	diff(t, "all ended", scrape(t, addr), s.want())
	sum := s.l.Summary()
	if err := e.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	diff(t, "summary", scrape(t, addr), s.want())
}

// Mesh buffers whose chips were never learned are leaked on chip "unknown".
func TestUnplacedLeak(t *testing.T) {
	e := listen(t)
	s := newStream(t, e)
	s.start(7, "w")
	s.meshAlloc(7, 0x1000, 0x5500a0000000, events.L1, 300)
	s.tick()
	s.end(7)
	s.leaked[UnplacedChip+"/l1"] = 300
	diff(t, "unplaced", scrape(t, e.Addr().String()), s.want())
}

// Counting an event allocates nothing: the consumer's hot path.
func TestEventAllocatesNothing(t *testing.T) {
	e := New(Options{})
	ev := events.Event{Kind: events.KindAlloc, Pid: 1, Chip: 0, Size: 64}
	if n := testing.AllocsPerRun(1000, func() { e.Event(&ev) }); n != 0 {
		t.Fatalf("Event allocates %v times", n)
	}
}

// Scrapes run while the sink goroutine publishes (go test -race).
func TestScrapeDuringTicks(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	s := newStream(t, e)
	s.start(1, "w")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	for i := uint64(0); i < 300; i++ {
		s.alloc(1, 0x1000+i*0x100, int32(i%4), events.DRAM, 4096)
		if i%10 == 0 {
			s.tick()
		}
	}
	close(stop)
	wg.Wait()
	s.tick()
	diff(t, "after", scrape(t, addr), s.want())
}

// A busy or malformed address fails at once; Close stops the endpoint.
func TestListen(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	if _, err := Listen(addr, Options{}); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("second Listen on %s: %v", addr, err)
	}
	for _, bad := range []string{"9464", "localhost", "127.0.0.1:http", "127.0.0.1:0x10", "127.0.0.1:70000", "127.0.0.1:0"} {
		if err := CheckAddr(bad); err == nil {
			t.Errorf("CheckAddr(%q) accepted it", bad)
		}
	}
	for _, ok := range []string{":9464", "127.0.0.1:9464", "[::1]:9464", "localhost:9464"} {
		if err := CheckAddr(ok); err != nil {
			t.Errorf("CheckAddr(%q): %v", ok, err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the endpoint still accepts connections after Close")
	}
}

func TestCommandLabel(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := commandLabel(long)
	if len(got) > MaxCommand || !strings.HasSuffix(got, "...") || !strings.HasPrefix(long, strings.TrimSuffix(got, "...")) {
		t.Errorf("commandLabel(200 bytes) = %q (%d bytes)", got, len(got))
	}
	if got := commandLabel("python3 x.py"); got != "python3 x.py" {
		t.Errorf("short command changed: %q", got)
	}
	if got := commandLabel("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 kept: %q", got)
	}
}

// Chip totals sum every process's bytes: a sum past 2^64 saturates rather
// than wrapping to a small number.
func TestChipTotalsSaturate(t *testing.T) {
	e := New(Options{})
	for pid := range 3 {
		uid := "0000:01:00.0"
		e.procs = append(e.procs, procSnap{pid: strconv.Itoa(pid), labels: append([]string{strconv.Itoa(pid), "w"}, make([]string, len(ProcessLabels)-2)...),
			devs: []devices.DeviceSummary{{Device: 0, ChipIdentity: devices.ChipIdentity{UID: &uid, PCI: uid}, DRAMBytes: 1 << 63}}})
	}
	e.publish()
	ch := make(chan prom.Metric, 1000)
	e.Collect(ch)
	close(ch)
	found := false
	for m := range ch {
		if m.Desc() != e.fams.chip.desc {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if pb.GetLabel()[len(pb.GetLabel())-1].GetValue() != "dram" {
			continue
		}
		found = true
		if got := pb.GetGauge().GetValue(); got != float64(^uint64(0)) {
			t.Errorf("chip 0 dram = %v, want %v (saturated)", got, float64(^uint64(0)))
		}
	}
	if !found {
		t.Fatal("no chip total for dram")
	}
}

// An idle keep-alive connection is closed after IdleTimeout, and one that
// sends nothing after ReadHeaderTimeout: a local user cannot hold the
// endpoint's connections.
func TestIdleConnectionsClosed(t *testing.T) {
	e := listenWith(t, Options{IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond})
	addr := e.Addr().String()
	keep, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if _, err := io.WriteString(keep, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for name, c := range map[string]net.Conn{"keep-alive": keep, "silent": silent} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s connection: not closed by the server: %v", name, err)
		}
	}
}

// Connections past MaxConns are closed at once; the others are served,
// and a slot is free again when one closes.
func TestConnectionCap(t *testing.T) {
	e := listenWith(t, Options{MaxConns: 3})
	addr := e.Addr().String()
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The server has accepted the three (a request on each is answered).
	for _, c := range held {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 64)); err != nil {
			t.Fatalf("a connection within the cap: %v", err)
		}
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a fourth connection: read %d, %v; want it closed", n, err)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Options.Labels chooses the process labels: without command, no series
// carries the command line.
func TestLabelsWithoutCommand(t *testing.T) {
	e := listenWith(t, Options{Labels: []string{"pid"}})
	s := newStream(t, e)
	s.start(5, "./train --token=SECRET")
	s.alloc(5, 0x1000, 2, events.DRAM, 4096)
	s.tick()
	got := scrape(t, e.Addr().String())
	if v, ok := got[series("tttrace_device_memory_bytes", "chip", "2", "chip_uid", "0000:02:00.0", "pci", "0000:02:00.0", "type", "dram", "pid", "5")]; !ok || v != 4096 {
		t.Errorf("dram of pid 5 on chip 2 = %v (%v), want 4096", v, ok)
	}
	if v := got[series("tttrace_live_buffers", "chip", "2", "chip_uid", "0000:02:00.0", "pci", "0000:02:00.0", "pid", "5")]; v != 1 {
		t.Errorf("live buffers = %v, want 1", v)
	}
	for k := range got {
		if strings.Contains(k, "command") || strings.Contains(k, "SECRET") {
			t.Errorf("series with the command: %s", k)
		}
	}
	for _, bad := range [][]string{{"command"}, {}, {"pid", "argv"}} {
		if err := CheckLabels(bad); err == nil {
			t.Errorf("CheckLabels(%q) accepted", bad)
		}
	}
	if err := CheckLabels([]string{"command", "pid"}); err != nil {
		t.Error(err)
	}
}

// Leaked series exist for at most MaxLeakChips chips; leaks on the chips
// past them are summed on chip="other".
func TestLeakChipsCapped(t *testing.T) {
	e := listenWith(t, Options{MaxLeakChips: 2})
	s := newStream(t, e)
	s.start(9, "w")
	for chip := int32(0); chip < 5; chip++ {
		s.alloc(9, 0x1000+uint64(chip)*0x100, chip*10, events.L1, 100+uint64(chip))
	}
	s.tick()
	s.end(9)
	got := scrape(t, e.Addr().String())
	want := map[string]float64{"0": 100, "10": 101, OtherChip: 102 + 103 + 104}
	n, found := 0, 0
	for k, v := range got {
		if !strings.HasPrefix(k, "tttrace_leaked_bytes_total{") {
			continue
		}
		n++
		for chip, w := range want {
			if k == series("tttrace_leaked_bytes_total", append(counterChip(chip), "type", "l1")...) {
				found++
				if v != w {
					t.Errorf("%s = %v, want %v", k, v, w)
				}
			}
		}
	}
	if n != 3*5 || found != len(want) {
		t.Errorf("%d leaked series, want 15 (3 chips x 5 types); %d of the %d compared", n, found, len(want))
	}
}

// Host-wide sums go by physical chip: processes that each call their chip
// 0 (TT_VISIBLE_DEVICES=0, =1) are told apart, two on one physical chip
// are added, and chips of unknown identity are never added to anything.
// The ranks are labels of every per-process series.
func TestPhysicalChips(t *testing.T) {
	e := listenWith(t, Options{Host: "node-a"})
	s := newStream(t, e)
	visible := func(v string) devices.ChipMap {
		return devices.NewChipMap(func(k string) (string, bool) { return v, k == "TT_VISIBLE_DEVICES" }, hostChips, nil)
	}
	unknown := devices.NewChipMap(noEnv, nil, errors.New("no /dev/tenstorrent"))
	s.startWith(1, "a", visible("0"))
	s.startWith(2, "b", visible("1"))
	s.startWith(3, "c", visible("0000:00:00.0")) // chip 0 of a too
	s.startWith(4, "d", unknown)
	s.startWith(5, "e", unknown)
	rank := int64(7)
	s.place = map[uint32]devices.Placement{2: {Host: "node-a", Rank: &rank, MeshID: &rank}}
	for pid, size := range map[uint32]uint64{1: 1000, 2: 20000, 3: 300000, 4: 4000000, 5: 50000000} {
		s.alloc(pid, 0x1000*uint64(pid), 0, events.DRAM, size)
	}
	s.tick()
	got := scrape(t, e.Addr().String())
	chip := func(labels ...string) float64 {
		return got[series("tttrace_chip_memory_bytes", append([]string{"host", "node-a", "type", "dram"}, labels...)...)]
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"chip_uid", "0000:00:00.0", "pci", "0000:00:00.0"}, 1000 + 300000},
		{[]string{"chip_uid", "0000:01:00.0", "pci", "0000:01:00.0"}, 20000},
		{[]string{"chip", "0", "pid", "4"}, 4000000},
		{[]string{"chip", "0", "pid", "5"}, 50000000},
	} {
		if g := chip(c.labels...); g != c.want {
			t.Errorf("tttrace_chip_memory_bytes %v = %v, want %v", c.labels, g, c.want)
		}
	}
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "tttrace_chip_memory_bytes{") && strings.Contains(k, `type="dram"`) {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d dram chip series, want 4", n)
	}
	k := series("tttrace_device_memory_bytes", "chip", "0", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "type", "dram",
		"pid", "2", "command", "b", "host", "node-a", "rank", "7", "mesh_id", "7")
	if got[k] != 20000 {
		t.Errorf("%s = %v, want 20000", k, got[k])
	}
	// Their leaks count apart by physical chip too (all call it chip 0).
	for _, pid := range []uint32{1, 2, 3, 4} {
		s.end(pid)
	}
	got = scrape(t, e.Addr().String())
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"chip", "0", "chip_uid", "0000:00:00.0", "pci", "0000:00:00.0"}, 1000 + 300000},
		{[]string{"chip", "0", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0"}, 20000},
		{[]string{"chip", "0"}, 4000000},
	} {
		k := series("tttrace_leaked_bytes_total", append(c.labels, "type", "dram")...)
		if got[k] != c.want {
			t.Errorf("%s = %v, want %v", k, got[k], c.want)
		}
	}
}

// leakedChips is the chip label of every tttrace_leaked_bytes_total series
// of a scrape, with the number of its series.
func leakedChips(got map[string]float64) map[string]int {
	out := map[string]int{}
	for k := range got {
		if rest, ok := strings.CutPrefix(k, `tttrace_leaked_bytes_total{chip="`); ok {
			chip, _, _ := strings.Cut(rest, `"`)
			out[chip]++
		}
	}
	return out
}

// Issue #32, 13: the chips the exporter remembers, and their counters'
// series, are those of the processes the ledger still holds: a chip of
// processes trimmed by retention (--keep-ended), or closed with nothing
// left, is forgotten; one still held keeps its counts.
func TestChipsForgotten(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	s := newStream(t, e)
	s.l = devices.NewLedger(devices.Options{KeepEnded: 1, KeepEndedTotals: 1}) // one ended process kept in full
	// A service meeting 50 processes, each on chip ids of its own, each
	// leaking a buffer.
	for i := range uint32(50) {
		pid, chip := 1000+i, 100+int32(i)
		s.start(pid, "w")
		s.alloc(pid, 0x1000, chip, events.DRAM, 4096)
		s.tick()
		s.end(pid)
	}
	s.tick()
	got := scrape(t, addr)
	if chips := leakedChips(got); len(chips) != 1 || chips["149"] != 5 {
		t.Errorf("leaked series by chip after 50 processes, the last one kept: %v; want only chip 149's 5", chips)
	}
	if v := got[series("tttrace_leaked_bytes_total", "chip", "149", "type", "dram")]; v != 4096 {
		t.Errorf("the kept process's leak: %v, want 4096", v)
	}

	// A traced process closes chip 300 with nothing left, and holds 301.
	s.start(7, "w")
	s.alloc(7, 0x2000, 300, events.L1, 100)
	s.free(7, 0x2000, 300)
	s.send(events.Event{Kind: events.KindDeviceClose, Pid: 7, Tid: 7, Device: chipPtr(300), DeviceKind: events.DeviceChip, Chip: 300})
	s.alloc(7, 0x3000, 301, events.L1, 200)
	s.tick()
	got = scrape(t, addr)
	if chips := leakedChips(got); len(chips) != 2 || chips["149"] != 5 || chips["301"] != 5 {
		t.Errorf("leaked series by chip with chip 300 closed: %v; want chips 149 and 301", chips)
	}
	// The process's own series of the closed chip stay while it runs.
	if _, ok := got[series("tttrace_device_memory_bytes", "chip", "300", "type", "l1", "pid", "7", "command", "w")]; !ok {
		t.Error("the process's series of its closed chip are gone")
	}

	// It ends leaking on 301: pid 1049, trimmed, lets 149 go.
	s.end(7)
	s.tick()
	got = scrape(t, addr)
	if chips := leakedChips(got); len(chips) != 1 || chips["301"] != 5 {
		t.Errorf("leaked series by chip after pid 7 ended: %v; want only chip 301's", chips)
	}
	if v := got[series("tttrace_leaked_bytes_total", "chip", "301", "type", "l1")]; v != 200 {
		t.Errorf("pid 7's leak: %v, want 200", v)
	}
}
