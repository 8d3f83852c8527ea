package devices

import (
	"errors"
	"fmt"

	"github.com/tttrace/tttrace/events"
)

// checkLimit: no total may reach it. Sizes are bounded by maxSize, so only
// a wrapped subtraction could.
const checkLimit = 1 << 62

// Check recomputes every total from the live entries (buffers, mesh chip
// sets, CB groups) and reports any disagreement with the running totals,
// a total near uint64 wrap, a peak below its current value, or an
// internal accounting anomaly. It is O(live entries) and allocates: for
// the ledger's tests (other packages' tests use devices/ledgertest, which
// sees only the summary).
func (l *Ledger) Check() error {
	var errs []error
	for _, pid := range l.Processes() {
		if err := l.procs[pid].check(); err != nil {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// checker recomputes one process's totals from its live entries.
type checker struct {
	p       *proc
	errs    []error
	want    map[int32]*Totals // per chip, recomputed
	meshTot []Totals          // per mesh index, recomputed
	held    uint64            // every live buffer and CB group, once
}

func (p *proc) check() error {
	c := &checker{p: p, want: make(map[int32]*Totals), meshTot: make([]Totals, len(p.meshes))}
	c.buffers()
	c.programs()
	c.meshes()
	c.chips()
	c.l1()
	c.allocators()
	c.l1PerCore()
	if c.held != p.held || p.held > maxHeld {
		c.bad("held %d bytes, recomputed %d (at most %d)", p.held, c.held, uint64(maxHeld))
	}
	if n := p.anomalies.counts[anAccounting]; n != 0 {
		c.bad("%d internal accounting errors", n)
	}
	if p.unknownFreeBytes >= checkLimit {
		c.bad("unknown_free_bytes %d near wrap-around", p.unknownFreeBytes)
	}
	return errors.Join(c.errs...)
}

func (c *checker) bad(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// at is chip id's recomputed totals.
func (c *checker) at(id int32) *Totals {
	w := c.want[id]
	if w == nil {
		w = new(Totals)
		c.want[id] = w
	}
	return w
}

// buffers checks the slot table and its index, and charges every live
// buffer to its chip or mesh.
func (c *checker) buffers() {
	t := &c.p.bufs
	live, free, indexed := 0, 0, 0
	defer func() {
		if t.index.n != indexed {
			c.bad("index holds %d keys, %d live buffers are unmarked", t.index.n, indexed)
		}
	}()
	for i := range t.slots.len() {
		b := t.slots.at(uint32(i))
		if !b.live {
			free++
			continue
		}
		live++
		if idx, ok := t.index.get(b.key, &t.slots); b.marked {
			if ok && idx == uint32(i) {
				c.bad("slot %d (buffer %#x): marked but still indexed", i, b.key)
			}
		} else {
			indexed++
			if !ok || idx != uint32(i) {
				c.bad("slot %d (buffer %#x) not indexed (index says %d, %v)", i, b.key, idx, ok)
			}
			if st, ended := t.ended[b.key]; ended {
				c.bad("slot %d (buffer %#x): live, and also ended (%#x)", i, b.key, st)
			}
		}
		if Counter(b.btype) >= CounterCB || b.size == 0 || b.size > maxSize {
			c.bad("slot %d: type %d size %d", i, b.btype, b.size)
			continue
		}
		c.held += b.size
		if b.mesh == 0 {
			w := c.at(b.chip)
			w[b.btype] += b.size
			w[CounterLiveBuffers]++
			continue
		}
		if int(b.mesh) >= len(c.p.meshes) || c.p.meshes[b.mesh] == nil {
			c.bad("buffer %#x: mesh %d is gone", b.key, b.mesh)
			continue
		}
		c.meshTot[b.mesh][b.btype] += b.size
		c.meshTot[b.mesh][CounterLiveBuffers]++
	}
	// The free list, threaded through the free slots: each free slot once.
	listed := 0
	for next := t.freeHead; next != 0; listed++ {
		if listed > t.slots.len() || int(next-1) >= t.slots.len() || t.slots.at(next-1).live {
			c.bad("free list: slot %d after %d free slots is not a free slot (or the list loops)", int(next)-1, listed)
			break
		}
		next = t.slots.at(next - 1).hpos
	}
	if live != t.live || free != listed {
		c.bad("%d live and %d free slots, table says %d live and %d free", live, free, t.live, listed)
	}
	for i, r := range t.index.buckets {
		if r == 0 {
			continue
		}
		if int(r-1) >= t.slots.len() || !t.slots.at(r-1).live || t.slots.at(r-1).marked {
			c.bad("index bucket %d -> slot %d, not a live unmarked buffer", i, r-1)
			continue
		}
		if idx, ok := t.index.get(t.slots.at(r-1).key, &t.slots); !ok || idx != r-1 {
			c.bad("index bucket %d -> slot %d, which a look-up of its key does not find", i, r-1)
		}
	}
	for key, st := range t.ended {
		if st != slotFreed && st != slotReleased {
			c.bad("ended key %#x: state %#x", key, st)
		}
	}
}

// programs charges every CB group to its chip or mesh.
func (c *checker) programs() {
	for prog, pc := range c.p.l1.progs {
		if len(pc.groups) == 0 {
			c.bad("program %#x kept with no CB group", prog)
		}
		for i, g := range pc.groups {
			for _, h := range pc.groups[:i] {
				if h.mesh == g.mesh && h.chip == g.chip {
					c.bad("program %#x: two CB groups for one target", prog)
				}
			}
			c.held += g.bytes
			if g.mesh == 0 {
				c.at(g.chip)[CounterCBRegistered] += g.bytes
				continue
			}
			if int(g.mesh) >= len(c.p.meshes) || c.p.meshes[g.mesh] == nil {
				c.bad("program %#x: CB group of a gone mesh %d", prog, g.mesh)
				continue
			}
			c.meshTot[g.mesh][CounterCBRegistered] += g.bytes
		}
	}
}

// meshes compares each mesh's running totals with the recomputed ones and
// charges them to the mesh's chips.
func (c *checker) meshes() {
	for i, m := range c.p.meshes {
		if m == nil {
			continue
		}
		if i == 0 {
			c.bad("mesh index 0 is in use")
			continue
		}
		if m.tot != c.meshTot[i] {
			c.bad("mesh %#x: totals %v, recomputed %v", m.ptr, m.tot, c.meshTot[i])
		}
		if idx, ok := c.p.meshIdx[m.ptr]; !ok || idx != uint32(i) {
			c.bad("mesh %#x not indexed", m.ptr)
		}
		for j, id := range m.chips {
			for _, other := range m.chips[:j] {
				if other == id {
					c.bad("mesh %#x lists chip %d twice", m.ptr, id)
				}
			}
			if c.p.chips[id] == nil {
				c.bad("mesh %#x: chip %d not touched", m.ptr, id)
			}
			w := c.at(id)
			for k, v := range c.meshTot[i] {
				w[k] += v
			}
		}
	}
}

// chips compares each chip's running totals and peaks with the recomputed
// totals.
func (c *checker) chips() {
	for id, w := range c.want {
		if c.p.chips[id] == nil && *w != (Totals{}) {
			c.bad("chip %d holds %v but is not touched", id, *w)
		}
	}
	for id, ch := range c.p.chips {
		var w Totals
		if x := c.want[id]; x != nil {
			w = *x
		}
		// What is resident: the busiest core's bytes and the sum over cores.
		var most, total uint64
		for _, r := range ch.cores.cores {
			most = max(most, r.bytes)
			total += r.bytes
		}
		if ch.cores.max != most || ch.cores.total != total {
			c.bad("chip %d: resident max %d total %d, recomputed %d and %d", id, ch.cores.max, ch.cores.total, most, total)
		}
		w[CounterCB], w[CounterCBResidentTotal] = most, total
		// L1 per core, once settled (at the end of each event; an
		// allocator read from memory may move it in between): its parts
		// are checked from the buffers (l1PerCore).
		w[CounterL1Core] = ch.cur[CounterL1Core]
		if now := ch.l1Now(0); !ch.hr.dirty {
			w[CounterL1Core] = now.total()
		}
		if ch.cur != w {
			c.bad("chip %d: totals %v, recomputed %v", id, ch.cur, w)
		}
		for k := range ch.cur {
			if ch.cur[k] >= checkLimit || ch.peak[k] >= checkLimit {
				c.bad("chip %d %s: %d (peak %d) near wrap-around", id, counterNames[k], ch.cur[k], ch.peak[k])
			}
			if ch.peak[k] < ch.cur[k] {
				c.bad("chip %d %s: peak %d below current %d", id, counterNames[k], ch.peak[k], ch.cur[k])
			}
		}
		if ch.closed && ch.cur != (Totals{}) {
			c.bad("chip %d closed but holds %v", id, ch.cur)
		}
	}
}

// l1 checks the L1 heaps (every live lockstep L1 buffer in its target's
// heap, at its position, nothing else, the heap order), the CB ends (a fresh one is
// the highest end of its target's groups), each chip's headroom against
// a recomputation from scratch, and the count of waiting clash checks.
func (c *checker) l1() {
	p := c.p
	s := &p.bufs.slots
	heapOf := func(b *bufEntry) *l1Heap {
		if b.mesh == 0 {
			if ch := p.chips[b.chip]; ch != nil {
				return &ch.l1
			}
			return nil
		}
		if int(b.mesh) < len(p.meshes) && p.meshes[b.mesh] != nil {
			return &p.meshes[b.mesh].l1
		}
		return nil
	}
	inHeaps := 0
	for i := range s.len() {
		b := s.at(uint32(i))
		if !b.live || b.btype != uint8(CounterL1) || b.perCore {
			continue
		}
		h := heapOf(b)
		if h == nil || int(b.hpos) >= len(h.h) || h.h[b.hpos] != uint32(i) {
			c.bad("L1 buffer %#x (slot %d) not at its heap position %d", b.key, i, b.hpos)
		}
	}
	heaps := []*l1Heap{}
	for _, ch := range p.chips {
		heaps = append(heaps, &ch.l1)
	}
	for _, m := range p.meshes {
		if m != nil {
			heaps = append(heaps, &m.l1)
		}
	}
	for _, h := range heaps {
		inHeaps += len(h.h)
		for j, idx := range h.h {
			if int(idx) >= s.len() || !s.at(idx).live || s.at(idx).btype != uint8(CounterL1) || s.at(idx).perCore || heapOf(s.at(idx)) != h {
				c.bad("L1 heap holds slot %d, not a live L1 buffer of its target", idx)
				continue
			}
			if j > 0 && l1Less(s, idx, h.h[(j-1)/2]) {
				c.bad("L1 heap order broken at %d", j)
			}
		}
	}
	live := 0
	for i := range s.len() {
		if b := s.at(uint32(i)); b.live && b.btype == uint8(CounterL1) && !b.perCore {
			live++
		}
	}
	if live != inHeaps {
		c.bad("%d live L1 buffers, %d in the heaps", live, inHeaps)
	}

	// Highest CB end per target, recomputed.
	chipEnd := map[int32]uint64{}
	meshEnd := make([]uint64, len(p.meshes))
	for _, pc := range p.l1.progs {
		for _, g := range pc.groups {
			if g.mesh == 0 {
				chipEnd[g.chip] = max(chipEnd[g.chip], g.end)
			} else if int(g.mesh) < len(meshEnd) {
				meshEnd[g.mesh] = max(meshEnd[g.mesh], g.end)
			}
		}
	}
	for id, ch := range p.chips {
		if !ch.cbEnd.stale && ch.cbEnd.end != chipEnd[id] {
			c.bad("chip %d: CB end %d, recomputed %d", id, ch.cbEnd.end, chipEnd[id])
		}
	}
	for i, m := range p.meshes {
		if m != nil && !m.cbEnd.stale && m.cbEnd.end != meshEnd[i] {
			c.bad("mesh %#x: CB end %d, recomputed %d", m.ptr, m.cbEnd.end, meshEnd[i])
		}
	}

	// Headroom per chip, from scratch.
	for id, ch := range p.chips {
		var low uint64
		hasLow := false
		end := chipEnd[id]
		for i := range s.len() {
			b := s.at(uint32(i))
			if !b.live || b.btype != uint8(CounterL1) || b.perCore {
				continue
			}
			on := b.mesh == 0 && b.chip == id
			if b.mesh != 0 && int(b.mesh) < len(p.meshes) && p.meshes[b.mesh] != nil {
				on = p.meshes[b.mesh].has(id)
			}
			if on && (!hasLow || b.addr < low) {
				low, hasLow = b.addr, true
			}
		}
		for i, m := range p.meshes {
			if m != nil && m.has(id) {
				end = max(end, meshEnd[i])
			}
		}
		has := hasLow && end != 0
		hr := &ch.hr
		if hr.has != has || has && (hr.low != low || hr.end != end || hr.cur != int64(low)-int64(end)) {
			c.bad("chip %d: headroom %v %d (L1 %d, CB end %d), recomputed %v (L1 %d, CB end %d)",
				id, hr.has, hr.cur, hr.low, hr.end, has, low, end)
		}
		if has && (!hr.minHas || hr.min > hr.cur) {
			c.bad("chip %d: min headroom %d above current %d", id, hr.min, hr.cur)
		}
		if hr.dirty {
			c.bad("chip %d: headroom left dirty", id)
		}
	}
	n := 0
	for _, t := range p.threads {
		if t.checkPending {
			n++
		}
	}
	if n != p.l1.nchecks {
		c.bad("%d threads wait for a clash check, count says %d", n, p.l1.nchecks)
	}
}

// allocators checks every exact bank manager against the live buffers: the
// spans of a chip's own buffers are what it holds, a mesh's buffers what
// its mesh's allocator holds; the per-core ones are counted apart; requests
// wait on as many threads as nreqs says.
func (c *checker) allocators() {
	p := c.p
	type sums struct{ spans, n, perCore, perCoreBytes uint64 }
	var want map[int32]*[events.NumBufferTypes]sums
	meshWant := map[uint32]*[events.NumBufferTypes]sums{}
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || !allocatable(events.BufferType(b.btype)) {
			continue
		}
		if b.mesh != 0 {
			w := meshWant[b.mesh]
			if w == nil {
				w = new([events.NumBufferTypes]sums)
				meshWant[b.mesh] = w
			}
			if b.span != 0 {
				w[b.btype].spans += b.span
				w[b.btype].n++
			}
			continue
		}
		p.allocs.forChips(b, func(cs *chipState) {
			if cs.alloc == nil {
				return
			}
			if want == nil {
				want = map[int32]*[events.NumBufferTypes]sums{}
			}
			w := want[cs.id]
			if w == nil {
				w = new([events.NumBufferTypes]sums)
				want[cs.id] = w
			}
			s := &w[b.btype]
			if b.perCore {
				s.perCore++
				s.perCoreBytes += b.size
				return
			}
			s.spans += b.span
			s.n++
		})
	}
	for id, cs := range p.chips {
		if cs.alloc == nil {
			continue
		}
		for _, t := range allocTypes {
			ta := cs.alloc.types[t]
			if ta == nil {
				continue
			}
			var s sums
			if w := want[id]; w != nil {
				s = w[t]
			}
			if s.perCore != ta.perCore || s.perCoreBytes != ta.perCoreBytes {
				c.bad("chip %d %s: %d per-core buffers (%d bytes), recomputed %d (%d)", id, t, ta.perCore, ta.perCoreBytes, s.perCore, s.perCoreBytes)
			}
			if !ta.exact() {
				continue
			}
			st := ta.m.Stats()
			if ta.mem != nil {
				// Read from memory: the list also holds what was allocated
				// before the attach, which the ledger never saw.
				if st.TotalAllocated < s.spans || uint64(ta.m.Live()) < s.n {
					c.bad("chip %d %s: allocator read from memory holds %d bytes in %d blocks, fewer than live buffers %d in %d", id, t, st.TotalAllocated, ta.m.Live(), s.spans, s.n)
				}
				continue
			}
			if st.TotalAllocated != s.spans || uint64(ta.m.Live()) != s.n {
				c.bad("chip %d %s: allocator holds %d bytes in %d blocks, live buffers %d in %d", id, t, st.TotalAllocated, ta.m.Live(), s.spans, s.n)
			}
		}
	}
	for idx, m := range p.meshes {
		if m == nil || m.alloc == nil {
			continue
		}
		if m.alloc.meshIdx != uint32(idx) || m.alloc.meshPtr != m.ptr {
			c.bad("mesh %#x: its allocator is tied to mesh %#x (index %d)", m.ptr, m.alloc.meshPtr, m.alloc.meshIdx)
		}
		for _, t := range allocTypes {
			ta := m.alloc.types[t]
			if !ta.exact() {
				continue
			}
			var s sums
			if w := meshWant[uint32(idx)]; w != nil {
				s = w[t]
			}
			if st := ta.m.Stats(); st.TotalAllocated != s.spans || uint64(ta.m.Live()) != s.n {
				c.bad("mesh %#x %s: allocator holds %d bytes in %d blocks, live buffers %d in %d", m.ptr, t, st.TotalAllocated, ta.m.Live(), s.spans, s.n)
			}
		}
	}
	// The bank managers the process knows are those of the allocators
	// it holds: its chips' own, and at most maxGroups made outside them.
	if len(p.allocs.groups) > maxGroups {
		c.bad("%d allocators made outside a chip's, more than %d", len(p.allocs.groups), maxGroups)
	}
	held := map[*chipAlloc]bool{}
	for _, g := range p.allocs.groups {
		if g.dropped || held[g] {
			c.bad("allocator of bank manager %#x: dropped (%v) or held twice", g.firstPtr(), g.dropped)
		}
		held[g] = true
	}
	for _, m := range p.meshes {
		if m != nil && m.alloc != nil && !held[m.alloc] {
			c.bad("mesh %#x: its allocator is not held", m.ptr)
		}
	}
	for ptr, r := range p.allocs.managers {
		var ta *typeAlloc
		switch {
		case r.grp != nil:
			if !held[r.grp] {
				c.bad("bank manager %#x: of an allocator no longer held", ptr)
				continue
			}
			ta = r.grp.typeOf(r.typ)
		case r.chip >= 0:
			if cs := p.chips[r.chip]; cs != nil {
				ta = cs.alloc.typeOf(r.typ)
			}
		}
		if ta == nil || ta.ptr != ptr {
			c.bad("bank manager %#x (chip %d %s): not its allocator's", ptr, r.chip, r.typ)
		}
	}
	waiting := 0
	for _, t := range p.threads {
		if t.req != nil {
			waiting++
		}
	}
	if waiting != p.allocs.nreqs {
		c.bad("%d threads wait with a request, nreqs %d", waiting, p.allocs.nreqs)
	}
}

// l1PerCore checks each chip's L1 per core (l1core.go) against the live
// buffers: the lockstep spans (and the buffers without one) of its own
// and its meshes' L1 and L1_SMALL buffers, the per-core spans per bank of
// its per-core buffers, the busiest bank, and a peak no lower than now.
func (c *checker) l1PerCore() {
	p := c.p
	type want struct {
		lock, noSpan uint64
		banks        map[uint32]uint64
	}
	w := map[int32]*want{}
	at := func(id int32) *want {
		if w[id] == nil {
			w[id] = &want{banks: map[uint32]uint64{}}
		}
		return w[id]
	}
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live {
			continue
		}
		if b.perCore {
			if pb := p.allocs.pcBufs[uint32(i)]; pb != nil {
				for _, k := range pb.cores {
					if k.spanKnown {
						at(b.chip).banks[k.bank] += k.span
					}
				}
			}
			continue
		}
		if !l1Lockstep(b) {
			continue
		}
		p.allocs.forChips(b, func(cs *chipState) {
			if b.span == 0 {
				at(cs.id).noSpan++
			} else {
				at(cs.id).lock += b.span
			}
		})
	}
	for id, cs := range p.chips {
		g := w[id]
		if g == nil {
			g = &want{}
		}
		if cs.l1c.lock != g.lock || cs.l1c.noSpan != g.noSpan {
			c.bad("chip %d: L1 per core %d lockstep bytes (%d without a span), recomputed %d (%d)", id, cs.l1c.lock, cs.l1c.noSpan, g.lock, g.noSpan)
		}
		var most uint64
		for bank, n := range g.banks {
			if cs.l1c.perCore[bank] != n {
				c.bad("chip %d bank %d: %d per-core bytes, recomputed %d", id, bank, cs.l1c.perCore[bank], n)
			}
			most = max(most, n)
		}
		if len(cs.l1c.perCore) != len(g.banks) || cs.l1c.pcMax != most || most != 0 && cs.l1c.perCore[cs.l1c.pcBank] != most {
			c.bad("chip %d: per-core banks %v, busiest %d at %d, recomputed %v", id, cs.l1c.perCore, cs.l1c.pcMax, cs.l1c.pcBank, g.banks)
		}
		if now := cs.l1Now(0); now.total() > 0 && (!cs.l1c.hasPeak || cs.l1c.peak.total() < now.total()) {
			c.bad("chip %d: L1 per core %d now, peak %d", id, now.total(), cs.l1c.peak.total())
		}
		if cs.l1c.hasPeak && cs.peak[CounterL1Core] != cs.l1c.peak.total() {
			c.bad("chip %d: L1 per core counter peaks at %d, its peak snapshot %d", id, cs.peak[CounterL1Core], cs.l1c.peak.total())
		}
		if cs.sites == nil {
			continue
		}
		// Per site: the lockstep spans sum to the chip's, the per-core
		// spans per bank to each bank's.
		var spans uint64
		for _, a := range cs.sites.accts {
			spans += a.span
		}
		if spans != cs.l1c.lock {
			c.bad("chip %d: sites' lockstep spans %d, the chip's %d", id, spans, cs.l1c.lock)
		}
		for bank, n := range cs.l1c.perCore {
			var s uint64
			for _, v := range cs.sites.l1core.banks[bank] {
				s += v
			}
			if s != n {
				c.bad("chip %d bank %d: sites' per-core spans %d, the bank's %d", id, bank, s, n)
			}
		}
		if len(cs.sites.l1core.banks) != len(cs.l1c.perCore) {
			c.bad("chip %d: sites' per-core banks %d, the chip's %d", id, len(cs.sites.l1core.banks), len(cs.l1c.perCore))
		}
	}
}
