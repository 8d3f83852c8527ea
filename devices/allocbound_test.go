package devices

import (
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// The bank managers a process makes are held only while they are its
// allocators' (issue #32, 7: every one was kept, 681 bytes a record, and
// each allocator made outside a chip's with its models, without end).

// allocBound is maxGroups, as docs/ndjson.md says it.
const allocBound = 256

// heldManagers counts the bank managers pid's ledger knows, and the
// allocators made outside a chip's they belong to.
func heldManagers(r *rec) (managers, groups int) {
	p := r.l.procs[r.pid]
	seen := map[*chipAlloc]bool{}
	for _, ref := range p.allocs.managers {
		if ref.grp != nil {
			seen[ref.grp] = true
		}
	}
	return len(p.allocs.managers), len(seen)
}

// statsOf is the process's stats as its summary line has them.
func statsOf(t *testing.T, p ProcessSummary) map[string]uint64 {
	t.Helper()
	b, err := json.Marshal(p.Stats)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// meshCycle makes a MeshDevice's allocator (bank managers at off, outside
// any chip's), allocates a mesh buffer of size through its DRAM manager
// on chips 0 and 1 (tying the allocator to the mesh) and returns the
// buffer's ts.
func meshCycle(r *rec, mesh, off, buf, size uint64) uint64 {
	r.apply(n150Caps(-1, off)...)
	r.apply(evReq(1, mgrDRAM+off, 12*size, size, true))
	return r.apply(evMeshAlloc(1, buf, mesh, events.DRAM, 0x40, 12*size), evView(1, 0, 0x40), evView(1, 1, 0x40))
}

// TestAllocatorsOpenAndClose: a program opening chips and a mesh, using
// the mesh and closing it, a thousand times, each time with new bank
// managers: the ledger holds the managers of what is open only, and each
// mesh's allocator is exact.
func TestAllocatorsOpenAndClose(t *testing.T) {
	const cycles = 1000
	r := newRec(t)
	for i := range uint64(cycles) {
		r.apply(n150Caps(0, 0x10000+i*0x10)...)
		r.apply(n150Caps(1, 0x20000+i*0x10)...)
		mesh := 0x5500a0000000 + i*0x1000 // a new MeshDevice* each time, or the same
		if i%2 == 1 {
			mesh = 0x5500a0000000
		}
		meshCycle(r, mesh, 0x30000+i*0x10, 0xa0+i, 8192)
		if i%100 == 0 {
			ms := r.proc().Meshes
			if len(ms) != 1 || ms[0].Allocator == nil {
				t.Fatalf("cycle %d: meshes %+v", i, ms)
			}
			if st, ok := ms[0].Allocator.DRAM.Stats(); !ok || st.TotalAllocated != 8192 {
				t.Fatalf("cycle %d: the mesh's DRAM %+v", i, ms[0].Allocator.DRAM)
			}
		}
		r.apply(evMeshFree(1, 0xa0+i, mesh), evMeshClose(1, mesh))
		if m, g := heldManagers(r); m > 8 || g != 0 {
			t.Fatalf("cycle %d: after the mesh's close, %d bank managers held (%d allocators outside a chip's); want chips 0 and 1's 8", i, m, g)
		}
	}
	p := r.proc()
	if n := p.Stats.AllocCapacities; n != cycles*12 {
		t.Errorf("%d bank managers made, want %d", n, cycles*12)
	}
	for k, n := range p.AnomalyCounts {
		if n != 0 {
			t.Errorf("%d %s anomalies", n, k)
		}
	}
	if s := statsOf(t, p); s["allocators_dropped"] != 0 || s["bank_managers_refused"] != 0 {
		t.Errorf("stats %v: an honest program lost an allocator", s)
	}
}

// TestAllocatorsBounded: a process making bank managers without end,
// outside any chip's allocator (each DRAM one a new allocator, tied to no
// mesh) and on a chip (its allocator made again and again): the ledger
// holds at most 256 allocators outside its chips, the newest, and four
// managers per chip; the allocators dropped are counted and said.
func TestAllocatorsBounded(t *testing.T) {
	const n = 2000
	r := newRec(t)
	for i := range uint64(n) {
		r.apply(n150Caps(-1, 0x10000+i*0x10)...)
		r.apply(n150Caps(0, 0x100000+i*0x10)...)
	}
	if m, g := heldManagers(r); g > allocBound || m > 4*allocBound+4 {
		t.Errorf("%d bank managers held, of %d allocators outside a chip's; want at most %d of %d", m, g, 4*allocBound+4, allocBound)
	}
	p := r.proc()
	if s := statsOf(t, p); s["allocators_dropped"] != n-allocBound || s["bank_managers_refused"] != 0 {
		t.Errorf("stats %v, want %d allocators dropped", s, n-allocBound)
	}
	if k := p.AnomalyCounts["too_many_allocators"]; k != n-allocBound {
		t.Errorf("%d too_many_allocators anomalies, want %d", k, n-allocBound)
	}
	// The newest are whole: chip 0's last allocator, and a mesh tied to
	// the last allocator made outside it.
	if st := allocStats(t, r.dev(0), events.DRAM); st.TotalAllocated != 0 || st.TotalFree != dramBank {
		t.Errorf("chip 0: %+v", st)
	}
	last := 0x10000 + uint64(n-1)*0x10
	r.apply(evReq(1, mgrDRAM+last, 12*4096, 4096, true), evMeshAlloc(1, 0xa0, 0x5500a0000000, events.DRAM, 0x40, 12*4096), evView(1, 1, 0x40))
	if ms := r.proc().Meshes; len(ms) != 1 || ms[0].Allocator == nil || ms[0].Allocator.DRAM.TotalAllocated == nil || *ms[0].Allocator.DRAM.TotalAllocated != 4096 {
		t.Errorf("the mesh of the last allocator: %+v", ms)
	}
}

// TestAllocatorsTiedRefused: a process holding 256 allocators outside its
// chips, each its live mesh's, gets no more: the bank managers of a 257th
// are refused (counted and said), its mesh has no allocator view, and
// once a mesh closes there is room again.
func TestAllocatorsTiedRefused(t *testing.T) {
	r := newRec(t)
	mesh := func(i uint64) uint64 { return 0x5500a0000000 + i*0x1000 }
	for i := range uint64(allocBound + 1) {
		meshCycle(r, mesh(i), 0x10000+i*0x10, 0xa0+i, 4096)
	}
	if _, g := heldManagers(r); g > allocBound {
		t.Errorf("%d allocators outside a chip's held, want at most %d", g, allocBound)
	}
	p := r.proc()
	if s := statsOf(t, p); s["bank_managers_refused"] != 4 || s["allocators_dropped"] != 0 {
		t.Errorf("stats %v, want the 4 bank managers of the last allocator refused", s)
	}
	if k := p.AnomalyCounts["too_many_allocators"]; k != 4 {
		t.Errorf("%d too_many_allocators anomalies, want 4", k)
	}
	viewed := 0
	for _, m := range p.Meshes {
		if m.Allocator != nil {
			viewed++
		} else if m.MeshDevice != hex(mesh(allocBound)) {
			t.Errorf("mesh %s has no allocator view", m.MeshDevice)
		}
	}
	if viewed != allocBound {
		t.Errorf("%d meshes with an allocator view, want %d", viewed, allocBound)
	}
	r.apply(evMeshFree(1, 0xa0, mesh(0)), evMeshClose(1, mesh(0)))
	meshCycle(r, mesh(1000), 0x900000, 0xf000, 4096)
	for _, m := range r.proc().Meshes {
		if m.MeshDevice == hex(mesh(1000)) && (m.Allocator == nil || *m.Allocator.DRAM.TotalAllocated != 4096) {
			t.Errorf("the mesh made after a close: %+v", m)
		}
	}
}
