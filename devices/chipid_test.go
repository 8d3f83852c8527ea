package devices

import (
	"errors"
	"strings"
	"testing"
)

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// The rules of docs/ttmetal.md "Physical chips": UMD sorts the PCIe
// devices by PCI address; an integer of TT_VISIBLE_DEVICES is a position
// in that order, anything with ':' or '.' matches addresses as a
// substring; the ids 0..n-1 go to the selected devices in address order.
func TestChipMap(t *testing.T) {
	// Numbered against the address order on purpose.
	devs := []PCIChip{{0, "0000:c1:00.0", "0x401e"}, {1, "0000:02:00.0", "0x401e"}, {2, "0000:05:00.0", "0x401e"}, {3, "0000:c2:00.0", "0x401e"}}
	type want struct {
		chip int32
		pci  string // "": unknown
		dev  string
	}
	for _, c := range []struct {
		name string
		env  []string
		devs []PCIChip
		err  error
		want []want
	}{
		{"unset: all, by address", nil, devs, nil, []want{{0, "0000:02:00.0", "/dev/tenstorrent/1"}, {1, "0000:05:00.0", "/dev/tenstorrent/2"}, {3, "0000:c2:00.0", "/dev/tenstorrent/3"}, {4, "", ""}}},
		{"one integer", []string{"TT_VISIBLE_DEVICES", "0"}, devs, nil, []want{{0, "0000:02:00.0", "/dev/tenstorrent/1"}, {1, "", ""}}},
		{"another integer", []string{"TT_VISIBLE_DEVICES", "1"}, devs, nil, []want{{0, "0000:05:00.0", "/dev/tenstorrent/2"}, {1, "", ""}}},
		{"integers, out of order, spaces, duplicates", []string{"TT_VISIBLE_DEVICES", " 3 ,1,,3"}, devs, nil, []want{{0, "0000:05:00.0", ""}, {1, "0000:c2:00.0", ""}, {2, "", ""}}},
		{"address prefix", []string{"TT_VISIBLE_DEVICES", "0000:c"}, devs, nil, []want{{0, "0000:c1:00.0", "/dev/tenstorrent/0"}, {1, "0000:c2:00.0", ""}, {2, "", ""}}},
		{"mixed, deduplicated", []string{"TT_VISIBLE_DEVICES", "0000:05:00.0,1"}, devs, nil, []want{{0, "0000:05:00.0", ""}, {1, "", ""}}},
		{"out of range", []string{"TT_VISIBLE_DEVICES", "4"}, devs, nil, []want{{0, "", ""}}},
		{"no match", []string{"TT_VISIBLE_DEVICES", "0000:ff"}, devs, nil, []want{{0, "", ""}}},
		{"not an id", []string{"TT_VISIBLE_DEVICES", "gpu0"}, devs, nil, []want{{0, "", ""}}},
		{"empty", []string{"TT_VISIBLE_DEVICES", ""}, devs, nil, []want{{0, "", ""}}},
		{"metal's own", []string{"TT_METAL_VISIBLE_DEVICES", "1"}, devs, nil, []want{{0, "", ""}}},
		{"simulator", []string{"TT_METAL_SIMULATOR", "/x"}, devs, nil, []want{{0, "", ""}}},
		{"no devices", nil, nil, errors.New("no /dev/tenstorrent"), []want{{0, "", ""}}},
		{"two architectures", nil, []PCIChip{{0, "0000:01:00.0", "0x401e"}, {1, "0000:02:00.0", "0xb140"}}, nil, []want{{0, "", ""}}},
		{"negative chip", nil, devs, nil, []want{{-1, "", ""}}},
		{"too many entries", []string{"TT_VISIBLE_DEVICES", strings.Repeat("0,", 5000)}, devs, nil, []want{{0, "", ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewChipMap(envOf(c.env...), c.devs, c.err)
			for _, w := range c.want {
				id := m.Identity(w.chip)
				if w.pci == "" {
					if id.UID != nil || id.PCI != "" || id.Why == "" {
						t.Errorf("chip %d: %+v, want unknown with a reason", w.chip, id)
					}
					continue
				}
				if id.UID == nil || *id.UID != w.pci || id.PCI != w.pci || id.Why != "" || (w.dev != "" && id.Dev != w.dev) {
					t.Errorf("chip %d: %+v, want %s %s", w.chip, id, w.pci, w.dev)
				}
			}
		})
	}
	var zero ChipMap
	if id := zero.Identity(0); id.UID != nil || id.Why == "" {
		t.Errorf("zero map: %+v", id)
	}
}

// A chip is named only when the process holds its device open, once its
// open files were looked at (Holding); the others say why, with the
// device their id names.
func TestChipMapHolding(t *testing.T) {
	devs := []PCIChip{{0, "0000:c1:00.0", "0x401e"}, {1, "0000:02:00.0", "0x401e"}, {2, "0000:05:00.0", "0x401e"}}
	m := NewChipMap(envOf(), devs, nil)
	if got := m.Devices(); len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 0 {
		t.Errorf("devices %v, want [1 2 0] (chip id order)", got)
	}
	if id := m.Identity(0); id.UID == nil {
		t.Errorf("not looked at: chip 0 %+v, want named", id)
	}
	h := m.Holding([]int{2}, "")
	if id := h.Identity(1); id.UID == nil || *id.UID != "0000:05:00.0" || id.Dev != "/dev/tenstorrent/2" {
		t.Errorf("held: chip 1 %+v", id)
	}
	for _, chip := range []int32{0, 2} {
		id := h.Identity(chip)
		if id.UID != nil || id.PCI != "" || !strings.Contains(id.Why, "/dev/tenstorrent/") || !strings.Contains(id.Why, "not seen holding") {
			t.Errorf("not held: chip %d %+v", chip, id)
		}
	}
	none := m.Holding(nil, "it holds more than 16384 open files")
	if id := none.Identity(1); id.UID != nil || !strings.Contains(id.Why, "16384 open files") {
		t.Errorf("none held: %+v", id)
	}
	// The map the process was looked at with is a copy: m is unchanged.
	if id := m.Identity(0); id.UID == nil {
		t.Errorf("m changed by Holding: %+v", id)
	}
	vis := NewChipMap(envOf("TT_VISIBLE_DEVICES", "2"), devs, nil).Holding([]int{0}, "")
	if id := vis.Identity(0); id.UID == nil || *id.UID != "0000:c1:00.0" {
		t.Errorf("TT_VISIBLE_DEVICES=2 holding /dev/tenstorrent/0: %+v", id)
	}
}
