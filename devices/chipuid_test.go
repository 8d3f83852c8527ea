package devices

import (
	"errors"
	"strings"
	"testing"
)

// A chip's UMD unique id, when the process's memory shows it, names the
// chip host-wide for local and Ethernet-remote chips alike; a local chip
// keeps its PCI address and device beside it; a chip without one keeps
// what its PCIe side says, with why the unique id is missing.
func TestChipMapUIDs(t *testing.T) {
	devs := []PCIChip{{0, "0000:02:00.0", "0x401e"}}
	m := NewChipMap(envOf(), devs, nil).Holding([]int{0}, "")
	m = m.WithUIDs(map[int32]ChipUID{
		0: {ID: 3677501122663824519, Known: true},
		1: {ID: 835350508680936016, Known: true},
		2: {Why: "the chip's Device holds no SHM provider"},
	}, "not an open Device")
	id0, id1, id2 := m.Identity(0), m.Identity(1), m.Identity(2)
	if id0.UID == nil || *id0.UID != "3677501122663824519" || id0.UniqueID != *id0.UID || id0.PCI != "0000:02:00.0" || id0.Dev != "/dev/tenstorrent/0" || id0.Why != "" {
		t.Errorf("local chip: %+v", id0)
	}
	if id1.UID == nil || *id1.UID != "835350508680936016" || id1.UniqueID != *id1.UID || id1.PCI != "" || id1.Why != "" {
		t.Errorf("remote chip: %+v", id1)
	}
	if id2.UID != nil || id2.UniqueID != "" || !strings.Contains(id2.Why, "over Ethernet") || !strings.Contains(id2.Why, "no SHM provider") {
		t.Errorf("remote chip without its id: %+v", id2)
	}
	if id := m.Identity(5); id.UID != nil || !strings.Contains(id.Why, "not an open Device") {
		t.Errorf("a chip the read left out: %+v", id)
	}
	// A chip named once keeps its id; an unknown one takes a later fact.
	m2 := m.WithUIDs(map[int32]ChipUID{0: {Why: "gone"}, 2: {ID: 7, Known: true}}, "")
	if id := m2.Identity(0); id.UID == nil || *id.UID != "3677501122663824519" {
		t.Errorf("named chip renamed: %+v", id)
	}
	if id := m2.Identity(2); id.UID == nil || *id.UID != "7" || m2.UIDsKnown() != 3 || m.UIDsKnown() != 2 {
		t.Errorf("later fact: %+v, known %d (before %d)", id, m2.UIDsKnown(), m.UIDsKnown())
	}
	// The process's environment or devices say nothing (a simulator's
	// variables, no /dev/tenstorrent): its own Devices still name chips.
	bare := NewChipMap(envOf(), nil, errors.New("no /dev/tenstorrent")).WithUIDs(map[int32]ChipUID{0: {ID: 9, Known: true}}, "")
	if id := bare.Identity(0); id.UID == nil || *id.UID != "9" || id.PCI != "" || id.Why != "" {
		t.Errorf("no devices: %+v", id)
	}
	if id := bare.Identity(1); id.UID != nil || !strings.Contains(id.Why, "no /dev/tenstorrent") {
		t.Errorf("no devices, no id: %+v", id)
	}
	// Unread (zero) map: nothing but what WithUIDs adds.
	var z ChipMap
	z = z.WithUIDs(map[int32]ChipUID{3: {ID: 1, Known: true}}, "")
	if id := z.Identity(3); id.UID == nil || *id.UID != "1" {
		t.Errorf("zero map: %+v", id)
	}
}
