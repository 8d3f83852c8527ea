package sinks

import (
	"testing"

	"github.com/tttrace/tttrace/devices"
)

func TestPhysicalName(t *testing.T) {
	u, p := "3677501122663824519", "0000:02:00.0"
	three, five := uint32(3), uint32(5)
	for _, c := range []struct {
		id   devices.ChipIdentity
		want string
	}{
		{devices.ChipIdentity{UID: &u, UniqueID: u, PCI: p, Dev: "/dev/tenstorrent/0"}, "unique id 3677501122663824519, pci 0000:02:00.0"},
		{devices.ChipIdentity{UID: &u, UniqueID: u}, "unique id 3677501122663824519"},
		{devices.ChipIdentity{UID: &u, UniqueID: u, Tray: &three, AsicLocation: &five, PCI: p}, "unique id 3677501122663824519, tray 3 asic location 5, pci 0000:02:00.0"},
		{devices.ChipIdentity{UID: &p, PCI: p}, "pci 0000:02:00.0"},
		{devices.ChipIdentity{Why: "a chip reached over Ethernet"}, ""},
	} {
		if got := PhysicalName(&c.id); got != c.want {
			t.Errorf("%+v: %q, want %q", c.id, got, c.want)
		}
	}
}
