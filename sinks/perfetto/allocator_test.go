package perfetto_test

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// The allocator's tracks and instants: random allocations and frees on
// two DRAM and L1 bank managers, placed by an independent alloc.Manager;
// each chip and type's "free" and "largest free block" tracks end at the
// truth's numbers x banks, ranked after the chip's memory types, and each
// failed request is one instant with its numbers as arguments.
func TestAllocatorTracks(t *testing.T) {
	var out bytes.Buffer
	const pid = 4242
	s, emit := newProcStream(t, &out, 3, pid, true)
	rng := rand.New(rand.NewPCG(5, 6))
	type mgr struct {
		chip  int32
		typ   events.BufferType
		ptr   uint64
		banks uint32
		m     *alloc.Manager
	}
	var mgrs []*mgr
	for i, chip := range []int32{0, 9} {
		for j, spec := range []struct {
			typ   events.BufferType
			banks uint32
			bank  uint64
		}{{events.DRAM, 12, 1 << 20}, {events.L1, 64, 0xe8000}} {
			g := &mgr{chip: chip, typ: spec.typ, ptr: 0xd0 + uint64(i*4+j), banks: spec.banks}
			c := dt.Capacity(chip, spec.typ, g.ptr, spec.banks, spec.bank, 32, 0x40)
			c.Tid = pid
			emit(c)
			var err error
			if g.m, err = alloc.New(alloc.Config{Banks: spec.banks, BankSize: spec.bank, Offset: 0x40, Alignment: 32, BlockAlign: 32}); err != nil {
				t.Fatal(err)
			}
			mgrs = append(mgrs, g)
		}
	}
	type live struct {
		g    *mgr
		addr uint64
	}
	bufs := map[uint64]live{}
	failures := 0
	next := uint64(0x1000)
	for range 400 {
		g := mgrs[rng.IntN(len(mgrs))]
		if rng.IntN(3) == 0 && len(bufs) > 0 {
			for k, b := range bufs {
				b.g.m.Free(b.addr)
				delete(bufs, k)
				emit(dt.Free(pid, k, b.g.chip))
				break
			}
			continue
		}
		page := uint64(1024 << rng.IntN(6))
		req := alloc.Request{PageSize: page, Size: page * uint64(1+rng.IntN(300)), BottomUp: g.typ == events.DRAM}
		addr, f := g.m.Allocate(req)
		emit(dt.Request(pid, g.ptr, req.Size, req.PageSize, req.BottomUp))
		if f != nil {
			failures++
			continue // the thread's next event shows it threw
		}
		next++
		bufs[next] = live{g, addr}
		emit(dt.AllocPage(pid, next, g.chip, g.typ, addr, req.Size, req.PageSize))
	}
	emit(events.Event{Kind: events.KindExit, Chip: -1})
	sum := s.l.Summary()
	if err := s.w.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// The allocator's tracks are where tttrace orders them, after the
	// memory types of their chip (Perfetto's schema, decoded by protoc).
	if ps, err := perfettotest.Protoc(protoc(t), out.Bytes()); err != nil {
		t.Fatal(err)
	} else {
		for _, p := range perfettotest.CheckSchema(ps) {
			t.Error(p)
		}
	}
	ps := tr.ProcessesOf(pid)
	if len(ps) != 1 {
		t.Fatalf("%d process tracks", len(ps))
	}
	tracks, err := tr.AllocCounters(ps[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Counters(ps[0]); err != nil {
		t.Fatal(err)
	}
	for _, g := range mgrs {
		st := g.m.Stats()
		k := perfettotest.ChipType{Chip: g.chip, Type: g.typ.String()}
		free, big := tracks[k]["free"], tracks[k]["largest free block"]
		if free == nil || big == nil {
			t.Fatalf("chip %d %s: tracks %v", g.chip, g.typ, tracks[k])
		}
		if free.Last() != int64(st.TotalFree)*int64(g.banks) || big.Last() != int64(st.LargestFreeBlock)*int64(g.banks) || free.Unit != 3 {
			t.Errorf("chip %d %s: free track ends at %d, largest at %d; truth %d x %d, %d x %d",
				g.chip, g.typ, free.Last(), big.Last(), st.TotalFree, g.banks, st.LargestFreeBlock, g.banks)
		}
	}
	got := 0
	fails := sum.Processes[0].AllocFailures
	for _, in := range tr.Instants {
		if len(in.Name) < 12 || in.Name[:12] != "alloc_failed" {
			continue
		}
		if got < len(fails) {
			f := fails[got]
			if in.Args["cause"] != f.Cause || in.Args["size"] != itoa(f.Size) || in.Args["total_free_bytes"] != itoa(*f.TotalFree) ||
				in.Args["largest_free_block_bytes"] != itoa(*f.LargestFree) || in.Args["size_per_bank"] != itoa(f.SizePerBank) {
				t.Errorf("instant %d: %v; record %+v", got, in.Args, f)
			}
		}
		got++
	}
	if got != failures || failures == 0 || len(fails) != min(failures, devices.MaxAnomalies) {
		t.Fatalf("%d alloc_failed instants, %d records, %d failures", got, len(fails), failures)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// A failed allocation of a MeshDevice's own allocator is an instant that
// names the mesh (no chip), with the mesh as an argument.
func TestAllocatorMeshInstant(t *testing.T) {
	var out bytes.Buffer
	const pid = 4243
	s, emit := newProcStream(t, &out, 3, pid, false)
	// The mesh's bank manager: made outside a chip's allocator.
	emit(dt.Capacity(-1, events.DRAM, 0xe0, 12, 1<<20, 32, 0x40))
	emit(dt.Request(pid, 0xe0, 12*4096, 4096, true))
	emit(dt.MeshAlloc(pid, 0xa0, dt.MeshA, events.DRAM, 0x40, 12*4096))
	emit(dt.View(pid, 3, 0x40))
	emit(dt.Request(pid, 0xe0, 12*(2<<20), 2<<20, true))
	emit(events.Event{Kind: events.KindExit, Chip: -1})
	sum := s.l.Summary()
	if err := s.w.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	mesh := "0x" + strconv.FormatUint(dt.MeshA, 16)
	n := 0
	for _, in := range tr.Instants {
		if len(in.Name) < 12 || in.Name[:12] != "alloc_failed" {
			continue
		}
		n++
		if in.Name != "alloc_failed mesh "+mesh+" DRAM (larger_than_bank)" || in.Args["mesh_device"] != mesh || in.Args["chip"] != "" {
			t.Errorf("instant %q %v", in.Name, in.Args)
		}
	}
	if n != 1 {
		t.Fatalf("%d alloc_failed instants, want 1", n)
	}
}
