package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/ttmetal"
)

// craftMem is a crafted process's memory: regions at addresses. It counts
// what it serves, per region too, and serves at most maxBytes in maxReads
// reads (then every read fails), so that a test of a reader without bounds
// ends soon, failing.
type craftMem struct {
	bases              []uint64 // sorted
	data               map[uint64][]byte
	next               uint64
	served, reads      int64
	maxBytes, maxReads int64
	touched            map[uint64]int64 // region base -> bytes served from it
}

func newCraftMem() *craftMem {
	return &craftMem{data: map[uint64][]byte{}, next: 0x100000, touched: map[uint64]int64{},
		maxBytes: 4 * ttmetal.AllocBudgetBytes, maxReads: 4 * ttmetal.AllocBudgetReads}
}

// region adds n zero bytes at a fresh address.
func (m *craftMem) region(n int) (uint64, []byte) {
	base := m.next
	b := make([]byte, n)
	m.data[base] = b
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > base })
	m.bases = append(m.bases, 0)
	copy(m.bases[i+1:], m.bases[i:])
	m.bases[i] = base
	m.next += (uint64(n) + 0x1fff) &^ 0xfff
	return base, b
}

func (m *craftMem) ReadAt(p []byte, off int64) (int, error) {
	if m.reads >= m.maxReads || m.served+int64(len(p)) > m.maxBytes {
		return 0, errors.New("EIO (the test's own bound)")
	}
	addr := uint64(off)
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > addr }) - 1
	if i < 0 {
		return 0, errors.New("EIO")
	}
	base := m.bases[i]
	b := m.data[base]
	if addr+uint64(len(p)) > base+uint64(len(b)) {
		return 0, errors.New("EIO")
	}
	m.reads++
	m.served += int64(len(p))
	m.touched[base] += int64(len(p))
	return copy(p, b[addr-base:]), nil
}

// The layouts the crafted memory is laid out with.
var (
	craftBM = ttmetal.BankManagerLayout{BufferType: 0, BankMap: 8, AddressLimit: 64, Alignment: 72, Allocators: 80,
		MaxSize: 8, Offset: 16, MinAlloc: 24, FreeAlign: 32, Shrink: 40,
		BlockAddress: 64, BlockSize: 88, BlockPrev: 112, BlockNext: 136, BlockAllocated: 160, MetaAllocated: 184}
	craftRoot = ttmetal.RootLayout{Slots: 1, DeviceManager: 8, Devices: 16, DeviceID: 8, DeviceInit: 12, DeviceAlloc: 16,
		Allocator: "AllocatorImpl", Managers: []int64{0, 8, 16, 24}}
)

var le = binary.LittleEndian

// list lays out a FreeListOpt of n blocks of 32 bytes, every other one
// allocated (the first is), and returns its address and those of its
// regions.
func (m *craftMem) list(n int) (uint64, []uint64) {
	fl, b := m.region(256)
	le.PutUint64(b[8:], uint64(n)*32) // max_size_bytes_
	le.PutUint64(b[16:], 0x20)        // offset_bytes_
	le.PutUint64(b[24:], 32)          // min_allocation_size_
	le.PutUint64(b[32:], 32)          // alignment_
	regions := []uint64{fl}
	for _, v := range []struct {
		off  int
		elem int
		get  func(i int) uint64
	}{
		{64, 8, func(i int) uint64 { return uint64(i) * 32 }},
		{88, 8, func(int) uint64 { return 32 }},
		{112, 8, func(i int) uint64 { return uint64(int64(i) - 1) }},
		{136, 8, func(i int) uint64 {
			if i == n-1 {
				return ^uint64(0)
			}
			return uint64(i + 1)
		}},
		{160, 1, func(i int) uint64 { return uint64(1 - i%2) }},
		{184, 1, func(int) uint64 { return 1 }},
	} {
		at, a := m.region(n * v.elem)
		for i := range n {
			if v.elem == 8 {
				le.PutUint64(a[i*8:], v.get(i))
			} else {
				a[i] = byte(v.get(i))
			}
		}
		le.PutUint64(b[v.off:], at)
		le.PutUint64(b[v.off+8:], at+uint64(n*v.elem))
		regions = append(regions, at)
	}
	return fl, regions
}

// manager lays out a BankManager of type t and 12 banks whose allocator 0
// is the list at fl, and returns its address and those of its regions.
func (m *craftMem) manager(t events.BufferType, fl uint64) (uint64, []uint64) {
	bm, b := m.region(128)
	le.PutUint32(b[0:], uint32(t))
	le.PutUint64(b[8+24:], 12) // banks
	le.PutUint32(b[72:], 32)   // alignment_bytes_
	vec, v := m.region(8)
	le.PutUint64(v, fl)
	le.PutUint64(b[80:], vec)
	le.PutUint32(b[88:], 1)
	return bm, []uint64{bm, vec}
}

// root lays out g_instances with one MetalContext whose DeviceManager
// holds chips (open, each with an allocator of the four managers given),
// and returns g_instances' address.
func (m *craftMem) root(chips []int32, managers func(chip int32) [4]uint64) uint64 {
	g, gb := m.region(8)
	ctx, cb := m.region(16)
	dm, db := m.region(32)
	devs, vb := m.region(8 * len(chips))
	le.PutUint64(gb, ctx)
	le.PutUint64(cb[8:], dm)
	le.PutUint64(db[16:], devs)
	le.PutUint64(db[24:], devs+uint64(8*len(chips)))
	for i, c := range chips {
		dev, b := m.region(24)
		le.PutUint32(b[8:], uint32(c))
		b[12] = 1
		al, ab := m.region(32)
		for j, bm := range managers(c) {
			le.PutUint64(ab[8*j:], bm)
		}
		le.PutUint64(b[16:], al)
		le.PutUint64(vb[8*i:], dev)
	}
	return g
}

// craftBackend is a fakeBackend whose processes' memory is crafted: their
// allocators are read from it by the same code as from /proc/PID/mem.
type craftBackend struct {
	*fakeBackend
	mem  *craftMem
	root uint64 // g_instances
}

func (b *craftBackend) AllocMem(_ uint32, budget *ttmetal.AllocBudget) (AllocMem, error) {
	lib := &probedLib{path: "/opt/tt/libtt_metal.so", addr: b.root, slots: 1, ready: make(chan struct{})}
	root := craftRoot
	root.Contexts = b.root
	lib.layouts = ttmetal.AllocatorLayouts{BankManager: &craftBM, Root: &root}
	close(lib.ready)
	mem := procfs.NewMem(b.mem, &budget.Mem)
	return &procAllocMem{mem: mem, walk: ttmetal.NewMemWalk(mem, &budget.Blocks), lib: lib,
		bias: func() (uint64, error) { return 0, nil }}, nil
}

var fourTypes = [4]events.BufferType{events.DRAM, events.L1, events.L1Small, events.Trace}

// runCrafted traces pid 300, whose memory is mem with its root at root,
// over the records of chips (an unknown free on each, so that they are in
// the summary), with --max-chips maxChips.
func runCrafted(t *testing.T, mem *craftMem, root uint64, maxChips int, chips ...int32) (*recorder, string) {
	t.Helper()
	const lib = "/opt/tt/libtt_metal.so"
	h := newFakeHost()
	h.load(300, lib)()
	var script []step
	for _, c := range chips {
		script = append(script, free(300, 0xf1+uint64(c), c))
	}
	script = append(script, do(h.end(300, 0, 0)))
	be := &craftBackend{fakeBackend: newFakeBackend(script...), mem: mem, root: root}
	be.attach[lib] = nil
	r := &recorder{}
	var log bytes.Buffer
	if _, err := run(context.Background(), Config{PIDs: []int{300}, Log: &log, MaxChips: maxChips}, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	return r, log.String()
}

// An honest process's allocators read at attach from its memory: every
// chip's four managers, each list exact, well within the budget.
func TestAttachAllocatorsCrafted(t *testing.T) {
	mem := newCraftMem()
	lists := map[int32][4]int{0: {7, 3, 1, 1}, 1: {41, 9, 1, 3}, 2: {1, 1, 1, 1}}
	g := mem.root([]int32{0, 1, 2}, func(c int32) (ms [4]uint64) {
		for j, n := range lists[c] {
			fl, _ := mem.list(n)
			ms[j], _ = mem.manager(fourTypes[j], fl)
		}
		return ms
	})
	r, log := runCrafted(t, mem, g, 0, 0, 1, 2)
	for c, ns := range lists {
		d := device(t, r.summary, 300, c)
		if d.Allocator == nil {
			t.Fatalf("chip %d: no allocator view (%s)\nlog:\n%s", c, d.AllocatorWhy, log)
		}
		for j, n := range ns {
			v := d.Allocator.Type(fourTypes[j])
			if v == nil || v.Source != "memory" || v.TotalAllocated == nil || *v.TotalAllocated != uint64((n+1)/2*32) ||
				*v.TotalFree != uint64(n/2*32) || v.Banks != 12 {
				t.Errorf("chip %d %s: %+v, want %d of %d blocks of 32 bytes allocated", c, fourTypes[j], v, (n+1)/2, n)
			}
		}
	}
	t.Logf("3 chips' allocators: %d reads, %d bytes", mem.reads, mem.served)
}

// Finding 4 of issue #32: what a process makes tttrace read from its
// memory at attach has a budget across its chips (bytes, reads, blocks
// held), --max-chips applies before anything of a chip is read, and a
// list every chip shares is read once. A process over the budget has no
// allocator read from memory, for one reason said by each chip.
func TestAttachAllocatorsBudget(t *testing.T) {
	over := "more than tttrace allows one process"
	t.Run("one list shared by every chip", func(t *testing.T) {
		mem := newCraftMem()
		const n = 100_000 // 3.4 MB, read once: its blocks held per chip are over the budget by the third
		fl, regions := mem.list(n)
		var chips []int32
		for c := range int32(64) {
			chips = append(chips, c)
		}
		g := mem.root(chips, func(int32) (ms [4]uint64) {
			for j := range ms {
				ms[j], _ = mem.manager(fourTypes[j], fl)
			}
			return ms
		})
		r, log := runCrafted(t, mem, g, 0, 0, 63)
		if mem.served > ttmetal.AllocBudgetBytes {
			t.Errorf("%d bytes read, over the budget of %d", mem.served, ttmetal.AllocBudgetBytes)
		}
		for _, reg := range regions[1:] {
			if size := int64(len(mem.data[reg])); mem.touched[reg] != size {
				t.Errorf("the shared list's array at %#x: %d bytes of its %d read, want it read once", reg, mem.touched[reg], size)
			}
		}
		for _, c := range []int32{0, 63} {
			if d := device(t, r.summary, 300, c); d.Allocator != nil || !strings.Contains(d.AllocatorWhy, over) {
				t.Errorf("chip %d: %+v, why %q", c, d.Allocator, d.AllocatorWhy)
			}
		}
		if strings.Count(log, over) != 1 {
			t.Errorf("the reason said %d times, want once:\n%s", strings.Count(log, over), log)
		}
	})
	t.Run("max-chips before reading", func(t *testing.T) {
		mem := newCraftMem()
		var chips []int32
		mine := map[uint64]int32{} // regions of each chip's managers and lists
		for c := range int32(64) {
			chips = append(chips, c)
		}
		g := mem.root(chips, func(c int32) (ms [4]uint64) {
			for j := range ms {
				fl, regs := mem.list(5)
				var more []uint64
				ms[j], more = mem.manager(fourTypes[j], fl)
				for _, reg := range append(regs, more...) {
					mine[reg] = c
				}
			}
			return ms
		})
		r, _ := runCrafted(t, mem, g, 4, 0, 1, 2, 3)
		for reg, c := range mine {
			if c >= 4 && mem.touched[reg] != 0 {
				t.Errorf("chip %d (past --max-chips 4): %d bytes of its allocator at %#x read", c, mem.touched[reg], reg)
			}
		}
		for c := range int32(4) {
			if d := device(t, r.summary, 300, c); d.Allocator == nil || d.Allocator.DRAM == nil || d.Allocator.DRAM.Source != "memory" {
				t.Errorf("chip %d: %+v (%s)", c, d.Allocator, d.AllocatorWhy)
			}
		}
	})
	t.Run("a root of thousands of devices", func(t *testing.T) {
		mem := newCraftMem()
		fl, _ := mem.list(3)
		var ms [4]uint64
		for j := range ms {
			ms[j], _ = mem.manager(fourTypes[j], fl)
		}
		var chips []int32
		for c := range int32(4096) {
			chips = append(chips, c)
		}
		g := mem.root(chips, func(int32) [4]uint64 { return ms })
		r, _ := runCrafted(t, mem, g, 0, 0)
		if mem.reads > ttmetal.AllocBudgetReads {
			t.Errorf("%d reads of the process's memory, over the budget of %d", mem.reads, ttmetal.AllocBudgetReads)
		}
		if d := device(t, r.summary, 300, 0); d.Allocator != nil || !strings.Contains(d.AllocatorWhy, over) {
			t.Errorf("chip 0: %+v, why %q", d.Allocator, d.AllocatorWhy)
		}
	})
}
