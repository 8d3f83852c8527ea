package devices

import (
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// Event constructors for synthetic streams. Seq, TsNs and Pid are filled
// in by a rec when left zero.

// chipPtr is a fake Device* for a chip id.
func chipPtr(chip int32) uint64 { return 0x7f0000000000 + uint64(uint32(chip))*0x1000 }

func evAlloc(tid uint32, buf uint64, chip int32, t events.BufferType, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Tid: tid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: t, Address: addr, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

func evMeshAlloc(tid uint32, buf, mesh uint64, t events.BufferType, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, BufferType: t, Address: addr, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

func evView(tid uint32, chip int32, addr uint64) events.Event {
	return events.Event{Kind: events.KindView, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, Address: addr, Size: 4096}
}

func evFree(tid uint32, buf uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindFree, Tid: tid, Object: buf, Device: chipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, OwnsData: true, Status: 1}
}

func evMeshFree(tid uint32, buf, mesh uint64) events.Event {
	return events.Event{Kind: events.KindFree, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, OwnsData: true, Status: 1}
}

func evMark(tid uint32, buf uint64) events.Event {
	return events.Event{Kind: events.KindMarkDeallocated, Tid: tid, Object: buf, Chip: -1}
}

func evCBLayout(tid uint32, prog uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindCBLayout, Tid: tid, Object: prog, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

func evCBLayoutMesh(tid uint32, prog, mesh uint64) events.Event {
	return events.Event{Kind: events.KindCBLayout, Tid: tid, Object: prog, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

func evCB(tid uint32, chip int32, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindCBAlloc, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: addr, Size: size}
}

func evCBMesh(tid uint32, mesh uint64, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindCBAlloc, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1, Address: addr, Size: size}
}

func evCBTeardown(tid uint32, prog uint64) events.Event {
	return events.Event{Kind: events.KindCBTeardown, Tid: tid, Object: prog, Chip: -1}
}

func evCBFree(tid uint32, chip int32) events.Event {
	return events.Event{Kind: events.KindCBFree, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

func evCBFreeMesh(tid uint32, mesh uint64) events.Event {
	return events.Event{Kind: events.KindCBFree, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

func evProgramDestroy(tid uint32, prog uint64) events.Event {
	return events.Event{Kind: events.KindProgramDestroy, Tid: tid, Object: prog, Chip: -1}
}

func evDeviceClose(tid uint32, chip int32) events.Event {
	return events.Event{Kind: events.KindDeviceClose, Tid: tid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

func evMeshClose(tid uint32, mesh uint64) events.Event {
	return events.Event{Kind: events.KindMeshClose, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

func evExit(code, sig int) events.Event {
	return events.Event{Kind: events.KindExit, ExitCode: code, ExitSignal: sig, Chip: -1}
}

func evLost(n uint64) events.Event {
	return events.Event{Kind: events.KindLost, LostBefore: n, Chip: -1}
}

// rec applies events to a ledger, numbering them, and checks the ledger's
// internal consistency after each one.
type rec struct {
	t   testing.TB
	l   *Ledger
	pid uint32
	seq uint64
	ts  uint64
}

func newRec(t testing.TB) *rec {
	return &rec{t: t, l: NewLedger(), pid: 1000}
}

// apply applies events in order; it returns the ts of the last.
func (r *rec) apply(evs ...events.Event) uint64 {
	r.t.Helper()
	for _, e := range evs {
		r.seq++
		r.ts += 100
		if e.Seq == 0 {
			e.Seq = r.seq
		}
		if e.TsNs == 0 {
			e.TsNs = r.ts
		}
		if e.Pid == 0 && e.Kind != events.KindLost {
			e.Pid = r.pid
		}
		r.l.Apply(&e)
		if err := r.l.Check(); err != nil {
			r.t.Fatalf("after %s seq %d: %v", e.Kind, e.Seq, err)
		}
	}
	return r.ts
}

func (r *rec) summary() Summary {
	r.t.Helper()
	s := r.l.Summary()
	if _, err := json.Marshal(&s); err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rec) proc() ProcessSummary {
	r.t.Helper()
	s := r.summary()
	for _, p := range s.Processes {
		if p.Pid == r.pid {
			return p
		}
	}
	r.t.Fatalf("pid %d not in summary", r.pid)
	return ProcessSummary{}
}

// dev returns chip's summary in the rec's process; it fails if absent.
func (r *rec) dev(chip int32) DeviceSummary {
	r.t.Helper()
	for _, d := range r.proc().Devices {
		if d.Device == chip {
			return d
		}
	}
	r.t.Fatalf("chip %d not in devices", chip)
	return DeviceSummary{}
}

// totals is a compact view of a chip's current totals for comparisons.
type totals struct {
	DRAM, L1, L1Small, Trace, SysMem, CB, Live uint64
}

func totOf(d DeviceSummary) totals {
	return totals{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBBytes, d.LiveBuffers}
}

func (r *rec) tot(chip int32) totals {
	r.t.Helper()
	return totOf(r.dev(chip))
}

func (r *rec) chips() []int32 {
	var ids []int32
	for _, d := range r.proc().Devices {
		ids = append(ids, d.Device)
	}
	return ids
}
