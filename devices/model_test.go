package devices

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// A model-based randomized test. gen plays random but valid TT-Metal-like
// programs (several processes and threads, chips with sparse ids, meshes
// learned through views, CB layouts and teardowns, closes, graph capture,
// zero-size and unknown-device buffers, missed frees) and emits their
// events in one interleaved order. Alongside, model keeps the expected
// state in plain sets — what is live, which chips each mesh has shown —
// and recomputes every total from scratch after each event. It shares no
// code with the ledger: the ledger's running totals must equal the model's
// sums exactly, peaks and their times included.

// ---- the reference model ----

type mMesh struct {
	ptr     uint64
	members []int32 // the mesh's real chips
	learned map[int32]bool
	open    bool
	busy    int // in-flight sequences that use it
}

type mBuf struct {
	key      uint64
	chip     int32
	mesh     *mMesh // nil: a chip buffer
	typ      events.BufferType
	addr     uint64
	size     uint64
	page     uint64
	tid      uint32
	seq, ts  uint64
	dropFree bool
}

type mCBKey struct {
	prog uint64
	chip int32
	mesh *mMesh
}

type mCBGroup struct {
	layout int // layout instance; -1: CBs outside any layout
	sizes  []uint64
	ends   []uint64 // address + size of each CB
}

// mHead is a chip's L1 headroom in the model.
type mHead struct {
	v         int64
	low, end  uint64
	ts        uint64 // for a minimum: when first reached
	has, seen bool
}

const (
	keyFreed    = 1
	keyReleased = 2
)

// mIdx are the model's own counter positions.
const (
	mDRAM = iota
	mL1
	mL1Small
	mTrace
	mSysMem
	mCB
	mLive
	mN
)

type mPeak struct{ v, ts uint64 }

type model struct {
	live     map[uint64]*mBuf
	held     map[*mBuf]bool  // marked deallocated: charged until their chip or mesh closes
	meshes   map[*mMesh]bool // open meshes
	keyState map[uint64]int
	cbs      map[mCBKey]*mCBGroup
	touched  map[int32]bool
	closed   map[int32]bool
	peaks    map[int32]*[mN]mPeak
	minHead  map[int32]*mHead

	unknownFrees, unknownBytes, doubleFrees uint64
	anomalies                               map[string]uint64
	hookedAllocs, hookedFrees, zeroSize     uint64
	globalCBs, releasedByMark, afterRelease uint64
	markedHeld                              uint64
	exited                                  bool
	exitCode, exitSig                       int
}

func newModel() *model {
	return &model{
		live: map[uint64]*mBuf{}, held: map[*mBuf]bool{}, meshes: map[*mMesh]bool{}, keyState: map[uint64]int{}, cbs: map[mCBKey]*mCBGroup{},
		touched: map[int32]bool{}, closed: map[int32]bool{}, peaks: map[int32]*[mN]mPeak{}, minHead: map[int32]*mHead{},
		anomalies: map[string]uint64{},
	}
}

func typeIdx(t events.BufferType) int {
	switch t {
	case events.DRAM:
		return mDRAM
	case events.L1:
		return mL1
	case events.L1Small:
		return mL1Small
	case events.Trace:
		return mTrace
	case events.SystemMemory:
		return mSysMem
	}
	panic("bad type")
}

// charged lists the buffers charged: live, and marked but held.
func (m *model) charged() []*mBuf {
	bs := make([]*mBuf, 0, len(m.live)+len(m.held))
	for _, b := range m.live {
		bs = append(bs, b)
	}
	for b := range m.held {
		bs = append(bs, b)
	}
	return bs
}

// totals recomputes every touched chip's totals from the live sets.
func (m *model) totals() map[int32]*[mN]uint64 {
	t := map[int32]*[mN]uint64{}
	for c := range m.touched {
		t[c] = new([mN]uint64)
	}
	at := func(c int32) *[mN]uint64 {
		if t[c] == nil {
			panic(fmt.Sprintf("model: chip %d charged but not touched", c))
		}
		return t[c]
	}
	for _, b := range m.charged() {
		var chips []int32
		if b.mesh == nil {
			chips = []int32{b.chip}
		} else {
			for c := range b.mesh.learned {
				chips = append(chips, c)
			}
		}
		for _, c := range chips {
			at(c)[typeIdx(b.typ)] += b.size
			at(c)[mLive]++
		}
	}
	for k, g := range m.cbs {
		var sum uint64
		for _, s := range g.sizes {
			sum += s
		}
		if k.mesh == nil {
			at(k.chip)[mCB] += sum
		} else {
			for c := range k.mesh.learned {
				at(c)[mCB] += sum
			}
		}
	}
	return t
}

// headrooms recomputes each touched chip's L1 headroom: the lowest
// address of a charged L1 buffer on it against the highest CB end of the
// groups on it.
func (m *model) headrooms() map[int32]mHead {
	low := map[int32]uint64{}
	end := map[int32]uint64{}
	for _, b := range m.charged() {
		if b.typ != events.L1 {
			continue
		}
		chips := []int32{b.chip}
		if b.mesh != nil {
			chips = chips[:0]
			for c := range b.mesh.learned {
				chips = append(chips, c)
			}
		}
		for _, c := range chips {
			if v, ok := low[c]; !ok || b.addr < v {
				low[c] = b.addr
			}
		}
	}
	for k, g := range m.cbs {
		var e uint64
		for _, x := range g.ends {
			e = max(e, x)
		}
		chips := []int32{k.chip}
		if k.mesh != nil {
			chips = chips[:0]
			for c := range k.mesh.learned {
				chips = append(chips, c)
			}
		}
		for _, c := range chips {
			end[c] = max(end[c], e)
		}
	}
	out := map[int32]mHead{}
	for c := range m.touched {
		l, ok := low[c]
		if ok && end[c] != 0 {
			out[c] = mHead{v: int64(l) - int64(end[c]), low: l, end: end[c], has: true}
		} else {
			out[c] = mHead{}
		}
	}
	return out
}

func (m *model) updatePeaks(ts uint64) {
	for c, h := range m.headrooms() {
		mh := m.minHead[c]
		if h.has && (mh == nil || h.v < mh.v) {
			h.ts = ts
			m.minHead[c] = &h
		}
	}
	for c, tot := range m.totals() {
		p := m.peaks[c]
		if p == nil {
			p = new([mN]mPeak)
			m.peaks[c] = p
		}
		for i, v := range tot {
			if v > p[i].v {
				p[i] = mPeak{v, ts}
			}
		}
	}
}

// closeChip: Device::close releases everything on the chip.
func (m *model) closeChip(c int32) {
	for k, b := range m.live {
		if b.mesh == nil && b.chip == c {
			delete(m.live, k)
			m.keyState[k] = keyReleased
		}
	}
	for b := range m.held {
		if b.mesh == nil && b.chip == c {
			delete(m.held, b)
			m.releasedByMark++
		}
	}
	for k := range m.cbs {
		if k.mesh == nil && k.chip == c {
			delete(m.cbs, k)
		}
	}
	for mesh := range m.meshes {
		delete(mesh.learned, c)
	}
	m.closed[c] = true
}

// ---- the program generator ----

type gThread struct {
	tid    uint32
	queue  []func() events.Event // the rest of an in-flight sequence
	noCBs  bool                  // never lays out CBs: its CBs have no program
	onDone func()
	// The mesh of this thread's last mesh alloc, until the thread does
	// anything but a view: if the mesh still has no known chip then, the
	// ledger reports mesh_chips_unknown.
	viewsOf *mMesh
}

type gProc struct {
	pid     uint32
	m       *model
	threads []*gThread
	chips   []int32 // all chip ids this process uses
	meshes  []*mMesh
	inMesh  map[int32]*mMesh // chip -> open mesh holding it

	nextKey   uint64
	keyPool   []uint64        // Buffer* values free for reuse
	bufs      []*mBuf         // program-owned, not in flight: may be freed
	hooked    []uint64        // keys of hooked buffers not yet freed
	deadMesh  []uint64        // keys of mesh buffers whose mesh closed: mark_as_deallocated later
	progs     []uint64        // ProgramImpl* values
	progBusy  map[uint64]bool // in a layout/teardown sequence
	progChips map[uint64][]int32
	layoutN   int
	meshPtrs  []uint64
	nextUnk   uint64
	done      bool
}

type gen struct {
	t     *testing.T
	rng   *rand.Rand
	l     *Ledger
	seq   uint64
	ts    uint64
	procs []*gProc
	n     int // events emitted
	trace []events.Event
}

func newGen(t *testing.T, seed uint64) *gen { return newGenWith(t, seed, Options{}) }

// newGenWith is newGen with a ledger configured by o.
func newGenWith(t *testing.T, seed uint64, o Options) *gen {
	g := &gen{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), l: NewLedger(o)}
	nproc := 1 + g.rng.IntN(3)
	used := map[uint32]bool{}
	for i := 0; i < nproc; i++ {
		pid := uint32(100 + g.rng.IntN(50))
		for used[pid] {
			pid++
		}
		used[pid] = true
		p := &gProc{pid: pid, m: newModel(), inMesh: map[int32]*mMesh{}, nextKey: 0x55d0c0000000,
			progBusy: map[uint64]bool{}, progChips: map[uint64][]int32{}, nextUnk: 0xf00000000000}
		for j := 0; j < 2+g.rng.IntN(4); j++ {
			p.threads = append(p.threads, &gThread{tid: pid*100 + uint32(j), noCBs: j == 0})
		}
		// Sparse chip ids: small, >= 64, and large.
		pool := []int32{0, 1, 2, 3, 5, 7, 8, 9, 31, 64, 65, 100, 101, 1000, 1 << 20}
		g.rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
		p.chips = pool[:3+g.rng.IntN(len(pool)-3)]
		for j := 0; j < 1+g.rng.IntN(6); j++ {
			p.progs = append(p.progs, 0x560000000000+uint64(j)*0x4000)
		}
		p.meshPtrs = []uint64{0x5500a0000000, 0x5500b0000000, 0x5500c0000000}
		g.procs = append(g.procs, p)
	}
	return g
}

func (g *gen) pick(n int) int { return g.rng.IntN(n) }

// emit applies e to the ledger and, through effect, to the model.
func (g *gen) emit(p *gProc, e events.Event, effect func()) {
	g.seq++
	g.ts += 1 + uint64(g.rng.IntN(1000))
	e.Seq, e.TsNs, e.Pid = g.seq, g.ts, p.pid
	m := p.m
	if e.Kind != events.KindView {
		for _, th := range p.threads {
			if th.tid == e.Tid && th.viewsOf != nil {
				if th.viewsOf.open && len(th.viewsOf.learned) == 0 {
					m.anomalies["mesh_chips_unknown"]++
				}
				th.viewsOf = nil
			}
		}
	}
	if e.DeviceKind == events.DeviceChip {
		m.touched[e.Chip] = true
		switch e.Kind {
		case events.KindAlloc, events.KindView, events.KindCBAlloc, events.KindCBLayout:
			m.closed[e.Chip] = false
		}
	}
	if effect != nil {
		effect()
	}
	g.l.Apply(&e)
	g.trace = append(g.trace, e)
	m.updatePeaks(e.TsNs)
	g.n++
}

func (p *gProc) key(g *gen) uint64 {
	if len(p.keyPool) > 0 && g.rng.IntN(2) == 0 {
		i := g.pick(len(p.keyPool))
		k := p.keyPool[i]
		p.keyPool[i] = p.keyPool[len(p.keyPool)-1]
		p.keyPool = p.keyPool[:len(p.keyPool)-1]
		return k
	}
	p.nextKey += 0x40 + uint64(g.rng.IntN(4))*0x40
	return p.nextKey
}

func (g *gen) size() uint64 {
	switch g.rng.IntN(4) {
	case 0:
		return uint64(1 + g.rng.IntN(64))
	case 1:
		return uint64(1+g.rng.IntN(64)) << 10
	case 2:
		return uint64(1+g.rng.IntN(64)) << 20
	}
	return uint64(1 + g.rng.IntN(1<<30))
}

func (g *gen) btype() events.BufferType { return events.BufferType(g.rng.IntN(events.NumBufferTypes)) }

// countedAlloc is the model's effect of an alloc that counts.
func (m *model) countedAlloc(b *mBuf) {
	if _, ok := m.live[b.key]; ok {
		m.anomalies["realloc_without_free"]++
	}
	m.live[b.key] = b
	delete(m.keyState, b.key)
}

// step runs one scheduling step; it reports false when all are done.
func (g *gen) step(finishing bool) bool {
	var active []*gProc
	for _, p := range g.procs {
		if !p.done {
			active = append(active, p)
		}
	}
	if len(active) == 0 {
		return false
	}
	p := active[g.pick(len(active))]
	th := p.threads[g.pick(len(p.threads))]
	if len(th.queue) > 0 {
		next := th.queue[0]
		th.queue = th.queue[1:]
		next()
		if len(th.queue) == 0 && th.onDone != nil {
			th.onDone()
			th.onDone = nil
		}
		return true
	}
	if finishing {
		for _, t := range p.threads {
			if len(t.queue) > 0 {
				return true // let the other threads finish first
			}
		}
		g.exit(p)
		return true
	}
	g.op(p, th)
	return true
}

func (g *gen) exit(p *gProc) {
	code, sig := g.rng.IntN(3), 0
	if g.rng.IntN(4) == 0 {
		code, sig = 0, 9
	}
	g.emit(p, evExit(code, sig), func() { p.m.exited, p.m.exitCode, p.m.exitSig = true, code, sig })
	p.done = true
}

// op starts a new operation on idle thread th.
func (g *gen) op(p *gProc, th *gThread) {
	m := p.m
	tid := th.tid
	switch r := g.pick(100); {
	case r < 30: // a chip buffer
		chip := p.chips[g.pick(len(p.chips))]
		b := &mBuf{key: p.key(g), chip: chip, typ: g.btype(), addr: uint64(g.pick(1<<20)) << 6, size: g.size(),
			page: 2048, tid: tid}
		e := evAlloc(tid, b.key, chip, b.typ, b.addr, b.size)
		e.PageSize = b.page
		switch g.pick(20) {
		case 0:
			e.Hooked, e.Address = true, 0
			g.emit(p, e, func() { m.hookedAllocs++ })
			p.hooked = append(p.hooked, b.key)
		case 1:
			e.Size = 0
			g.emit(p, e, func() { m.zeroSize++ })
			p.keyPool = append(p.keyPool, b.key)
		default:
			g.emit(p, e, func() { b.seq, b.ts = g.seq, g.ts; m.countedAlloc(b) })
			p.bufs = append(p.bufs, b)
		}
	case r < 45: // a mesh buffer and its per-chip views
		mesh := g.openMesh(p)
		if mesh == nil {
			return
		}
		mesh.busy++
		b := &mBuf{key: p.key(g), chip: -1, mesh: mesh, typ: g.btype(), addr: uint64(g.pick(1<<20)) << 6, size: g.size(),
			page: 4096, tid: tid}
		e := evMeshAlloc(tid, b.key, mesh.ptr, b.typ, b.addr, b.size)
		e.PageSize = b.page
		hooked := g.pick(20) == 0
		if hooked {
			e.Hooked, e.Address = true, 0
		}
		th.queue = append(th.queue, func() events.Event {
			if hooked {
				g.emit(p, e, func() { m.hookedAllocs++ })
			} else {
				g.emit(p, e, func() { b.seq, b.ts = g.seq, g.ts; m.countedAlloc(b) })
			}
			th.viewsOf = mesh
			return e
		})
		members := mesh.members
		if g.pick(5) == 0 {
			// Not valid upstream (every chip gets a view), but it makes the
			// mesh's chip set grow later, under live buffers and CBs.
			members = members[:g.pick(len(members)+1)]
		}
		for _, c := range members {
			c := c
			th.queue = append(th.queue, func() events.Event {
				v := evView(tid, c, e.Address)
				g.emit(p, v, func() { mesh.learned[c] = true })
				return v
			})
		}
		th.onDone = func() {
			mesh.busy--
			if hooked {
				p.hooked = append(p.hooked, b.key)
			} else {
				p.bufs = append(p.bufs, b)
			}
		}
		th.queue[0]()
		th.queue = th.queue[1:]
	case r < 63: // free a buffer, on any thread
		if len(p.bufs) == 0 {
			return
		}
		i := g.pick(len(p.bufs))
		b := p.bufs[i]
		p.bufs[i] = p.bufs[len(p.bufs)-1]
		p.bufs = p.bufs[:len(p.bufs)-1]
		p.keyPool = append(p.keyPool, b.key)
		if g.pick(30) == 0 {
			return // the free is missed: the ledger sees a realloc later, or a leak
		}
		e := evFree(tid, b.key, b.chip)
		if b.mesh != nil {
			e = evMeshFree(tid, b.key, b.mesh.ptr)
		}
		e.Size, e.BufferType, e.Address = b.size, b.typ, b.addr
		g.emit(p, e, func() {
			if cur, ok := m.live[b.key]; ok && cur == b {
				delete(m.live, b.key)
				m.keyState[b.key] = keyFreed
			} else {
				panic("model: freeing a buffer that is not live")
			}
		})
	case r < 66: // free hooked buffers
		if len(p.hooked) == 0 {
			return
		}
		k := p.hooked[len(p.hooked)-1]
		p.hooked = p.hooked[:len(p.hooked)-1]
		e := evFree(tid, k, p.chips[0])
		e.Hooked = true
		g.emit(p, e, func() { m.hookedFrees++ })
		p.keyPool = append(p.keyPool, k)
	case r < 69: // free of a buffer allocated before the tracer attached
		p.nextUnk += 0x40
		e := evFree(tid, p.nextUnk, p.chips[g.pick(len(p.chips))])
		e.Size = g.size()
		g.emit(p, e, func() { m.unknownFrees++; m.unknownBytes += e.Size })
	case r < 71: // free again a key whose free was seen (or one a close released)
		var cands []uint64
		for _, k := range p.keyPool {
			if m.keyState[k] != 0 {
				cands = append(cands, k)
			}
		}
		if len(cands) == 0 {
			return
		}
		k := cands[g.pick(len(cands))]
		g.emit(p, evFree(tid, k, p.chips[0]), func() {
			if m.keyState[k] == keyFreed {
				m.doubleFrees++
			} else {
				m.afterRelease++
			}
		})
	case r < 75: // a plain view (Buffer::view, CreateBuffer(config, address)) elsewhere
		c := p.chips[g.pick(len(p.chips))]
		g.emit(p, evView(tid, c, 0xd00000000000+uint64(g.pick(1000))), nil)
	case r < 83: // lay out a program's CBs
		if th.noCBs {
			g.orphanCB(p, th)
			return
		}
		g.cbLayout(p, th)
	case r < 87: // tear a program's CBs down
		if th.noCBs {
			return
		}
		g.cbTeardown(p, th)
	case r < 89: // destroy a program
		prog := p.progs[g.pick(len(p.progs))]
		if p.progBusy[prog] {
			return
		}
		g.emit(p, evProgramDestroy(tid, prog), func() {
			for k := range m.cbs {
				if k.prog == prog {
					delete(m.cbs, k)
				}
			}
		})
		delete(p.progChips, prog)
	case r < 91: // close a chip that is in no open mesh
		c := p.chips[g.pick(len(p.chips))]
		if mesh := p.inMesh[c]; mesh != nil && (!mesh.open || g.pick(3) > 0) {
			// Upstream closes a mesh's chips only through the mesh; at
			// times close one anyway: the mesh loses the chip.
			return
		}
		g.emit(p, evDeviceClose(tid, c), func() { m.closeChip(c) })
		g.dropChipBuffers(p, c)
	case r < 93: // close a mesh and its chips
		if len(p.meshes) == 0 {
			return
		}
		mesh := p.meshes[g.pick(len(p.meshes))]
		if mesh.busy > 0 {
			return
		}
		g.closeMesh(p, th, mesh)
	case r < 95: // mark_as_deallocated: of a buffer a mesh close released, or of a live one whose close was not seen
		if len(p.deadMesh) > 0 && g.pick(3) > 0 {
			k := p.deadMesh[len(p.deadMesh)-1]
			p.deadMesh = p.deadMesh[:len(p.deadMesh)-1]
			g.emit(p, evMark(tid, k), nil)
			p.keyPool = append(p.keyPool, k)
			return
		}
		if len(p.bufs) == 0 {
			return
		}
		i := g.pick(len(p.bufs))
		b := p.bufs[i]
		p.bufs[i] = p.bufs[len(p.bufs)-1]
		p.bufs = p.bufs[:len(p.bufs)-1]
		g.emit(p, evMark(tid, b.key), func() {
			if cur, ok := m.live[b.key]; ok && cur == b {
				// Still charged until its chip or mesh closes.
				delete(m.live, b.key)
				m.keyState[b.key] = keyReleased
				m.held[b] = true
				m.markedHeld++
			}
		})
		p.keyPool = append(p.keyPool, b.key)
	case r < 96: // an alloc on a device the probe could not identify
		e := evAlloc(tid, p.key(g), 0, events.DRAM, 0x40, 64)
		e.DeviceKind, e.Chip, e.DeviceVptr = events.DeviceUnknown, -1, 0xbad
		g.emit(p, e, func() { m.anomalies["unknown_device"]++ })
		p.keyPool = append(p.keyPool, e.Object)
	case r < 97: // an invalid buffer type
		e := evAlloc(tid, p.key(g), p.chips[0], events.BufferType(5+g.pick(100)), 0x40, 64)
		g.emit(p, e, func() { m.anomalies["invalid_buffer_type"]++ })
		p.keyPool = append(p.keyPool, e.Object)
	default: // a non-owning alloc (never emitted upstream; ignored)
		e := evAlloc(tid, p.key(g), p.chips[0], events.DRAM, 0x40, 64)
		e.OwnsData = false
		g.emit(p, e, nil)
		p.keyPool = append(p.keyPool, e.Object)
	}
}

// openMesh returns an open mesh, making one over free chips at times.
func (g *gen) openMesh(p *gProc) *mMesh {
	if len(p.meshes) > 0 && (len(p.meshes) >= 2 || g.pick(4) > 0) {
		return p.meshes[g.pick(len(p.meshes))]
	}
	var free []int32
	for _, c := range p.chips {
		if p.inMesh[c] == nil {
			free = append(free, c)
		}
	}
	var ptrs []uint64
	for _, ptr := range p.meshPtrs {
		inUse := false
		for _, m := range p.meshes {
			inUse = inUse || m.ptr == ptr
		}
		if !inUse {
			ptrs = append(ptrs, ptr)
		}
	}
	if len(free) == 0 || len(ptrs) == 0 {
		if len(p.meshes) > 0 {
			return p.meshes[g.pick(len(p.meshes))]
		}
		return nil
	}
	g.rng.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	mesh := &mMesh{ptr: ptrs[g.pick(len(ptrs))], members: free[:1+g.pick(len(free))], learned: map[int32]bool{}, open: true}
	for _, c := range mesh.members {
		p.inMesh[c] = mesh
	}
	p.meshes = append(p.meshes, mesh)
	p.m.meshes[mesh] = true
	return mesh
}

func (g *gen) closeMesh(p *gProc, th *gThread, mesh *mMesh) {
	m := p.m
	for i, x := range p.meshes {
		if x == mesh {
			p.meshes = append(p.meshes[:i], p.meshes[i+1:]...)
			break
		}
	}
	mesh.open = false
	closing := &mMesh{} // the chips stay taken until their Device::close is seen
	for _, c := range mesh.members {
		p.inMesh[c] = closing
	}
	kept := p.bufs[:0]
	for _, b := range p.bufs {
		if b.mesh == mesh {
			p.deadMesh = append(p.deadMesh, b.key)
		} else {
			kept = append(kept, b)
		}
	}
	p.bufs = kept
	tid := th.tid
	for c := range mesh.learned {
		g.dropChipBuffers(p, c) // the mesh close closes them at once
	}
	g.emit(p, evMeshClose(tid, mesh.ptr), func() {
		for k, b := range m.live {
			if b.mesh == mesh {
				delete(m.live, k)
				m.keyState[k] = keyReleased
			}
		}
		for b := range m.held {
			if b.mesh == mesh {
				delete(m.held, b)
				m.releasedByMark++
			}
		}
		for k := range m.cbs {
			if k.mesh == mesh {
				delete(m.cbs, k)
			}
		}
		for c := range mesh.learned {
			m.closeChip(c)
		}
		delete(m.meshes, mesh)
	})
	for _, c := range mesh.members {
		c := c
		th.queue = append(th.queue, func() events.Event {
			e := evDeviceClose(tid, c)
			g.emit(p, e, func() { m.closeChip(c) })
			g.dropChipBuffers(p, c)
			delete(p.inMesh, c)
			return e
		})
	}
}

// dropChipBuffers: the program's chip buffers on a closed chip are
// destroyed later without any event.
func (g *gen) dropChipBuffers(p *gProc, c int32) {
	kept := p.bufs[:0]
	for _, b := range p.bufs {
		if b.mesh == nil && b.chip == c {
			p.keyPool = append(p.keyPool, b.key)
		} else {
			kept = append(kept, b)
		}
	}
	p.bufs = kept
}

func (g *gen) cbLayout(p *gProc, th *gThread) {
	m := p.m
	prog := p.progs[g.pick(len(p.progs))]
	if p.progBusy[prog] {
		return
	}
	tid := th.tid
	p.layoutN++
	inst := p.layoutN
	var mesh *mMesh
	if g.pick(4) == 0 && len(p.meshes) > 0 {
		mesh = p.meshes[g.pick(len(p.meshes))] // legacy: CBs on the MeshDevice
		mesh.busy++
	}
	var targets []int32
	if mesh == nil {
		for _, c := range p.chips {
			if g.pick(3) == 0 {
				targets = append(targets, c)
			}
		}
		if len(targets) == 0 {
			targets = []int32{p.chips[0]}
		}
	}
	p.progBusy[prog] = true
	var layout events.Event
	if mesh != nil {
		layout = evCBLayoutMesh(tid, prog, mesh.ptr)
	} else {
		layout = evCBLayout(tid, prog, targets[0])
	}
	g.emit(p, layout, nil)
	ncb := g.pick(5) // 0: laid out again with nothing to do
	for i := 0; i < ncb; i++ {
		size := uint64(1+g.pick(1<<10)) << 4
		global := g.pick(10) == 0
		addr := uint64(0x10000 + i*0x1000)
		if mesh != nil {
			th.queue = append(th.queue, func() events.Event {
				e := evCBMesh(tid, mesh.ptr, addr, size)
				e.Global = global
				g.emit(p, e, func() { m.cbAdd(mCBKey{prog: prog, mesh: mesh}, inst, addr, size, global) })
				return e
			})
			continue
		}
		for _, c := range targets {
			c := c
			th.queue = append(th.queue, func() events.Event {
				e := evCB(tid, c, addr, size)
				e.Global = global
				g.emit(p, e, func() { m.cbAdd(mCBKey{prog: prog, chip: c}, inst, addr, size, global) })
				return e
			})
		}
		if !global {
			p.progChips[prog] = append(p.progChips[prog], targets...)
		}
	}
	done := func() {
		p.progBusy[prog] = false
		if mesh != nil {
			mesh.busy--
		}
	}
	if len(th.queue) == 0 {
		done()
	} else {
		th.onDone = done
	}
}

func (m *model) cbAdd(k mCBKey, inst int, addr, size uint64, global bool) {
	if global {
		m.globalCBs++
		return
	}
	grp := m.cbs[k]
	if grp == nil || grp.layout != inst {
		grp = &mCBGroup{layout: inst}
		m.cbs[k] = grp
	}
	grp.sizes = append(grp.sizes, size)
	grp.ends = append(grp.ends, addr+size)
}

func (g *gen) orphanCB(p *gProc, th *gThread) {
	m := p.m
	c := p.chips[g.pick(len(p.chips))]
	size := uint64(1+g.pick(100)) << 4
	g.emit(p, evCB(th.tid, c, 0x8000, size), func() {
		m.anomalies["cb_without_program"]++
		k := mCBKey{prog: 0, chip: c}
		if m.cbs[k] == nil {
			m.cbs[k] = &mCBGroup{layout: -1}
		}
		m.cbs[k].sizes = append(m.cbs[k].sizes, size)
		m.cbs[k].ends = append(m.cbs[k].ends, 0x8000+size)
	})
}

func (g *gen) cbTeardown(p *gProc, th *gThread) {
	m := p.m
	prog := p.progs[g.pick(len(p.progs))]
	if p.progBusy[prog] {
		return
	}
	tid := th.tid
	g.emit(p, evCBTeardown(tid, prog), nil)
	chips := append([]int32(nil), p.progChips[prog]...)
	if g.pick(3) == 0 {
		chips = append(chips, p.chips[g.pick(len(p.chips))]) // a chip it holds nothing on
	}
	delete(p.progChips, prog)
	p.progBusy[prog] = true
	for _, c := range chips {
		c := c
		th.queue = append(th.queue, func() events.Event {
			e := evCBFree(tid, c)
			g.emit(p, e, func() { delete(m.cbs, mCBKey{prog: prog, chip: c}) })
			return e
		})
	}
	if len(th.queue) == 0 {
		p.progBusy[prog] = false
	} else {
		th.onDone = func() { p.progBusy[prog] = false }
	}
}

// ---- comparison ----

func (g *gen) compareTotals(when string) {
	g.t.Helper()
	for _, p := range g.procs {
		want := p.m.totals()
		got := g.l.Devices(p.pid)
		if len(got) != len(want) {
			g.t.Fatalf("%s: pid %d: %d devices, model has %d", when, p.pid, len(got), len(want))
		}
		for _, d := range got {
			w := want[d.Device]
			if w == nil {
				g.t.Fatalf("%s: pid %d: chip %d not in model", when, p.pid, d.Device)
			}
			gotT := [mN]uint64{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBRegisteredBytes, d.LiveBuffers}
			if gotT != *w {
				g.t.Fatalf("%s: pid %d chip %d: ledger %v, model %v", when, p.pid, d.Device, gotT, *w)
			}
			if d.Closed != p.m.closed[d.Device] {
				g.t.Fatalf("%s: pid %d chip %d: closed %v, model %v", when, p.pid, d.Device, d.Closed, p.m.closed[d.Device])
			}
		}
		heads := p.m.headrooms()
		for _, h := range g.l.L1Headroom(p.pid) {
			w := heads[h.Device]
			if h.HasHeadroom != w.has || w.has && (h.Headroom != w.v || h.LowestL1Address != w.low || h.CBRegionEnd != w.end) {
				g.t.Fatalf("%s: pid %d chip %d: headroom %+v, model %+v", when, p.pid, h.Device, h, w)
			}
		}
	}
}

func (g *gen) compareSummary() {
	t := g.t
	t.Helper()
	checkStreamed(t, g.l)
	s := g.l.Summary()
	if !s.Complete || s.LostEvents != 0 {
		t.Errorf("summary incomplete without loss")
	}
	if len(s.Processes) != len(g.procs) {
		t.Fatalf("%d processes, want %d", len(s.Processes), len(g.procs))
	}
	byPid := map[uint32]*gProc{}
	for _, p := range g.procs {
		byPid[p.pid] = p
	}
	for i := range s.Processes {
		ps := &s.Processes[i]
		p := byPid[ps.Pid]
		if p == nil {
			t.Fatalf("unexpected pid %d", ps.Pid)
		}
		m := p.m
		if i > 0 && s.Processes[i-1].Pid >= ps.Pid {
			t.Errorf("processes not sorted")
		}
		for j, d := range ps.Devices {
			if j > 0 && ps.Devices[j-1].Device >= d.Device {
				t.Errorf("pid %d: devices not sorted", ps.Pid)
			}
			pk := m.peaks[d.Device]
			if pk == nil {
				pk = new([mN]mPeak)
			}
			got := [mN]mPeak{
				{d.Peaks.DRAMBytes.Value, d.Peaks.DRAMBytes.TsNs}, {d.Peaks.L1Bytes.Value, d.Peaks.L1Bytes.TsNs},
				{d.Peaks.L1SmallBytes.Value, d.Peaks.L1SmallBytes.TsNs}, {d.Peaks.TraceBytes.Value, d.Peaks.TraceBytes.TsNs},
				{d.Peaks.SystemMemoryBytes.Value, d.Peaks.SystemMemoryBytes.TsNs}, {d.Peaks.CBRegisteredBytes.Value, d.Peaks.CBRegisteredBytes.TsNs},
				{d.Peaks.LiveBuffers.Value, d.Peaks.LiveBuffers.TsNs},
			}
			if got != *pk {
				t.Errorf("pid %d chip %d: peaks %v, model %v", ps.Pid, d.Device, got, *pk)
			}
			mh := m.minHead[d.Device]
			switch {
			case (d.MinL1Headroom == nil) != (mh == nil):
				t.Errorf("pid %d chip %d: min headroom %+v, model %+v", ps.Pid, d.Device, d.MinL1Headroom, mh)
			case mh != nil && *d.MinL1Headroom != (MinHeadroom{Value: mh.v, TsNs: mh.ts, LowestL1Address: mh.low, CBRegionEnd: mh.end}):
				t.Errorf("pid %d chip %d: min headroom %+v, model %+v", ps.Pid, d.Device, *d.MinL1Headroom, *mh)
			}
		}

		// Leaks: one per chip a live buffer is charged on.
		type lk struct {
			dev  int32
			typ  events.BufferType
			addr uint64
			size uint64
			buf  string
			mesh bool
			tid  uint32
			seq  uint64
			ts   uint64
			mark bool
		}
		var want, unplaced []lk
		for _, b := range m.charged() {
			mark := m.held[b]
			if b.mesh == nil {
				want = append(want, lk{b.chip, b.typ, b.addr, b.size, fmt.Sprintf("%#x", b.key), false, b.tid, b.seq, b.ts, mark})
				continue
			}
			if len(b.mesh.learned) == 0 {
				unplaced = append(unplaced, lk{0, b.typ, b.addr, b.size, fmt.Sprintf("%#x", b.key), true, b.tid, b.seq, b.ts, mark})
			}
			for c := range b.mesh.learned {
				want = append(want, lk{c, b.typ, b.addr, b.size, fmt.Sprintf("%#x", b.key), true, b.tid, b.seq, b.ts, mark})
			}
		}
		order := func(ls []lk) {
			sort.Slice(ls, func(a, b int) bool {
				x, y := ls[a], ls[b]
				if x.dev != y.dev {
					return x.dev < y.dev
				}
				if x.typ != y.typ {
					return x.typ < y.typ
				}
				if x.addr != y.addr {
					return x.addr < y.addr
				}
				return x.seq < y.seq
			})
		}
		order(want)
		order(unplaced)
		conv := func(ls []Leak) []lk {
			var out []lk
			for _, l := range ls {
				typ, ok := events.ParseBufferType(l.Type)
				if !ok {
					t.Fatalf("leak type %q", l.Type)
				}
				out = append(out, lk{l.Device, typ, l.Address, l.Size, l.Buffer, l.Mesh, l.Tid, l.Seq, l.TsNs, l.MarkedDeallocated})
			}
			return out
		}
		if got := conv(ps.Leaks); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pid %d: leaks\n got %v\nwant %v", ps.Pid, got, want)
		}
		if got := conv(ps.UnplacedLeaks); fmt.Sprint(got) != fmt.Sprint(unplaced) {
			t.Errorf("pid %d: unplaced leaks\n got %v\nwant %v", ps.Pid, got, unplaced)
		}
		var groupsN, groupsB, leakB uint64
		for _, gr := range ps.LeakGroups {
			groupsN += gr.Count
			groupsB += gr.Bytes
		}
		for _, l := range want {
			leakB += l.size
		}
		if groupsN != uint64(len(want)) || groupsB != leakB {
			t.Errorf("pid %d: leak groups %d/%d, leaks %d/%d", ps.Pid, groupsN, groupsB, len(want), leakB)
		}

		check := func(what string, got, want uint64) {
			if got != want {
				t.Errorf("pid %d: %s = %d, model %d", ps.Pid, what, got, want)
			}
		}
		check("unknown_frees", ps.UnknownFrees, m.unknownFrees)
		check("unknown_free_bytes", ps.UnknownFreeBytes, m.unknownBytes)
		check("double_frees", ps.DoubleFrees, m.doubleFrees)
		check("hooked_allocs", ps.Stats.HookedAllocs, m.hookedAllocs)
		check("hooked_frees", ps.Stats.HookedFrees, m.hookedFrees)
		check("zero_size_allocs", ps.Stats.ZeroSizeAllocs, m.zeroSize)
		check("global_cbs", ps.Stats.GlobalCBs, m.globalCBs)
		check("released_by_mark", ps.Stats.ReleasedByMark, m.releasedByMark)
		check("marked_held", ps.Stats.MarkedHeld, m.markedHeld)
		check("frees_after_release", ps.Stats.FreesAfterRelease, m.afterRelease)
		for k, n := range ps.AnomalyCounts {
			check("anomaly "+k, n, m.anomalies[k])
		}
		for k := range m.anomalies {
			if _, ok := ps.AnomalyCounts[k]; !ok {
				t.Errorf("anomaly kind %q missing from the summary", k)
			}
		}
		if ps.Exited != m.exited || ps.ExitCode != m.exitCode || ps.ExitSignal != m.exitSig {
			t.Errorf("pid %d: exit %v/%d/%d, model %v/%d/%d", ps.Pid, ps.Exited, ps.ExitCode, ps.ExitSignal, m.exited, m.exitCode, m.exitSig)
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int) *gen {
	g := newGen(t, seed)
	for i := 0; i < steps; i++ {
		g.step(false)
		if i%53 == 0 {
			g.compareTotals(fmt.Sprintf("seed %d step %d", seed, i))
		}
	}
	for g.step(true) {
	}
	g.compareTotals(fmt.Sprintf("seed %d end", seed))
	if err := g.l.Check(); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	g.compareSummary()
	return g
}

// TestModel compares the ledger with the reference model on many random programs.
func TestModel(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 40
	}
	var events, leaks, headrooms, overlaps int
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		ok := t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := runModel(t, seed, 400+int(seed%7)*300)
			events += g.n
			for _, p := range g.l.Summary().Processes {
				leaks += len(p.Leaks)
				for _, d := range p.Devices {
					if d.MinL1Headroom != nil {
						headrooms++
						if d.MinL1Headroom.Value < 0 {
							overlaps++
						}
					}
				}
			}
		})
		if !ok {
			break
		}
	}
	t.Logf("%d events, %d leaks, %d minimum L1 headrooms (%d negative) compared", events, leaks, headrooms, overlaps)
	if headrooms == 0 || overlaps == 0 || overlaps == headrooms {
		t.Errorf("the streams never exercised L1 headroom both ways: %d minimums, %d negative", headrooms, overlaps)
	}
}
