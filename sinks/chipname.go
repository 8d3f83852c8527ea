package sinks

import "github.com/tttrace/tttrace/devices"

// PhysicalName says for people which physical chip d is, "" when not
// known: its UMD unique id (with its place, tray and ASIC location, when
// known, and its PCI address when its PCIe side names it), else its PCI
// address (docs/ndjson.md, chip_uid, tray).
func PhysicalName(d *devices.ChipIdentity) string {
	if d.UID == nil {
		return ""
	}
	if d.UniqueID == "" {
		return "pci " + d.PCI
	}
	s := "unique id " + d.UniqueID
	if tray, loc := devices.PlaceLabels(d); tray != "" {
		s += ", tray " + tray + " asic location " + loc
	}
	if d.PCI != "" {
		s += ", pci " + d.PCI
	}
	return s
}
