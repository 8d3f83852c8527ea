package sinks

import "github.com/tttrace/tttrace/devices"

// PhysicalName says for people which physical chip d is, "" when not
// known: its UMD unique id (with its PCI address when its PCIe side names
// it), else its PCI address (docs/ndjson.md, chip_uid).
func PhysicalName(d *devices.ChipIdentity) string {
	switch {
	case d.UID == nil:
		return ""
	case d.UniqueID != "" && d.PCI != "":
		return "unique id " + d.UniqueID + ", pci " + d.PCI
	case d.UniqueID != "":
		return "unique id " + d.UniqueID
	}
	return "pci " + d.PCI
}
