package prometheus

import (
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

func (s *stream) capacity(pid uint32, chip int32, t events.BufferType, mgr uint64, banks uint32, bank, base uint64) {
	e := events.Event{Kind: events.KindAllocCapacity, Pid: pid, Tid: pid, Object: mgr, BufferType: t, Chip: chip,
		DeviceKind: events.DeviceChip, Device: chipPtr(chip)}
	e.Banks, e.BankSize, e.Alignment, e.Base = banks, bank, 32, base
	s.send(e)
}

func (s *stream) request(pid uint32, mgr, size, page uint64, bottomUp bool) {
	e := events.Event{Kind: events.KindAllocRequest, Pid: pid, Tid: pid, Object: mgr, Size: size, PageSize: page, Chip: -1}
	e.BottomUp = bottomUp
	s.send(e)
}

// The allocator's series: capacity per chip and type, free and largest
// free block per process (banks x per-bank numbers), failures by cause,
// from 0; every number worked out by hand.
func TestAllocatorMetrics(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	s := newStream(t, e)
	s.l = devices.NewLedger(devices.Options{Notices: e}) // before any event
	s.start(100, "w")
	const mib = 1 << 20
	s.capacity(100, 2, events.DRAM, 0xd0, 12, mib, 0x40)
	s.capacity(100, 2, events.L1, 0xd2, 64, 0xe8000, 0x18000)
	// 24 pages of 8 KiB: 2 per bank, 16 KiB per bank.
	s.request(100, 0xd0, 24*8192, 8192, true)
	s.send(events.Event{Kind: events.KindAlloc, Pid: 100, Tid: 100, Object: 0xa0, Device: chipPtr(2), DeviceKind: events.DeviceChip,
		Chip: 2, BufferType: events.DRAM, Address: 0x40, Size: 24 * 8192, PageSize: 8192, OwnsData: true, Status: 1})
	// 2 MiB per bank: larger than a bank; the thread's next event shows it threw.
	s.request(100, 0xd0, 12*2*mib, 2*mib, true)
	s.free(100, 0xa0, 2)
	// A request of a manager never seen made: cause unknown, chip unknown.
	s.request(100, 0xeee, 4096, 4096, true)
	s.free(100, 0xa1, 2)
	s.alloc(100, 0xa2, 2, events.DRAM, 4096) // allocated without its request: DRAM's numbers go
	s.tick()
	got := scrape(t, addr)
	const chip2 = "0000:02:00.0" // the process sees the host's chips: chip 2 is the third by address
	want := map[string]float64{
		series("tttrace_device_capacity_bytes", "chip_uid", chip2, "pci", chip2, "type", "dram"):                                                    12 * mib,
		series("tttrace_device_capacity_bytes", "chip_uid", chip2, "pci", chip2, "type", "l1"):                                                      64 * 0xe8000,
		series("tttrace_device_free_bytes", "chip", "2", "chip_uid", chip2, "pci", chip2, "type", "l1", "pid", "100", "command", "w"):               64 * 0xe8000,
		series("tttrace_device_largest_free_block_bytes", "chip", "2", "chip_uid", chip2, "pci", chip2, "type", "l1", "pid", "100", "command", "w"): 64 * 0xe8000,
	}
	for _, typ := range []string{"dram", "l1", "l1_small", "trace"} {
		for _, c := range []string{"exhausted", "fragmented", "larger_than_bank", "unknown"} {
			want[series("tttrace_alloc_failures_total", "chip", "2", "chip_uid", chip2, "pci", chip2, "type", typ, "cause", c)] = 0
			want[series("tttrace_alloc_failures_total", "chip", UnplacedChip, "type", typ, "cause", c)] = 0
		}
	}
	want[series("tttrace_alloc_failures_total", "chip", "2", "chip_uid", chip2, "pci", chip2, "type", "dram", "cause", "larger_than_bank")] = 1
	want[series("tttrace_alloc_failures_total", "chip", UnplacedChip, "type", "unknown", "cause", "unknown")] = 1
	for k := range got {
		if strings.HasPrefix(k, "tttrace_device_capacity") || strings.HasPrefix(k, "tttrace_device_free") ||
			strings.HasPrefix(k, "tttrace_device_largest") || strings.HasPrefix(k, "tttrace_alloc_failures") {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected %s = %v", k, got[k])
			}
		}
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	_ = devices.AllocatorTypes
}
