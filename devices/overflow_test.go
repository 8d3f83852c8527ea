package devices

import (
	"testing"

	"github.com/tttrace/tttrace/events"
)

// TestTotalsCannotWrap: 2^24+1 buffers of 1 TiB on one chip add up to
// 2^64 + 2^40 bytes; counted, the chip's total would wrap to 1 TiB. The
// process may hold maxHeld bytes: the rest are implausible_total
// anomalies, and every total stays exact for what is counted.
func TestTotalsCannotWrap(t *testing.T) {
	l := NewLedger(Options{})
	const n = 1<<24 + 1
	e := evAlloc(1, 0, 0, events.DRAM, 0, maxSize)
	e.Pid = 7
	for i := range uint64(n) {
		e.Seq, e.TsNs, e.Object, e.Address = i+1, i+1, 0x10000+i*64, i*maxSize
		l.Apply(&e)
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	ps, _ := l.ProcessSummary(7)
	p := ps.Processes[0]
	const counted = maxHeld / maxSize
	d := p.Devices[0]
	if d.DRAMBytes != maxHeld || d.LiveBuffers != counted || d.Peaks.DRAMBytes.Value != maxHeld {
		t.Errorf("chip 0: dram %d, live %d, peak %d; want %d, %d, %d", d.DRAMBytes, d.LiveBuffers, d.Peaks.DRAMBytes.Value, uint64(maxHeld), counted, uint64(maxHeld))
	}
	if got := p.AnomalyCounts["implausible_total"]; got != n-counted {
		t.Errorf("implausible_total = %d, want %d", got, n-counted)
	}
	// Freeing one makes room for one more.
	f := evFree(1, 0x10000, 0)
	f.Pid, f.Seq = 7, n+1
	l.Apply(&f)
	e.Seq, e.Object = n+2, 0x1
	l.Apply(&e)
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	ps, _ = l.ProcessSummary(7)
	if d := ps.Processes[0].Devices[0]; d.DRAMBytes != maxHeld || d.LiveBuffers != counted {
		t.Errorf("after a free and an alloc: dram %d, live %d", d.DRAMBytes, d.LiveBuffers)
	}
}

// TestCBTotalsCannotWrap: the same bound holds CBs, together with buffers.
func TestCBTotalsCannotWrap(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0xa0, 0, events.L1, 0, maxSize))
	r.apply(evCBLayout(1, progP, 0))
	for i := range uint64(maxHeld/maxSize + 5) {
		r.apply(evCB(1, 0, i*maxSize, maxSize))
	}
	p := r.proc()
	d := r.dev(0)
	if d.CBRegisteredBytes+d.L1Bytes != maxHeld {
		t.Errorf("cb %d + l1 %d, want %d", d.CBRegisteredBytes, d.L1Bytes, uint64(maxHeld))
	}
	eq(t, "implausible_total", p.AnomalyCounts["implausible_total"], 6)
	r.apply(evCBTeardown(1, progP), evCBFree(1, 0), evFree(1, 0xa0, 0))
	eq(t, "chip 0 after teardown", r.tot(0), totals{})
}

func TestSatAdd(t *testing.T) {
	eq(t, "1+2", SatAdd(1, 2), 3)
	eq(t, "max-1+1", SatAdd(^uint64(0)-1, 1), ^uint64(0))
	eq(t, "max+2", SatAdd(^uint64(0), 2), ^uint64(0))
	eq(t, "2^63+2^63", SatAdd(1<<63, 1<<63), ^uint64(0))
}

// A process touching more distinct chips than Options.MaxChips: the chips past
// the bound count nothing and each event on them is a too_many_chips
// anomaly; the chips within keep working.
func TestMaxChips(t *testing.T) {
	r := newRecWith(t, Options{MaxChips: 3})
	for chip := int32(0); chip < 60000; chip += 1000 {
		r.apply(evAlloc(1, 0x1000+uint64(chip), chip, events.DRAM, 0, 64))
	}
	r.apply(evAlloc(1, 0xa0, 2000, events.L1, 0, 8), evFree(1, 0x1000, 0), evDeviceClose(1, 59000))
	p := r.proc()
	if got, want := r.chips(), []int32{0, 1000, 2000}; len(got) != len(want) || got[0] != 0 || got[1] != 1000 || got[2] != 2000 {
		t.Errorf("chips %v, want %v", got, want)
	}
	eq(t, "too_many_chips", p.AnomalyCounts["too_many_chips"], 57+1)
	eq(t, "chip 2000", r.tot(2000), totals{DRAM: 64, L1: 8, Live: 2})
	eq(t, "chip 0", r.tot(0), totals{})

	d := newRec(t) // the default bound
	for chip := int32(0); chip < DefaultMaxChips+10; chip++ {
		d.apply(evAlloc(1, 0x1000+uint64(chip), chip, events.DRAM, 0, 64))
	}
	eq(t, "chips", len(d.chips()), DefaultMaxChips)
	eq(t, "too_many_chips", d.proc().AnomalyCounts["too_many_chips"], 10)
}
