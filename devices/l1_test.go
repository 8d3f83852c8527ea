package devices

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// l1Rec is a rec that keeps the notices the ledger makes.
type l1Rec struct {
	*rec
	notes []Notice
}

func newL1Rec(t *testing.T, warn uint64) *l1Rec {
	r := &l1Rec{}
	r.rec = newRecWith(t, Options{L1Warn: warn, Notices: NoticeFunc(func(n *Notice) {
		c := *n
		c.L1Buffers = append([]L1Buffer(nil), n.L1Buffers...)
		r.notes = append(r.notes, c)
	})})
	return r
}

func (r *l1Rec) take(kind NoticeKind) []Notice {
	var out []Notice
	for _, n := range r.notes {
		if n.Type == kind {
			out = append(out, n)
		}
	}
	return out
}

// way is a compact view of the buffers a clash names.
func way(n Notice) string {
	var parts []string
	for _, b := range n.L1Buffers {
		parts = append(parts, fmt.Sprintf("%s@%#x+%d", b.Buffer, b.Address, b.Size))
	}
	return strings.Join(parts, " ")
}

func headroomOf(t *testing.T, r *rec, chip int32) (int64, bool) {
	t.Helper()
	d := r.dev(chip)
	if d.L1Headroom == nil {
		return 0, false
	}
	return *d.L1Headroom, true
}

func TestL1HeadroomAndClash(t *testing.T) {
	const kb = 1024
	cases := []struct {
		name string
		warn uint64
		run  func(t *testing.T, r *l1Rec)
	}{
		{"a clash names the L1 buffers below the CB end, not L1_SMALL or DRAM", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x10000, 8*kb),
				evAlloc(1, 0xa1, 0, events.L1, 0x12000, 8*kb),
				evAlloc(1, 0xa2, 0, events.L1, 0x14000, 8*kb),
				evAlloc(1, 0xb0, 0, events.L1Small, 0x1000, 8*kb),
				evAlloc(1, 0xb1, 0, events.DRAM, 0x1000, 8*kb),
				evCBLayout(2, progP, 0),
				evCB(2, 0, 0x1000, 32*kb),
			)
			last := r.apply(evCB(2, 0, 0x9000, 40*kb)) // region ends at 0x13000
			eq(t, "clash before the layout is over", len(r.notes), 0)
			r.apply(evProgramDestroy(2, progP))
			cl := r.take(NoticeL1Clash)
			if len(cl) != 1 {
				t.Fatalf("clashes %+v", cl)
			}
			n := cl[0]
			eq(t, "ts", n.TsNs, last)
			eq(t, "tid", n.Tid, 2)
			eq(t, "chip", n.Chip, 0)
			eq(t, "program", n.Program, hex(progP))
			eq(t, "cb end", n.CBRegionEnd, 0x13000)
			eq(t, "lowest", n.LowestL1Address, 0x10000)
			eq(t, "lowest buffer", n.Lowest.Buffer, "0xa0")
			eq(t, "headroom", n.Headroom, -0x3000)
			eq(t, "in the way", way(n), "0xa0@0x10000+8192 0xa1@0x12000+8192")
			eq(t, "count", n.L1BuffersCount, 2)
			eq(t, "bytes", n.L1BuffersBytes, 16*kb)
			eq(t, "seq of the lowest", n.Lowest.Seq, 1)
			p := r.proc()
			eq(t, "summary clashes", len(p.L1Clashes), 1)
			eq(t, "stats", p.Stats.L1Clashes, 1)
			if !reflect.DeepEqual(p.L1Clashes[0], n) {
				t.Errorf("summary clash %+v, notice %+v", p.L1Clashes[0], n)
			}
			d := r.dev(0)
			eq(t, "no CBs now: no headroom", d.L1Headroom == nil, true)
			eq(t, "min headroom", *d.MinL1Headroom, MinHeadroom{Value: -0x3000, TsNs: last, LowestL1Address: 0x10000, CBRegionEnd: 0x13000})
		}},
		{"no clash when the low L1 buffers are freed before the program runs", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x10000, 8*kb),
				evAlloc(1, 0xa1, 0, events.L1, 0x12000, 8*kb),
				evAlloc(1, 0xa2, 0, events.L1, 0x14000, 8*kb),
				evFree(1, 0xa0, 0),
				evFree(1, 0xa1, 0),
				evCBLayout(2, progP, 0),
				evCB(2, 0, 0x1000, 32*kb),
				evCB(2, 0, 0x9000, 40*kb),
				evAlloc(2, 0xa3, 1, events.L1, 0x10000, 8*kb), // ends the layout; another chip
			)
			eq(t, "notices", len(r.notes), 0)
			h, ok := headroomOf(t, r.rec, 0)
			eq(t, "headroom", h, 0x1000)
			eq(t, "has headroom", ok, true)
			_, ok = headroomOf(t, r.rec, 1)
			eq(t, "chip 1 has no CBs", ok, false)
		}},
		{"the lowest buffer freed: the next one is the lowest", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa2, 0, events.L1, 0x30000, 4*kb),
				evAlloc(1, 0xa0, 0, events.L1, 0x10000, 4*kb),
				evAlloc(1, 0xa1, 0, events.L1, 0x20000, 4*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 4*kb),
			)
			h, _ := headroomOf(t, r.rec, 0)
			eq(t, "headroom", h, 0x10000-0x2000)
			r.apply(evFree(1, 0xa0, 0))
			h, _ = headroomOf(t, r.rec, 0)
			eq(t, "after freeing the lowest", h, 0x20000-0x2000)
			r.apply(evFree(1, 0xa1, 0), evFree(1, 0xa2, 0))
			_, ok := headroomOf(t, r.rec, 0)
			eq(t, "no L1 buffer: no headroom", ok, false)
			eq(t, "min", r.dev(0).MinL1Headroom.Value, 0x10000-0x2000)
		}},
		{"several programs: each checked with its own region, headroom against the highest", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x12000, 8*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 16*kb), // ends 0x5000
				evCBLayout(2, progQ, 0), evCB(2, 0, 0x1000, 80*kb), // ends 0x15000: clashes
				evCBTeardown(2, progQ),
			)
			cl := r.take(NoticeL1Clash)
			if len(cl) != 1 || cl[0].Program != hex(progQ) || way(cl[0]) != "0xa0@0x12000+8192" {
				t.Fatalf("clashes %+v", cl)
			}
			h, _ := headroomOf(t, r.rec, 0)
			eq(t, "headroom with Q", h, 0x12000-0x15000)
			r.apply(evCBFree(2, 0))
			h, _ = headroomOf(t, r.rec, 0)
			eq(t, "headroom after Q's CBs went", h, 0x12000-0x5000)
		}},
		{"a relayout replaces the region", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x12000, 8*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 80*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 8*kb),
				evAlloc(2, 0xa1, 0, events.DRAM, 0, 64),
			)
			cl := r.take(NoticeL1Clash)
			eq(t, "clashes (the first layout only)", len(cl), 1)
			h, _ := headroomOf(t, r.rec, 0)
			eq(t, "headroom", h, 0x12000-0x3000)
		}},
		{"chips are separate", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 1, events.L1, 0x10000, 8*kb),
				evAlloc(1, 0xa1, 0, events.L1, 0x40000, 8*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 128*kb),
				evProgramDestroy(2, progP),
			)
			eq(t, "notices", len(r.notes), 0)
			eq(t, "min on chip 0", r.dev(0).MinL1Headroom.Value, 0x40000-0x21000)
			eq(t, "chip 1 never had CBs", r.dev(1).MinL1Headroom == nil, true)
		}},
		{"a mesh buffer is an L1 buffer on every chip of its mesh", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evMeshAlloc(1, 0xc0, meshA, events.L1, 0x10000, 4*kb),
				evView(1, 2, 0x10000), evView(1, 3, 0x10000),
				// 2026: a mesh program's CBs come chip by chip.
				evCBLayoutMesh(2, progP, meshA),
				evCB(2, 2, 0x1000, 64*kb), evCB(2, 2, 0x11000, 4*kb),
				evCB(2, 3, 0x1000, 64*kb), evCB(2, 3, 0x11000, 4*kb),
			)
			cl := r.take(NoticeL1Clash)
			eq(t, "chip 2 checked when chip 3's CBs start", len(cl), 1)
			r.apply(evProgramDestroy(2, progP))
			cl = r.take(NoticeL1Clash)
			if len(cl) != 2 {
				t.Fatalf("clashes %+v", cl)
			}
			for i, chip := range []int32{2, 3} {
				n := cl[i]
				eq(t, "chip", n.Chip, chip)
				eq(t, "cb end", n.CBRegionEnd, 0x12000)
				eq(t, "mesh buffer", n.Lowest.Mesh, true)
				eq(t, "mesh device", n.Lowest.MeshDevice, hex(meshA))
				eq(t, "in the way", way(n), "0xc0@0x10000+4096")
			}
		}},
		{"a legacy mesh CB group clashes on every chip of the mesh", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 5, events.L1, 0x10000, 4*kb),
				evMeshAlloc(1, 0xc0, meshB, events.L1, 0x20000, 4*kb),
				evView(1, 4, 0x20000), evView(1, 5, 0x20000),
				evCBLayoutMesh(2, progP, meshB), evCBMesh(2, meshB, 0x1000, 0x1f800),
			)
			r.l.Flush() // nothing more on the thread: the end of tracing runs the check
			cl := r.take(NoticeL1Clash)
			if len(cl) != 2 {
				t.Fatalf("clashes %+v", cl)
			}
			eq(t, "chip 4", way(cl[0]), "0xc0@0x20000+4096")
			eq(t, "chip 5", way(cl[1]), "0xa0@0x10000+4096 0xc0@0x20000+4096")
			h, _ := headroomOf(t, r.rec, 5)
			eq(t, "chip 5 headroom", h, 0x10000-0x20800)
		}},
		{"a layout quiet long enough is checked without a further event", 0, func(t *testing.T, r *l1Rec) {
			last := r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x10000, 4*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 64*kb),
			)
			eq(t, "last ts", r.l.LastTs(), last)
			r.l.FlushBefore(last) // its last CB is not before last: maybe more to come
			eq(t, "clashes too early", len(r.take(NoticeL1Clash)), 0)
			r.l.FlushBefore(last + 1)
			eq(t, "clashes", len(r.take(NoticeL1Clash)), 1)
			r.apply(evProgramDestroy(2, progP))
			eq(t, "checked once", len(r.take(NoticeL1Clash)), 1)
			if err := r.l.Check(); err != nil {
				t.Fatal(err)
			}
		}},
		{"the process's end runs a waiting check", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x10000, 4*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 64*kb),
				evExit(134, 0),
			)
			eq(t, "clashes", len(r.take(NoticeL1Clash)), 1)
		}},
		{"an L1 buffer under live CBs lowers headroom but is no clash", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 64*kb),
				evAlloc(2, 0xa0, 0, events.L1, 0x10000, 4*kb),
			)
			h, _ := headroomOf(t, r.rec, 0)
			eq(t, "headroom", h, -0x1000)
			eq(t, "notices", len(r.notes), 0)
		}},
		{"l1_headroom under the threshold, once until it recovers", 0x4000, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x40000, 4*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 64*kb), // headroom 0x2f000
				evAlloc(1, 0xa1, 0, events.L1, 0x14000, 4*kb), // 0x3000: warn
				evAlloc(1, 0xa2, 0, events.L1, 0x12000, 4*kb), // 0x1000: still under
			)
			w := r.take(NoticeL1Headroom)
			if len(w) != 1 {
				t.Fatalf("warnings %+v", w)
			}
			eq(t, "headroom", w[0].Headroom, 0x3000)
			eq(t, "lowest", w[0].Lowest.Buffer, "0xa1")
			eq(t, "warn", w[0].WarnBytes, 0x4000)
			eq(t, "seq", w[0].Seq, 4)
			r.apply(evFree(1, 0xa1, 0), evFree(1, 0xa2, 0)) // recovers
			r.apply(evAlloc(1, 0xa3, 0, events.L1, 0x12000, 4*kb))
			eq(t, "warnings", len(r.take(NoticeL1Headroom)), 2)
			eq(t, "stats", r.proc().Stats.L1HeadroomWarnings, 2)
			eq(t, "min", r.dev(0).MinL1Headroom.Value, 0x1000)
		}},
		{"a chip's close ends its headroom", 0, func(t *testing.T, r *l1Rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.L1, 0x40000, 4*kb),
				evCBLayout(2, progP, 0), evCB(2, 0, 0x1000, 4*kb),
				evDeviceClose(1, 0),
			)
			_, ok := headroomOf(t, r.rec, 0)
			eq(t, "headroom after close", ok, false)
			hs := r.l.L1Headroom(r.pid)
			eq(t, "accessor", len(hs), 1)
			eq(t, "accessor chip 0", hs[0].HasHeadroom, false)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newL1Rec(t, c.warn)
			c.run(t, r)
			for _, n := range r.notes {
				b, err := json.Marshal(&n)
				if err != nil {
					t.Fatal(err)
				}
				want := `{"type":"` + n.Type.String() + `"`
				if !strings.HasPrefix(string(b), want) {
					t.Errorf("notice JSON %s", b)
				}
			}
		})
	}
}

// TestL1HeadroomAccessor: what the live view shows, per chip.
func TestL1HeadroomAccessor(t *testing.T) {
	r := newRec(t)
	r.apply(
		evAlloc(1, 0xa0, 3, events.L1, 0x30000, 4096),
		evCBLayout(1, progP, 3), evCB(1, 3, 0x1000, 0x1000),
		evAlloc(1, 0xa1, 1, events.DRAM, 0x30000, 4096),
	)
	got := r.l.L1Headroom(r.pid)
	want := []Headroom{{Device: 1}, {Device: 3, HasHeadroom: true, Headroom: 0x2e000, LowestL1Address: 0x30000, CBRegionEnd: 0x2000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("L1Headroom = %+v, want %+v", got, want)
	}
	if r.l.L1Headroom(4242) != nil {
		t.Error("unknown pid")
	}
}

// L1 buffers, CB layouts and teardowns allocate nothing per event in a
// steady state (no notice fires: notices are rare and may allocate).
func TestL1BookkeepingAllocatesNothing(t *testing.T) {
	l := NewLedger(Options{Notices: NoticeFunc(func(*Notice) { t.Fatal("no notice expected") })})
	l.SetProcessInfo(1, ProcessInfo{})
	apply := func(e events.Event) {
		e.Pid = 1
		l.Apply(&e)
	}
	warm := func() {
		for i := uint64(0); i < 32; i++ {
			apply(evAlloc(10, 0x1000+i, int32(i%4), events.L1, 0x40000+i*0x1000, 4096))
			apply(evMeshAlloc(10, 0x9000+i, meshA, events.L1, 0x80000+i*0x1000, 512))
			for c := int32(0); c < 4; c++ {
				apply(evView(10, c, 0x80000+i*0x1000))
			}
			prog := progP + i%4
			apply(evCBLayout(11, prog, int32(i%4)))
			apply(evCB(11, int32(i%4), 0x1000, 8192))
			apply(evCB(11, int32(i%4), 0x3000, 4096))
			apply(evCBLayoutMesh(11, prog+8, meshA))
			for c := int32(0); c < 4; c++ {
				apply(evCB(11, c, 0x1000, 2048))
			}
			apply(evFree(10, 0x1000+i, int32(i%4)))
			apply(evMeshFree(10, 0x9000+i, meshA))
			apply(evCBTeardown(11, prog))
			apply(evCBFree(11, int32(i%4)))
			apply(evProgramDestroy(11, prog+8))
		}
	}
	warm()
	if n := testing.AllocsPerRun(20, warm); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestL1ClashAtEveryRun: TT-Metal validates a program's CB region each
// time the program is compiled for a run, also when its CBs are cached
// (allocate_circular_buffers tracks none). An L1 buffer allocated under
// the CBs of a program laid out earlier is no clash until the program
// runs again; then it is, at that run's cb_layout, on every chip of its
// target; a run with nothing in the way is none.
func TestL1ClashAtEveryRun(t *testing.T) {
	const mesh = 0x5500a0000000
	r := newL1Rec(t, 0)
	r.apply(
		evCBLayout(1, 0x9000, 0), evCB(1, 0, 0x10000, 0x3000), // CBs end at 0x13000
		evAlloc(1, 0xa0, 0, events.L1, 0x20000, 0x1000), // laid out: checked, no clash
		evAlloc(2, 0xa1, 0, events.L1, 0x12000, 0x1000), // under the CBs: no check now
	)
	if n := r.take(NoticeL1Clash); len(n) != 0 {
		t.Fatalf("clash before the program runs again: %+v", n)
	}
	if h, _ := headroomOf(t, r.rec, 0); h != -0x1000 {
		t.Fatalf("headroom %d", h)
	}
	// The program runs again: a cached layout, no CBs.
	r.apply(evCBLayout(1, 0x9000, 0), evFree(1, 0xa0, 0))
	n := r.take(NoticeL1Clash)
	if len(n) != 1 || n[0].Seq != 5 || n[0].Tid != 1 || n[0].Program != "0x9000" || n[0].CBRegionEnd != 0x13000 ||
		n[0].LowestL1Address != 0x12000 || n[0].Headroom != -0x1000 || way(n[0]) != "0xa1@0x12000+4096" {
		t.Fatalf("clash at the second run: %+v", n)
	}
	// The buffer goes; the next run clashes with nothing.
	r.apply(evFree(2, 0xa1, 0), evCBLayout(1, 0x9000, 0), evAlloc(1, 0xa2, 0, events.DRAM, 0, 64))
	if n := r.take(NoticeL1Clash); len(n) != 1 {
		t.Fatalf("a run with nothing in the way clashed: %+v", n)
	}
	// A new layout of the same program (CBs follow) is checked with its new CBs.
	r.apply(evAlloc(2, 0xa3, 0, events.L1, 0x11000, 0x1000), evCBLayout(1, 0x9000, 0), evCB(1, 0, 0x10000, 0x800), evFree(1, 0xa2, 0))
	if n := r.take(NoticeL1Clash); len(n) != 1 {
		t.Fatalf("a relayout below the buffer clashed: %+v", r.notes)
	}
	// A mesh program runs again: one clash per chip of the mesh.
	r.apply(evMeshAlloc(3, 0xb0, mesh, events.DRAM, 0x40, 4096), evView(3, 4, 0x40), evView(3, 5, 0x40),
		evCBLayoutMesh(3, 0x9100, mesh), evCBMesh(3, mesh, 0x10000, 0x4000), evFree(3, 0xb0, 4))
	r.apply(evMeshAlloc(3, 0xb1, mesh, events.L1, 0x12000, 4096), evView(3, 4, 0x12000), evView(3, 5, 0x12000))
	before := len(r.take(NoticeL1Clash))
	r.apply(evCBLayoutMesh(3, 0x9100, mesh), evExit(0, 0))
	clashes := r.take(NoticeL1Clash)[before:]
	if len(clashes) != 2 || clashes[0].Chip != 4 || clashes[1].Chip != 5 || clashes[0].CBRegionEnd != 0x14000 {
		t.Fatalf("mesh run: %+v", clashes)
	}
}
