package devices

import (
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// TestL1ClashPerRange: a clash names the program's core ranges whose own
// CB region end passes an L1 buffer, as upstream's CB allocators per
// unique range end (here 0x1000 above the lockstep buffer on (4,0)-(7,7),
// 0x1000 below it on (0,0)-(3,7)), with the exact per-range headroom while
// only lockstep buffers are below; a per-core buffer is not in the
// lockstep heap: below a range it makes that range a possible clash, and
// alone (the lockstep buffer freed) the clash is "possible", counted
// apart, never a certain one. Each number worked out by hand.
func TestL1ClashPerRange(t *testing.T) {
	r := newL1Rec(t, 0)
	r.apply(n150Caps(2, 0x10)...)
	top := uint64(l1Base + l1Bank)
	low := top - 4096 // the lockstep buffer: 4096 B per bank at the top
	r.apply(evReq(1, mgrL1+0x10, 64*4096, 4096, false), evAllocPage(1, 0xb1, 2, events.L1, low, 64*4096, 4096))
	x := low - 0x2000
	a, b := [4]uint16{0, 0, 3, 7}, [4]uint16{4, 0, 7, 7}
	run := func(cbs bool) {
		r.apply(devicestest.CBLayout(1, 0x100, 2))
		if cbs {
			r.apply(devicestest.CBOn(1, 2, x, 0x1000, a), devicestest.CBOn(1, 2, x, 0x3000, b))
		}
		r.apply(devicestest.Dispatch(1, 0x100, 2))
	}
	run(true)
	cl := r.take(NoticeL1Clash)
	h := int64(-0x1000)
	if len(cl) != 1 || cl[0].Clash != ClashCertain || cl[0].CBRegionEnd != x+0x3000 || cl[0].LowestL1Address != low ||
		cl[0].CoreRangesCount != 1 || len(cl[0].CoreRanges) != 1 || len(cl[0].PerCoreBlocks) != 0 {
		t.Fatalf("lockstep clash: %s", mustJSON(t, cl))
	}
	if got, want := mustJSON(t, cl[0].CoreRanges[0]), mustJSON(t, ClashRange{Range: b, CBRegionEnd: x + 0x3000, Clash: ClashCertain, Headroom: &h}); got != want {
		t.Fatalf("range %s, want %s", got, want)
	}

	// A per-core buffer of 8 KiB on bank 0: its list places it top-down
	// under the lockstep block, at low - 8192, below range a's end.
	q := evReq(1, mgrL1+0x10, 8192, 2048, false)
	q.Shards, q.AllocatorID = 1, 1
	r.apply(q, evAllocPage(1, 0xb2, 2, events.L1, low-8192, 8192, 2048))
	if d := r.dev(2); d.L1Headroom == nil || *d.L1Headroom != -0x1000 {
		t.Fatalf("the chip's headroom is the lockstep one: %v", d.L1Headroom)
	}
	r.notes = nil
	run(false)
	cl = r.take(NoticeL1Clash)
	if len(cl) != 1 || cl[0].Clash != ClashCertain || cl[0].LowestL1Address != low || cl[0].CoreRangesCount != 2 ||
		cl[0].PerCoreBlocksCount != 1 || cl[0].PerCoreBlocks[0].Address != low-8192 || !cl[0].PerCoreBlocks[0].PerCore ||
		*cl[0].PerCoreBlocks[0].Bank != 0 || cl[0].PerCoreBlocks[0].Span != 8192 || cl[0].L1BuffersCount != 1 {
		t.Fatalf("with a per-core block: %s", mustJSON(t, cl))
	}
	for _, cr := range cl[0].CoreRanges {
		want := map[[4]uint16]string{a: ClashPossible, b: ClashCertain}[cr.Range]
		if cr.Clash != want || cr.Headroom != nil {
			t.Fatalf("range %s: want %s without a headroom (not exact)", mustJSON(t, cr), want)
		}
	}

	// The lockstep buffer freed: only the per-core block is below.
	r.apply(evFree(1, 0xb1, 2))
	r.notes = nil
	run(false)
	cl = r.take(NoticeL1Clash)
	if len(cl) != 1 || cl[0].Clash != ClashPossible || cl[0].LowestL1Address != low-8192 || cl[0].Headroom != int64(low-8192)-int64(x+0x3000) ||
		!cl[0].Lowest.PerCore || cl[0].CoreRangesCount != 2 || cl[0].L1BuffersCount != 0 {
		t.Fatalf("per-core only: %s", mustJSON(t, cl))
	}
	p := r.proc()
	if p.Stats.L1Clashes != 2 || p.Stats.L1ClashesPossible != 1 || len(p.L1Clashes) != 2 || len(p.L1ClashesPossible) != 1 {
		t.Fatalf("stats %d certain, %d possible; lists %d, %d", p.Stats.L1Clashes, p.Stats.L1ClashesPossible, len(p.L1Clashes), len(p.L1ClashesPossible))
	}
	if d := r.dev(2); d.L1Headroom != nil {
		t.Fatalf("no lockstep L1 buffer: no chip headroom, got %d", *d.L1Headroom)
	}
}
