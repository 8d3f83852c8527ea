package devices

import (
	"testing"

	"github.com/tttrace/tttrace/events"
)

// The documented failures of the instrumented TT-Metal design tttrace
// replaces (docs/ttmetal.md §8), each as a stream that now comes out right.

// Non-blocking sends dropped messages silently. Here loss arrives in band
// (LostBefore) or at the end (KindLost) and the summary says so.
func TestInstrumentedFailure_DroppedMessages(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100))
	a := evAlloc(1, 0xa1, 0, events.DRAM, 0x1000, 100)
	a.LostBefore = 2 // e.g. a free and an alloc went missing before this record
	r.apply(a, evLost(5))
	s := r.summary()
	eq(t, "lost_events", s.LostEvents, 7)
	eq(t, "complete", s.Complete, false)
	eq(t, "LostEvents()", r.l.LostEvents(), 7)

	clean := newRec(t)
	clean.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100))
	eq(t, "clean complete", clean.summary().Complete, true)
}

// Threads raced to the server, so a free could overtake its alloc. The ring
// buffer is ordered: a free on thread B of a buffer allocated on thread A
// comes after the alloc, and the ledger keys by Buffer*, not by thread.
func TestInstrumentedFailure_ReorderingBetweenThreads(t *testing.T) {
	r := newRec(t)
	r.apply(
		evAlloc(11, 0xa0, 0, events.DRAM, 0x1000, 4096),
		evAlloc(12, 0xa1, 0, events.L1, 0x1000, 64),
		evFree(12, 0xa0, 0),                           // B frees A's buffer
		evFree(11, 0xa1, 0),                           // A frees B's buffer
		evAlloc(13, 0xa0, 0, events.DRAM, 0x2000, 10), // the Buffer* is reused at once on C
	)
	eq(t, "chip 0", r.tot(0), totals{DRAM: 10, Live: 1})
	p := r.proc()
	eq(t, "unknown", p.UnknownFrees, 0)
	eq(t, "double", p.DoubleFrees, 0)
	eq(t, "anomalies", sumCounts(p), 0)
}

// Fixed 8-device arrays. Chip ids here are 0..31 and 100, all kept apart.
func TestInstrumentedFailure_MoreThan8Devices(t *testing.T) {
	r := newRec(t)
	chips := make([]int32, 0, 33)
	for c := int32(0); c < 32; c++ {
		chips = append(chips, c)
	}
	chips = append(chips, 100)
	for i, c := range chips {
		r.apply(evAlloc(1, uint64(0x1000+i), c, events.DRAM, 0x100, uint64(1000+c)))
	}
	got := r.chips()
	if len(got) != len(chips) {
		t.Fatalf("devices %v, want %v", got, chips)
	}
	for i, c := range chips {
		eq(t, "chip id", got[i], c)
		eq(t, "chip total", r.tot(c), totals{DRAM: uint64(1000 + c), Live: 1})
	}
	// A mesh over the same 33 chips counts once on each.
	r.apply(evMeshAlloc(2, 0xb0, meshA, events.L1, 0x9000, 5))
	for _, c := range chips {
		r.apply(evView(2, c, 0x9000))
	}
	for _, c := range chips {
		eq(t, "chip with mesh", r.tot(c), totals{DRAM: uint64(1000 + c), L1: 5, Live: 2})
	}
}

// CB frees carried size 0, so cb_bytes never went down. Here the group
// remembers its sizes and a free returns cb_bytes to exactly zero.
func TestInstrumentedFailure_CBFreeSizeZero(t *testing.T) {
	r := newRec(t)
	r.apply(evCBLayout(1, progP, 0), evCB(1, 0, 0x1000, 2048), evCB(1, 0, 0x9000, 512), evCB(1, 1, 0x1000, 2048))
	eq(t, "chip 0", r.tot(0), totals{CB: 2560})
	r.apply(evCBTeardown(1, progP), evCBFree(1, 0), evCBFree(1, 1))
	eq(t, "chip 0", r.tot(0), totals{})
	eq(t, "chip 1", r.tot(1), totals{})
	eq(t, "peak", r.dev(0).Peaks.CBRegisteredBytes.Value, 2560)
}

// CBs were tracked only on device 0. Here CBs on chips 3 and 5 land there.
func TestInstrumentedFailure_CBsOnlyOnDevice0(t *testing.T) {
	r := newRec(t)
	r.apply(evCBLayout(1, progP, 3), evCB(1, 3, 0x1000, 300), evCB(1, 5, 0x1000, 500))
	if got := r.chips(); len(got) != 2 || got[0] != 3 || got[1] != 5 {
		t.Fatalf("devices %v, want [3 5]", got)
	}
	eq(t, "chip 3", r.tot(3), totals{CB: 300})
	eq(t, "chip 5", r.tot(5), totals{CB: 500})
}

// Mesh buffers were double counted (on the MeshDevice's id, which collides
// with chip 0, and on each chip). Here a mesh buffer counts exactly once
// per chip of its mesh, and nothing lands on chip 0 unless it is a member.
func TestInstrumentedFailure_MeshDoubleCounted(t *testing.T) {
	r := newRec(t)
	a := evMeshAlloc(1, 0xb0, meshA, events.DRAM, 0x4000, 1<<20)
	a.Chip = 0 // even if a decoder put the mesh id (0) there
	r.apply(a, evView(1, 4, 0x4000), evView(1, 5, 0x4000))
	if got := r.chips(); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("devices %v, want [4 5]", got)
	}
	eq(t, "chip 4", r.tot(4), totals{DRAM: 1 << 20, Live: 1})
	eq(t, "chip 5", r.tot(5), totals{DRAM: 1 << 20, Live: 1})
	r.apply(evMeshFree(1, 0xb0, meshA))
	eq(t, "chip 4 after", r.tot(4), totals{})
	eq(t, "chip 5 after", r.tot(5), totals{})
}

// Pre-allocated buffers (mesh views) were counted and never freed. Here
// views count nothing, so nothing is left once the mesh buffer is freed.
func TestInstrumentedFailure_PreallocatedNeverFreed(t *testing.T) {
	r := newRec(t)
	for i := uint64(0); i < 10; i++ {
		r.apply(evMeshAlloc(1, 0xb0+i, meshA, events.DRAM, 0x4000*i, 4096), evView(1, 0, 0x4000*i), evView(1, 1, 0x4000*i))
	}
	r.apply(evView(1, 0, 0x123)) // a Buffer::view elsewhere
	for i := uint64(0); i < 10; i++ {
		r.apply(evMeshFree(1, 0xb0+i, meshA))
	}
	r.apply(evExit(0, 0))
	eq(t, "chip 0", r.tot(0), totals{})
	eq(t, "chip 1", r.tot(1), totals{})
	p := r.proc()
	eq(t, "leaks", len(p.Leaks), 0)
	eq(t, "peak live", r.dev(0).Peaks.LiveBuffers.Value, 10)
}

// The server keyed by (device, address), so a DRAM and an L1 buffer at the
// same address on one chip collided. Here buffers are keyed by identity.
func TestInstrumentedFailure_SameAddressDifferentType(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0x20000, 4096), evAlloc(1, 0xa1, 0, events.L1, 0x20000, 64))
	eq(t, "chip 0", r.tot(0), totals{DRAM: 4096, L1: 64, Live: 2})
	r.apply(evFree(1, 0xa1, 0))
	eq(t, "chip 0 after L1 free", r.tot(0), totals{DRAM: 4096, Live: 1})
	p := r.proc()
	eq(t, "leaks", len(p.Leaks), 1)
	eq(t, "leak type", p.Leaks[0].Type, "DRAM")
	eq(t, "anomalies", sumCounts(p), 0)
}
