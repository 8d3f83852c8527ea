package devices

// Naming physical chips host-wide across processes (docs/ttmetal.md §11,
// "A chip's place"): a process whose library has no DWARF names a PCIe
// chip by its PCI address only, one that shows its Devices' unique ids
// names it by its unique id; host sums must count that chip once. A
// ChipJoin learns, from every process's chip identities, which PCI address
// goes with which unique id: only from a process that names a chip by both
// (its unique id, and its PCI address from the PCIe side it was seen
// holding), and only while no PCI address goes with two unique ids nor a
// unique id with two addresses. A chip named by that PCI address alone is
// then named by the unique id, with the place (tray, ASIC location) a
// process gave it. What stays apart: a chip reached over Ethernet (no PCI
// address), a PCIe chip no process names by both, an address claimed
// twice.

import "strconv"

// ChipJoin joins chip identities across processes. The zero value is
// not usable: NewChipJoin.
type ChipJoin struct {
	uidOfPCI map[string]string // "" once claimed by two unique ids
	pciOfUID map[string]string // "" once named with two addresses
	place    map[string][2]uint32
}

// NewChipJoin is an empty join.
func NewChipJoin() *ChipJoin {
	return &ChipJoin{uidOfPCI: map[string]string{}, pciOfUID: map[string]string{}, place: map[string][2]uint32{}}
}

// Add learns what ci says.
func (j *ChipJoin) Add(ci *ChipIdentity) {
	u := ci.UniqueID
	if u == "" {
		return
	}
	if ci.Tray != nil && ci.AsicLocation != nil {
		j.place[u] = [2]uint32{*ci.Tray, *ci.AsicLocation}
	}
	if ci.PCI == "" {
		return
	}
	if old, ok := j.uidOfPCI[ci.PCI]; !ok {
		j.uidOfPCI[ci.PCI] = u
	} else if old != u {
		j.uidOfPCI[ci.PCI] = ""
	}
	if old, ok := j.pciOfUID[u]; !ok {
		j.pciOfUID[u] = ci.PCI
	} else if old != ci.PCI {
		j.pciOfUID[u] = ""
	}
}

// unique is the unique id a PCI address goes with, if one alone and it
// with that address alone.
func (j *ChipJoin) unique(pci string) string {
	u := j.uidOfPCI[pci]
	if u == "" || j.pciOfUID[u] != pci {
		return ""
	}
	return u
}

// Resolve is ci as named host-wide: a chip named by its PCI address alone
// takes the unique id that goes with it; a chip with a unique id takes the
// place another process gave it when its own process gave none.
func (j *ChipJoin) Resolve(ci ChipIdentity) ChipIdentity {
	if ci.UID == nil {
		return ci
	}
	if ci.UniqueID == "" && ci.PCI != "" {
		u := j.unique(ci.PCI)
		if u == "" {
			return ci
		}
		ci.UID, ci.UniqueID = &u, u
	}
	if p, ok := j.place[ci.UniqueID]; ok && ci.Tray == nil {
		tray, loc := p[0], p[1]
		ci.Tray, ci.AsicLocation, ci.PlaceWhy = &tray, &loc, ""
	}
	return ci
}

// PCIOf is the PCI address that goes with unique id u ("" none, or not
// one alone): the host-wide series' pci label.
func (j *ChipJoin) PCIOf(u string) string {
	p := j.pciOfUID[u]
	if p == "" || j.uidOfPCI[p] != u {
		return ""
	}
	return p
}

// PlaceLabels are ci's tray and asic_location as label values ("" when
// not known).
func PlaceLabels(ci *ChipIdentity) (tray, asicLocation string) {
	if ci.Tray == nil || ci.AsicLocation == nil {
		return "", ""
	}
	return strconv.FormatUint(uint64(*ci.Tray), 10), strconv.FormatUint(uint64(*ci.AsicLocation), 10)
}
