package devices

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// l1CoreModel is a plain model of one chip's L1 per core, sharing no code
// with the ledger: the live lockstep buffers' spans by site, the per-core
// buffers' spans by bank and site, each core's resident CBs; after each
// step its total (the spans, the busiest bank's, the busiest core's CBs)
// and, at each new highest total, what held the busiest core by site and
// program.
type l1CoreModel struct {
	lock  map[uint64]l1CoreHold            // lockstep buffer -> its site and span
	pc    map[uint64]map[uint32]l1CoreHold // per-core buffer -> bank -> its site and span
	cores map[[2]uint16]l1CoreCB
	progs map[uint64]map[[2]uint16]l1CoreCB // what each program's dispatch writes
	now   l1CoreCB                          // the busiest core's CBs now
	peak  uint64
	// at the peak: bytes by "site type op" and the CB holder.
	sites map[string]uint64
	cb    l1CoreCB
}

type l1CoreHold struct {
	key  string // "site type op"
	span uint64
}

type l1CoreCB struct {
	prog  uint64
	op    string
	bytes uint64
}

func (m *l1CoreModel) settle() {
	var total uint64
	for _, h := range m.lock {
		total += h.span
	}
	banks := map[uint32]uint64{}
	for _, cores := range m.pc {
		for bank, h := range cores {
			banks[bank] += h.span
		}
	}
	var bank uint32
	var pcMost uint64
	for b, n := range banks {
		if n > pcMost || n == pcMost && b < bank {
			bank, pcMost = b, n
		}
	}
	var core [2]uint16
	var cb l1CoreCB
	for xy, r := range m.cores {
		if r.bytes > cb.bytes || r.bytes == cb.bytes && r.bytes > 0 && (xy[0] < core[0] || xy[0] == core[0] && xy[1] < core[1]) {
			core, cb = xy, r
		}
	}
	total += pcMost + cb.bytes
	m.now = cb
	if total <= m.peak {
		return
	}
	m.peak, m.cb = total, cb
	m.sites = map[string]uint64{}
	for _, h := range m.lock {
		m.sites[h.key] += h.span
	}
	if pcMost > 0 {
		for _, cores := range m.pc {
			if h, ok := cores[bank]; ok {
				m.sites[h.key] += h.span
			}
		}
	}
}

// TestL1CorePeakSites: what filled the busiest core at the peak of L1 per
// core, by site (SiteUsage.L1CorePeakBytes) and program
// (peak_l1_busiest_core's program, op and cb_bytes), against l1CoreModel
// over a chip's life: lockstep L1 and L1_SMALL buffers of sites in and out
// of ops, a program laid out in an op and dispatched, per-core buffers on
// two banks, a lockstep buffer freed (its site holds nothing at the later
// peak), a larger program laid out in no op, then changes below the peak
// that must not move it. The rows and the CBs sum to the peak's total.
func TestL1CorePeakSites(t *testing.T) {
	r := newRecWith(t, Options{SiteUsage: true})
	m := &l1CoreModel{lock: map[uint64]l1CoreHold{}, pc: map[uint64]map[uint32]l1CoreHold{}, cores: map[[2]uint16]l1CoreCB{},
		progs: map[uint64]map[[2]uint16]l1CoreCB{}}
	matmul := events.OpNames.Intern("ttnn.matmul")
	conv := events.OpNames.Intern("ttnn.conv2d")
	top := uint64(l1Base + l1Bank)
	r.apply(n150Caps(1, 0)...)

	// lockstep allocates a lockstep buffer of span bytes per bank (64
	// banks) at addr.
	lockstep := func(buf uint64, t events.BufferType, mgr, addr, span uint64, site uint32, op uint32) {
		a := evAllocPage(1, buf, 1, t, addr, 64*span, span)
		a.Site, a.Op, a.OpDepth = site, op, 1
		if op == 0 {
			a.OpDepth = 0
		}
		r.apply(evReq(1, mgr, 64*span, span, false), a)
		m.lock[buf] = l1CoreHold{fmt.Sprintf("%d %s %s", site, t, events.OpNames.Name(op)), span}
		m.settle()
	}
	// perCore allocates a per-core buffer of 2048 B on each bank of banks.
	perCore := func(buf, addr uint64, site uint32, op uint32, banks ...uint32) {
		for _, b := range banks {
			q := evReq(1, mgrL1, 2048, 2048, false)
			q.Shards, q.AllocatorID = 1, b+1
			r.apply(q)
		}
		a := evAllocPage(1, buf, 1, events.L1, addr, 2048*uint64(len(banks)), 2048)
		a.Site, a.Op, a.OpDepth = site, op, 1
		r.apply(a)
		m.pc[buf] = map[uint32]l1CoreHold{}
		for _, b := range banks {
			m.pc[buf][b] = l1CoreHold{fmt.Sprintf("%d L1 %s", site, events.OpNames.Name(op)), 2048}
		}
		m.settle()
	}
	// dispatch dispatches program prog: the cores of its CBs hold them.
	dispatch := func(prog uint64) {
		r.apply(devicestest.Dispatch(1, prog, 1))
		maps.Copy(m.cores, m.progs[prog])
		m.settle()
	}
	// program lays program prog out in op (its CBs: addr, size, core
	// range) and dispatches it.
	type cbSpec struct {
		addr, size uint64
		rng        [4]uint16
	}
	program := func(prog uint64, op uint32, cbs ...cbSpec) {
		r.apply(devicestest.CBLayout(1, prog, 1))
		for _, c := range cbs {
			e := devicestest.CBOn(1, 1, c.addr, c.size, c.rng)
			e.Op, e.OpDepth = op, 1
			if op == 0 {
				e.OpDepth = 0
			}
			r.apply(e)
		}
		// Per core: the union of its CBs' [addr, addr+size).
		spans := map[[2]uint16][][2]uint64{}
		for _, c := range cbs {
			for x := c.rng[0]; x <= c.rng[2]; x++ {
				for y := c.rng[1]; y <= c.rng[3]; y++ {
					spans[[2]uint16{x, y}] = append(spans[[2]uint16{x, y}], [2]uint64{c.addr, c.addr + c.size})
				}
			}
		}
		for xy, ss := range spans {
			var bytes uint64
			for a := uint64(0); a < 0x20000; a++ { // byte by byte: no cleverness
				for _, s := range ss {
					if a >= s[0] && a < s[1] {
						bytes++
						break
					}
				}
			}
			if m.progs[prog] == nil {
				m.progs[prog] = map[[2]uint16]l1CoreCB{}
			}
			m.progs[prog][xy] = l1CoreCB{prog, events.OpNames.Name(op), bytes}
		}
		dispatch(prog)
	}
	free := func(buf uint64) {
		r.apply(evFree(1, buf, 1))
		delete(m.lock, buf)
		delete(m.pc, buf)
		m.settle()
	}

	lockstep(0xa1, events.L1, mgrL1, top-4096, 4096, 11, matmul)
	lockstep(0xa2, events.L1Small, mgrL1Small, top+0x8000-1024, 1024, 12, 0)
	program(0x100, conv, cbSpec{0x1000, 8192, [4]uint16{0, 0, 3, 3}}, cbSpec{0x2800, 4096, [4]uint16{2, 2, 2, 2}})
	perCore(0xb1, top-4096-2048, 13, matmul, 0)
	perCore(0xb2, top-4096-4096, 13, matmul, 0, 1)
	free(0xa1)
	program(0x200, 0, cbSpec{0x1000, 20000, [4]uint16{5, 5, 5, 5}}, cbSpec{0x3000, 100, [4]uint16{5, 5, 6, 6}})
	// Below the peak from here.
	free(0xb2)
	lockstep(0xa3, events.L1, mgrL1, l1Base+0x10000, 1024, 14, conv)
	dispatch(0x100) // (0,0)-(3,3) hold its CBs again

	d := r.dev(1)
	pk := d.PeakL1BusiestCore
	if pk == nil || pk.TotalBytes != m.peak {
		t.Fatalf("peak_l1_busiest_core %+v, the model's peak %d", pk, m.peak)
	}
	if m.cb.prog == 0 || len(m.sites) < 2 || m.sites["11 L1 ttnn.matmul"] != 0 {
		t.Fatalf("the model's peak %d: %v, %+v: not the chip's life this test means", m.peak, m.sites, m.cb)
	}
	op := ""
	if pk.Op != nil {
		op = pk.Op.Name
	}
	if pk.CBBytes != m.cb.bytes || pk.Program != hex(m.cb.prog) || op != m.cb.op {
		t.Errorf("peak CBs: %d B of program %s op %q; the model: %d B of %#x op %q", pk.CBBytes, pk.Program, op, m.cb.bytes, m.cb.prog, m.cb.op)
	}
	got := map[string]uint64{}
	sum := pk.CBBytes
	for _, u := range r.proc().SiteUsage {
		if u.Device != 1 || u.L1CorePeakBytes == 0 {
			continue
		}
		name := ""
		if u.Op != nil {
			name = u.Op.Name
		}
		got[fmt.Sprintf("%d %s %s", u.Site, u.Type, name)] += u.L1CorePeakBytes
		sum += u.L1CorePeakBytes
	}
	want := map[string]uint64{}
	for k, v := range m.sites {
		if v != 0 {
			want[k] = v
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("sites at the peak %v, the model's %v", got, want)
	}
	if sum != pk.TotalBytes {
		t.Errorf("sites and CBs at the peak sum to %d, the peak is %d", sum, pk.TotalBytes)
	}
	// Now: the busiest core's program.
	now, nowOp := d.L1BusiestCore, ""
	if now != nil && now.Op != nil {
		nowOp = now.Op.Name
	}
	if now == nil || now.CBBytes != m.now.bytes || now.Program != hex(m.now.prog) || nowOp != m.now.op {
		t.Errorf("l1_busiest_core now %+v, the model's busiest core holds %+v", now, m.now)
	}
}
