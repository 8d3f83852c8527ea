package events_test

import (
	"bufio"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/ledgertest"
	"github.com/tttrace/tttrace/events"
)

// The consumer's work per ring-buffer record, as cmd/tttrace/cli does it:
// events.Decode, devices.Ledger.Apply, and (with --json) events.AppendJSON
// into a buffered writer. The records are wire records (events.Wire)
// of a synthetic TT-NN-like workload, replayed in a loop. scripts/bench.sh
// runs these with GOMAXPROCS=1 on one CPU; goal: >= 3M events/s with NDJSON
// and no allocation per event.

const (
	benchPid    = 4242
	benchChips  = 8
	benchMesh   = 0x55d0d0001000 // MeshDevice* over chips 0..7
	benchVtable = 0x7f3a12345010 // Device vptr, as the probe reports it
)

func chipDev(chip int32) uint64 { return 0x55d0c8000000 + uint64(chip)*0x2000 }

// streamGen writes wire records into one slab, as the ring buffer hands
// them out (each record its own 8-byte aligned sample).
type streamGen struct {
	rng  *rand.Rand
	seq  uint64
	recs [][]byte
}

// stamp gives the next record its header's sequence, time and pid.
func (g *streamGen) stamp(h *events.Header) {
	g.seq++
	h.Seq = g.seq
	h.TsNs = 1_000_000_000 + g.seq*250
	h.Pid = benchPid
}

func (g *streamGen) add(w events.Wire) {
	g.stamp(&w.Hdr)
	if w.Chip == 0 && w.DeviceKind != events.DeviceChip {
		w.Chip = -1
	}
	if w.Hdr.Kind != events.KindAlloc && w.Hdr.Kind != events.KindFree && w.Hdr.Kind != events.KindView {
		w.BufferType = -1
	}
	raw := make([]byte, events.WireSize)
	*(*events.Wire)(unsafe.Pointer(&raw[0])) = w
	g.recs = append(g.recs, raw)
}

// cbAlloc adds a circular buffer laid out on chip over one core range (a
// struct cb_alloc_record).
func (g *streamGen) cbAlloc(tid uint32, chip int32, addr, size uint64) {
	w := events.CBAllocWire{Hdr: events.Header{Kind: events.KindCBAlloc, Tid: tid}, Device: chipDev(chip),
		DeviceVptr: benchVtable, DeviceKind: events.DeviceChip, Chip: chip, Address: addr, Size: size,
		Nranges: 1, Flags: events.CBRangesKnown}
	w.Ranges[0] = events.CoreRange{X1: 7, Y1: 7}
	g.stamp(&w.Hdr)
	raw := make([]byte, events.CBAllocWireSize)
	*(*events.CBAllocWire)(unsafe.Pointer(&raw[0])) = w
	g.recs = append(g.recs, raw)
}

func (g *streamGen) onChip(w *events.Wire, chip int32) {
	w.Device = chipDev(chip)
	w.DeviceVptr = benchVtable
	w.DeviceKind = events.DeviceChip
	w.Chip = chip
}

func (g *streamGen) onMesh(w *events.Wire) {
	w.Device = benchMesh
	w.DeviceVptr = benchVtable + 0x400
	w.DeviceKind = events.DeviceMesh
	w.Chip = -1
}

type liveBuf struct {
	ptr  uint64
	chip int32
	mesh bool
	typ  int32
	addr uint64
	size uint64
}

func (g *streamGen) buffer(kind events.Kind, tid uint32, b liveBuf) {
	w := events.Wire{Hdr: events.Header{Kind: kind, Tid: tid}, Object: b.ptr, BufferType: b.typ,
		Address: b.addr, Size: b.size, PageSize: 2048, OwnsData: 1, Status: 1}
	if b.mesh {
		g.onMesh(&w)
	} else {
		g.onChip(&w, b.chip)
	}
	g.add(w)
}

// workload returns about n records. alloc/free only (mixed false): the
// burst of the replica, single-chip buffers on a few chips and two threads.
// mixed: also mesh buffers with their per-chip views, and programs laying
// out, tearing down and destroying circular buffers. Every buffer and
// program is released by the end, so the stream can be replayed.
func workload(n int, mixed bool) [][]byte {
	g := &streamGen{rng: rand.New(rand.NewPCG(1, 2))}
	tids := []uint32{benchPid + 1, benchPid + 2}
	live := map[uint32][]liveBuf{}
	var nextPtr uint64 = 0x55d0c0000000
	// Buffer* values are recycled by malloc: keep a small pool per thread.
	freePtrs := map[uint32][]uint64{}
	ptr := func(tid uint32) uint64 {
		if p := freePtrs[tid]; len(p) > 0 {
			v := p[len(p)-1]
			freePtrs[tid] = p[:len(p)-1]
			return v
		}
		nextPtr += 0x70
		return nextPtr
	}
	release := func(tid uint32, b liveBuf) {
		g.buffer(events.KindFree, tid, b)
		freePtrs[tid] = append(freePtrs[tid], b.ptr)
	}
	var addr uint64 = 0x10000
	var prog uint64 = 0x55d0e0000000
	for op := 0; len(g.recs) < n; op++ {
		tid := tids[op%len(tids)]
		addr += 0x800
		b := liveBuf{ptr: ptr(tid), chip: int32(g.rng.IntN(benchChips)), typ: int32(g.rng.IntN(2)),
			addr: addr, size: uint64(1+g.rng.IntN(64)) * 1024}
		if mixed && op%16 == 0 {
			b.mesh = true
			g.buffer(events.KindAlloc, tid, b)
			for c := int32(0); c < benchChips; c++ {
				w := events.Wire{Hdr: events.Header{Kind: events.KindView, Tid: tid}, BufferType: b.typ,
					Address: b.addr, Size: b.size, PageSize: 2048}
				g.onChip(&w, c)
				g.add(w)
			}
		} else {
			g.buffer(events.KindAlloc, tid, b)
		}
		live[tid] = append(live[tid], b)
		if len(live[tid]) > 48 {
			i := g.rng.IntN(len(live[tid]))
			old := live[tid][i]
			live[tid] = append(live[tid][:i], live[tid][i+1:]...)
			release(tid, old)
		}
		if mixed && op%8 == 0 {
			// A program run on one chip: layout with four CBs, then teardown
			// (one CB free per chip) and destruction. The CBs sit below
			// every L1 buffer (from 0x10800), as in TT-Metal: no l1_clash.
			prog += 0x1000
			chip := int32(g.rng.IntN(benchChips))
			w := events.Wire{Hdr: events.Header{Kind: events.KindCBLayout, Tid: tid}, Object: prog}
			g.onChip(&w, chip)
			g.add(w)
			for i := 0; i < 4; i++ {
				g.cbAlloc(tid, chip, 0x100+uint64(i)*0x4000, uint64(1+g.rng.IntN(8))*2048)
			}
			g.add(events.Wire{Hdr: events.Header{Kind: events.KindCBTeardown, Tid: tid}, Object: prog})
			w = events.Wire{Hdr: events.Header{Kind: events.KindCBFree, Tid: tid}}
			g.onChip(&w, chip)
			g.add(w)
			g.add(events.Wire{Hdr: events.Header{Kind: events.KindProgramDestroy, Tid: tid}, Object: prog})
		}
	}
	for _, tid := range tids {
		for _, b := range live[tid] {
			release(tid, b)
		}
	}
	return g.recs
}

// consumer is the per-record path of the tracer's session loop.
type consumer struct {
	ledger *devices.Ledger
	out    *bufio.Writer
	buf    []byte
	json   bool
	ev     events.Event
}

func (c *consumer) handle(raw []byte) error {
	if err := events.Decode(raw, &c.ev); err != nil {
		return err
	}
	c.ledger.Apply(&c.ev)
	if c.json {
		c.buf = events.AppendJSON(c.buf[:0], &c.ev)
		_, _ = c.out.Write(c.buf)
	}
	return nil
}

func benchConsume(b *testing.B, mixed, json bool) {
	recs := workload(1<<16, mixed)
	c := &consumer{ledger: devices.NewLedger(devices.Options{}), out: bufio.NewWriterSize(io.Discard, 1<<20), json: json}
	// One pass to grow the ledger's tables and the buffers.
	for _, r := range recs {
		if err := c.handle(r); err != nil {
			b.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.handle(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	// allocs/op rounds down to an integer; this says 0.004 when a
	// program's lifecycle allocates a little every few hundred events.
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/event")
	if err := ledgertest.Check(c.ledger); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkConsume: one op is one record. AllocFree replays the burst's
// record mix; Mixed adds mesh buffers, views and circular buffers. JSON:
// decode + ledger + NDJSON; Ledger: decode + ledger (the human mode and
// --no-events).
func BenchmarkConsume(b *testing.B) {
	b.Run("AllocFree/JSON", func(b *testing.B) { benchConsume(b, false, true) })
	b.Run("AllocFree/Ledger", func(b *testing.B) { benchConsume(b, false, false) })
	b.Run("Mixed/JSON", func(b *testing.B) { benchConsume(b, true, true) })
	b.Run("Mixed/Ledger", func(b *testing.B) { benchConsume(b, true, false) })
}

// TestConsumeWorkload checks that the benchmark's stream is one the ledger
// accepts without anomalies and leaves empty, so the benchmark measures the
// normal path.
func TestConsumeWorkload(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		recs := workload(1<<14, mixed)
		l := devices.NewLedger(devices.Options{})
		var ev events.Event
		for pass := 0; pass < 2; pass++ {
			for _, r := range recs {
				if err := events.Decode(r, &ev); err != nil {
					t.Fatal(err)
				}
				l.Apply(&ev)
			}
		}
		if err := ledgertest.Check(l); err != nil {
			t.Fatal(err)
		}
		s := l.Summary()
		if len(s.Processes) != 1 {
			t.Fatalf("mixed=%v: %d processes", mixed, len(s.Processes))
		}
		p := s.Processes[0]
		if len(p.Anomalies) != 0 || len(p.Leaks) != 0 || p.UnknownFrees != 0 || p.DoubleFrees != 0 {
			t.Fatalf("mixed=%v: anomalies %v, %d leaks, %d unknown frees, %d double frees",
				mixed, p.Anomalies, len(p.Leaks), p.UnknownFrees, p.DoubleFrees)
		}
		for _, d := range p.Devices {
			if d.LiveBuffers != 0 || d.CBBytes != 0 || d.DRAMBytes != 0 || d.L1Bytes != 0 {
				t.Fatalf("mixed=%v: chip %d not empty at the end: %+v", mixed, d.Device, d)
			}
		}
		if mixed && (p.Stats.MeshAllocs == 0 || p.Stats.CBAllocs == 0 || p.Stats.ProgramDestroys == 0) {
			t.Fatalf("mixed stream lacks mesh or CB events: %+v", p.Stats)
		}
	}
}

// TestConsumeAllocatesNothing: decode + ledger + NDJSON of the mixed stream
// (mesh buffers, views, circular buffers, program teardowns) allocate
// nothing per record once the ledger has warmed up.
func TestConsumeAllocatesNothing(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		recs := workload(1<<12, mixed)
		l := devices.NewLedger(devices.Options{})
		var ev events.Event
		var buf []byte
		pass := func() {
			for _, r := range recs {
				if err := events.Decode(r, &ev); err != nil {
					t.Fatal(err)
				}
				l.Apply(&ev)
				buf = events.AppendJSON(buf[:0], &ev)
			}
		}
		pass()
		if n := testing.AllocsPerRun(5, pass); n != 0 {
			t.Errorf("mixed=%v: %v allocations per pass of %d records", mixed, n, len(recs))
		}
	}
}
