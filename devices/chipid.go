package devices

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ChipIdentity is the physical chip behind a process's chip id: in the
// usual one-process-per-chip layout every process calls its chip 0
// (TT_VISIBLE_DEVICES), so host-wide sums go by this identity, never by
// the id. docs/ttmetal.md "Physical chips" has the rules and their
// upstream sources.
type ChipIdentity struct {
	// UID names the physical chip host-wide: its UMD unique id (UniqueID)
	// when the process shows it, else its PCI address for a chip reached
	// over PCIe. Nil when not known (Why says why): such a chip is never
	// added to another process's.
	UID *string `json:"chip_uid"`
	// UniqueID is the chip's UMD unique id in decimal, as TT-Metal names
	// its /dev/shm/tt_device_<id>_memory, read from the process's own
	// Device (chipuid.go in session); "" when not known.
	UniqueID string `json:"unique_id,omitempty"`
	// PCI is the chip's PCI address; Dev its /dev/tenstorrent/N.
	PCI string `json:"pci,omitempty"`
	Dev string `json:"dev,omitempty"`
	Why string `json:"chip_uid_why,omitempty"`
	// Tray and AsicLocation: the chip's place as TT-Metal's system
	// descriptor gives it (the tray, 0 where the host has none, and the
	// chip's place on it or on its board: tt-telemetry's tray and chip
	// labels), from the process's UMD cluster descriptor; nil, with
	// PlaceWhy, when not known. Only a chip named by its unique id has one.
	Tray         *uint32 `json:"tray,omitempty"`
	AsicLocation *uint32 `json:"asic_location,omitempty"`
	PlaceWhy     string  `json:"place_why,omitempty"`
}

// PCIChip is one /dev/tenstorrent/N of a process's view, with its PCI
// address and PCI device id (procfs.TTDevices).
type PCIChip struct {
	Num      int
	PCI      string
	DeviceID string
}

// ChipMap maps one process's chip ids to physical chips, as UMD numbers
// them: the PCIe devices it opens (all of /dev/tenstorrent, or those
// TT_VISIBLE_DEVICES selects) sorted by PCI address take the ids 0..n-1;
// chips reached over Ethernet come after them. The zero value knows
// nothing ("not read").
type ChipMap struct {
	pcie []PCIChip // the PCIe chips, in chip id order
	why  string    // set: nothing is known, for this reason
	// visible: TT_VISIBLE_DEVICES as the process has it (for people).
	visible string
	// held: the devices (N of /dev/tenstorrent/N) the process was seen
	// holding open, once looked at (Holding); nil: not looked at, every
	// chip named as its environment says. heldWhy: why its open files
	// could not all be looked at.
	held    map[int]bool
	heldWhy string
	// uids: what the process's memory said of each chip id's UMD unique
	// id (WithUIDs); a chip named once stays named. uidWhy: why the chips
	// not in uids have none.
	uids   map[int32]ChipUID
	uidWhy string
}

// ChipUID is a chip's UMD unique id as the process holds it (its Device's
// SHM provider, corroborated by the counters file it maps), or why not,
// and its place (its cluster descriptor's entry of that unique id).
type ChipUID struct {
	ID    uint64
	Known bool
	Why   string
	Place ChipPlace
}

// ChipPlace is a chip's tray and ASIC location, or why not.
type ChipPlace struct {
	Tray, AsicLocation uint32
	Known              bool
	Why                string
}

// WithUIDs is m with what the process's memory said of its chips' unique
// ids: a chip already named keeps its id, the others take u's; rest says
// why the chips u leaves out have none.
func (m ChipMap) WithUIDs(u map[int32]ChipUID, rest string) ChipMap {
	out := make(map[int32]ChipUID, len(m.uids)+len(u))
	for c, v := range m.uids {
		out[c] = v
	}
	for c, v := range u {
		switch old, ok := out[c]; {
		case !ok || !old.Known:
			out[c] = v
		case !old.Place.Known && v.Known && v.ID == old.ID:
			old.Place = v.Place
			out[c] = old
		}
	}
	m.uids, m.uidWhy = out, rest
	return m
}

// UIDsKnown is how many chip ids have a known unique id.
func (m *ChipMap) UIDsKnown() int {
	n := 0
	for _, v := range m.uids {
		if v.Known {
			n++
		}
	}
	return n
}

// UIDKnown says whether chip has a known unique id.
func (m *ChipMap) UIDKnown(chip int32) bool { return m.uids[chip].Known }

// The environment variables that decide the chip ids (docs/ttmetal.md).
const (
	EnvVisibleDevices      = "TT_VISIBLE_DEVICES"
	EnvMetalVisibleDevices = "TT_METAL_VISIBLE_DEVICES"
)

// NewChipMap builds a process's chip map from its environment (getenv)
// and the Tenstorrent devices of its mount namespace (devs; devsErr set
// when they could not be listed).
func NewChipMap(getenv func(string) (string, bool), devs []PCIChip, devsErr error) ChipMap {
	for _, k := range []string{"TT_METAL_SIMULATOR", "TT_METAL_MOCK_CLUSTER_DESC_PATH"} {
		if v, ok := getenv(k); ok && v != "" {
			return ChipMap{why: k + " is set: a simulated or mock cluster's chips are the process's own"}
		}
	}
	if v, ok := getenv(EnvMetalVisibleDevices); ok && v != "" {
		return ChipMap{why: EnvMetalVisibleDevices + "=" + quoteShort(v) + ": TT-Metal renumbers the chips it selects, which tttrace does not follow"}
	}
	if devsErr != nil {
		return ChipMap{why: "no Tenstorrent device list in the process's mount namespace (" + devsErr.Error() + ")"}
	}
	if len(devs) == 0 {
		return ChipMap{why: "/dev/tenstorrent in the process's mount namespace has no PCIe device with a known address"}
	}
	all := append([]PCIChip(nil), devs...)
	sort.Slice(all, func(i, j int) bool { return all[i].PCI < all[j].PCI })
	v, set := getenv(EnvVisibleDevices)
	m := ChipMap{visible: v}
	if !set {
		m.pcie = all
		return m.sameArch()
	}
	if v == "" {
		return ChipMap{why: EnvVisibleDevices + " is empty: UMD opens no PCIe device"}
	}
	// Bounded work on a value from the process: a host has at most a few
	// dozen devices, so more entries than this say nothing UMD would use.
	const maxEntries = 4096
	if strings.Count(v, ",") >= maxEntries {
		return ChipMap{why: fmt.Sprintf("%s has more than %d entries", EnvVisibleDevices, maxEntries)}
	}
	picked := map[string]PCIChip{}
	for _, tok := range strings.Split(v, ",") {
		tok = strings.Trim(tok, " \n\r\t")
		if tok == "" {
			continue
		}
		switch {
		case isBDFToken(tok):
			n := 0
			for _, d := range all {
				if strings.Contains(d.PCI, tok) {
					picked[d.PCI] = d
					n++
				}
			}
			if n == 0 {
				return ChipMap{why: EnvVisibleDevices + " entry " + quoteShort(tok) + " matches no PCI address of /dev/tenstorrent (UMD refuses it)"}
			}
		case isDigits(tok):
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(all) {
				return ChipMap{why: EnvVisibleDevices + " entry " + quoteShort(tok) + fmt.Sprintf(" is past the %d device(s) of /dev/tenstorrent (UMD refuses it)", len(all))}
			}
			picked[all[i].PCI] = all[i]
		default:
			return ChipMap{why: EnvVisibleDevices + " entry " + quoteShort(tok) + " is neither a number nor a PCI address (UMD refuses it)"}
		}
	}
	for _, d := range all {
		if _, ok := picked[d.PCI]; ok {
			m.pcie = append(m.pcie, d)
		}
	}
	return m.sameArch()
}

// sameArch: UMD skips the devices whose architecture differs from the
// cluster's, which shifts the ids after them; such a mix is not followed.
func (m ChipMap) sameArch() ChipMap {
	for _, d := range m.pcie {
		if d.DeviceID == "" || d.DeviceID != m.pcie[0].DeviceID {
			return ChipMap{why: "the PCIe devices' PCI device ids are unknown or differ (chips of two architectures: UMD skips some)"}
		}
	}
	return m
}

// isBDFToken is UMD's test for a PCI address (or part of one) in
// TT_VISIBLE_DEVICES: a ':' or '.' and only hex digits and those.
func isBDFToken(s string) bool {
	if !strings.ContainsAny(s, ":.") {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// quoteShort quotes a value from the process for a message, cut to 64
// bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// Devices are the N of the /dev/tenstorrent/N behind the map's chip ids:
// the devices a process must hold open to be counted on their chips.
func (m *ChipMap) Devices() []int {
	out := make([]int, len(m.pcie))
	for i, d := range m.pcie {
		out[i] = d.Num
	}
	return out
}

// Holding is m naming only the chips whose device the process holds open:
// a process's environment is its own to write, and a TT_VISIBLE_DEVICES
// naming a chip it never opened must not add its memory to that chip's
// host-wide sums (TT-Metal opens every PCIe chip it uses: UMD keeps its
// /dev/tenstorrent/N open). held are the N seen held; why, when set, says
// why the process's open files could not all be looked at. The other
// chips carry chip_uid null and the reason.
func (m ChipMap) Holding(held []int, why string) ChipMap {
	m.held = make(map[int]bool, len(held))
	for _, n := range held {
		m.held[n] = true
	}
	m.heldWhy = why
	return m
}

// Known says whether the map was read (a zero ChipMap was not).
func (m *ChipMap) Known() bool { return m.why != "" || m.pcie != nil }

// Identity is the physical chip behind chip id: its UMD unique id when
// the process's memory showed it (with its PCI address and device too when
// its PCIe side names it), else its PCI address, else why not.
func (m *ChipMap) Identity(chip int32) ChipIdentity {
	id := m.pciIdentity(chip)
	u, ok := m.uids[chip]
	if !ok && m.uidWhy != "" {
		u, ok = ChipUID{Why: m.uidWhy}, true
	}
	switch {
	case ok && u.Known:
		s := strconv.FormatUint(u.ID, 10)
		id.UID, id.UniqueID, id.Why = &s, s, ""
		if p := u.Place; p.Known {
			tray, loc := p.Tray, p.AsicLocation
			id.Tray, id.AsicLocation = &tray, &loc
		} else {
			id.PlaceWhy = p.Why
		}
	case id.UID == nil && ok && u.Why != "":
		id.Why += "; its UMD unique id was not read: " + u.Why
	}
	return id
}

// pciIdentity is the chip behind chip id as its PCIe side names it.
func (m *ChipMap) pciIdentity(chip int32) ChipIdentity {
	switch {
	case !m.Known():
		return ChipIdentity{Why: "the process's devices were not read"}
	case m.why != "":
		return ChipIdentity{Why: m.why}
	case chip < 0:
		return ChipIdentity{Why: "a negative chip id"}
	case int(chip) >= len(m.pcie):
		return ChipIdentity{Why: fmt.Sprintf("past the process's %d PCIe chip(s) with a known address: a chip reached over Ethernet (n300, T3K, Galaxy), named only by its UMD unique id", len(m.pcie))}
	}
	d := m.pcie[chip]
	if m.held != nil && !m.held[d.Num] {
		why := fmt.Sprintf("the process was not seen holding /dev/tenstorrent/%d (%s) open, which its chip id names: not counted on that chip", d.Num, d.PCI)
		if m.heldWhy != "" {
			why += " (" + m.heldWhy + ")"
		}
		return ChipIdentity{Why: why}
	}
	uid := d.PCI
	return ChipIdentity{UID: &uid, PCI: d.PCI, Dev: "/dev/tenstorrent/" + strconv.Itoa(d.Num)}
}
