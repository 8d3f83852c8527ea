package devices

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

func evCap(chip int32, t events.BufferType, mgr uint64, banks uint32, bank, align, base uint64) events.Event {
	e := events.Event{Kind: events.KindAllocCapacity, Tid: 1, Object: mgr, BufferType: t, Chip: chip}
	if chip >= 0 {
		e.DeviceKind, e.Device = events.DeviceChip, chipPtr(chip)
	}
	e.Banks, e.BankSize, e.Alignment, e.Base = banks, bank, align, base
	return e
}

func evReq(tid uint32, mgr, size, page uint64, bottomUp bool) events.Event {
	e := events.Event{Kind: events.KindAllocRequest, Tid: tid, Object: mgr, Size: size, PageSize: page, Chip: -1}
	e.BottomUp = bottomUp
	return e
}

func evOOM(tid uint32, site uint32) events.Event {
	return events.Event{Kind: events.KindAllocOom, Tid: tid, Chip: -1, Site: site}
}

func evAllocPage(tid uint32, buf uint64, chip int32, t events.BufferType, addr, size, page uint64) events.Event {
	e := evAlloc(tid, buf, chip, t, addr, size)
	e.PageSize = page
	return e
}

// A chip shaped like a Wormhole n150's allocator, small: 12 DRAM banks of
// 1 MiB at 0x40, a TRACE region above them, 64 L1 banks of 0xe8000 at
// 0x18000, an L1_SMALL region of 0x8000 at the top.
const (
	mgrDRAM, mgrTrace, mgrL1, mgrL1Small = 0xd0, 0xd1, 0xd2, 0xd3
	dramBank                             = 1 << 20
	l1Base, l1Bank                       = 0x18000, 0xe8000
)

func n150Caps(chip int32, off uint64) []events.Event {
	return []events.Event{
		evCap(chip, events.DRAM, mgrDRAM+off, 12, dramBank, 32, 0x40),
		evCap(chip, events.Trace, mgrTrace+off, 12, 1<<16, 32, 0x40+dramBank),
		evCap(chip, events.L1, mgrL1+off, 64, l1Bank, 16, l1Base),
		evCap(chip, events.L1Small, mgrL1Small+off, 64, 0x8000, 16, l1Base+l1Bank),
	}
}

func u64(v uint64) *uint64 { return &v }

func stats(total, allocated, free, largest uint64) alloc.Statistics {
	return alloc.Statistics{TotalAllocatable: total, TotalAllocated: allocated, TotalFree: free, LargestFreeBlock: largest}
}

func allocStats(t *testing.T, d DeviceSummary, typ events.BufferType) alloc.Statistics {
	t.Helper()
	at := d.Allocator.Type(typ)
	st, ok := at.Stats()
	if !ok {
		t.Fatalf("chip %d %s: no statistics (%+v, %q)", d.Device, typ, at, d.AllocatorWhy)
	}
	return st
}

// TestAllocatorLedger walks one chip through allocations, an exhausted, a
// larger-than-bank and a fragmented failure, each number worked out by
// hand.
func TestAllocatorLedger(t *testing.T) {
	var notes []Notice
	r := newRecWith(t, Options{Notices: NoticeFunc(func(n *Notice) {
		if n.Type == NoticeAllocFailed {
			c := *n
			f := *n.AllocFailed
			c.AllocFailed = &f
			notes = append(notes, c)
		}
	})})
	r.apply(n150Caps(3, 0)...)
	d := r.dev(3)
	if got := allocStats(t, d, events.DRAM); got != (stats(dramBank, 0, dramBank, dramBank)) {
		t.Fatalf("empty DRAM: %+v", got)
	}
	if d.Allocator.L1.Banks != 64 || d.Allocator.L1.BankSize != l1Bank || d.Allocator.L1.Source != "probe" || d.Allocator.Trace.Base != 0x40+dramBank {
		t.Fatalf("L1 %+v trace %+v", d.Allocator.L1, d.Allocator.Trace)
	}

	// 36 pages of 4 KiB over 12 banks: 3 pages, 12288 per bank, at the
	// bottom of DRAM.
	r.apply(evReq(7, mgrDRAM, 36*4096, 4096, true), evAllocPage(7, 0xa0, 3, events.DRAM, 0x40, 36*4096, 4096))
	// 128 pages of 2 KiB over 64 L1 banks: 4096 per bank, at the top of L1.
	r.apply(evReq(7, mgrL1, 128*2048, 2048, false), evAllocPage(7, 0xb0, 3, events.L1, l1Base+l1Bank-4096, 128*2048, 2048))
	d = r.dev(3)
	if got := allocStats(t, d, events.DRAM); got != (stats(dramBank, 12288, dramBank-12288, dramBank-12288)) {
		t.Fatalf("DRAM: %+v", got)
	}
	if got := allocStats(t, d, events.L1); got != (stats(l1Bank, 4096, l1Bank-4096, l1Bank-4096)) {
		t.Fatalf("L1: %+v", got)
	}
	if d.DRAMBytes != 36*4096 || d.L1Bytes != 128*2048 {
		t.Fatalf("size_ totals %d %d", d.DRAMBytes, d.L1Bytes)
	}

	// 1 MiB per bank: no more than a bank, more than is free: exhausted.
	// The thread's next event (a free) says TT-Metal threw.
	r.apply(evReq(7, mgrDRAM, 12*dramBank, dramBank, true), evFree(7, 0xa0, 3))
	// 2 MiB per bank: larger than a bank; the end of tracing says it threw.
	r.apply(evReq(8, mgrDRAM, 12*2*dramBank, 2*dramBank, true))
	r.l.Flush()
	// Three buffers of 256 KiB per bank, the middle one freed: 512 KiB
	// free, in holes of 256 KiB: 384 KiB per bank is fragmented.
	const q = 256 << 10
	for i, buf := range []uint64{0xc0, 0xc1, 0xc2} {
		r.apply(evReq(9, mgrDRAM, 12*q, q, true), evAllocPage(9, buf, 3, events.DRAM, 0x40+uint64(i)*q, 12*q, q))
	}
	r.apply(evFree(9, 0xc1, 3))
	// Its out-of-memory path is seen (alloc_oom): it fails at once, with
	// that record's site; a second one without a request is only counted.
	r.apply(evReq(9, mgrDRAM, 12*384<<10, 384<<10, true), evOOM(9, 42))
	if n := len(r.proc().AllocFailures); n != 3 {
		t.Fatalf("after alloc_oom: %d failures, want 3 (known at once)", n)
	}
	r.apply(evOOM(9, 43))
	r.apply(evExit(0, 0))

	ps := r.proc()
	if len(ps.AllocFailures) != 3 || ps.Stats.AllocFailures != 3 || ps.Stats.AllocRequests != 8 || ps.Stats.AllocCapacities != 4 ||
		ps.Stats.AllocOOMs != 2 {
		t.Fatalf("%d failures, stats %+v", len(ps.AllocFailures), ps.Stats)
	}
	three := int32(3)
	want := []AllocFailure{
		{Type: "alloc_failed", Pid: 1000, Tid: 7, Seq: 9, DeviceKind: "chip", Device: &three, Manager: "0xd0", BufferType: "DRAM",
			Size: 12 * dramBank, PageSize: dramBank, BottomUp: true, Banks: 12, SizePerBank: dramBank, Span: u64(dramBank), BankSize: dramBank,
			TotalAllocated: u64(12288), TotalFree: u64(dramBank - 12288), LargestFree: u64(dramBank - 12288), Cause: "exhausted",
			Holders:      []Holder{{Buffer: "0xa0", Address: 0x40, Size: 36 * 4096, Span: u64(12288), Tid: 7, Seq: 6}},
			HoldersCount: 1, HoldersBytes: 36 * 4096, HolderSites: []HolderSite{}},
		{Type: "alloc_failed", Pid: 1000, Tid: 8, Seq: 11, DeviceKind: "chip", Device: &three, Manager: "0xd0", BufferType: "DRAM",
			Size: 24 * dramBank, PageSize: 2 * dramBank, BottomUp: true, Banks: 12, SizePerBank: 2 * dramBank, Span: u64(2 * dramBank), BankSize: dramBank,
			TotalAllocated: u64(0), TotalFree: u64(dramBank), LargestFree: u64(dramBank), Cause: "larger_than_bank",
			Holders: []Holder{}, HolderSites: []HolderSite{}},
		{Type: "alloc_failed", Pid: 1000, Tid: 9, Seq: 19, DeviceKind: "chip", Device: &three, Manager: "0xd0", BufferType: "DRAM",
			Size: 12 * 384 << 10, PageSize: 384 << 10, BottomUp: true, Banks: 12, SizePerBank: 384 << 10, Span: u64(384 << 10), BankSize: dramBank,
			TotalAllocated: u64(2 * q), TotalFree: u64(2 * q), LargestFree: u64(q), Cause: "fragmented", Site: 42, Thrown: true,
			Holders: []Holder{{Buffer: "0xc0", Address: 0x40, Size: 12 * q, Span: u64(q), Tid: 9, Seq: 13},
				{Buffer: "0xc2", Address: 0x40 + 2*q, Size: 12 * q, Span: u64(q), Tid: 9, Seq: 17}},
			HoldersCount: 2, HoldersBytes: 24 * q, HolderSites: []HolderSite{}},
	}
	for i := range want {
		got := ps.AllocFailures[i]
		got.TsNs = 0
		// No chip map was given: the physical chip is unknown, with why.
		if got.Physical.UID != nil || got.Physical.Why == "" {
			t.Errorf("failure %d: physical chip %+v", i, got.Physical)
		}
		got.Physical = ChipIdentity{}
		for j := range got.Holders {
			got.Holders[j].TsNs = 0
		}
		if !reflect.DeepEqual(got, want[i]) {
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want[i])
			t.Errorf("failure %d:\n got %s\nwant %s", i, gj, wj)
		}
	}
	if len(notes) != 3 || notes[0].AllocFailed.Cause != "exhausted" || notes[0].Chip != 3 || notes[2].Seq != 19 {
		t.Fatalf("notices %+v", notes)
	}
	// The line of a notice is the record itself.
	line, err := json.Marshal(&notes[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"type", "pid", "tid", "seq", "ts_ns", "device_kind", "device", "buffer_type", "size", "page_size", "banks",
		"size_per_bank", "bank_size", "total_allocated_bytes", "total_free_bytes", "largest_free_block_bytes", "cause", "holders"} {
		if _, ok := m[k]; !ok {
			t.Errorf("alloc_failed line %s lacks %q", line, k)
		}
	}
	if m["type"] != "alloc_failed" || m["cause"] != "larger_than_bank" {
		t.Errorf("line %s", line)
	}
}

// TestAllocatorUnknown: a chip whose allocator was made before tttrace
// attached has no allocator view, and says why; a type whose allocation
// came without its request stops giving numbers.
func TestAllocatorUnknown(t *testing.T) {
	r := newRec(t)
	r.l.SetProcessInfo(r.pid, ProcessInfo{AttachedMidRun: true})
	r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0x40, 4096))
	d := r.dev(0)
	if d.Allocator != nil || !strings.Contains(d.AllocatorWhy, "before tttrace attached") {
		t.Fatalf("%+v %q", d.Allocator, d.AllocatorWhy)
	}
	b, _ := json.Marshal(d)
	if !strings.Contains(string(b), `"allocator":null`) {
		t.Fatalf("%s", b)
	}

	r.apply(n150Caps(1, 0)...)
	r.apply(evAlloc(1, 0xa1, 1, events.DRAM, 0x40, 4096))
	d = r.dev(1)
	if _, ok := d.Allocator.DRAM.Stats(); ok || !strings.Contains(d.Allocator.DRAM.Why, "without a BankManager::allocate_buffer record") {
		t.Fatalf("%+v", d.Allocator.DRAM)
	}
	if _, ok := d.Allocator.L1.Stats(); !ok {
		t.Fatal("L1 lost too")
	}
	// A request of an unknown manager fails without numbers.
	r.apply(evReq(2, 0xeeee, 4096, 4096, true), evExit(0, 0))
	f := r.proc().AllocFailures
	if len(f) != 1 || f[0].Cause != "" || f[0].TotalFree != nil || !strings.Contains(f[0].Why, "did not see bank manager") || f[0].DeviceKind != "none" {
		t.Fatalf("%+v", f)
	}
}

// TestAllocatorMeshAndClose: a mesh buffer holds its span at its address
// on every chip of its mesh (learnt from the views that follow it, or
// already known); a per-core allocation is counted apart; Device::close
// clears the chip's lists.
func TestAllocatorMeshAndClose(t *testing.T) {
	const mesh = 0x5500a0000000
	const mm = 0x100 // the mesh's bank managers: made outside a chip's allocator
	r := newRec(t)
	r.apply(n150Caps(0, 0)...)
	r.apply(n150Caps(1, 0x10)...)
	r.apply(n150Caps(-1, mm)...)
	r.apply(evReq(1, mgrDRAM+mm, 12*8192, 8192, true), evMeshAlloc(1, 0xa0, mesh, events.DRAM, 0x40, 12*8192),
		evView(1, 0, 0x40), evView(1, 1, 0x40))
	r.apply(evReq(1, mgrDRAM+mm, 12*4096, 4096, true), evMeshAlloc(1, 0xa1, mesh, events.DRAM, 0x40+8192, 12*4096),
		evView(1, 0, 0x40+8192), evView(1, 1, 0x40+8192))
	// A chip buffer at the same address as a mesh buffer: the allocators
	// are independent.
	r.apply(evReq(1, mgrDRAM, 12*2048, 2048, true), evAllocPage(1, 0xa2, 0, events.DRAM, 0x40, 12*2048, 2048))
	meshStats := func(typ events.BufferType) alloc.Statistics {
		t.Helper()
		ms := r.proc().Meshes
		if len(ms) != 1 || ms[0].MeshDevice != hex(mesh) || ms[0].Allocator == nil {
			t.Fatalf("meshes %+v", ms)
		}
		st, ok := ms[0].Allocator.Type(typ).Stats()
		if !ok {
			t.Fatalf("mesh %s: no statistics: %+v", typ, ms[0].Allocator.Type(typ))
		}
		return st
	}
	if got := meshStats(events.DRAM); got.TotalAllocated != 8192+4096 || got.LargestFreeBlock != dramBank-8192-4096 {
		t.Fatalf("mesh: %+v", got)
	}
	if got := allocStats(t, r.dev(0), events.DRAM); got.TotalAllocated != 2048 {
		t.Fatalf("chip 0 holds mesh buffers: %+v", got)
	}
	if got := allocStats(t, r.dev(1), events.DRAM); got.TotalAllocated != 0 {
		t.Fatalf("chip 1 holds mesh buffers: %+v", got)
	}
	if ms := r.proc().Meshes; len(ms[0].Chips) != 2 {
		t.Fatalf("mesh chips %+v", ms[0].Chips)
	}
	// A mesh OOM: the mesh's allocator, the mesh's buffers as holders.
	r.apply(evReq(1, mgrL1+mm, 64*(l1Bank+2048), 2048, false), evOOM(1, 0))
	f := r.proc().AllocFailures
	if len(f) != 1 || f[0].DeviceKind != "mesh" || f[0].MeshDevice != hex(mesh) || f[0].Device != nil || f[0].Cause != "larger_than_bank" ||
		f[0].HoldersCount != 0 || *f[0].TotalAllocated != 0 {
		t.Fatalf("mesh failure %+v", f)
	}
	r.apply(evReq(1, mgrDRAM+mm, 12*(dramBank-8192), 8192, true), evOOM(1, 0))
	f = r.proc().AllocFailures
	if len(f) != 2 || f[1].DeviceKind != "mesh" || f[1].Cause != "exhausted" || f[1].HoldersCount != 2 || f[1].Holders[0].Buffer != hex(0xa0) ||
		*f[1].TotalAllocated != 8192+4096 {
		t.Fatalf("mesh failure %+v", f[1])
	}
	if a := r.proc().Meshes[0].Allocator; a.L1.Failures != 1 || a.DRAM.Failures != 1 {
		t.Fatalf("mesh failures counted %+v %+v", a.L1, a.DRAM)
	}
	r.apply(evFree(1, 0xa2, 0))
	// A per-core L1 allocation on chip 1 (one call per core of its grid,
	// then one track_allocate): counted apart, none of its calls a failure.
	for core := range uint32(4) {
		pc := evReq(2, mgrL1+0x10, 2048, 2048, false)
		pc.AllocatorID = 5 + core
		r.apply(pc)
	}
	r.apply(evAllocPage(2, 0xb0, 1, events.L1, 0x20000, 4*2048, 2048))
	d := r.dev(1)
	if d.Allocator.L1.PerCoreBuffers != 1 || d.Allocator.L1.PerCoreBytes != 4*2048 || *d.Allocator.L1.TotalAllocated != 0 {
		t.Fatalf("per-core %+v", d.Allocator.L1)
	}
	if f := r.proc().AllocFailures; len(f) != 2 {
		t.Fatalf("per-core calls taken for failures: %+v", f)
	}
	r.apply(evMeshFree(1, 0xa0, mesh))
	if got := meshStats(events.DRAM); got.TotalAllocated != 4096 || got.LargestFreeBlock != dramBank-8192-4096 {
		t.Fatalf("after the mesh free: %+v", got)
	}
	r.apply(evDeviceClose(1, 1))
	d = r.dev(1)
	if got := allocStats(t, d, events.DRAM); got.TotalAllocated != 0 || d.Allocator.L1.PerCoreBuffers != 0 {
		t.Fatalf("after close: %+v %+v", got, d.Allocator.L1)
	}
	if got := meshStats(events.DRAM); got.TotalAllocated != 4096 {
		t.Fatalf("the mesh after chip 1's close: %+v", got)
	}
	// Quiet requests fail at FlushBefore.
	ts := r.apply(evReq(3, mgrDRAM, 12*4096, 4096, true))
	r.l.FlushBefore(ts)
	if n := len(r.proc().AllocFailures); n != 2 {
		t.Fatalf("%d failures before the request's time", n)
	}
	r.l.FlushBefore(ts + 1)
	if f := r.proc().AllocFailures; len(f) != 3 || f[2].Cause != "" || !strings.Contains(f[2].Why, "free block large enough") || *f[2].LargestFree != dramBank {
		t.Fatalf("%+v", f)
	}
}

// TestAllocatorStreams: random multi-thread streams against a generator
// that decides every placement and failure with its own alloc.Manager
// (Allocate: placement by rule), while the ledger only sees addresses and
// the absence of an alloc. After every event the ledger's view equals the
// generator's; its failures are the generator's, with the same cause and
// numbers.
func TestAllocatorStreams(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 99))
		r := newRec(t)
		chips := []int32{0, 5}
		truth := map[int32]map[events.BufferType]*alloc.Manager{}
		mgrOf := map[int32]uint64{0: 0, 5: 0x100}
		caps := func(chip int32) {
			r.apply(n150Caps(chip, mgrOf[chip])...)
			truth[chip] = map[events.BufferType]*alloc.Manager{}
			for _, e := range n150Caps(chip, mgrOf[chip]) {
				m, err := alloc.New(alloc.Config{Banks: e.Banks, BankSize: e.BankSize, Offset: e.Base, Alignment: e.Alignment, BlockAlign: 32})
				if err != nil {
					t.Fatal(err)
				}
				truth[chip][e.BufferType] = m
			}
		}
		for _, c := range chips {
			caps(c)
		}
		type live struct {
			chip int32
			typ  events.BufferType
			addr uint64
		}
		bufs := map[uint64]live{}
		var wantFail []*alloc.Failure
		next := uint64(0x1000)
		pending := map[uint32]bool{}
		types := []events.BufferType{events.DRAM, events.L1, events.L1Small, events.Trace}
		for step := 0; step < 300; step++ {
			tid := uint32(1 + rng.IntN(3))
			switch op := rng.IntN(10); {
			case op < 6:
				chip := chips[rng.IntN(len(chips))]
				typ := types[rng.IntN(len(types))]
				m := truth[chip][typ]
				page := uint64(32 << rng.IntN(12))
				req := alloc.Request{PageSize: page, Size: page * uint64(1+rng.IntN(200)), BottomUp: typ == events.DRAM}
				mgr := mgrDRAM + mgrOf[chip] + map[events.BufferType]uint64{events.DRAM: 0, events.Trace: 1, events.L1: 2, events.L1Small: 3}[typ]
				pending[tid] = false
				addr, f := m.Allocate(req)
				r.apply(evReq(tid, mgr, req.Size, req.PageSize, req.BottomUp))
				if f != nil {
					wantFail = append(wantFail, f)
					pending[tid] = true // the thread's next event ends it
					continue
				}
				next++
				bufs[next] = live{chip, typ, addr}
				r.apply(evAllocPage(tid, next, chip, typ, addr, req.Size, req.PageSize))
			case op < 9 && len(bufs) > 0:
				for k, b := range bufs {
					truth[b.chip][b.typ].Free(b.addr)
					delete(bufs, k)
					r.apply(evFree(tid, k, b.chip))
					break
				}
			case op == 9 && rng.IntN(8) == 0:
				chip := chips[rng.IntN(len(chips))]
				for k, b := range bufs {
					if b.chip == chip {
						delete(bufs, k)
					}
				}
				for _, m := range truth[chip] {
					m.Clear()
				}
				r.apply(evDeviceClose(tid, chip))
			default:
				r.apply(evCBFree(tid, 0)) // any other event of the thread
			}
			pending[tid] = false
			for _, chip := range chips {
				d := r.dev(chip)
				for _, typ := range types {
					if got, want := allocStats(t, d, typ), truth[chip][typ].Stats(); got != want {
						t.Fatalf("seed %d step %d chip %d %s: %+v, truth %+v", seed, step, chip, typ, got, want)
					}
				}
			}
		}
		r.l.Flush()
		got := r.proc().AllocFailures
		if len(wantFail) > maxFailures {
			wantFail = wantFail[:maxFailures]
		}
		if len(got) != len(wantFail) {
			t.Fatalf("seed %d: %d failures, truth %d", seed, len(got), len(wantFail))
		}
		for i, f := range wantFail {
			g := got[i]
			if g.Cause != f.Cause.String() || *g.TotalAllocated != f.Stats.TotalAllocated || *g.TotalFree != f.Stats.TotalFree ||
				*g.LargestFree != f.Stats.LargestFreeBlock || g.SizePerBank != f.Need.SizePerBank || g.Banks != f.Need.Banks || g.BankSize != f.BankSize {
				t.Fatalf("seed %d failure %d: %+v, truth %+v", seed, i, g, f)
			}
		}
	}
}

// TestAllocatorRequestsAllocateNothing: requests that succeed (each
// followed by its alloc, on two threads whose calls interleave) allocate
// nothing once the threads were seen, with an allocator observer too:
// their failure report is made only when one fails.
func TestAllocatorRequestsAllocateNothing(t *testing.T) {
	var told int
	l := NewLedger(Options{
		Notices: NoticeFunc(func(*Notice) { t.Fatal("no notice expected") }),
		AllocObserver: func(_ uint32, _ int32, _ uint64, _ events.BufferType, _ uint32, st *alloc.Statistics) {
			if st != nil {
				told++
			}
		},
	})
	var seq uint64
	apply := func(e events.Event) {
		seq++
		e.Pid, e.Seq, e.TsNs = 1, seq, seq*100
		l.Apply(&e)
	}
	for _, e := range n150Caps(0, 0) {
		apply(e)
	}
	warm := func() {
		for i := uint64(0); i < 32; i++ {
			apply(evReq(7, mgrDRAM, 12*4096, 4096, true))
			apply(evReq(8, mgrL1, 64*2048, 2048, false))
			apply(evAllocPage(7, 0xa0, 0, events.DRAM, 0x40, 12*4096, 4096))
			apply(evAllocPage(8, 0xb0, 0, events.L1, l1Base+l1Bank-2048, 64*2048, 2048))
			apply(evFree(7, 0xa0, 0))
			apply(evFree(8, 0xb0, 0))
		}
	}
	warm()
	if n := testing.AllocsPerRun(20, warm); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	if told == 0 {
		t.Fatal("the observer was told nothing")
	}
	d := l.Summary().Processes[0].Devices[0]
	if st := allocStats(t, d, events.DRAM); st != stats(dramBank, 0, dramBank, dramBank) {
		t.Fatalf("DRAM %+v", st)
	}
	if st := allocStats(t, d, events.L1); st != stats(l1Bank, 0, l1Bank, l1Bank) {
		t.Fatalf("L1 %+v", st)
	}
}
