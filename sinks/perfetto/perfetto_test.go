package perfetto_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/perfetto"
	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// stream feeds a real ledger and the writer the way the runtime does:
// Apply (the writer observes chip totals), then Event.
type stream struct {
	t   *testing.T
	l   *devices.Ledger
	w   *perfetto.Writer
	seq uint64
	ts  uint64
	rng *rand.Rand
}

func newStream(t *testing.T, out *bytes.Buffer, seed uint64) *stream {
	return newStreamWith(t, out, seed, func(w *perfetto.Writer) devices.Options {
		return devices.Options{Observer: w.ChipTotals}
	})
}

// newStreamWith is newStream whose ledger has the options opts gives for
// its writer.
func newStreamWith(t *testing.T, out *bytes.Buffer, seed uint64, opts func(w *perfetto.Writer) devices.Options) *stream {
	w := perfetto.New(out)
	w.Comm = func(pid, tid uint32) string { return fmt.Sprintf("worker-%d", tid) }
	return &stream{t: t, l: devices.NewLedger(opts(w)), w: w, ts: 1_000_000, rng: rand.New(rand.NewPCG(seed, 7))}
}

// newProcStream is newStream whose writer hears the ledger's notices too
// (and its allocator states, with allocs), with an emit that gives each
// event process pid (the devicestest builders leave it to the caller).
func newProcStream(t *testing.T, out *bytes.Buffer, seed uint64, pid uint32, allocs bool) (*stream, func(events.Event)) {
	s := newStreamWith(t, out, seed, func(w *perfetto.Writer) devices.Options {
		o := devices.Options{Observer: w.ChipTotals, Notices: w}
		if allocs {
			o.AllocObserver = w.AllocState
		}
		return o
	})
	return s, func(e events.Event) {
		e.Pid = pid
		s.emit(e)
	}
}

// emit applies e. Time mostly moves on, but now and then it stands still
// or steps back a little, as records of different CPUs do.
func (s *stream) emit(e events.Event) {
	s.seq++
	switch r := s.rng.IntN(10); {
	case r == 0:
	case r == 1 && s.ts > 50:
		s.ts -= uint64(s.rng.IntN(50))
	default:
		s.ts += uint64(1 + s.rng.IntN(1000))
	}
	e.Seq, e.TsNs = s.seq, s.ts
	s.l.Apply(&e)
	s.w.Event(&e)
}

func chipPtr(chip int32) uint64 { return 0x7f0000000000 + uint64(uint32(chip))*0x1000 }

func allocEvent(pid, tid uint32, buf uint64, chip int32, t events.BufferType, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Pid: pid, Tid: tid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: t, Address: 0x10000, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

func free(pid, tid uint32, buf uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindFree, Pid: pid, Tid: tid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, OwnsData: true, Status: 1}
}

func meshAlloc(pid, tid uint32, buf, mesh uint64, t events.BufferType, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Pid: pid, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, BufferType: t, Address: 0x20000, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

func view(pid, tid uint32, chip int32) events.Event {
	return events.Event{Kind: events.KindView, Pid: pid, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, Address: 0x20000, Size: 4096}
}

func meshFree(pid, tid uint32, buf, mesh uint64) events.Event {
	return events.Event{Kind: events.KindFree, Pid: pid, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, OwnsData: true, Status: 1}
}

var chipIDs = []int32{0, 1, 7, 65}

// workload is a random program of one process incarnation: buffers of
// every type on sparse chips, a mesh, CBs, closes, and a few anomalies.
func (s *stream) workload(pid uint32, steps int) {
	type live struct {
		buf  uint64
		chip int32
		mesh uint64
	}
	var bufs []live
	nextBuf := uint64(pid) << 32
	mesh := uint64(0x5500a0000000) + uint64(pid)<<12
	meshChips := []int32{0, 1}
	tids := []uint32{pid, pid + 1, pid + 2}
	prog := uint64(0x6600000) + uint64(pid)<<12
	for i := 0; i < steps; i++ {
		tid := tids[s.rng.IntN(len(tids))]
		switch r := s.rng.IntN(100); {
		case r < 40:
			nextBuf++
			chip := chipIDs[s.rng.IntN(len(chipIDs))]
			s.emit(allocEvent(pid, tid, nextBuf, chip, events.BufferType(s.rng.IntN(events.NumBufferTypes)), uint64(1+s.rng.IntN(1<<20))))
			bufs = append(bufs, live{buf: nextBuf, chip: chip})
		case r < 70 && len(bufs) > 0:
			j := s.rng.IntN(len(bufs))
			b := bufs[j]
			bufs = append(bufs[:j], bufs[j+1:]...)
			if b.mesh != 0 {
				s.emit(meshFree(pid, tid, b.buf, b.mesh))
			} else {
				s.emit(free(pid, tid, b.buf, b.chip))
			}
		case r < 78:
			nextBuf++
			s.emit(meshAlloc(pid, tid, nextBuf, mesh, events.BufferType(s.rng.IntN(events.NumBufferTypes)), uint64(1+s.rng.IntN(1<<16))))
			for _, c := range meshChips {
				s.emit(view(pid, tid, c))
			}
			bufs = append(bufs, live{buf: nextBuf, mesh: mesh})
		case r < 84:
			prog++
			chip := chipIDs[s.rng.IntN(len(chipIDs))]
			s.emit(events.Event{Kind: events.KindCBLayout, Pid: pid, Tid: tid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
			// CBs on random core ranges, the program dispatched most of
			// the time: resident per core (CB, CB_RESIDENT_TOTAL), not
			// only registered (CB_REGISTERED).
			for k := 0; k < 1+s.rng.IntN(3); k++ {
				cb := events.Event{Kind: events.KindCBAlloc, Pid: pid, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
					Chip: chip, Address: 0x1000 * uint64(k+1), Size: uint64(1 + s.rng.IntN(1<<14))}
				x, y := uint16(s.rng.IntN(4)), uint16(s.rng.IntN(4))
				cb.RangesKnown, cb.NumRanges = true, 1
				cb.CoreRanges[0] = events.CoreRange{X0: x, Y0: y, X1: x + uint16(s.rng.IntN(3)), Y1: y + uint16(s.rng.IntN(3))}
				s.emit(cb)
			}
			if s.rng.IntN(3) != 0 {
				s.emit(events.Event{Kind: events.KindProgramDispatch, Pid: pid, Tid: tid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
			}
			if s.rng.IntN(2) == 0 {
				s.emit(events.Event{Kind: events.KindProgramDestroy, Pid: pid, Tid: tid, Object: prog, Chip: -1})
			}
		case r < 87:
			chip := chipIDs[s.rng.IntN(len(chipIDs))]
			s.emit(events.Event{Kind: events.KindDeviceClose, Pid: pid, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip})
		case r < 88:
			s.emit(events.Event{Kind: events.KindMeshClose, Pid: pid, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1})
		case r < 91:
			// An allocation on a device the probe could not classify.
			nextBuf++
			e := allocEvent(pid, tid, nextBuf, -1, events.DRAM, 4096)
			e.DeviceKind, e.Device = events.DeviceUnknown, 0xdead000
			s.emit(e)
		case r < 92:
			s.emit(events.Event{Kind: events.KindLost, LostBefore: 3, Chip: -1})
		}
	}
}

// For every process (and every incarnation of a reused pid) × chip ×
// memory type, the counter track read back as trace_processor reads it
// ends at the ledger's final total and peaks at its peak; anomalies,
// closes and exits are instants on declared tracks; processes are named.
func TestCountersMatchLedger(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var out bytes.Buffer
			s := newStream(t, &out, seed)
			for _, pid := range []uint32{100, 200} {
				s.l.SetProcessInfo(pid, devices.ProcessInfo{Command: fmt.Sprintf("/opt/bin/work%d --x", pid)})
			}
			s.w.Tick(&sinks.View{Ledger: s.l, Procs: []sinks.Proc{{Pid: 100, Command: "/opt/bin/work100 --x"}}})
			s.workload(100, 1500)
			s.workload(200, 800)
			// pid 100 exits, leaving buffers; the pid is reused.
			s.emit(events.Event{Kind: events.KindExit, Pid: 100, ExitCode: 3, Chip: -1})
			one, _ := s.l.ProcessSummary(100)
			s.w.ProcessEnded(&one, true)
			s.l.NewIncarnation(100)
			s.l.SetProcessInfo(100, devices.ProcessInfo{Command: "again"})
			s.workload(100, 600)
			s.workload(200, 400)
			sum := s.l.Summary()
			if err := s.w.Summary(&sum); err != nil {
				t.Fatal(err)
			}
			if err := s.w.Close(); err != nil {
				t.Fatal(err)
			}
			tr, err := perfettotest.Decode(out.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstSummary(t, tr, &sum)
		})
	}
}

// typeFields maps a track's memory type to a DeviceSummary's total and peak.
func typeFields(d *devices.DeviceSummary) map[string][2]uint64 {
	p := &d.Peaks
	var l1c [2]uint64 // L1 per core: the busiest core's total now and at its peak
	if c := d.L1BusiestCore; c != nil {
		l1c[0] = c.TotalBytes
	}
	if c := d.PeakL1BusiestCore; c != nil {
		l1c[1] = c.TotalBytes
	}
	return map[string][2]uint64{
		"DRAM":          {d.DRAMBytes, p.DRAMBytes.Value},
		"L1":            {d.L1Bytes, p.L1Bytes.Value},
		"L1_SMALL":      {d.L1SmallBytes, p.L1SmallBytes.Value},
		"TRACE":         {d.TraceBytes, p.TraceBytes.Value},
		"SYSTEM_MEMORY": {d.SystemMemoryBytes, p.SystemMemoryBytes.Value},
		"CB":            {d.CBBytes, p.CBBytes.Value},
		// The CB measures beside CB.
		"CB_REGISTERED":     {d.CBRegisteredBytes, p.CBRegisteredBytes.Value},
		"CB_RESIDENT_TOTAL": {d.CBResidentTotalBytes, p.CBResidentTotalBytes.Value},
		// L1 per core.
		"L1_BUSIEST_CORE": l1c,
	}
}

func checkAgainstSummary(t *testing.T, tr *perfettotest.Trace, sum *devices.Summary) {
	t.Helper()
	inc := map[uint32]int{}
	checked, cbApart := 0, 0
	for i := range sum.Processes {
		sp := &sum.Processes[i]
		n := inc[sp.Pid]
		inc[sp.Pid]++
		ps := tr.ProcessesOf(sp.Pid)
		if n >= len(ps) {
			t.Fatalf("pid %d incarnation %d: no process track (%d)", sp.Pid, n, len(ps))
		}
		p := ps[n]
		if want := sp.Command; p.ProcessName == "" || strings.Join(p.Cmdline, " ") != want ||
			!strings.HasSuffix(strings.Fields(want)[0], p.ProcessName) {
			t.Errorf("pid %d: process named %q %q, command %q", sp.Pid, p.ProcessName, p.Cmdline, want)
		}
		counters, err := tr.Counters(p)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[perfettotest.ChipType]bool{}
		for j := range sp.Devices {
			d := &sp.Devices[j]
			if pk := &d.Peaks; pk.CBBytes.Value > 0 && pk.CBBytes.Value < pk.CBResidentTotalBytes.Value && pk.CBResidentTotalBytes.Value != pk.CBRegisteredBytes.Value {
				cbApart++
			}
			for typ, want := range typeFields(d) {
				k := perfettotest.ChipType{Chip: d.Device, Type: typ}
				seen[k] = true
				var last, peak int64
				if c := counters[k]; c != nil {
					last, peak = c.Last(), c.Max()
					if c.Unit != 3 {
						t.Errorf("%s: unit %d, want bytes (3)", c.Name, c.Unit)
					}
					checked++
				}
				if uint64(last) != want[0] || uint64(peak) != want[1] {
					t.Errorf("pid %d #%d chip %d %s: track ends at %d peaks at %d; ledger: total %d peak %d",
						sp.Pid, n, d.Device, typ, last, peak, want[0], want[1])
				}
			}
		}
		for k := range counters {
			if !seen[k] {
				t.Errorf("pid %d: track for chip %d %s, which the summary does not have", sp.Pid, k.Chip, k.Type)
			}
		}
		// Anomalies: one instant each, on this incarnation's tracks.
		var want, got int
		for _, a := range sp.Anomalies {
			if a.Kind == "unknown_device" {
				want++
			}
		}
		for _, in := range tr.Instants {
			if in.Name == "anomaly: unknown_device" && owner(tr, in.Track) == p {
				got++
			}
		}
		if got != want {
			t.Errorf("pid %d #%d: %d unknown_device instants, summary lists %d", sp.Pid, n, got, want)
		}
		if closes := countInstants(tr, p, "device_close chip "); uint64(closes) != sp.Stats.DeviceCloses {
			t.Errorf("pid %d #%d: %d device_close instants, ledger counted %d", sp.Pid, n, closes, sp.Stats.DeviceCloses)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d counter tracks checked: the workload is too small", checked)
	}
	if cbApart == 0 {
		t.Fatal("no chip whose CB peaks differ (CB below CB_RESIDENT_TOTAL, which is not CB_REGISTERED): the CB measures are not told apart")
	}
	if n := countInstants(tr, nil, "exit 3"); n != 1 {
		t.Errorf("%d exit instants, want 1", n)
	}
	if n := countInstants(tr, nil, "lost 3 records"); n == 0 {
		t.Error("no lost-records instant")
	}
	for _, in := range tr.Instants {
		if th := tr.Tracks[in.Track]; th.IsThread && th.ThreadName != fmt.Sprintf("worker-%d", th.Tid) {
			t.Errorf("thread %d named %q", th.Tid, th.ThreadName)
		}
	}
}

// owner is the process track a track belongs to.
func owner(tr *perfettotest.Trace, uuid uint64) *perfettotest.Track {
	for t := tr.Tracks[uuid]; t != nil; t = tr.Tracks[t.Parent] {
		if t.IsProcess {
			return t
		}
	}
	return nil
}

// countInstants counts the instants whose name starts with prefix, on the
// tracks of process p (nil: anywhere).
func countInstants(tr *perfettotest.Trace, p *perfettotest.Track, prefix string) int {
	n := 0
	for _, in := range tr.Instants {
		if strings.HasPrefix(in.Name, prefix) && (p == nil || owner(tr, in.Track) == p) {
			n++
		}
	}
	return n
}

// steady is a stream of allocations and frees on 8 chips, the shape of a
// busy workload: every event changes one counter of one chip.
func steady(l *devices.Ledger, w *perfetto.Writer, n int, ts *uint64) {
	for i := 0; i < n; i++ {
		buf := uint64(0x1000 + i%512)
		chip := int32(i % 8)
		var e events.Event
		if (i/512)%2 == 0 {
			e = allocEvent(1, 1, buf, chip, events.BufferType(i%3), uint64(4096+i%4096))
		} else {
			e = free(1, 1, buf, chip)
		}
		*ts += 250
		e.TsNs = *ts
		l.Apply(&e)
		w.Event(&e)
	}
}

// Once a chip's tracks are declared, a sample allocates nothing.
func TestSamplesAllocateNothing(t *testing.T) {
	w := perfetto.New(io.Discard)
	l := devices.NewLedger(devices.Options{Observer: w.ChipTotals})
	ts := uint64(1)
	steady(l, w, 4096, &ts)
	if n := testing.AllocsPerRun(10, func() { steady(l, w, 1024, &ts) }); n != 0 {
		t.Fatalf("%v allocations per 1024 events", n)
	}
}

// BenchmarkEvents reports the trace's bytes per event and the time per
// event of the ledger and the writer together.
func BenchmarkEvents(b *testing.B) {
	var cw countingWriter
	w := perfetto.New(&cw)
	l := devices.NewLedger(devices.Options{Observer: w.ChipTotals})
	ts := uint64(1)
	b.ResetTimer()
	steady(l, w, b.N, &ts)
	_ = w.Close()
	b.ReportMetric(float64(cw.n)/float64(b.N), "bytes/event")
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
