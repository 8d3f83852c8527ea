package devices

import (
	"runtime"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// BenchmarkApplyAllocFree: the hot path, one op = one event, alternating
// alloc and free of single-chip buffers over a working set of recycled
// Buffer* values on a few chips and threads. Steady state must not allocate.
func BenchmarkApplyAllocFree(b *testing.B) {
	const working = 4096
	l := NewLedger(Options{})
	alloc := make([]events.Event, working)
	free := make([]events.Event, working)
	for i := range alloc {
		chip := int32(i % 4)
		alloc[i] = evAlloc(uint32(100+i%8), 0x55d0c0000000+uint64(i)*0x40, chip, events.BufferType(i%5), uint64(i)*4096, 4096)
		alloc[i].Pid = 1234
		free[i] = evFree(uint32(100+(i+3)%8), alloc[i].Object, chip)
		free[i].Pid = 1234
	}
	// Warm up: every key allocated and freed once, tables grown.
	for i := range alloc {
		l.Apply(&alloc[i])
	}
	for i := range free {
		l.Apply(&free[i])
	}
	var seq uint64
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		i := (n >> 1) % working
		e := &alloc[i]
		if n&1 == 1 {
			e = &free[i]
		}
		seq++
		e.Seq, e.TsNs = seq, seq
		l.Apply(e)
	}
	b.StopTimer()
	if err := l.Check(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkApplyMeshAllocFree: a mesh buffer on 8 chips (alloc, 8 views,
// free). One op = one mesh buffer's 10 events.
func BenchmarkApplyMeshAllocFree(b *testing.B) {
	const working = 1024
	l := NewLedger(Options{})
	var evs [][]events.Event
	for i := 0; i < working; i++ {
		buf := 0x55d0c0000000 + uint64(i)*0x40
		addr := uint64(i) * 4096
		seq := []events.Event{evMeshAlloc(100, buf, meshA, events.DRAM, addr, 1<<20)}
		for c := int32(0); c < 8; c++ {
			seq = append(seq, evView(100, c, addr))
		}
		seq = append(seq, evMeshFree(101, buf, meshA))
		for j := range seq {
			seq[j].Pid = 1234
		}
		evs = append(evs, seq)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for j := range evs[n%working] {
			l.Apply(&evs[n%working][j])
		}
	}
}

// BenchmarkLiveBuffers1M allocates 1,000,000 live single-chip buffers and
// reports the ledger's heap per live buffer.
func BenchmarkLiveBuffers1M(b *testing.B) {
	const live = 1_000_000
	var perBuf float64
	for n := 0; n < b.N; n++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l := NewLedger(Options{})
		e := evAlloc(100, 0, 0, events.DRAM, 0, 4096)
		e.Pid = 1234
		for i := 0; i < live; i++ {
			e.Object = 0x55d0c0000000 + uint64(i)*0x70
			e.Chip = int32(i % 8)
			e.Address = uint64(i) * 4096
			e.Seq, e.TsNs = uint64(i+1), uint64(i+1)
			l.Apply(&e)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perBuf = float64(after.HeapAlloc-before.HeapAlloc) / live
		runtime.KeepAlive(l)
	}
	b.ReportMetric(perBuf, "bytes/live_buffer")
	b.ReportMetric(perBuf*live/(1<<20), "MiB/1M_buffers")
}

// BenchmarkApplyCBRecords: the CB records of a program cache (#30), one op
// = one record: 320 programs, each a cb_layout, two cb_alloc (8x8 and 4x8
// cores) and a program_dispatch, laid out again and dispatched in turn,
// with an L1 buffer (its allocate_buffer request, alloc and free) between
// programs, on one chip with an allocator: the CB group, residency and L1
// per core paths. Steady state must not allocate.
func BenchmarkApplyCBRecords(b *testing.B) {
	const programs = 320
	l := NewLedger(Options{})
	var evs []events.Event
	evs = append(evs, n150Caps(5, 0)...)
	for i := range programs {
		prog := uint64(0x5600000 + i*0x100)
		evs = append(evs,
			devicestest.CBLayout(1, prog, 5),
			devicestest.CBOn(1, 5, 0x1000, 16384+32*uint64(i%64), [4]uint16{0, 0, 7, 7}),
			devicestest.CBOn(1, 5, 0x6000, 4096, [4]uint16{0, 0, 3, 7}),
			devicestest.Dispatch(1, prog, 5),
			evReq(1, mgrL1, 64*4096, 4096, false),
			evAllocPage(1, 0x55d0c0000000+uint64(i%4)*0x40, 5, events.L1, l1Base+l1Bank-4096, 64*4096, 4096),
			evFree(1, 0x55d0c0000000+uint64(i%4)*0x40, 5))
	}
	for i := range evs {
		evs[i].Pid = 1234
	}
	var seq uint64
	apply := func(e *events.Event) {
		seq++
		e.Seq, e.TsNs = seq, seq
		l.Apply(e)
	}
	for i := range evs { // warm up: every program laid out once
		apply(&evs[i])
	}
	cycle := evs[len(n150Caps(5, 0)):]
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		apply(&cycle[n%len(cycle)])
	}
	b.StopTimer()
	if err := l.Check(); err != nil {
		b.Fatal(err)
	}
}
