package devices

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

const (
	meshA = devicestest.MeshA
	meshB = devicestest.MeshB
	progP = devicestest.ProgP
	progQ = devicestest.ProgQ
)

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

// TestRules checks each ledger rule on a small synthetic stream.
func TestRules(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, r *rec)
	}{
		{"alloc counts by type, free returns to zero, peaks stay", func(t *testing.T, r *rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.DRAM, 0x1000, 4096),
				evAlloc(1, 0xa1, 0, events.L1, 0x2000, 100),
				evAlloc(1, 0xa2, 0, events.L1Small, 0x3000, 7),
				evAlloc(1, 0xa3, 0, events.Trace, 0x4000, 9),
			)
			tsPeak := r.apply(evAlloc(1, 0xa4, 0, events.SystemMemory, 0x5000, 11))
			eq(t, "chip 0", r.tot(0), totals{DRAM: 4096, L1: 100, L1Small: 7, Trace: 9, SysMem: 11, Live: 5})
			r.apply(evFree(2, 0xa0, 0), evFree(2, 0xa1, 0), evFree(2, 0xa2, 0), evFree(2, 0xa3, 0), evFree(2, 0xa4, 0))
			d := r.dev(0)
			eq(t, "chip 0 after frees", totOf(d), totals{})
			eq(t, "peak dram", d.Peaks.DRAMBytes, Peak{4096, tsPeak - 400})
			eq(t, "peak sysmem", d.Peaks.SystemMemoryBytes, Peak{11, tsPeak})
			eq(t, "peak live", d.Peaks.LiveBuffers, Peak{5, tsPeak})
			eq(t, "peak cb", d.Peaks.CBRegisteredBytes, Peak{})
			p := r.proc()
			eq(t, "leaks", len(p.Leaks), 0)
			eq(t, "unknown frees", p.UnknownFrees, 0)
		}},
		{"peak timestamp is when first reached", func(t *testing.T, r *rec) {
			ts1 := r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100))
			r.apply(evFree(1, 0xa0, 0), evAlloc(1, 0xa0, 0, events.DRAM, 0, 100))
			eq(t, "peak", r.dev(0).Peaks.DRAMBytes, Peak{100, ts1})
		}},
		{"hooked alloc and free count nothing", func(t *testing.T, r *rec) {
			a := evAlloc(1, 0xa0, 3, events.DRAM, 0, 4096)
			a.Hooked = true
			f := evFree(1, 0xa0, 3)
			f.Hooked = true
			r.apply(a, f)
			eq(t, "chip 3", r.tot(3), totals{})
			p := r.proc()
			eq(t, "hooked allocs", p.Stats.HookedAllocs, 1)
			eq(t, "hooked frees", p.Stats.HookedFrees, 1)
			eq(t, "unknown frees", p.UnknownFrees, 0)
			eq(t, "double frees", p.DoubleFrees, 0)
		}},
		{"zero-size and non-owning allocs count nothing", func(t *testing.T, r *rec) {
			z := evAlloc(1, 0xa0, 0, events.DRAM, 0, 0)
			n := evAlloc(1, 0xa1, 0, events.DRAM, 0, 64)
			n.OwnsData = false
			r.apply(z, n)
			eq(t, "chip 0", r.tot(0), totals{})
			p := r.proc()
			eq(t, "zero", p.Stats.ZeroSizeAllocs, 1)
			eq(t, "non-owning", p.Stats.NonOwningAllocs, 1)
			eq(t, "anomalies", sumCounts(p), 0)
		}},
		{"invalid buffer type and implausible size are anomalies", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.BufferType(7), 0, 64), evAlloc(1, 0xa1, 0, events.BufferType(-1), 0, 64),
				evAlloc(1, 0xa2, 0, events.DRAM, 0, 1<<50))
			eq(t, "chip 0", r.tot(0), totals{})
			p := r.proc()
			eq(t, "invalid type", p.AnomalyCounts["invalid_buffer_type"], 2)
			eq(t, "implausible", p.AnomalyCounts["implausible_size"], 1)
			eq(t, "listed", len(p.Anomalies), 3)
		}},
		{"read error alloc is not charged", func(t *testing.T, r *rec) {
			a := evAlloc(1, 0xa0, 0, events.DRAM, 0, 64)
			a.ReadError = true
			r.apply(a)
			eq(t, "chip 0", r.tot(0), totals{})
			eq(t, "read errors", r.proc().AnomalyCounts["read_error"], 1)
		}},
		{"realloc without free releases the old entry", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0x100, 1000), evAlloc(1, 0xa0, 1, events.L1, 0x200, 30))
			eq(t, "chip 0", r.tot(0), totals{})
			eq(t, "chip 1", r.tot(1), totals{L1: 30, Live: 1})
			p := r.proc()
			eq(t, "anomaly", p.AnomalyCounts["realloc_without_free"], 1)
			eq(t, "leaks", len(p.Leaks), 1)
			r.apply(evFree(1, 0xa0, 1))
			eq(t, "chip 1", r.tot(1), totals{})
			eq(t, "double frees", r.proc().DoubleFrees, 0)
		}},
		{"unknown free is counted and never makes a total negative", func(t *testing.T, r *rec) {
			f := evFree(1, 0xdead, 4)
			f.Size = 5000
			f.BufferType = events.DRAM
			r.apply(evAlloc(1, 0xa0, 4, events.DRAM, 0, 100), f)
			eq(t, "chip 4", r.tot(4), totals{DRAM: 100, Live: 1})
			p := r.proc()
			eq(t, "unknown", p.UnknownFrees, 1)
			eq(t, "unknown bytes", p.UnknownFreeBytes, 5000)
			eq(t, "double", p.DoubleFrees, 0)
		}},
		{"unknown free touches its chip", func(t *testing.T, r *rec) {
			r.apply(evFree(1, 0xdead, 42))
			eq(t, "chips", len(r.chips()), 1)
			eq(t, "chip 42", r.tot(42), totals{})
		}},
		{"double free", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100), evFree(1, 0xa0, 0), evFree(1, 0xa0, 0))
			p := r.proc()
			eq(t, "double", p.DoubleFrees, 1)
			eq(t, "unknown", p.UnknownFrees, 0)
			eq(t, "chip 0", r.tot(0), totals{})
		}},
		{"a new alloc takes the key out of the freed set", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100), evFree(1, 0xa0, 0),
				evAlloc(1, 0xa0, 0, events.L1, 0, 50), evFree(1, 0xa0, 0))
			p := r.proc()
			eq(t, "double", p.DoubleFrees, 0)
			eq(t, "realloc", p.AnomalyCounts["realloc_without_free"], 0)
			r.apply(evFree(1, 0xa0, 0))
			eq(t, "double after", r.proc().DoubleFrees, 1)
		}},
		{"alloc on an unknown device counts nothing", func(t *testing.T, r *rec) {
			a := evAlloc(1, 0xa0, 0, events.DRAM, 0, 100)
			a.DeviceKind, a.Chip, a.DeviceVptr = events.DeviceUnknown, -1, 0x1234
			b := a
			b.Object, b.DeviceKind = 0xa1, events.DeviceNone
			r.apply(a, b)
			p := r.proc()
			eq(t, "devices", len(p.Devices), 0)
			eq(t, "anomaly", p.AnomalyCounts["unknown_device"], 2)
			r.apply(evFree(1, 0xa0, 0))
			eq(t, "unknown frees", r.proc().UnknownFrees, 1)
		}},
		{"mesh buffer counts once on every chip of its mesh", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(7, 0xb0, meshA, events.DRAM, 0x8000, 1<<20),
				evView(7, 0, 0x8000), evView(7, 1, 0x8000), evView(7, 2, 0x8000), evView(7, 3, 0x8000))
			for c := int32(0); c < 4; c++ {
				eq(t, "chip", r.tot(c), totals{DRAM: 1 << 20, Live: 1})
			}
			eq(t, "chips", len(r.chips()), 4)
			// Chips known: the next mesh alloc is charged at once, before its views.
			r.apply(evMeshAlloc(8, 0xb1, meshA, events.L1, 0x100, 512))
			eq(t, "chip 2", r.tot(2), totals{DRAM: 1 << 20, L1: 512, Live: 2})
			r.apply(evView(8, 0, 0x100), evView(8, 1, 0x100), evView(8, 2, 0x100), evView(8, 3, 0x100))
			eq(t, "chip 2 after views", r.tot(2), totals{DRAM: 1 << 20, L1: 512, Live: 2})
			p := r.proc()
			eq(t, "leaks (2 buffers x 4 chips)", len(p.Leaks), 8)
			eq(t, "leak mesh", p.Leaks[0].Mesh, true)
			r.apply(evMeshFree(9, 0xb0, meshA), evMeshFree(9, 0xb1, meshA))
			for c := int32(0); c < 4; c++ {
				eq(t, "chip after free", r.tot(c), totals{})
			}
		}},
		{"mesh chip set growth charges live buffers and CBs of the mesh", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(7, 0xb0, meshA, events.DRAM, 0x8000, 1000), evView(7, 10, 0x8000))
			r.apply(evCBLayoutMesh(7, progP, meshA), evCBMesh(7, meshA, 0x100, 64))
			eq(t, "chip 10", r.tot(10), totals{DRAM: 1000, CB: 64, Live: 1})
			// A later mesh alloc whose views name one more chip.
			r.apply(evMeshAlloc(7, 0xb1, meshA, events.L1, 0x9000, 10), evView(7, 10, 0x9000), evView(7, 11, 0x9000))
			eq(t, "chip 10", r.tot(10), totals{DRAM: 1000, L1: 10, CB: 64, Live: 2})
			eq(t, "chip 11", r.tot(11), totals{DRAM: 1000, L1: 10, CB: 64, Live: 2})
			eq(t, "learned", r.proc().Stats.MeshChipsLearned, 2)
		}},
		{"views only teach chips right after the mesh alloc on the same thread", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(7, 0xb0, meshA, events.DRAM, 0x8000, 1000),
				evView(8, 1, 0x8000), // other thread
				evView(7, 2, 0x9000), // other address
				evView(7, 3, 0x8000), // counts
				evAlloc(7, 0xa0, 5, events.L1, 0x8000, 1),
				evView(7, 4, 0x8000), // after another event on the thread: a plain view
			)
			eq(t, "chip 1", r.tot(1), totals{})
			eq(t, "chip 2", r.tot(2), totals{})
			eq(t, "chip 3", r.tot(3), totals{DRAM: 1000, Live: 1})
			eq(t, "chip 4", r.tot(4), totals{})
			eq(t, "touched", len(r.chips()), 5)
		}},
		{"views in between other threads' events still count", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(7, 0xb0, meshA, events.DRAM, 0x8000, 1000),
				evAlloc(8, 0xa0, 5, events.L1, 0x8000, 1),
				evView(7, 0, 0x8000), evFree(8, 0xa0, 5), evView(7, 1, 0x8000))
			eq(t, "chip 0", r.tot(0), totals{DRAM: 1000, Live: 1})
			eq(t, "chip 1", r.tot(1), totals{DRAM: 1000, Live: 1})
		}},
		{"mesh with no views is an anomaly and counts nowhere", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(7, 0xb0, meshA, events.DRAM, 0x8000, 1000), evAlloc(7, 0xa0, 5, events.L1, 0, 1))
			p := r.proc()
			eq(t, "anomaly", p.AnomalyCounts["mesh_chips_unknown"], 1)
			eq(t, "unplaced leaks", len(p.UnplacedLeaks), 1)
			eq(t, "leaks", len(p.Leaks), 1)
			r.apply(evMeshFree(7, 0xb0, meshA))
			eq(t, "unplaced after free", len(r.proc().UnplacedLeaks), 0)
		}},
		{"views count nothing and are never freed", func(t *testing.T, r *rec) {
			r.apply(evView(1, 0, 0x100), evView(1, 0, 0x200), evView(1, 9, 0x300))
			eq(t, "chip 0", r.tot(0), totals{})
			eq(t, "chip 9", r.tot(9), totals{})
			eq(t, "views", r.proc().Stats.Views, 3)
		}},
		{"mark_deallocated keeps a live buffer counted until its chip closes", func(t *testing.T, r *rec) {
			// Upstream: "without releasing underlying device memory".
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100), evMark(1, 0xa0), evMark(1, 0xa1))
			eq(t, "chip 0", r.tot(0), totals{DRAM: 100, Live: 1})
			p := r.proc()
			eq(t, "held", p.Stats.MarkedHeld, 1)
			eq(t, "released", p.Stats.ReleasedByMark, 0)
			eq(t, "anomalies", sumCounts(p), 0)
			eq(t, "leaks", len(p.Leaks), 1)
			eq(t, "leak marked", p.Leaks[0].MarkedDeallocated, true)
			// The Buffer is gone: a stray free changes nothing, and a new
			// Buffer at the same address is a new buffer beside the held one.
			r.apply(evFree(1, 0xa0, 0), evAlloc(1, 0xa0, 0, events.DRAM, 0x1000, 50))
			p = r.proc()
			eq(t, "unknown", p.UnknownFrees, 0)
			eq(t, "double", p.DoubleFrees, 0)
			eq(t, "after release", p.Stats.FreesAfterRelease, 1)
			eq(t, "anomalies after", sumCounts(p), 0)
			eq(t, "chip 0 with both", r.tot(0), totals{DRAM: 150, Live: 2})
			r.apply(evFree(1, 0xa0, 0))
			eq(t, "chip 0 held only", r.tot(0), totals{DRAM: 100, Live: 1})
			r.apply(evDeviceClose(1, 0))
			eq(t, "chip 0 closed", r.tot(0), totals{})
			p = r.proc()
			eq(t, "released by mark", p.Stats.ReleasedByMark, 1)
			eq(t, "leaks at the end", len(p.Leaks), 0)
		}},
		{"device close releases everything on the chip", func(t *testing.T, r *rec) {
			r.apply(
				evAlloc(1, 0xa0, 0, events.DRAM, 0, 100),
				evAlloc(1, 0xa1, 1, events.DRAM, 0, 200),
				evMeshAlloc(1, 0xb0, meshA, events.L1, 0x50, 30), evView(1, 0, 0x50), evView(1, 1, 0x50),
				evCBLayout(1, progP, 0), evCB(1, 0, 0x10, 8), evCB(1, 1, 0x10, 8),
			)
			eq(t, "chip 0 before", r.tot(0), totals{DRAM: 100, L1: 30, CB: 8, Live: 2})
			r.apply(evDeviceClose(1, 0))
			d := r.dev(0)
			eq(t, "chip 0", totOf(d), totals{})
			eq(t, "closed", d.Closed, true)
			eq(t, "peak kept", d.Peaks.DRAMBytes.Value, 100)
			eq(t, "chip 1", r.tot(1), totals{DRAM: 200, L1: 30, CB: 8, Live: 2})
			// Later events for released buffers change nothing.
			r.apply(evMark(1, 0xa0), evFree(1, 0xa0, 0))
			eq(t, "chip 0 after", r.tot(0), totals{})
			p := r.proc()
			eq(t, "unknown", p.UnknownFrees, 0)
			eq(t, "after release", p.Stats.FreesAfterRelease, 1)
			eq(t, "leaks", len(p.Leaks), 2) // 0xa1 and the mesh buffer on chip 1; none on 0
			// The mesh lost chip 0: freeing its buffer uncharges chip 1 only.
			r.apply(evMeshFree(1, 0xb0, meshA))
			eq(t, "chip 1 after mesh free", r.tot(1), totals{DRAM: 200, CB: 8, Live: 1})
			eq(t, "still closed", r.dev(0).Closed, true)
			// Any later activity on chip 0 reopens it.
			r.apply(evAlloc(1, 0xa2, 0, events.DRAM, 0, 1))
			d = r.dev(0)
			eq(t, "reopened", d.Closed, false)
			eq(t, "chip 0 reopened", totOf(d), totals{DRAM: 1, Live: 1})
		}},
		{"device close of a chip with a mesh: later mesh allocs skip it", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(1, 0xb0, meshA, events.L1, 0x50, 30), evView(1, 0, 0x50), evView(1, 1, 0x50),
				evDeviceClose(1, 0), evMeshAlloc(1, 0xb1, meshA, events.L1, 0x90, 5))
			eq(t, "chip 0", r.tot(0), totals{})
			eq(t, "chip 1", r.tot(1), totals{L1: 35, Live: 2})
		}},
		{"mesh close releases the mesh, its CBs and its chips", func(t *testing.T, r *rec) {
			r.apply(
				evMeshAlloc(1, 0xb0, meshA, events.DRAM, 0x50, 30), evView(1, 2, 0x50), evView(1, 3, 0x50),
				evAlloc(1, 0xa0, 2, events.L1, 0, 7), // a chip buffer on a mesh chip
				evAlloc(1, 0xa1, 4, events.L1, 0, 9), // another chip
				evCBLayoutMesh(1, progP, meshA), evCBMesh(1, meshA, 0, 64),
			)
			eq(t, "chip 3 before", r.tot(3), totals{DRAM: 30, CB: 64, Live: 1})
			r.apply(evMeshClose(1, meshA))
			eq(t, "chip 2", r.tot(2), totals{})
			eq(t, "chip 3", r.tot(3), totals{})
			eq(t, "chip 4", r.tot(4), totals{L1: 9, Live: 1})
			eq(t, "closed 2", r.dev(2).Closed, true)
			eq(t, "closed 3", r.dev(3).Closed, true)
			// Upstream then closes each chip: no-ops. Marks change nothing.
			r.apply(evDeviceClose(1, 2), evDeviceClose(1, 3), evMark(1, 0xb0), evMark(1, 0xa0))
			eq(t, "chip 2 after", r.tot(2), totals{})
			p := r.proc()
			eq(t, "released by close", p.Stats.ReleasedByClose, 2)
			eq(t, "released by mark", p.Stats.ReleasedByMark, 0)
			eq(t, "anomalies", sumCounts(p), 0)
			// The pointer is reused by a new MeshDevice over other chips.
			r.apply(evMeshAlloc(1, 0xb2, meshA, events.DRAM, 0x70, 11), evView(1, 5, 0x70))
			eq(t, "chip 2 not charged", r.tot(2), totals{})
			eq(t, "chip 5", r.tot(5), totals{DRAM: 11, Live: 1})
		}},
		{"mesh close of an unknown mesh is harmless", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 5), evMeshClose(1, meshB))
			eq(t, "chip 0", r.tot(0), totals{DRAM: 5, Live: 1})
		}},
		{"CBs count per chip and are released by teardown", func(t *testing.T, r *rec) {
			r.apply(evCBLayout(3, progP, 3), evCB(3, 3, 0x100, 1000), evCB(3, 3, 0x500, 24), evCB(3, 5, 0x100, 1000))
			eq(t, "chip 3", r.tot(3), totals{CB: 1024})
			eq(t, "chip 5", r.tot(5), totals{CB: 1000})
			r.apply(evCBTeardown(4, progP), evCBFree(4, 3))
			eq(t, "chip 3 after", r.tot(3), totals{})
			eq(t, "chip 5 untouched", r.tot(5), totals{CB: 1000})
			r.apply(evCBFree(4, 5))
			eq(t, "chip 5 after", r.tot(5), totals{})
			eq(t, "peak", r.dev(3).Peaks.CBRegisteredBytes.Value, 1024)
		}},
		{"a program laid out again is not double counted", func(t *testing.T, r *rec) {
			r.apply(evCBLayout(3, progP, 0), evCB(3, 0, 0x100, 1000), evCB(3, 0, 0x500, 24))
			r.apply(evCBLayout(3, progP, 0)) // no CB follows: nothing changes
			eq(t, "chip 0", r.tot(0), totals{CB: 1024})
			r.apply(evCBLayout(3, progP, 0), evCB(3, 0, 0x100, 2000))
			eq(t, "chip 0 relaid", r.tot(0), totals{CB: 2000})
			eq(t, "peak", r.dev(0).Peaks.CBRegisteredBytes.Value, 2000)
			eq(t, "relayouts", r.proc().Stats.CBRelayouts, 1)
		}},
		{"CBs of two programs on one chip", func(t *testing.T, r *rec) {
			r.apply(evCBLayout(3, progP, 0), evCB(3, 0, 0x100, 100),
				evCBLayout(4, progQ, 0), evCB(4, 0, 0x100, 10), evCB(3, 0, 0x200, 1))
			eq(t, "chip 0", r.tot(0), totals{CB: 111})
			r.apply(evProgramDestroy(5, progP))
			eq(t, "chip 0 after destroy", r.tot(0), totals{CB: 10})
		}},
		{"program destroy releases legacy CBs that are never freed", func(t *testing.T, r *rec) {
			r.apply(evMeshAlloc(1, 0xb0, meshA, events.DRAM, 0x50, 30), evView(1, 0, 0x50), evView(1, 1, 0x50),
				evCBLayoutMesh(2, progP, meshA), evCBMesh(2, meshA, 0x10, 50), evCBMesh(2, meshA, 0x90, 50))
			eq(t, "chip 1", r.tot(1), totals{DRAM: 30, CB: 100, Live: 1})
			r.apply(evProgramDestroy(2, progP))
			eq(t, "chip 0", r.tot(0), totals{DRAM: 30, Live: 1})
			eq(t, "chip 1", r.tot(1), totals{DRAM: 30, Live: 1})
		}},
		{"global CBs count nothing", func(t *testing.T, r *rec) {
			cb := evCB(3, 0, 0x100, 1000)
			cb.Global = true
			r.apply(evCBLayout(3, progP, 0), cb)
			eq(t, "chip 0", r.tot(0), totals{})
			eq(t, "global", r.proc().Stats.GlobalCBs, 1)
		}},
		{"CB without a program counts under program 0", func(t *testing.T, r *rec) {
			r.apply(evCB(3, 0, 0x100, 1000))
			eq(t, "chip 0", r.tot(0), totals{CB: 1000})
			eq(t, "anomaly", r.proc().AnomalyCounts["cb_without_program"], 1)
			r.apply(evProgramDestroy(3, 0))
			eq(t, "chip 0 after", r.tot(0), totals{})
		}},
		{"CB free without a teardown is an anomaly", func(t *testing.T, r *rec) {
			r.apply(evCBLayout(3, progP, 0), evCB(3, 0, 0x100, 1000), evCBFree(3, 0))
			eq(t, "chip 0", r.tot(0), totals{CB: 1000})
			eq(t, "anomaly", r.proc().AnomalyCounts["cb_free_without_program"], 1)
		}},
		{"CB free of an unknown group is a stat", func(t *testing.T, r *rec) {
			r.apply(evCBTeardown(3, progQ), evCBFree(3, 0), evCBFreeMesh(3, meshB))
			p := r.proc()
			eq(t, "unknown", p.Stats.CBFreesUnknown, 2)
			eq(t, "anomalies", sumCounts(p), 0)
		}},
		{"lost events make the summary incomplete", func(t *testing.T, r *rec) {
			a := evAlloc(1, 0xa0, 0, events.DRAM, 0, 100)
			a.LostBefore = 3
			r.apply(a, evLost(4))
			s := r.summary()
			eq(t, "lost", s.LostEvents, 7)
			eq(t, "complete", s.Complete, false)
			eq(t, "processes", len(s.Processes), 1) // KindLost creates none
		}},
		{"process exit freezes the ledger and leaks what is live", func(t *testing.T, r *rec) {
			r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0x100, 100), evExit(3, 0), evFree(1, 0xa0, 0))
			p := r.proc()
			eq(t, "exited", p.Exited, true)
			eq(t, "exit code", p.ExitCode, 3)
			eq(t, "chip 0 kept", r.tot(0), totals{DRAM: 100, Live: 1})
			eq(t, "leaks", len(p.Leaks), 1)
			eq(t, "after exit", p.AnomalyCounts["event_after_exit"], 1)
			eq(t, "leak", p.Leaks[0], Leak{Device: 0, Type: "DRAM", Address: 0x100, Size: 100, PageSize: 1024,
				Buffer: "0xa0", Tid: 1, Seq: 1, TsNs: 100, btype: events.DRAM})
		}},
		{"unknown event kinds are anomalies", func(t *testing.T, r *rec) {
			r.apply(events.Event{Kind: 200, Chip: -1}, events.Event{Kind: 0, Chip: -1})
			eq(t, "anomaly", r.proc().AnomalyCounts["unknown_event_kind"], 2)
		}},
		{"anomaly list is bounded, counts are not", func(t *testing.T, r *rec) {
			for i := 0; i < 250; i++ {
				r.apply(evAlloc(1, uint64(i), 0, events.BufferType(9), 0, 1))
			}
			p := r.proc()
			eq(t, "count", p.AnomalyCounts["invalid_buffer_type"], 250)
			eq(t, "list", len(p.Anomalies), MaxAnomalies)
			eq(t, "first seq", p.Anomalies[0].Seq, 1)
		}},
		{"touched chips are sorted, sparse, negative and huge", func(t *testing.T, r *rec) {
			r.apply(evView(1, 1<<30, 0), evAlloc(1, 0xa0, 100, events.DRAM, 0, 1), evCB(1, -5, 0, 1),
				evDeviceClose(1, 64), evFree(1, 0x99, 7))
			if got, want := r.chips(), []int32{-5, 7, 64, 100, 1 << 30}; !slices.Equal(got, want) {
				t.Errorf("chips %v, want %v", got, want)
			}
		}},
		{"leaks are sorted by device, type, address with groups", func(t *testing.T, r *rec) {
			r.apply(
				evAlloc(1, 0xa0, 2, events.L1, 0x300, 1),
				evAlloc(1, 0xa1, 2, events.DRAM, 0x900, 2),
				evAlloc(1, 0xa2, 2, events.L1, 0x100, 4),
				evAlloc(1, 0xa3, 1, events.Trace, 0x100, 8),
				evMeshAlloc(1, 0xb0, meshA, events.DRAM, 0x500, 16), evView(1, 2, 0x500), evView(1, 1, 0x500),
			)
			p := r.proc()
			type k struct {
				dev  int32
				typ  string
				addr uint64
			}
			var got []k
			for _, l := range p.Leaks {
				got = append(got, k{l.Device, l.Type, l.Address})
			}
			want := []k{{1, "DRAM", 0x500}, {1, "TRACE", 0x100}, {2, "DRAM", 0x500}, {2, "DRAM", 0x900}, {2, "L1", 0x100}, {2, "L1", 0x300}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("leaks %v, want %v", got, want)
			}
			wantG := []LeakGroup{{1, "DRAM", 1, 16}, {1, "TRACE", 1, 8}, {2, "DRAM", 2, 18}, {2, "L1", 2, 5}}
			if !reflect.DeepEqual(p.LeakGroups, wantG) {
				t.Errorf("leak groups %v, want %v", p.LeakGroups, wantG)
			}
		}},
		{"processes are independent and sorted", func(t *testing.T, r *rec) {
			a := evAlloc(1, 0xa0, 0, events.DRAM, 0, 100)
			a.Pid = 300
			b := evAlloc(1, 0xa0, 0, events.DRAM, 0, 7)
			b.Pid = 20
			f := evFree(1, 0xa0, 0)
			f.Pid = 300
			r.apply(a, b, f)
			s := r.summary()
			if len(s.Processes) != 2 || s.Processes[0].Pid != 20 || s.Processes[1].Pid != 300 {
				t.Fatalf("processes %+v", s.Processes)
			}
			eq(t, "pid 20", totOf(s.Processes[0].Devices[0]), totals{DRAM: 7, Live: 1})
			eq(t, "pid 300", totOf(s.Processes[1].Devices[0]), totals{})
			if got := r.l.Processes(); !slices.Equal(got, []uint32{20, 300}) {
				t.Errorf("Processes() = %v", got)
			}
			eq(t, "Devices(20)", totOf(r.l.Devices(20)[0]), totals{DRAM: 7, Live: 1})
			if r.l.Devices(1) != nil {
				t.Error("Devices of an unknown pid")
			}
		}},
		{"process info appears in the summary", func(t *testing.T, r *rec) {
			r.l.SetProcessInfo(r.pid, ProcessInfo{Command: "python -m pytest", Parent: 1, NsPid: 5, AttachedMidRun: true})
			p := r.proc()
			eq(t, "command", p.Command, "python -m pytest")
			eq(t, "parent", p.Parent, 1)
			eq(t, "nspid", p.NsPid, 5)
			eq(t, "mid-run", p.AttachedMidRun, true)
			eq(t, "devices", len(p.Devices), 0)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newRec(t)) })
	}
}

func sumCounts(p ProcessSummary) uint64 {
	var n uint64
	for _, v := range p.AnomalyCounts {
		n += v
	}
	return n
}

// TestSummaryJSONContract checks the public field names of the summary line.
func TestSummaryJSONContract(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0x55d0c0ffee00, 0, events.DRAM, 131072, 4096), evExit(0, 0))
	s := r.summary()
	raw, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	hasKeys(t, "summary", m, "type", "lost_events", "complete", "processes")
	eq(t, "type", m["type"], any("summary"))
	p := m["processes"].([]any)[0].(map[string]any)
	hasKeys(t, "process", p, "pid", "command", "attached_mid_run", "exited", "exit_code", "exit_signal", "devices",
		"leaks", "leak_groups", "unknown_frees", "unknown_free_bytes", "double_frees", "stats", "anomaly_counts", "anomalies",
		"l1_clashes")
	hasKeys(t, "stats", p["stats"].(map[string]any), "l1_clashes", "l1_headroom_warnings")
	d := p["devices"].([]any)[0].(map[string]any)
	counters := []string{"dram_bytes", "l1_bytes", "l1_small_bytes", "trace_bytes", "system_memory_bytes", "cb_bytes", "live_buffers", "cb_registered_bytes", "cb_resident_total_bytes"}
	hasKeys(t, "device", d, append([]string{"device", "closed", "peaks", "l1_headroom", "min_l1_headroom"}, counters...)...)
	peaks := d["peaks"].(map[string]any)
	hasKeys(t, "peaks", peaks, counters...)
	for _, c := range counters {
		hasKeys(t, "peak "+c, peaks[c].(map[string]any), "value", "ts_ns")
	}
	leak := p["leaks"].([]any)[0].(map[string]any)
	hasKeys(t, "leak", leak, "device", "type", "address", "size", "page_size", "buffer", "mesh", "tid", "seq", "ts_ns")
	eq(t, "leak buffer", leak["buffer"], any("0x55d0c0ffee00"))
	eq(t, "leak address", leak["address"], any(float64(131072)))
	hasKeys(t, "leak group", p["leak_groups"].([]any)[0].(map[string]any), "device", "type", "count", "bytes")
	hasKeys(t, "anomaly_counts", p["anomaly_counts"].(map[string]any), "unknown_device", "realloc_without_free",
		"cb_without_program", "invalid_buffer_type")

	// An l1_clash, in the summary as on its line.
	r = newRec(t)
	r.apply(evAlloc(1, 0xa0, 0, events.L1, 0x10000, 4096), evCBLayout(1, progP, 0), evCB(1, 0, 0x1000, 0x10000), evExit(0, 0))
	s = r.summary()
	raw, _ = json.Marshal(&s)
	m = nil
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	p = m["processes"].([]any)[0].(map[string]any)
	c := p["l1_clashes"].([]any)[0].(map[string]any)
	hasKeys(t, "l1_clash", c, "type", "seq", "ts_ns", "pid", "tid", "device", "program", "cb_region_end", "lowest_l1_address",
		"headroom", "lowest_l1_buffer", "l1_buffers", "l1_buffers_count", "l1_buffers_bytes")
	eq(t, "l1_clash type", c["type"], any("l1_clash"))
	hasKeys(t, "l1 buffer", c["l1_buffers"].([]any)[0].(map[string]any), "buffer", "address", "size", "mesh", "tid", "seq", "ts_ns")
	d = p["devices"].([]any)[0].(map[string]any)
	hasKeys(t, "min_l1_headroom", d["min_l1_headroom"].(map[string]any), "value", "ts_ns", "lowest_l1_address", "cb_region_end")

	// An empty ledger marshals lists as [], not null.
	empty := NewLedger(Options{})
	empty.SetProcessInfo(1, ProcessInfo{})
	es := empty.Summary()
	raw, _ = json.Marshal(&es)
	if bytes.Contains(raw, []byte("null")) {
		t.Errorf("empty summary has null: %s", raw)
	}
}

func hasKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: no %q in %v", what, k, m)
		}
	}
}

// TestSummaryDeterministic: the same stream gives byte-identical JSON, and
// taking a summary changes nothing.
func TestSummaryDeterministic(t *testing.T) {
	stream := func() []events.Event {
		var evs []events.Event
		for i := 0; i < 200; i++ {
			chip := int32(i % 13 * 7)
			evs = append(evs, evAlloc(uint32(i%3), uint64(0x1000+i), chip, events.BufferType(i%5), uint64(i*64), uint64(i+1)))
			if i%4 == 0 {
				evs = append(evs, evMeshAlloc(1, uint64(0x9000+i), meshA+uint64(i%2), events.DRAM, uint64(i), 10),
					evView(1, int32(i%5), uint64(i)), evView(1, int32(i%7+100), uint64(i)))
			}
			if i%3 == 0 {
				evs = append(evs, evFree(2, uint64(0x1000+i/2), 0))
			}
			if i%50 == 0 {
				evs = append(evs, evAlloc(1, 1, 0, events.BufferType(99), 0, 1), evCB(1, chip, 0, 5))
			}
		}
		return evs
	}
	var out [3][]byte
	for i := range out {
		r := newRec(t)
		r.apply(stream()...)
		s1 := r.l.Summary()
		s2 := r.l.Summary()
		a, _ := json.Marshal(&s1)
		b, _ := json.Marshal(&s2)
		if !bytes.Equal(a, b) {
			t.Fatal("Summary changed the ledger")
		}
		out[i] = a
	}
	if !bytes.Equal(out[0], out[1]) || !bytes.Equal(out[1], out[2]) {
		t.Fatal("same stream, different summaries")
	}
}

// TestCheckDetectsCorruption: the consistency check the fuzz and model
// tests rely on is not vacuous.
func TestCheckDetectsCorruption(t *testing.T) {
	corruptions := map[string]func(p *proc){
		"chip total":   func(p *proc) { p.chips[0].cur[CounterDRAM]++ },
		"live count":   func(p *proc) { p.chips[1].cur[CounterLiveBuffers]-- },
		"mesh total":   func(p *proc) { p.meshes[1].tot[CounterL1] += 5 },
		"cb group":     func(p *proc) { p.l1.progs[progP].groups[0].bytes++ },
		"index":        func(p *proc) { p.bufs.index.del(0xa0, &p.bufs.slots) },
		"ended":        func(p *proc) { p.bufs.ended[0xa0] = slotFreed },
		"peak":         func(p *proc) { p.chips[0].peak[CounterDRAM] = 0 },
		"closed chip":  func(p *proc) { p.chips[0].closed = true },
		"mesh chip":    func(p *proc) { p.meshes[1].chips = append(p.meshes[1].chips, 0) },
		"wrap":         func(p *proc) { p.chips[5].cur[CounterDRAM] -= 10; p.chips[5].peak[CounterDRAM] -= 10 },
		"accounting":   func(p *proc) { p.anomalies.counts[anAccounting]++ },
		"free slots":   func(p *proc) { p.bufs.live++ },
		"orphan group": func(p *proc) { p.l1.progs[progQ] = &progCBs{} },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			r := newRec(t)
			r.apply(
				evAlloc(1, 0xa0, 0, events.DRAM, 0, 100),
				evMeshAlloc(1, 0xb0, meshA, events.L1, 0x50, 30), evView(1, 1, 0x50), evView(1, 2, 0x50),
				evCBLayout(1, progP, 0), evCB(1, 0, 0x10, 8),
				evView(1, 5, 0),
			)
			corrupt(r.l.procs[r.pid])
			if err := r.l.Check(); err == nil {
				t.Error("Check found nothing")
			}
		})
	}
}

func TestExitedAccessor(t *testing.T) {
	r := newRec(t)
	if ex, _, _ := r.l.Exited(r.pid); ex {
		t.Error("unknown pid exited")
	}
	r.apply(evAlloc(1, 0xa0, 0, events.DRAM, 0, 100), evExit(0, 9))
	ex, code, sig := r.l.Exited(r.pid)
	if !ex || code != 0 || sig != 9 {
		t.Errorf("Exited = %v %d %d", ex, code, sig)
	}
}
