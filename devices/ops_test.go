package devices

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// The ops rows equal sums made from the stream by a model of its own: per
// (op, device op), the allocations made in it, their bytes, the process's
// DRAM and L1 bytes right after each, its local CBs, its failed
// requests, and its buffers left live; leaks and failures name their op.
func TestOpRows(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { opRowsRun(t, seed) })
	}
}

func opRowsRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 31))
	names := []uint32{0, events.OpNames.Intern("ttnn.matmul"), events.OpNames.Intern("ttnn.conv2d")}
	devs := []uint32{0, events.OpNames.Intern("MatmulDeviceOperation"), events.OpNames.Intern("HaloDeviceOperation")}
	r := newRec(t)
	const mgr = 0xabc0
	r.apply(evCap(0, events.L1, mgr, 4, 1<<20, 32, 0))
	type live struct {
		key  uint64
		chip int32
		typ  events.BufferType
		size uint64
		row  opKey
	}
	want := map[opKey]*OpRow{}
	var order []opKey
	row := func(k opKey) *OpRow {
		if want[k] == nil {
			want[k] = &OpRow{Name: events.OpNames.Name(k.op), DeviceOp: events.OpNames.Name(k.dev)}
			order = append(order, k)
		}
		return want[k]
	}
	var lives []live
	held := map[events.BufferType]uint64{}
	next := uint64(0x1000)
	failed := 0
	for range 400 {
		var f events.OpFields
		if n := rng.IntN(len(names)); n != 0 {
			f.Op, f.OpDepth = names[n], uint8(1+rng.IntN(2))
			if d := rng.IntN(len(devs)); d != 0 {
				f.DeviceOp = devs[d]
				f.RuntimeID, f.HasRuntimeID = rng.Uint64N(100), rng.IntN(2) == 0
			}
		}
		k := opKey{f.Op, f.DeviceOp}
		switch x := rng.IntN(10); {
		case x < 5:
			typ := []events.BufferType{events.DRAM, events.L1}[rng.IntN(2)]
			chip := int32(rng.IntN(2))
			size := uint64(1+rng.IntN(64)) * 1024
			e := evAlloc(1, next, chip, typ, next, size)
			e.OpFields = f
			r.apply(e)
			held[typ] += size
			lives = append(lives, live{next, chip, typ, size, k})
			next += 0x100000
			if f.Op != 0 {
				w := row(k)
				w.Allocs++
				w.Bytes += size
				w.PeakDRAM = max(w.PeakDRAM, held[events.DRAM])
				w.PeakL1 = max(w.PeakL1, held[events.L1])
			}
		case x < 8 && len(lives) > 0:
			i := rng.IntN(len(lives))
			b := lives[i]
			r.apply(evFree(1, b.key, b.chip))
			held[b.typ] -= b.size
			lives = append(lives[:i], lives[i+1:]...)
		case x < 9:
			e := evCB(2, 0, 0x1000, uint64(1+rng.IntN(8))*2048)
			e.Global = rng.IntN(4) == 0
			e.OpFields = f
			r.apply(evCBLayout(2, 0x77, 0), e)
			if f.Op != 0 && !e.Global {
				row(k).CBBytes += e.Size
			}
		default:
			// A request that is not followed by its alloc: it failed.
			e := evReq(3, mgr, 2<<20, 2048, true)
			e.OpFields = f
			// The thread's next record is no alloc: the request threw.
			r.apply(e, evFree(3, 0xdead0000+next, 0))
			next += 0x100000
			failed++
			if f.Op != 0 {
				row(k).AllocFailures++
			}
		}
	}
	for _, b := range lives {
		if b.row.op != 0 {
			w := want[b.row]
			w.LeakedBuffers++
			w.LeakedBytes += b.size
		}
	}
	var rows []OpRow
	for _, k := range order {
		rows = append(rows, *want[k])
	}
	ps := r.proc()
	if !reflect.DeepEqual(ps.Ops, rows) {
		t.Fatalf("ops rows\n got %+v\nwant %+v", ps.Ops, rows)
	}
	if len(ps.AllocFailures) != min(failed, 100) {
		t.Fatalf("%d failures, want %d", len(ps.AllocFailures), failed)
	}
	for lk := range ps.AllLeaks() {
		var b *live
		for i := range lives {
			if fmt.Sprintf("%#x", lives[i].key) == lk.Buffer {
				b = &lives[i]
			}
		}
		if b == nil {
			t.Fatalf("leak %s is no live buffer", lk.Buffer)
		}
		switch {
		case b.row.op == 0 && lk.Op != nil:
			t.Fatalf("leak %s made in no op names %+v", lk.Buffer, lk.Op)
		case b.row.op != 0 && (lk.Op == nil || lk.Op.Name != events.OpNames.Name(b.row.op) || lk.Op.DeviceOp != events.OpNames.Name(b.row.dev)):
			t.Fatalf("leak %s: op %+v, want %v", lk.Buffer, lk.Op, b.row)
		}
	}
}

// A failed allocation names the op of its request, runtime id and depth
// included.
func TestOpFailureNamesOp(t *testing.T) {
	r := newRec(t)
	const mgr = 0xabc0
	r.apply(evCap(0, events.L1, mgr, 4, 1<<20, 32, 0))
	e := evReq(3, mgr, 2<<20, 2048, true)
	e.Op, e.DeviceOp, e.RuntimeID, e.HasRuntimeID, e.OpDepth = events.OpNames.Intern("ttnn.add"), events.OpNames.Intern("BinaryDeviceOperation"), 42, true, 2
	r.apply(e, evFree(3, 0x5000, 0))
	f := r.proc().AllocFailures
	if len(f) != 1 || f[0].Op == nil || f[0].Op.Name != "ttnn.add" || f[0].Op.DeviceOp != "BinaryDeviceOperation" ||
		f[0].Op.RuntimeID == nil || *f[0].Op.RuntimeID != 42 || f[0].Op.Depth != 2 {
		t.Fatalf("failures %+v", f)
	}
}

// Rows past MaxOpRows are counted, not kept; a slot reused by a buffer
// made in no op forgets its former op.
func TestOpRowsBounded(t *testing.T) {
	r := newRec(t)
	for i := range MaxOpRows + 5 {
		e := evAlloc(1, 0x1000, 0, events.DRAM, 0x1000, 64)
		e.Op, e.OpDepth = events.OpNames.Intern(fmt.Sprintf("ttnn.op%d", i)), 1
		r.apply(e, evFree(1, 0x1000, 0))
	}
	r.apply(evAlloc(1, 0x1000, 0, events.DRAM, 0x1000, 64))
	ps := r.proc()
	if len(ps.Ops) != MaxOpRows || ps.OpsDropped != 5 {
		t.Fatalf("%d rows, %d dropped", len(ps.Ops), ps.OpsDropped)
	}
	for _, row := range ps.Ops {
		if row.LeakedBuffers != 0 {
			t.Fatalf("row %s counts the buffer made in no op as its leak", row.Name)
		}
	}
	if lk := ps.Leaks; len(lk) != 1 || lk[0].Op != nil {
		t.Fatalf("leaks %+v", lk)
	}
}

// Per-site accounting is per op too: one site's buffers made in two ops
// (and in none) are three rows of SiteUsage, each with its op, so the
// memory profile can put the op at the root of its stacks.
func TestSiteUsagePerOp(t *testing.T) {
	r := newRecWith(t, Options{SiteUsage: true})
	mm, add := events.OpNames.Intern("ttnn.matmul"), events.OpNames.Intern("ttnn.add")
	a := evAlloc(1, 0xa, 0, events.DRAM, 0x1000, 100)
	a.Site, a.Op, a.OpDepth = 5, mm, 1
	b := evAlloc(1, 0xb, 0, events.DRAM, 0x2000, 30)
	b.Site, b.Op, b.OpDepth = 5, add, 1
	c := evAlloc(1, 0xc, 0, events.DRAM, 0x3000, 7)
	c.Site = 5
	r.apply(a, b, c, evFree(1, 0xb, 0))
	type row struct {
		op            string
		inuse, allocd uint64
	}
	var got []row
	for _, u := range r.proc().SiteUsage {
		name := ""
		if u.Op != nil {
			name = u.Op.Name
		}
		got = append(got, row{name, u.InuseBytes, u.AllocBytes})
	}
	want := []row{{"", 7, 7}, {"ttnn.matmul", 100, 100}, {"ttnn.add", 0, 30}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("site usage %+v, want %+v", got, want)
	}
}

// A mesh buffer left live counts in its op's row once per chip of its
// mesh, as the summary's leaks list it.
func TestOpLeakPerChip(t *testing.T) {
	r := newRec(t)
	const mesh = 0x9000
	a := evMeshAlloc(1, 0xa, mesh, events.DRAM, 0x1000, 100)
	a.Op, a.OpDepth = events.OpNames.Intern("ttnn.matmul"), 1
	r.apply(a, evView(1, 0, 0x1000), evView(1, 1, 0x1000))
	ps := r.proc()
	if len(ps.Ops) != 1 || ps.Ops[0].LeakedBuffers != 2 || ps.Ops[0].LeakedBytes != 200 || ps.LeakCount() != 2 {
		t.Fatalf("ops %+v, %d leaks", ps.Ops, ps.LeakCount())
	}
}

// Calls: each entry of a top-level op counts in its own row, each launch
// of a device op in the row of the op it was launched in; a launch's
// further frames are no new launch; a device op launched where no op is
// live has a row of its own (no name).
func TestOpCalls(t *testing.T) {
	r := newRec(t)
	conv, add := events.OpNames.Intern("ttnn.conv2d"), events.OpNames.Intern("ttnn.add")
	mm, bin := events.OpNames.Intern("MatmulDeviceOperation"), events.OpNames.Intern("BinaryDeviceOperation")
	enter := func(ent events.OpEntered, op, dev uint32, depth uint8) events.Event {
		e := events.Event{Kind: events.KindOpEnter, Tid: 1, Chip: -1, BufferType: -1}
		e.Entered, e.Op, e.DeviceOp, e.OpDepth = ent, op, dev, depth
		return e
	}
	r.apply(
		enter(events.OpEnteredOp, conv, 0, 1),
		enter(events.OpEnteredLaunch, conv, mm, 1),
		enter(events.OpEnteredLaunchFrame, conv, mm, 1),
		enter(events.OpEnteredOp, add, 0, 2),
		enter(events.OpEnteredLaunch, add, bin, 2),
		enter(events.OpEnteredOp, conv, 0, 1),
		enter(events.OpEnteredLaunch, conv, mm, 1),
		enter(events.OpEnteredLaunch, 0, bin, 0),
		enter(events.OpEnteredUnknown, 0, 0, 0),
	)
	got := map[string]uint64{}
	for _, row := range r.proc().Ops {
		got[row.Name+">"+row.DeviceOp] = row.Calls
	}
	want := map[string]uint64{"ttnn.conv2d>": 2, "ttnn.conv2d>MatmulDeviceOperation": 2, "ttnn.add>": 1,
		"ttnn.add>BinaryDeviceOperation": 1, ">BinaryDeviceOperation": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}
