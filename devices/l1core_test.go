package devices

import (
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

func l1c(t *testing.T, what string, got *L1Core, core *[2]uint16, bank *uint32, buffers, cbs, size uint64) {
	t.Helper()
	switch {
	case got == nil:
		t.Fatalf("%s: none", what)
	case (got.Core == nil) != (core == nil) || core != nil && *got.Core != *core:
		t.Fatalf("%s: core %v, want %v", what, got.Core, core)
	case (got.Bank == nil) != (bank == nil) || bank != nil && *got.Bank != *bank:
		t.Fatalf("%s: bank %v, want %v", what, got.Bank, bank)
	case got.L1BufferBytes != buffers || got.CBBytes != cbs || got.TotalBytes != buffers+cbs:
		t.Fatalf("%s: %+v, want %d buffer bytes and %d CB bytes", what, got, buffers, cbs)
	case got.L1Size == nil || *got.L1Size != size:
		t.Fatalf("%s: l1_size %v, want %d", what, got.L1Size, size)
	}
}

// TestL1PerCore walks two chips through L1 per core, each number worked
// out by hand: lockstep L1 and L1_SMALL spans on every core plus the
// resident CBs of the busiest core, its peak kept after a free; per-core
// buffers on their banks, a buffer whose two cores got different
// addresses (per_core_address_divergence), a per-core request refused
// with its core's numbers, a close.
func TestL1PerCore(t *testing.T) {
	var notes []Notice
	r := newRecWith(t, Options{Notices: NoticeFunc(func(n *Notice) {
		if n.Type == NoticePerCoreDivergence || n.Type == NoticeAllocFailed {
			c := *n
			notes = append(notes, c)
		}
	})})
	const l1Size = l1Base + l1Bank + 0x8000
	r.apply(n150Caps(1, 0)...)
	// A lockstep L1 buffer (64 pages over 64 banks: 4096 B per bank) at
	// the top, and an L1_SMALL one (1024 B per bank).
	r.apply(evReq(1, mgrL1, 64*4096, 4096, false), evAllocPage(1, 0xa1, 1, events.L1, l1Base+l1Bank-4096, 64*4096, 4096))
	r.apply(evReq(1, mgrL1Small, 64*1024, 1024, false), evAllocPage(1, 0xa2, 1, events.L1Small, l1Base+l1Bank+0x8000-1024, 64*1024, 1024))
	l1c(t, "lockstep only", r.dev(1).L1BusiestCore, nil, nil, 5120, 0, l1Size)
	// A program: 8 KiB on cores (0,0)-(3,3), 4 KiB right above on (2,2).
	r.apply(devicestest.CBLayout(1, 0x100, 1),
		devicestest.CBOn(1, 1, 0x1000, 8192, [4]uint16{0, 0, 3, 3}),
		devicestest.CBOn(1, 1, 0x3000, 4096, [4]uint16{2, 2, 2, 2}),
		devicestest.Dispatch(1, 0x100, 1))
	d := r.dev(1)
	l1c(t, "with CBs", d.L1BusiestCore, &[2]uint16{2, 2}, nil, 5120, 12288, l1Size)
	r.apply(evFree(1, 0xa1, 1))
	d = r.dev(1)
	l1c(t, "after the free", d.L1BusiestCore, &[2]uint16{2, 2}, nil, 1024, 12288, l1Size)
	l1c(t, "peak", d.PeakL1BusiestCore, &[2]uint16{2, 2}, nil, 5120, 12288, l1Size)

	// Chip 2, HYBRID: a lockstep buffer at the top, then per-core buffers.
	r.apply(n150Caps(2, 0x10)...)
	r.apply(evReq(1, mgrL1+0x10, 64*4096, 4096, false), evAllocPage(1, 0xb1, 2, events.L1, l1Base+l1Bank-4096, 64*4096, 4096))
	perCore := func(tid uint32, buf, addr uint64, banks ...uint32) {
		for _, b := range banks {
			q := evReq(tid, mgrL1+0x10, 2048, 2048, false)
			q.Shards, q.AllocatorID = 1, b+1
			r.apply(q)
		}
		if buf != 0 {
			r.apply(evAllocPage(tid, buf, 2, events.L1, addr, 2048*uint64(len(banks)), 2048))
		}
	}
	// Bank 0 alone: below the lockstep buffer, the same on every core.
	perCore(1, 0xb2, l1Base+l1Bank-4096-2048, 0)
	// Banks 0 and 1: bank 0 has one block already, bank 1 none.
	perCore(1, 0xb3, l1Base+l1Bank-4096-4096, 0, 1)
	p := r.proc()
	if p.Stats.PerCoreBuffers != 2 || p.Stats.PerCoreUnchecked != 0 || p.Stats.PerCoreDivergences != 1 || len(p.PerCoreDivergences) != 1 {
		t.Fatalf("stats %+v, divergences %+v", p.Stats, p.PerCoreDivergences)
	}
	dv := p.PerCoreDivergences[0]
	want := PerCoreDivergence{Type: "per_core_address_divergence", Pid: dv.Pid, Tid: 1, Seq: dv.Seq, TsNs: dv.TsNs, Device: 2, Buffer: hex(0xb3),
		Address: l1Base + l1Bank - 8192, Size: 4096, CoresCount: 2, Distinct: 2, Differing: 1,
		Cores: []PerCoreAddress{{0, l1Base + l1Bank - 8192, 2048}, {1, l1Base + l1Bank - 6144, 2048}}}
	if b1, b2 := mustJSON(t, dv), mustJSON(t, want); b1 != b2 {
		t.Fatalf("divergence\n got %s\nwant %s", b1, b2)
	}
	if len(notes) != 1 || notes[0].PerCore == nil || mustJSON(t, &notes[0]) != mustJSON(t, want) {
		t.Fatalf("notices %+v", notes)
	}
	zero := uint32(0)
	l1c(t, "per-core", r.dev(2).L1BusiestCore, nil, &zero, 4096+4096, 0, l1Size)

	// Bank 1 refused its core's whole bank: 4096 B lockstep and 2048 B of
	// its own are taken there.
	q := evReq(2, mgrL1+0x10, l1Bank, 2048, false)
	q.Shards, q.AllocatorID = 1, 2
	r.apply(q, evOOM(2, 0))
	f := r.proc().AllocFailures
	if len(f) != 1 || f[0].Cause != "exhausted" || f[0].Bank == nil || *f[0].Bank != 1 || *f[0].AllocatorID != 2 ||
		*f[0].TotalAllocated != 6144 || *f[0].TotalFree != l1Bank-6144 || *f[0].LargestFree != l1Bank-6144 || *f[0].Span != l1Bank {
		t.Fatalf("per-core failure %s", mustJSON(t, f))
	}
	// The second core of a buffer fails: the first's call is not a failure.
	q0 := evReq(3, mgrL1+0x10, 2048, 2048, false)
	q0.Shards, q0.AllocatorID = 1, 3
	q1 := evReq(3, mgrL1+0x10, 2*l1Bank, 2048, false)
	q1.Shards, q1.AllocatorID = 1, 4
	r.apply(q0, q1, evOOM(3, 0))
	if f = r.proc().AllocFailures; len(f) != 2 || f[1].Cause != "larger_than_bank" || *f[1].Bank != 3 || f[1].CoresBefore != 1 {
		t.Fatalf("second core's failure %s", mustJSON(t, f))
	}

	// Freeing the divergent buffer gives its cores' blocks back: bank 1's
	// list places at the top again.
	r.apply(evFree(1, 0xb3, 2))
	l1c(t, "after the per-core free", r.dev(2).L1BusiestCore, nil, &zero, 4096+2048, 0, l1Size)
	perCore(1, 0xb4, l1Base+l1Bank-4096-2048, 1)
	if p := r.proc(); p.Stats.PerCoreDivergences != 1 || p.Stats.PerCoreUnchecked != 0 {
		t.Fatalf("after the free: %+v", p.Stats)
	}
	r.apply(evDeviceClose(1, 2))
	d = r.dev(2)
	if d.L1BusiestCore != nil {
		t.Fatalf("closed chip: %+v", d.L1BusiestCore)
	}
	l1c(t, "closed chip's peak", d.PeakL1BusiestCore, nil, &zero, 8192, 0, l1Size)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An L1 buffer allocated while its chip's allocator was not known (a late
// attach: its span per bank unknown, spans_unknown) gets the span the
// list read from memory holds for it: L1 per core counts it from then on,
// its site's bytes on the busiest core too, and its free takes exactly
// that off (before, the span moved into the buffer only, the chip kept it
// as unknown and its free took 256 B of spans never counted).
func TestL1PerCoreSpanFromMemory(t *testing.T) {
	r := newRecWith(t, Options{MemReads: true, SiteUsage: true})
	r.l.SetProcessInfo(r.pid, ProcessInfo{AttachedMidRun: true})
	a := at(evAllocPage(1, 0xa0, 0, events.L1, 0xf00, 0x100, 0x100), 1100)
	a.Site = 9
	r.apply(at(evReq(1, 0xd2, 0x100, 0x100, false), 1000), a)
	if c := r.dev(0).L1BusiestCore; c == nil || c.SpansUnknown != 1 || c.TotalBytes != 0 {
		t.Fatalf("before the read: %+v", c)
	}
	ws := r.l.TakeMemWants()
	if len(ws) != 1 || ws[0].Type != events.L1 {
		t.Fatalf("wants %+v", ws)
	}
	r.l.InstallMem(ws[0], &MemManager{BufferType: int32(events.L1), Banks: 1, Alignment: 32, BankSize: 0x1000, BlockAlign: 32,
		Blocks: []alloc.Block{{Addr: 0, Size: 0xf00}, {Addr: 0xf00, Size: 0x100, Allocated: true}}, FromNs: 10_000_000, ToNs: 10_100_000}, nil)
	r.apply(at(evReq(2, 0xd0, 0x40, 0x40, false), 20_000_000)) // any event: L1 per core settles
	d := r.dev(0)
	if c := d.L1BusiestCore; c == nil || c.SpansUnknown != 0 || c.L1BufferBytes != 0x100 || c.TotalBytes != 0x100 {
		t.Fatalf("after the read: %+v", c)
	}
	var site uint64
	for _, u := range r.proc().SiteUsage {
		if u.Site == 9 {
			site += u.L1CorePeakBytes
		}
	}
	if pk := d.PeakL1BusiestCore; pk == nil || pk.TotalBytes != 0x100 || site != 0x100 {
		t.Fatalf("peak %+v, site 9 held %d B on the busiest core then", pk, site)
	}
	r.apply(at(evFree(1, 0xa0, 0), 30_000_000))
	if c := r.dev(0).L1BusiestCore; c != nil {
		t.Fatalf("after the free: %+v", c)
	}
}
