package ttmetal

// A chip's physical identity read from the process that uses it
// (docs/ttmetal.md §11, "Physical chips"): 2026 TT-Metal gives every Device
// a SharedMemoryStatsProvider (Device::shm_stats_provider_,
// tt_metal/impl/memory_tracking/memory_stats_shm.hpp) made from the chip's
// UMD unique id (ClusterDescriptor::chip_unique_ids) and its logical id,
// which maps /dev/shm/tt_device_<unique id>_memory. Its asic_id_ is that
// unique id, for PCIe-local and Ethernet-remote chips alike; its
// device_id_ must be the Device's own id, or the walk does not read what it
// expects. Offsets come from DWARF only.

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
)

// UIDLayout is where a Device's SHM provider and the provider's ids are.
type UIDLayout struct {
	Provider int64 // Device::shm_stats_provider_ (unique_ptr)
	AsicID   int64 // SharedMemoryStatsProvider::asic_id_ (u64)
	DeviceID int64 // SharedMemoryStatsProvider::device_id_ (i32)
}

// ChipUID is a chip's UMD unique id as its Device holds it, or why not.
type ChipUID struct {
	ID    uint64
	Known bool
	Why   string
}

// uidLayout reads the provider's layout, given Device's member
// shm_stats_provider_ (found false: the Device has none).
func uidLayout(d *dwarf.Data, prov dwarfMember, found bool) (*UIDLayout, error) {
	if !found {
		return nil, errors.New("this TT-Metal's Device has no shm_stats_provider_ (DWARF): it keeps no per-chip SHM counters, which name a chip's UMD unique id")
	}
	tn, size := dwarfTypeName(d, prov.typ)
	if name, ok := ttClassArg(tn); !ok || name != "SharedMemoryStatsProvider" || size != 8 {
		return nil, fmt.Errorf("DWARF: Device::shm_stats_provider_ is a %q of %d bytes, not a unique_ptr to tt::tt_metal::SharedMemoryStatsProvider", tn, size)
	}
	l := &UIDLayout{Provider: prov.off}
	c := &bmClass{name: "SharedMemoryStatsProvider", members: []bmMember{
		{name: "asic_id_", size: 8, dst: &l.AsicID},
		{name: "device_id_", size: 4, dst: &l.DeviceID},
	}}
	if err := scanClasses(d, []*bmClass{c}); err != nil {
		return nil, err
	}
	return l, nil
}

// readChipUID reads the unique id of the Device at dev (chip id) through
// its SHM provider, with a reader of its own: a bad pointer there costs
// this chip its id, not the walk its allocators.
func readChipUID(mem io.ReaderAt, dev uint64, id int32, l *RootLayout) ChipUID {
	if l.UID == nil {
		why := "no layout of the chip's SHM provider"
		if l.UIDErr != nil {
			why = l.UIDErr.Error()
		}
		return ChipUID{Why: why}
	}
	rd := memReader{mem: mem}
	p := rd.u64(dev + uint64(l.UID.Provider))
	if rd.err != nil {
		return ChipUID{Why: fmt.Sprintf("Device at %#x: %v", dev, rd.err)}
	}
	if p == 0 {
		return ChipUID{Why: "the chip's Device holds no SHM provider (TT-Metal made none for it)"}
	}
	asic := rd.u64(p + uint64(l.UID.AsicID))
	did := int32(rd.u32(p + uint64(l.UID.DeviceID)))
	switch {
	case rd.err != nil:
		return ChipUID{Why: fmt.Sprintf("SHM provider at %#x: %v", p, rd.err)}
	case did != id:
		return ChipUID{Why: fmt.Sprintf("the SHM provider of the Device of chip %d names chip %d: not what tttrace expects to read", id, did)}
	case asic == 0:
		return ChipUID{Why: "the chip's SHM provider holds unique id 0"}
	}
	return ChipUID{ID: asic, Known: true}
}
