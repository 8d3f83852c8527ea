package session

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	allocmodel "github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/ttmetal"
)

// rootBackend is a fakeBackend that finds the open chips of a process from
// its root (ReadDevices) and reads bank managers (ReadBankManager) as
// given, whatever the budget.
type rootBackend struct {
	*fakeBackend
	devs    []ttmetal.MemDevice
	rootErr error
	mgrs    map[uint64]*ttmetal.MemBankManager
	reads   int
}

func (b *rootBackend) AllocMem(uint32, *ttmetal.AllocBudget) (AllocMem, error) {
	return rootMem{b}, nil
}

type rootMem struct{ b *rootBackend }

func (m rootMem) ReadDevices() ([]ttmetal.MemDevice, error) { return m.b.devs, m.b.rootErr }
func (m rootMem) ReadBankManager(ptr uint64) (*ttmetal.MemBankManager, error) {
	m.b.reads++
	if mm, ok := m.b.mgrs[ptr]; ok {
		return mm, nil
	}
	return nil, errors.New("unreadable")
}
func (rootMem) Close() error { return nil }

// -p on a process whose chip opened before the attach and allocates
// nothing after it: its bank managers are found at attach from the
// process's root and read ("source": "memory"); a root that cannot be
// walked is said by the chip.
func TestRunAttachFindsAllocators(t *testing.T) {
	const lib = "/opt/tt/libtt_metal.so"
	l1 := &ttmetal.MemBankManager{BufferType: int32(events.L1), Banks: 64, Alignment: 16, BankSize: 0x1000, Offset: 0x40, BlockAlign: 32,
		Blocks: []allocmodel.Block{{Addr: 0, Size: 0xc00}, {Addr: 0xc00, Size: 0x400, Allocated: true}}}
	h := newFakeHost()
	h.load(300, lib)()
	be := &rootBackend{fakeBackend: newFakeBackend(
		free(300, 0xf1, 5), // a buffer of chip 5 allocated before the attach; nothing allocated after
		do(h.end(300, 0, 0)),
	), devs: []ttmetal.MemDevice{{Chip: 5, Managers: []uint64{0xd1, 0xd2}}},
		mgrs: map[uint64]*ttmetal.MemBankManager{0xd1: l1}}
	be.attach[lib] = nil
	r := &recorder{}
	var log bytes.Buffer
	if _, err := run(context.Background(), Config{PIDs: []int{300}, Log: &log}, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	d := device(t, r.summary, 300, 5)
	if d.Allocator == nil || d.Allocator.L1 == nil || d.Allocator.L1.Source != "memory" || d.Allocator.L1.TotalAllocated == nil ||
		*d.Allocator.L1.TotalAllocated != 0x400 || *d.Allocator.L1.LargestFree != 0xc00 || d.Allocator.L1.Banks != 64 {
		t.Fatalf("chip 5: %+v (why %q)\nlog:\n%s", d.Allocator, d.AllocatorWhy, log.String())
	}
	if d.Allocator.DRAM != nil || !strings.Contains(log.String(), "bank manager 0xd2 not read") {
		t.Errorf("the unreadable manager: %+v\nlog:\n%s", d.Allocator.DRAM, log.String())
	}

	h2 := newFakeHost()
	h2.load(301, lib)()
	be2 := &rootBackend{fakeBackend: newFakeBackend(free(301, 0xf1, 2), do(h2.end(301, 0, 0))),
		rootErr: errors.New("no DWARF for " + lib)}
	be2.attach[lib] = nil
	r2 := &recorder{}
	log.Reset()
	if _, err := run(context.Background(), Config{PIDs: []int{301}, Log: &log}, be2, h2, []sinks.Sink{r2}); err != nil {
		t.Fatal(err)
	}
	if d := device(t, r2.summary, 301, 2); d.Allocator != nil || !strings.Contains(d.AllocatorWhy, "not read at attach: no DWARF") {
		t.Errorf("chip 2: %+v %q", d.Allocator, d.AllocatorWhy)
	}
	if !strings.Contains(log.String(), "pid 301: its open chips' allocators not read at attach: no DWARF") {
		t.Errorf("log:\n%s", log.String())
	}
}
