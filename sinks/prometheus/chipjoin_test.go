package prometheus

import (
	"errors"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// A chip named by its PCI address in one process (a library without DWARF)
// and by its unique id and PCI address in another is one chip host-wide,
// with the unique id and place on every series of it; a chip reached over
// Ethernet (unique id alone) and a PCI address two unique ids claim stay
// apart.
func TestJoinedChips(t *testing.T) {
	e := listenWith(t, Options{Host: "node-a"})
	s := newStream(t, e)
	visible := func(v string) devices.ChipMap {
		return devices.NewChipMap(func(k string) (string, bool) { return v, k == "TT_VISIBLE_DEVICES" }, hostChips, nil)
	}
	placed := func(id uint64, tray, loc uint32) devices.ChipUID {
		return devices.ChipUID{ID: id, Known: true, Place: devices.ChipPlace{Tray: tray, AsicLocation: loc, Known: true}}
	}
	// pid 1: chip 0 is 0000:00:00.0 with unique id 77 (tray 2, place 5),
	// chip 1 behind it over Ethernet, unique id 88. pid 2: chip 0 is
	// 0000:00:00.0, named by its PCI address alone. pids 3 and 4 give
	// 0000:01:00.0 two unique ids; pid 5 names it by its address alone.
	s.startWith(1, "uid", visible("0").WithUIDs(map[int32]devices.ChipUID{0: placed(77, 2, 5), 1: {ID: 88, Known: true}}, ""))
	s.startWith(2, "pci", visible("0"))
	s.startWith(3, "x", visible("1").WithUIDs(map[int32]devices.ChipUID{0: {ID: 301, Known: true}}, ""))
	s.startWith(4, "y", visible("1").WithUIDs(map[int32]devices.ChipUID{0: {ID: 302, Known: true}}, ""))
	s.startWith(5, "z", visible("1"))
	s.startWith(6, "w", devices.NewChipMap(noEnv, nil, errors.New("no /dev/tenstorrent")))
	for pid, size := range map[uint32]uint64{1: 1000, 2: 20000, 3: 300000, 4: 4000000, 5: 50000000, 6: 600} {
		s.alloc(pid, 0x1000*uint64(pid), 0, events.DRAM, size)
	}
	s.alloc(1, 0x9000, 1, events.DRAM, 7)
	s.tick()
	got := scrape(t, e.Addr().String())
	host := map[string]float64{}
	for k, v := range got {
		if strings.HasPrefix(k, "tttrace_chip_memory_bytes{") && strings.Contains(k, `type="dram"`) {
			host[k] = v
		}
	}
	want := map[string]float64{
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip_uid", "77", "pci", "0000:00:00.0", "tray", "2", "asic_location", "5", "type", "dram"): 1000 + 20000,
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip_uid", "88", "type", "dram"):                                                           7,
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip_uid", "301", "type", "dram"):                                                          300000,
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip_uid", "302", "type", "dram"):                                                          4000000,
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip_uid", "0000:01:00.0", "pci", "0000:01:00.0", "type", "dram"):                          50000000,
		series("tttrace_chip_memory_bytes", "host", "node-a", "chip", "0", "pid", "6", "type", "dram"):                                                    600,
	}
	for k, v := range want {
		if host[k] != v {
			t.Errorf("%s = %v, want %v", k, host[k], v)
		}
	}
	if len(host) != len(want) {
		t.Errorf("host series %v, want %v", host, want)
	}
	// The PCI-named process's series carry the unique id and place.
	k := series("tttrace_device_memory_bytes", "chip", "0", "chip_uid", "77", "pci", "0000:00:00.0", "tray", "2", "asic_location", "5",
		"type", "dram", "pid", "2", "command", "pci")
	if got[k] != 20000 {
		t.Errorf("%s = %v, want 20000", k, got[k])
	}
}
