package devices

import "github.com/tttrace/tttrace/events"

// L1 per core (docs/ttmetal.md §12): what one worker core's L1 holds, and
// the chip's busiest core.
//
// Every compute-and-storage core of a chip is one L1 bank (and one
// L1_SMALL bank), all at offset 0 (upstream l1_banking_allocator.cpp), so
// a lockstep L1 or L1_SMALL buffer reserves its span per bank at the same
// address on every core: the lockstep bytes of a core are the spans of
// the chip's live lockstep buffers (its own and its meshes'), the same on
// every core. A per-core (HYBRID) buffer holds its span only on the core
// of each bank it was given (percore.go). Resident CBs are per core
// (resident.go). A core's L1 is the three together.
//
// The core of a bank is not seen: upstream numbers a chip's banks over
// its cores in an order shuffled at the allocator's making. So per-core
// buffers are known by bank, CBs by core, and the busiest core is exact
// when a chip has only one of the two: with both, its total is the sum of
// the busiest bank's and the busiest core's (an upper bound, said so).
//
// Everything is kept incrementally: the lockstep spans as running sums
// (core.charge, releaseBuffer, a mesh's chips joining or leaving), the
// busiest bank recomputed only when a per-core buffer comes or goes, the
// busiest CB core by resident.go; after each event the chips whose L1
// side changed (l1dirty) compare their total with their peak: O(1) each.

// l1Core is one chip's L1 per core.
type l1Core struct {
	// lock: the spans per bank of the live lockstep L1 and L1_SMALL
	// buffers charged on the chip; noSpan: of them, those whose span is
	// not known (no allocate_buffer record), not in lock.
	lock   uint64
	noSpan uint64
	// perCore: per bank, the spans of the live per-core buffers there;
	// pcMax at pcBank is the largest.
	perCore map[uint32]uint64
	pcMax   uint64
	pcBank  uint32
	// pcLive: the chip's live per-core buffers; pcLow: the lowest block of
	// them at a known address (pcHas), pcUnknown: some have cores at
	// unknown addresses; recomputed when pcStale (l1range.go).
	pcLive                    int
	pcLow                     uint64
	pcHas, pcUnknown, pcStale bool
	// peak: the busiest core when its total was highest.
	peak    l1Snap
	hasPeak bool
}

// l1Snap is a chip's busiest core at one moment.
type l1Snap struct {
	lock, pc, cb uint64
	noSpan       uint64
	xy           coreXY
	bank         uint32
	hasCore      bool // cb > 0: xy is the busiest CB core
	hasBank      bool // pc > 0: bank is the busiest per-core bank
	ts           uint64
	// prog, op: the program whose CBs xy holds and the op row + 1 they
	// were laid out in (cbHolder; hasCore only).
	prog uint64
	op   uint16
}

func (s *l1Snap) total() uint64 { return s.lock + s.pc + s.cb }

// l1Lockstep reports whether live buffer b holds a lockstep span per bank
// on each core of its chips.
func l1Lockstep(b *bufEntry) bool {
	t := events.BufferType(b.btype)
	return (t == events.L1 || t == events.L1Small) && !b.perCore
}

// lockSpan is what live buffer b holds on each core of its chips as a
// lockstep buffer: its span per bank; 0 for other buffers and for a span
// not known (per-site accounting: sitetab.go).
func lockSpan(b *bufEntry) uint64 {
	if l1Lockstep(b) {
		return b.span
	}
	return 0
}

// l1Span adds (or takes away) lockstep buffer b's span on chip c.
func (p *core) l1Span(c *chipState, b *bufEntry, add bool) {
	if !l1Lockstep(b) {
		return
	}
	v, n := &c.l1c.lock, b.span
	if b.span == 0 {
		v, n = &c.l1c.noSpan, 1
	}
	if add {
		*v += n
	} else if *v >= n {
		*v -= n
	} else {
		*v = 0
	}
	p.touchL1(c)
}

// setSpan gives live buffer idx (b), charged on chip c alone, the span
// per bank its allocator's list, read from memory, holds for it: L1 per
// core and its site's spans move from what was charged (l1dirty settles
// them at the next event).
func (p *core) setSpan(c *chipState, idx uint32, b *bufEntry, span uint64) {
	if !l1Lockstep(b) || b.span == span {
		b.span = span
		return
	}
	p.l1Span(c, b, false)
	c.sites.respan(siteKey{b.site, b.btype, p.ops.bufOf(idx)}, b.span, span)
	b.span = span
	p.l1Span(c, b, true)
}

// meshL1Span keeps mesh m's lockstep spans, which its chips carry.
func (m *meshState) meshL1Span(b *bufEntry, add bool) {
	if !l1Lockstep(b) {
		return
	}
	v, n := &m.l1Lock, b.span
	if b.span == 0 {
		v, n = &m.l1NoSpan, 1
	}
	if add {
		*v += n
	} else if *v >= n {
		*v -= n
	}
}

// meshL1Move moves mesh m's lockstep spans onto chip c (join) or off it.
func (p *core) meshL1Move(m *meshState, c *chipState, join bool) {
	if join {
		c.l1c.lock += m.l1Lock
		c.l1c.noSpan += m.l1NoSpan
	} else {
		c.l1c.lock -= min(c.l1c.lock, m.l1Lock)
		c.l1c.noSpan -= min(c.l1c.noSpan, m.l1NoSpan)
	}
	p.touchL1(c)
}

// perCoreAdd adds (or takes away) span bytes of a per-core buffer on bank.
func (p *core) perCoreAdd(c *chipState, bank uint32, span uint64, add bool) {
	lc := &c.l1c
	if lc.perCore == nil {
		lc.perCore = map[uint32]uint64{}
	}
	v := lc.perCore[bank]
	switch {
	case add:
		v += span
	case v > span:
		v -= span
	default:
		v = 0
	}
	if v == 0 {
		delete(lc.perCore, bank)
	} else {
		lc.perCore[bank] = v
	}
	switch {
	case add && (v > lc.pcMax || v == lc.pcMax && bank < lc.pcBank):
		lc.pcMax, lc.pcBank = v, bank
	case !add && bank == lc.pcBank:
		// The busiest lost bytes: find it again (rare: per-core frees).
		lc.pcMax, lc.pcBank = 0, 0
		for k, n := range lc.perCore {
			if n > lc.pcMax || n == lc.pcMax && k < lc.pcBank {
				lc.pcMax, lc.pcBank = n, k
			}
		}
	}
	p.touchL1(c)
}

// l1Now is chip c's busiest core now.
func (c *chipState) l1Now(ts uint64) l1Snap {
	s := l1Snap{lock: c.l1c.lock, noSpan: c.l1c.noSpan, pc: c.l1c.pcMax, cb: c.cores.max, ts: ts}
	if s.cb > 0 {
		s.xy, s.hasCore = c.cores.busiest, true
	}
	if s.pc > 0 {
		s.bank, s.hasBank = c.l1c.pcBank, true
	}
	return s
}

// cbHolder fills in s the program whose CBs its busiest CB core holds.
func (c *chipState) cbHolder(s *l1Snap) {
	if s.hasCore {
		r := c.cores.cores[s.xy]
		s.prog, s.op = r.prog, r.op
	}
}

// l1Settle sets chip c's L1 per core counter and keeps its peak, with
// what each site and program held on the busiest core then (sitetab.go),
// after event e changed its L1 side.
func (p *core) l1Settle(c *chipState, e *events.Event) {
	s := c.l1Now(e.TsNs)
	t := s.total()
	p.setTo(c, CounterL1Core, t, e)
	if t > 0 && (!c.l1c.hasPeak || t > c.l1c.peak.total()) {
		c.cbHolder(&s)
		c.l1c.peak, c.l1c.hasPeak = s, true
		c.sites.l1CorePeak(&s)
	}
}

// l1Clear empties chip c's L1 per core (its close); the peak stays.
func (c *chipState) l1Clear() {
	c.l1c.lock, c.l1c.noSpan, c.l1c.pcMax, c.l1c.pcBank = 0, 0, 0, 0
	clear(c.l1c.perCore)
	c.l1c.pcLive, c.l1c.pcStale = 0, true
	c.sites.l1CoreClear()
}

// l1Size is a core's L1 size, from the chip's L1 and L1_SMALL bank
// managers: the L1 manager's base and bank size (the region below its
// base is reserved, the CBs' among it) and the L1_SMALL region above; 0
// when the L1 manager was not seen.
func (c *chipState) l1Size() uint64 {
	ta := c.alloc.typeOf(events.L1)
	if ta == nil || ta.cfg.BankSize == 0 {
		return 0
	}
	n := ta.cfg.Offset + ta.cfg.BankSize
	if s := c.alloc.typeOf(events.L1Small); s != nil && s.cfg.Offset == n {
		n += s.cfg.BankSize
	}
	return n
}

// L1Core is a chip's busiest core in the summary (l1_busiest_core and
// peak_l1_busiest_core): the core whose L1 holds the most, what holds it,
// and its L1 size.
type L1Core struct {
	// Core: its [x, y] (logical worker coordinates), the core holding
	// the most resident CBs; null when no CB is resident (every core then
	// holds the same lockstep buffers, or the per-core ones of Bank).
	Core *[2]uint16 `json:"core"`
	// Bank: the L1 bank holding the most per-core (HYBRID) buffer bytes;
	// absent when none is live. Upstream does not say which core a bank
	// is (its bank ids are shuffled over the cores).
	Bank *uint32 `json:"bank,omitempty"`
	// L1BufferBytes: the lockstep L1 and L1_SMALL spans per bank of the
	// chip's live buffers (on every core) plus Bank's per-core spans;
	// CBBytes: Core's resident CB bytes; TotalBytes their sum.
	L1BufferBytes uint64 `json:"l1_buffer_bytes"`
	CBBytes       uint64 `json:"cb_bytes"`
	TotalBytes    uint64 `json:"total_bytes"`
	// L1Size: a core's L1 (the L1 manager's base and bank size and the
	// L1_SMALL region); null when the chip's L1 bank manager was not seen
	// made.
	L1Size *uint64 `json:"l1_size"`
	// UpperBound: Core and Bank may be two cores; TotalBytes adds what
	// each holds, the most one core can.
	UpperBound bool `json:"upper_bound,omitempty"`
	// SpansUnknown: live lockstep L1/L1_SMALL buffers whose span per bank
	// is not known (no allocate_buffer record), not in L1BufferBytes.
	SpansUnknown uint64 `json:"spans_unknown,omitempty"`
	// TsNs: when (peak_l1_busiest_core only).
	TsNs uint64 `json:"ts_ns,omitempty"`
	// Program: the ProgramImpl* (hex) whose CBs Core holds (the program
	// last dispatched there, or the one a replayed trace's capture
	// dispatched there); Op: the TT-NN op its CBs were laid out in.
	// Absent without CBs (Op: or when laid out in no op).
	Program string `json:"program,omitempty"`
	Op      *OpRef `json:"op,omitempty"`
}

// l1CoreOf is s as the summary shows it (ops names its op).
func (c *chipState) l1CoreOf(s l1Snap, peak bool, ops *opTab) *L1Core {
	out := &L1Core{L1BufferBytes: s.lock + s.pc, CBBytes: s.cb, TotalBytes: s.total(),
		UpperBound: s.hasCore && s.hasBank, SpansUnknown: s.noSpan}
	if s.hasCore {
		out.Core = &[2]uint16{s.xy.x, s.xy.y}
		out.Program, out.Op = hex(s.prog), ops.ref(s.op)
	}
	if s.hasBank {
		b := s.bank
		out.Bank = &b
	}
	if n := c.l1Size(); n != 0 {
		out.L1Size = &n
	}
	if peak {
		out.TsNs = s.ts
	}
	return out
}

// l1Summary is chip c's l1_busiest_core and peak_l1_busiest_core (nil
// while its L1 held nothing known), ops naming their programs' ops.
func (c *chipState) l1Summary(ops *opTab) (now, peak *L1Core) {
	if s := c.l1Now(0); s.total() > 0 || s.noSpan > 0 {
		c.cbHolder(&s)
		now = c.l1CoreOf(s, false, ops)
	}
	if c.l1c.hasPeak {
		peak = c.l1CoreOf(c.l1c.peak, true, ops)
	}
	return now, peak
}
