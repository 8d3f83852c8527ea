package prometheus

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/events"
)

func (s *stream) trace(pid uint32, op events.TraceOp, chip int32, id uint32) {
	e := events.Event{Kind: events.KindTrace, Pid: pid, Tid: pid, Device: chipPtr(chip), DeviceKind: events.DeviceChip, Chip: chip, BufferType: -1}
	e.TraceOp, e.TraceID, e.TraceIDKnown, e.CQ, e.CQKnown = op, id, true, 0, op != events.TraceRelease
	s.send(e)
}

// The Metal trace and mesh allocator series, every number worked out by
// hand: a process captures a trace on chip 0 (one buffer allocated during
// the capture and freed), allocates a buffer over the captured one,
// replays twice (one hazard, found once), releases it and replays it once
// more (invalid), and replays a trace it never captured; its MeshDevice's
// own allocator holds one DRAM mesh buffer (at 0xb0, 8 KiB per bank) on two
// chips. A process that
// made no trace call has its trace series at 0 and no mesh series.
func TestTraceAndMeshMetrics(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	s := newStream(t, e)
	s.start(100, "w")
	s.start(200, "idle")
	const mib = 1 << 20
	const mesh = 0x5500a0000000
	s.capacity(100, 0, events.DRAM, 0xd0, 12, mib, 0x40)

	s.trace(100, events.TraceBegin, 0, 7)
	s.request(100, 0xd0, 12*4096, 4096, true)
	s.send(events.Event{Kind: events.KindAlloc, Pid: 100, Tid: 100, Object: 0xa0, Device: chipPtr(0), DeviceKind: events.DeviceChip,
		Chip: 0, BufferType: events.DRAM, Address: 0x40, Size: 12 * 4096, PageSize: 4096, OwnsData: true, Status: 1})
	s.free(100, 0xa0, 0)
	s.trace(100, events.TraceEnd, 0, 7)
	s.request(100, 0xd0, 12*4096, 4096, true)
	s.send(events.Event{Kind: events.KindAlloc, Pid: 100, Tid: 100, Object: 0xa1, Device: chipPtr(0), DeviceKind: events.DeviceChip,
		Chip: 0, BufferType: events.DRAM, Address: 0x40, Size: 12 * 4096, PageSize: 4096, OwnsData: true, Status: 1})
	s.trace(100, events.TraceReplay, 0, 7)
	s.trace(100, events.TraceReplay, 0, 7)
	s.trace(100, events.TraceRelease, 0, 7)
	s.trace(100, events.TraceReplay, 0, 7)
	s.trace(100, events.TraceReplay, 0, 99)

	// The mesh's own bank managers: made outside any chip's allocator (a
	// DRAM one first), tied to the mesh by its first buffer.
	for _, c := range []struct {
		t     events.BufferType
		mgr   uint64
		banks uint32
		bank  uint64
	}{{events.DRAM, 0x100, 12, mib}, {events.L1, 0x102, 64, 0xe8000}} {
		e := events.Event{Kind: events.KindAllocCapacity, Pid: 100, Tid: 100, Object: c.mgr, BufferType: c.t, Chip: -1}
		e.Banks, e.BankSize, e.Alignment, e.Base = c.banks, c.bank, 32, 0x40
		s.send(e)
	}
	s.request(100, 0x100, 12*8192, 8192, true)
	s.meshAlloc(100, 0xb0, mesh, events.DRAM, 12*8192, 1, 2)
	s.tick()

	got := scrape(t, addr)
	// The chips' allocator series are TestAllocatorMetrics'.
	mine := map[string]float64{}
	for k, v := range got {
		if !strings.HasPrefix(k, "tttrace_alloc_failures") && !strings.HasPrefix(k, "tttrace_device_capacity") &&
			!strings.HasPrefix(k, "tttrace_device_free") && !strings.HasPrefix(k, "tttrace_device_largest") {
			mine[k] = v
		}
	}
	diff(t, "traces and meshes", mine, s.want())
	lint(t, addr)
	pl := func(pid string, ls ...string) []string {
		cmd := map[string]string{"100": "w", "200": "idle"}[pid]
		return append(ls, "pid", pid, "command", cmd)
	}
	meshDev := fmt.Sprintf("%#x", mesh)
	want := map[string]float64{
		series("tttrace_trace_captures_total", pl("100")...):                                                  1,
		series("tttrace_trace_replays_total", pl("100")...):                                                   2,
		series("tttrace_trace_releases_total", pl("100")...):                                                  1,
		series("tttrace_trace_unknown_replays_total", pl("100")...):                                           1,
		series("tttrace_trace_checked_buffers_total", pl("100")...):                                           0,
		series("tttrace_trace_records_total", pl("100", "record", "trace_hazard")...):                         1,
		series("tttrace_trace_records_total", pl("100", "record", "trace_replay_invalid")...):                 1,
		series("tttrace_trace_records_total", pl("100", "record", "trace_region_hazard")...):                  0,
		series("tttrace_trace_records_total", pl("100", "record", "trace_capture_alloc")...):                  1,
		series("tttrace_trace_bounds_exceeded_total", pl("100", "bound", "traces_dropped")...):                0,
		series("tttrace_trace_captures_total", pl("200")...):                                                  0,
		series("tttrace_trace_records_total", pl("200", "record", "trace_hazard")...):                         0,
		series("tttrace_mesh_chips", pl("100", "mesh_device", meshDev)...):                                    2,
		series("tttrace_mesh_capacity_bytes", pl("100", "mesh_device", meshDev, "type", "dram")...):           12 * mib,
		series("tttrace_mesh_capacity_bytes", pl("100", "mesh_device", meshDev, "type", "l1")...):             64 * 0xe8000,
		series("tttrace_mesh_free_bytes", pl("100", "mesh_device", meshDev, "type", "dram")...):               12 * (mib - 8192),
		series("tttrace_mesh_largest_free_block_bytes", pl("100", "mesh_device", meshDev, "type", "dram")...): 12 * (mib - 8192 - 0x70), // the buffer at 0xb0: 0x70 free below it
		series("tttrace_mesh_free_bytes", pl("100", "mesh_device", meshDev, "type", "l1")...):                 64 * 0xe8000,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "tttrace_mesh_") && strings.Contains(k, `pid="200"`) {
			t.Errorf("a process with no mesh has %s", k)
		}
	}
}
