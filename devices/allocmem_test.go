package devices

import (
	"errors"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// at sets an event's time.
func at(e events.Event, ts uint64) events.Event {
	e.TsNs = ts
	return e
}

// TestAllocatorFromMemory: a chip whose allocator was made before the
// attach is read from memory when a request names its DRAM manager; the
// records around the read are folded in by their times, every number
// worked out by hand (one bank of 0x1000 at 0x40, blocks of 32).
func TestAllocatorFromMemory(t *testing.T) {
	r := newRecWith(t, Options{MemReads: true})
	r.l.SetProcessInfo(r.pid, ProcessInfo{AttachedMidRun: true})
	const from, to = 10_000_000, 10_100_000
	r.apply(at(evReq(1, 0xd0, 0x100, 0x100, true), 1000), at(evAllocPage(1, 0xa0, 0, events.DRAM, 0x40, 0x100, 0x100), 1100))
	if d := r.dev(0); d.Allocator == nil || d.Allocator.DRAM == nil || d.Allocator.DRAM.Why == "" {
		t.Fatalf("pending read: %+v %q", d.Allocator, d.AllocatorWhy)
	}
	ws := r.l.TakeMemWants()
	if len(ws) != 1 || ws[0] != (MemWant{Pid: r.pid, Chip: 0, Type: events.DRAM, Manager: 0xd0}) {
		t.Fatalf("wants %+v", ws)
	}
	// The list read: 0xa0's block, one of an alloc still in the ring (at
	// 0x140), one of a buffer allocated before the attach (at 0x240).
	r.l.InstallMem(ws[0], &MemManager{BufferType: int32(events.DRAM), Banks: 1, Alignment: 32, BankSize: 0x1000, Offset: 0x40, BlockAlign: 32,
		Blocks: []alloc.Block{{Addr: 0, Size: 0x100, Allocated: true}, {Addr: 0x100, Size: 0x100, Allocated: true}, {Addr: 0x200, Size: 0x100, Allocated: true}, {Addr: 0x300, Size: 0xd00, Allocated: false}},
		FromNs: from, ToNs: to}, nil)
	if st := allocStats(t, r.dev(0), events.DRAM); st != stats(0x1000, 0x300, 0xd00, 0xd00) {
		t.Fatalf("read: %+v", st)
	}
	r.apply(
		at(evReq(1, 0xd0, 0x100, 0x100, true), 5_000_000),
		at(evAllocPage(1, 0xa1, 0, events.DRAM, 0x140, 0x100, 0x100), 5_000_100), // before the read: in it
		at(evFree(1, 0xa0, 0), 10_050_000),                                       // during it: freed if the list still holds it
	)
	if st := allocStats(t, r.dev(0), events.DRAM); st != stats(0x1000, 0x200, 0xe00, 0xd00) {
		t.Fatalf("after the records around the read: %+v", st)
	}
	unknown := at(evFree(1, 0xbb, 0), 20_000_000) // allocated before the attach
	unknown.BufferType, unknown.Address = events.DRAM, 0x240
	r.apply(unknown,
		at(evReq(1, 0xd0, 0x80, 0x80, true), 30_000_000),
		at(evAllocPage(1, 0xa2, 0, events.DRAM, 0x40, 0x80, 0x80), 30_000_100), // after it: placed
		at(evFree(1, 0xa1, 0), 31_000_000),
	)
	d := r.dev(0)
	if st := allocStats(t, d, events.DRAM); st != stats(0x1000, 0x80, 0xf80, 0xf80) {
		t.Fatalf("after: %+v", st)
	}
	if d.Allocator.DRAM.Source != "memory" || d.Allocator.DRAM.Banks != 1 {
		t.Fatalf("%+v", d.Allocator.DRAM)
	}
	// A failure now is explained from the list read.
	r.apply(at(evReq(1, 0xd0, 0x2000, 0x2000, true), 40_000_000), at(evExit(0, 0), 40_000_100))
	f := r.proc().AllocFailures
	if len(f) != 1 || f[0].Cause != "larger_than_bank" || f[0].TotalAllocated == nil || *f[0].TotalAllocated != 0x80 {
		t.Fatalf("%+v", f)
	}
}

// TestAllocatorFromMemoryRefused: a read that fails says why per chip; a
// list that does not hold a buffer counted before the read loses the type.
func TestAllocatorFromMemoryRefused(t *testing.T) {
	r := newRecWith(t, Options{MemReads: true})
	r.l.SetProcessInfo(r.pid, ProcessInfo{AttachedMidRun: true})
	r.apply(evReq(1, 0xd0, 0x100, 0x100, true), evAllocPage(1, 0xa0, 0, events.DRAM, 0x40, 0x100, 0x100))
	r.apply(evReq(1, 0xd5, 0x100, 0x100, true), evAllocPage(1, 0xa5, 5, events.DRAM, 0x40, 0x100, 0x100))
	ws := r.l.TakeMemWants()
	if len(ws) != 2 {
		t.Fatalf("wants %+v", ws)
	}
	r.l.InstallMem(ws[0], nil, errors.New("no DWARF for libtt_metal.so"))
	r.l.InstallMem(ws[1], &MemManager{BufferType: int32(events.DRAM), Banks: 1, Alignment: 32, BankSize: 0x1000, Offset: 0x40, BlockAlign: 32,
		Blocks: []alloc.Block{{Addr: 0, Size: 0x1000, Allocated: false}}, FromNs: 1, ToNs: 2}, nil)
	if d := r.dev(0); d.Allocator != nil || !strings.Contains(d.AllocatorWhy, "no DWARF") {
		t.Fatalf("chip 0: %+v %q", d.Allocator, d.AllocatorWhy)
	}
	if d := r.dev(5); d.Allocator == nil || d.Allocator.DRAM.TotalAllocated != nil || !strings.Contains(d.Allocator.DRAM.Why, "not allocated in the list read") {
		t.Fatalf("chip 5: %+v %q", d.Allocator, d.AllocatorWhy)
	}
	// Installing again, or for a manager replaced since, changes nothing.
	r.l.InstallMem(ws[0], &MemManager{BufferType: int32(events.DRAM), Banks: 1, Alignment: 32, BankSize: 0x1000, Offset: 0x40, BlockAlign: 32,
		Blocks: []alloc.Block{{Addr: 0, Size: 0x1000, Allocated: false}}}, nil)
	if d := r.dev(0); d.Allocator != nil {
		t.Fatalf("installed twice: %+v", d.Allocator)
	}
}

// TestAllocatorFoundAtAttach: bank managers found from the process's root
// at attach are read at once, with no request naming them: a chip that
// allocates nothing after the attach has its numbers (source "memory");
// a later request on a manager found so is known, not unseen; a root that
// could not be walked is said by each chip without a view.
func TestAllocatorFoundAtAttach(t *testing.T) {
	r := newRecWith(t, Options{MemReads: true})
	r.l.SetProcessInfo(r.pid, ProcessInfo{AttachedMidRun: true})
	w, ok := r.l.FoundMem(r.pid, 3, events.L1, 0xe1)
	if !ok || w != (MemWant{Pid: r.pid, Chip: 3, Type: events.L1, Manager: 0xe1}) {
		t.Fatalf("want %+v %v", w, ok)
	}
	if _, ok := r.l.FoundMem(r.pid, 3, events.L1, 0xe1); ok {
		t.Fatal("a type found twice")
	}
	if _, ok := r.l.FoundMem(r.pid, 3, events.SystemMemory, 0xe2); ok {
		t.Fatal("SYSTEM_MEMORY has no bank manager")
	}
	r.l.InstallMem(w, &MemManager{BufferType: int32(events.L1), Banks: 64, Alignment: 16, BankSize: 0x1000, Offset: 0x40, BlockAlign: 32,
		Blocks: []alloc.Block{{Addr: 0, Size: 0xe00, Allocated: false}, {Addr: 0xe00, Size: 0x200, Allocated: true}}, FromNs: 10, ToNs: 20}, nil)
	d := r.dev(3)
	if st := allocStats(t, d, events.L1); st != stats(0x1000, 0x200, 0xe00, 0xe00) || d.Allocator.L1.Source != "memory" || d.Allocator.L1.Banks != 64 {
		t.Fatalf("chip 3: %+v", d.Allocator.L1)
	}
	if len(r.l.TakeMemWants()) != 0 {
		t.Fatal("a manager found at attach asked for again")
	}
	// A request on it after the attach is known; its alloc is placed.
	r.apply(at(evReq(1, 0xe1, 0x100, 0x100, false), 1000), at(evAllocPage(1, 0xa0, 3, events.L1, 0xd40, 0x100, 0x100), 1100))
	if st := allocStats(t, r.dev(3), events.L1); st != stats(0x1000, 0x300, 0xd00, 0xd00) {
		t.Fatalf("after an alloc: %+v", st)
	}
	if len(r.l.TakeMemWants()) != 0 {
		t.Fatal("a request on a manager found at attach asked for a read")
	}
	// Another process whose root could not be walked: its chips say why.
	r2 := newRec(t)
	r2.l.SetProcessInfo(r2.pid, ProcessInfo{AttachedMidRun: true})
	r2.l.SetRootWhy(r2.pid, "no DWARF for libtt_metal.so")
	r2.apply(evFree(1, 0xbb, 0))
	if d := r2.dev(0); d.Allocator != nil || !strings.Contains(d.AllocatorWhy, "not read at attach: no DWARF") {
		t.Fatalf("%+v %q", d.Allocator, d.AllocatorWhy)
	}
}
