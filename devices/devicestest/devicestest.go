// Package devicestest builds synthetic event streams for the tests of the
// ledger and of what reads its summaries (the sinks): one constructor per
// record kind and a fuzzer's byte-to-stream mapping. Seq, TsNs and Pid are
// left for the caller to fill in.
package devicestest

import (
	"math"

	"github.com/tttrace/tttrace/events"
)

// Fake MeshDevice* and Program* values.
const (
	MeshA uint64 = 0x5500a0000000
	MeshB uint64 = 0x5500b0000000
	ProgP uint64 = 0x5600000a0000
	ProgQ uint64 = 0x5600000b0000
)

// ChipPtr is a fake Device* for a chip id.
func ChipPtr(chip int32) uint64 { return 0x7f0000000000 + uint64(uint32(chip))*0x1000 }

// Alloc is the allocation of Buffer* buf of size bytes at addr on one chip.
func Alloc(tid uint32, buf uint64, chip int32, t events.BufferType, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Tid: tid, Object: buf, Device: ChipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: t, Address: addr, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

// MeshAlloc is the allocation of a mesh buffer on MeshDevice* mesh.
func MeshAlloc(tid uint32, buf, mesh uint64, t events.BufferType, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindAlloc, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, BufferType: t, Address: addr, Size: size, PageSize: 1024, OwnsData: true, Status: 1}
}

// View is a per-chip view of a mesh buffer at addr: it places the mesh on chip.
func View(tid uint32, chip int32, addr uint64) events.Event {
	return events.Event{Kind: events.KindView, Tid: tid, Device: ChipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, Address: addr, Size: 4096}
}

// Free is the free of a single-chip buffer.
func Free(tid uint32, buf uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindFree, Tid: tid, Object: buf, Device: ChipPtr(chip), DeviceKind: events.DeviceChip,
		Chip: chip, OwnsData: true, Status: 1}
}

// MeshFree is the free of a mesh buffer.
func MeshFree(tid uint32, buf, mesh uint64) events.Event {
	return events.Event{Kind: events.KindFree, Tid: tid, Object: buf, Device: mesh, DeviceKind: events.DeviceMesh,
		Chip: -1, OwnsData: true, Status: 1}
}

// Mark is Buffer::mark_as_deallocated.
func Mark(tid uint32, buf uint64) events.Event {
	return events.Event{Kind: events.KindMarkDeallocated, Tid: tid, Object: buf, Chip: -1}
}

// CBLayout starts program prog's CB layout on a chip.
func CBLayout(tid uint32, prog uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindCBLayout, Tid: tid, Object: prog, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

// CBLayoutMesh starts program prog's CB layout on a mesh.
func CBLayoutMesh(tid uint32, prog, mesh uint64) events.Event {
	return events.Event{Kind: events.KindCBLayout, Tid: tid, Object: prog, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

// CB is one locally allocated CB of the layout in progress on a chip.
func CB(tid uint32, chip int32, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindCBAlloc, Tid: tid, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: addr, Size: size}
}

// CBMesh is one CB of the layout in progress on a mesh.
func CBMesh(tid uint32, mesh uint64, addr, size uint64) events.Event {
	return events.Event{Kind: events.KindCBAlloc, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1, Address: addr, Size: size}
}

// CBTeardown starts the release of program prog's CBs.
func CBTeardown(tid uint32, prog uint64) events.Event {
	return events.Event{Kind: events.KindCBTeardown, Tid: tid, Object: prog, Chip: -1}
}

// CBFree is one CB of the teardown in progress on a chip.
func CBFree(tid uint32, chip int32) events.Event {
	return events.Event{Kind: events.KindCBFree, Tid: tid, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

// CBFreeMesh is one CB of the teardown in progress on a mesh.
func CBFreeMesh(tid uint32, mesh uint64) events.Event {
	return events.Event{Kind: events.KindCBFree, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

// ProgramDestroy is the destruction of program prog.
func ProgramDestroy(tid uint32, prog uint64) events.Event {
	return events.Event{Kind: events.KindProgramDestroy, Tid: tid, Object: prog, Chip: -1}
}

// DeviceClose is Device::close of a chip.
func DeviceClose(tid uint32, chip int32) events.Event {
	return events.Event{Kind: events.KindDeviceClose, Tid: tid, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}

// MeshClose is MeshDevice::close.
func MeshClose(tid uint32, mesh uint64) events.Event {
	return events.Event{Kind: events.KindMeshClose, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1}
}

// Exit is the traced process's exit.
func Exit(code, sig int) events.Event {
	return events.Event{Kind: events.KindExit, ExitCode: code, ExitSignal: sig, Chip: -1}
}

// Lost says n records were lost.
func Lost(n uint64) events.Event {
	return events.Event{Kind: events.KindLost, LostBefore: n, Chip: -1}
}

// FuzzEvents turns bytes into an event stream: mostly well-formed kinds
// over small pools of pids, threads, buffers, chips (sparse, negative,
// huge), meshes and programs, so that the ledger's rules interact, plus
// garbage kinds, device kinds, buffer types and sizes.
func FuzzEvents(data []byte) []events.Event {
	const per = 9
	kinds := []events.Kind{
		events.KindAlloc, events.KindAlloc, events.KindAlloc, events.KindFree, events.KindFree, events.KindView,
		events.KindView, events.KindCBAlloc, events.KindCBFree, events.KindCBLayout, events.KindCBTeardown,
		events.KindProgramDestroy, events.KindDeviceClose, events.KindMeshClose, events.KindMarkDeallocated,
		events.KindLost, events.KindExit, events.KindAllocCapacity, events.KindAllocRequest, events.KindAllocRequest, events.KindAllocOom,
	}
	chips := []int32{0, 1, 7, 64, 100, -1, -5, 1 << 30, math.MaxInt32, math.MinInt32, 2, 3}
	meshes := []uint64{MeshA, MeshB, 0, ChipPtr(0)}
	var out []events.Event
	var seq, ts uint64
	for len(data) >= per && len(out) < 400 {
		b := data[:per]
		data = data[per:]
		var e events.Event
		if b[0] >= 250 {
			e.Kind = events.Kind(b[0] - 250) // 0..5, with garbage 0
			if b[0] == 255 {
				e.Kind = 200
			}
		} else {
			e.Kind = kinds[int(b[0])%len(kinds)]
		}
		e.Pid = 1 + uint32(b[1]%3)
		e.Tid = uint32(b[1]>>2) % 4
		e.Object = 0x1000 + uint64(b[2]%16)*0x40
		if b[2] >= 240 {
			e.Object = 0x560000000000 + uint64(b[2]%4) // programs
		}
		switch dk := b[3] % 6; dk {
		case 0, 1, 2:
			e.DeviceKind = events.DeviceChip
			e.Chip = chips[int(b[3]>>3)%len(chips)]
			e.Device = ChipPtr(e.Chip)
		case 3:
			e.DeviceKind = events.DeviceMesh
			e.Chip = -1
			e.Device = meshes[int(b[3]>>3)%len(meshes)]
		case 4:
			e.DeviceKind = events.DeviceUnknown
			e.Chip = -1
		default:
			e.DeviceKind = events.DeviceKind(b[3] >> 4) // none, or garbage
			e.Chip = int32(b[3])
		}
		e.BufferType = events.BufferType(int(b[4]%8) - 1)
		e.Size = uint64(b[5]) << (b[6] % 48) // up to about 2^55: past the plausible cap too
		e.Address = uint64(b[7]%8) * 0x1000
		f := b[8]
		e.Hooked = f&1 != 0 && f&2 != 0
		e.OwnsData = f&4 == 0 || f&8 == 0
		e.Global = f&0x10 != 0
		e.ReadError = f&0xe0 == 0xe0
		if f&0x60 == 0x40 {
			e.LostBefore = uint64(f >> 6)
		}
		e.ExitCode, e.ExitSignal = int(b[5]), int(b[6]%32)
		if e.Kind == events.KindAllocCapacity || e.Kind == events.KindAllocRequest {
			// Bank managers: a few per chip, small banks so that requests
			// fail in every way.
			e.Object = 0xd0 + uint64(b[2]%6)
			e.Banks = uint32(b[7] % 70)
			e.BankSize = uint64(b[5]) << (b[6] % 24)
			e.Alignment = uint64(1) << (f % 8)
			e.Base = uint64(b[7]%4) * 0x1000
			e.PageSize = uint64(1) << (b[7] % 16)
			e.BottomUp = f&2 != 0
			if f&0x18 == 0x18 {
				e.Shards = uint32(b[8] % 9)
			}
			if f&0x60 == 0x60 {
				e.AllocatorID = 1
			}
		}
		if f&0x80 == 0 || seq == 0 { // else a duplicate seq
			seq++
		}
		ts += uint64(b[6])
		e.Seq, e.TsNs = seq, ts
		out = append(out, e)
	}
	return out
}

// AllocPage is Alloc with a page size.
func AllocPage(tid uint32, buf uint64, chip int32, t events.BufferType, addr, size, page uint64) events.Event {
	e := Alloc(tid, buf, chip, t, addr, size)
	e.PageSize = page
	return e
}

// Capacity is a BankManager of chip made (chip -1: of no known chip):
// banks of bank bytes at base, pages aligned to align.
func Capacity(chip int32, t events.BufferType, mgr uint64, banks uint32, bank, align, base uint64) events.Event {
	e := events.Event{Kind: events.KindAllocCapacity, Tid: 1, Object: mgr, BufferType: t, Chip: chip}
	if chip >= 0 {
		e.DeviceKind, e.Device = events.DeviceChip, ChipPtr(chip)
	}
	e.Banks, e.BankSize, e.Alignment, e.Base = banks, bank, align, base
	return e
}

// Request is BankManager::allocate_buffer of mgr: size bytes in pages of
// page (interleaved over every bank).
func Request(tid uint32, mgr, size, page uint64, bottomUp bool) events.Event {
	e := events.Event{Kind: events.KindAllocRequest, Tid: tid, Object: mgr, Size: size, PageSize: page, Chip: -1}
	e.BottomUp = bottomUp
	return e
}

// Trace is the entry of a Metal trace call (op) on a chip with command
// queue cq and trace id (docs/ttmetal.md §10).
func Trace(tid uint32, op events.TraceOp, chip int32, cq uint8, id uint32) events.Event {
	e := events.Event{Kind: events.KindTrace, Tid: tid, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip,
		BufferType: -1}
	e.TraceOp, e.TraceID, e.TraceIDKnown, e.CQ, e.CQKnown = op, id, true, cq, op != events.TraceRelease
	return e
}

// MeshTrace is Trace on MeshDevice* mesh; idKnown false is the
// one-argument begin_mesh_trace(cq).
func MeshTrace(tid uint32, op events.TraceOp, mesh uint64, cq uint8, id uint32, idKnown bool) events.Event {
	e := events.Event{Kind: events.KindTrace, Tid: tid, Device: mesh, DeviceKind: events.DeviceMesh, Chip: -1, BufferType: -1}
	e.TraceOp, e.TraceID, e.TraceIDKnown, e.CQ, e.CQKnown = op, id, idKnown, cq, op != events.TraceRelease
	return e
}

// CBOn is CB with its core ranges ([x0, y0, x1, y1] each).
func CBOn(tid uint32, chip int32, addr, size uint64, ranges ...[4]uint16) events.Event {
	e := CB(tid, chip, addr, size)
	e.RangesKnown = true
	e.NumRanges = uint32(len(ranges))
	e.RangesTruncated = len(ranges) > events.CoreRangeMax
	for i, r := range ranges[:min(len(ranges), events.CoreRangeMax)] {
		e.CoreRanges[i] = events.CoreRange{X0: r[0], Y0: r[1], X1: r[2], Y1: r[3]}
	}
	return e
}

// Dispatch is ProgramImpl::generate_dispatch_commands of program prog on a
// chip.
func Dispatch(tid uint32, prog uint64, chip int32) events.Event {
	return events.Event{Kind: events.KindProgramDispatch, Tid: tid, Object: prog, Device: ChipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip}
}
