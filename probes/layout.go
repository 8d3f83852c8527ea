package probes

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Layout gives the byte offsets tttrace reads in TT-Metal objects. Offsets
// of fields a layout lacks are -1. Wrong numbers are worse than none: a
// Layout is only ever taken from a source that matched the library.
type Layout struct {
	// Name of the layout ("V1", ...) or a description of its source.
	Name string `json:"name"`
	// BufferImplPtr is the offset of the BufferImpl pointer in a pimpl
	// Buffer; when >= 0 the Buffer* offsets below are inside BufferImpl.
	BufferImplPtr int64 `json:"buffer_impl_ptr"`
	Device        int64 `json:"device"`
	Size          int64 `json:"size"`
	Type          int64 `json:"buffer_type"`
	OwnsData      int64 `json:"owns_data"`
	Status        int64 `json:"allocation_status"`
	Hooked        int64 `json:"hooked_allocation"`
	Address       int64 `json:"address"`
	PageSize      int64 `json:"page_size"`
	// DeviceID is the offset of Device::id_.
	DeviceID int64 `json:"device_id"`
	// TypeWidth is the size of buffer_type_ in bytes: BufferType is an int
	// enum in most builds, one byte in some. BPF reads exactly this many
	// bytes: the bytes after a one-byte field are padding, and may hold
	// anything.
	TypeWidth int64 `json:"buffer_type_width"`
	// Allocated is the value of AllocationStatus::ALLOCATED (1; 2 in the
	// V0 layout), -1 when unknown. Only the lifecycle plan reads the status.
	Allocated int64 `json:"allocated_value"`
}

// LayoutV1 is tt::tt_metal::Buffer as 2025 to early-2026 mainline lays it
// out (docs/ttmetal.md §3).
var LayoutV1 = Layout{
	Name:          "V1",
	BufferImplPtr: -1,
	Device:        16,
	Size:          24,
	Type:          32,
	OwnsData:      43,
	Status:        72,
	Hooked:        73,
	Address:       80,
	PageSize:      88,
	DeviceID:      8,
	Allocated:     1,
	TypeWidth:     4,
}

// LayoutV0 is the late-2024 Buffer (no enable_shared_from_this, an atomic
// status with four states). Offsets the facts do not give are -1:
// hooked_allocation_ (graph-capture allocations cannot be told apart) and
// page_size_ (taken from Buffer::page_size() const's code when it can be).
var LayoutV0 = Layout{
	Name:          "V0",
	BufferImplPtr: -1,
	Device:        0,
	Size:          8,
	Type:          16,
	OwnsData:      27,
	Status:        56,
	Hooked:        -1,
	Address:       64,
	PageSize:      -1,
	DeviceID:      8,
	Allocated:     2,
	TypeWidth:     4,
}

// LayoutV2 is the 2026 pimpl Buffer: a std::unique_ptr<BufferImpl> at 16,
// the fields in BufferImpl. page_size_ is not in the facts (-1), taken
// from Buffer::page_size() const's code when it can be.
var LayoutV2 = Layout{
	Name:          "V2",
	BufferImplPtr: 16,
	Device:        0,
	Size:          8,
	Type:          16,
	OwnsData:      27,
	Status:        56,
	Hooked:        57,
	Address:       64,
	PageSize:      -1,
	DeviceID:      8,
	Allocated:     1,
	TypeWidth:     4,
}

// LayoutSource says where a layout came from, for the user.
type LayoutSource struct {
	Layout Layout `json:"layout"`
	From   string `json:"from"` // "file x.json", "DWARF of ...", "built-in profile V1 (...)"
	// Checked lists what was looked at, in order (for doctor and errors).
	Checked []string `json:"checked"`
	// Evidence is what the library's own code says (accessor disassembly).
	Evidence []Evidence `json:"evidence"`
	// Warnings: a layout file the library's code disagrees with.
	Warnings []string `json:"warnings"`
	// Corrections: what the library's code said that the chosen profile
	// did not (a field's width), and was used instead.
	Corrections []string `json:"corrections,omitempty"`
	// Unknown names fields the layout lacks and what that costs.
	Unknown []string `json:"unknown"`
}

// fieldRef names a Layout field for comparisons.
type fieldRef struct {
	json   string
	member string // C++ member, for people
	get    func(*Layout) *int64
	buffer bool // a Buffer field (inside BufferImpl in a pimpl layout)
}

var layoutFields = []fieldRef{
	{"device", "device_", func(l *Layout) *int64 { return &l.Device }, true},
	{"size", "size_", func(l *Layout) *int64 { return &l.Size }, true},
	{"buffer_type", "buffer_type_", func(l *Layout) *int64 { return &l.Type }, true},
	{"owns_data", "owns_data_", func(l *Layout) *int64 { return &l.OwnsData }, true},
	{"allocation_status", "allocation_status_", func(l *Layout) *int64 { return &l.Status }, true},
	{"hooked_allocation", "hooked_allocation_", func(l *Layout) *int64 { return &l.Hooked }, true},
	{"address", "address_", func(l *Layout) *int64 { return &l.Address }, true},
	{"page_size", "page_size_", func(l *Layout) *int64 { return &l.PageSize }, true},
	{"device_id", "Device::id_", func(l *Layout) *int64 { return &l.DeviceID }, false},
}

func fieldByJSON(name string) *fieldRef {
	for i := range layoutFields {
		if layoutFields[i].json == name {
			return &layoutFields[i]
		}
	}
	return nil
}

// disagreements compares a layout with the library's own code. With fill,
// fields the layout lacks (-1) are taken from the code instead.
func disagreements(l *Layout, ev []Evidence, fill bool) (diffs, filled []string) {
	for _, e := range ev {
		f := fieldByJSON(e.Field)
		if f == nil {
			continue
		}
		p := f.get(l)
		if f.buffer && e.ImplPtr != l.BufferImplPtr {
			diffs = append(diffs, fmt.Sprintf("%s reads %s through %s, the layout says %s",
				e.Source, f.member, implDesc(e.ImplPtr), implDesc(l.BufferImplPtr)))
			continue
		}
		switch {
		case *p < 0 && fill:
			*p = e.Offset
			filled = append(filled, fmt.Sprintf("%s at %d (from %s)", f.member, e.Offset, e.Source))
		case *p != e.Offset:
			diffs = append(diffs, fmt.Sprintf("%s: %s is at %d, the layout says %d", e.Source, f.member, e.Offset, *p))
		}
		if e.Field == "allocation_status" && e.Allocated >= 0 {
			switch {
			case l.Allocated < 0 && fill:
				l.Allocated = e.Allocated
			case l.Allocated != e.Allocated:
				diffs = append(diffs, fmt.Sprintf("%s: ALLOCATED is %d, the layout says %d", e.Source, e.Allocated, l.Allocated))
			}
		}
	}
	return diffs, filled
}

// widthFromCode takes buffer_type_'s width from the library's own code
// where it disagrees with l (the code is the authority on how many bytes
// the field has), and says what it corrected.
func widthFromCode(l *Layout, ev []Evidence) (corrected []string) {
	for _, e := range ev {
		if e.Field == "buffer_type" && e.Width > 0 && e.Width != l.TypeWidth {
			corrected = append(corrected, fmt.Sprintf("buffer_type_ is %d byte(s) wide in the library's code, not %d: "+
				"reading %d (%s)", e.Width, l.TypeWidth, e.Width, e.Source))
			l.TypeWidth = e.Width
		}
	}
	return corrected
}

func implDesc(p int64) string {
	if p < 0 {
		return "the Buffer itself"
	}
	return fmt.Sprintf("the BufferImpl pointer at %d", p)
}

// profile is a built-in layout and the symbol fingerprint that selects it.
type profile struct {
	layout Layout
	match  func(*Symbols) bool
	print  string // what the fingerprint is, for people
}

var profiles = []profile{
	{LayoutV0, func(s *Symbols) bool { return s.HasV0Namespace && !s.HasPimplAccessors },
		"symbols in namespace tt::tt_metal::v0, no exported Buffer::size() const / device() const"},
	{LayoutV2, func(s *Symbols) bool { return s.HasPimplAccessors && !s.HasV0Namespace },
		"exported Buffer::size() const / device() const (pimpl), no namespace v0"},
	{LayoutV1, func(s *Symbols) bool { return !s.HasV0Namespace && !s.HasPimplAccessors },
		"no namespace v0, no exported Buffer::size() const / device() const"},
}

// ResolveLayout chooses the layout for lib, from the first source that has
// one: a layout file (the user's word: it wins, but where the library's own
// code disagrees the user is warned), the DWARF of the library or of its
// separate debug file, or the built-in profile (V0, V1, V2) whose symbol
// fingerprint matches. DWARF and profiles are checked against the library's
// own code (disassembly of out-of-line accessors), which also supplies
// offsets a profile lacks; any disagreement refuses the library with what
// was checked.
func ResolveLayout(lib *Library, syms *Symbols, layoutFile string) (*LayoutSource, error) {
	src := &LayoutSource{}
	ev, notes := accessorEvidence(lib, syms)
	src.Evidence = ev
	var evDesc []string
	for _, e := range ev {
		evDesc = append(evDesc, e.Source)
	}
	evDesc = append(evDesc, notes...)
	if len(evDesc) == 0 {
		evDesc = []string{"no out-of-line accessor found"}
	}
	disasm := "disassembly: " + strings.Join(evDesc, "; ")

	if layoutFile != "" {
		l, err := ReadLayoutFile(layoutFile)
		if err != nil {
			return nil, err
		}
		if l.Allocated < 0 {
			for _, e := range ev {
				if e.Field == "allocation_status" && e.Allocated >= 0 && e.Offset == l.Status {
					l.Allocated = e.Allocated
				}
			}
		}
		diffs, _ := disagreements(l, ev, false)
		for _, d := range diffs {
			src.Warnings = append(src.Warnings, "the library's own code disagrees with "+layoutFile+": "+d)
		}
		for _, w := range widthFromCode(l, ev) {
			src.Warnings = append(src.Warnings, layoutFile+": "+w)
		}
		src.Layout, src.From = *l, "file "+layoutFile
		src.Checked = []string{"--layout " + layoutFile + ": used as given", disasm}
		src.Unknown = unknownFields(l)
		return src, nil
	}
	src.Checked = append(src.Checked, "--layout: not given")

	dbg := findDebugInfo(lib)
	dwarfNote := "DWARF: " + strings.Join(dbg.checked, "; ")
	if dbg.path != "" {
		l, where, err := dwarfLayout(dbg.path)
		if err != nil {
			dwarfNote += "; not usable: " + err.Error()
		} else {
			src.Checked = append(src.Checked, dwarfNote+"; "+where+" read", disasm)
			diffs, _ := disagreements(l, ev, false)
			if w := l.TypeWidth; len(widthFromCode(l, ev)) > 0 {
				diffs = append(diffs, fmt.Sprintf("buffer_type_ is %d byte(s) wide in DWARF, %d in the code", w, l.TypeWidth))
			}
			if len(diffs) > 0 {
				return nil, fmt.Errorf("%s: its DWARF (%s) and its own code disagree on Buffer's layout: %s; "+
					"tttrace will not guess which is right: give the offsets with --layout FILE (docs/layout.md)",
					lib.Path, dbg.path, strings.Join(diffs, "; "))
			}
			l.Name = "DWARF"
			src.Layout = *l
			src.From = "DWARF of " + dbg.path
			if len(ev) > 0 {
				src.From += fmt.Sprintf(" (agrees with the code of %d accessors)", len(ev))
			}
			src.Unknown = unknownFields(l)
			return src, nil
		}
	}
	src.Checked = append(src.Checked, dwarfNote, disasm)

	var tried []string
	for _, p := range profiles {
		if !p.match(syms) {
			tried = append(tried, fmt.Sprintf("profile %s needs %s: not this library", p.layout.Name, p.print))
			continue
		}
		l := p.layout
		diffs, filled := disagreements(&l, ev, true)
		if len(diffs) > 0 {
			tried = append(tried, fmt.Sprintf("profile %s (%s) matches the symbols, but the library's code disagrees: %s",
				p.layout.Name, p.print, strings.Join(diffs, "; ")))
			continue
		}
		widths := widthFromCode(&l, ev)
		for _, w := range widths {
			src.Corrections = append(src.Corrections, "profile "+l.Name+" does not match the library: "+w)
		}
		src.Layout = l
		src.From = fmt.Sprintf("built-in profile %s (symbol fingerprint: %s)", l.Name, p.print)
		if n := len(ev) - len(filled) - len(widths); len(widths) > 0 {
			src.From += fmt.Sprintf(", corrected by the library's code (%s), other fields confirmed by the code of %d accessors",
				strings.Join(widths, "; "), n)
		} else if n > 0 {
			src.From += fmt.Sprintf(", confirmed by the code of %d accessors", n)
		} else {
			src.From += ", not confirmed by the library's code (no accessor could be read)"
		}
		if len(filled) > 0 {
			src.From += "; from the code: " + strings.Join(filled, ", ")
		}
		src.Checked = append(src.Checked, tried...)
		src.Unknown = unknownFields(&l)
		return src, nil
	}
	src.Checked = append(src.Checked, tried...)
	return nil, &LayoutError{Lib: lib.Path, Checked: src.Checked}
}

// LayoutError is a library whose layout no source gives.
type LayoutError struct {
	Lib     string
	Checked []string
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("%s: the layout of tt::tt_metal::Buffer is unknown, and tttrace does not guess offsets "+
		"(wrong numbers are worse than none). Checked: %s. Give the offsets with --layout FILE (docs/layout.md)",
		e.Lib, strings.Join(e.Checked, ". "))
}

// unknownFields says what a layout lacks and what that costs.
func unknownFields(l *Layout) []string {
	var out []string
	if l.Hooked < 0 {
		out = append(out, "hooked_allocation_: graph-capture (hooked) allocations would be counted as real")
	}
	if l.Type < 0 {
		out = append(out, "buffer_type_: allocations cannot be counted by type")
	}
	if l.OwnsData < 0 {
		out = append(out, "owns_data_: non-owning buffers cannot be told apart")
	}
	if l.Status < 0 || l.Allocated < 0 {
		out = append(out, "allocation_status_ / ALLOCATED: the lifecycle probe plan is impossible")
	}
	if l.PageSize < 0 {
		out = append(out, "page_size_: events carry no page size (the ledger does not need it)")
	}
	return out
}

// ReadLayoutFile reads a layout written as JSON with the field names of
// Layout. Every field must be present: a missing offset is an error, not 0.
func ReadLayoutFile(path string) (*Layout, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("layout file: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	for _, k := range []string{"buffer_impl_ptr", "device", "size", "buffer_type", "owns_data",
		"allocation_status", "hooked_allocation", "address", "page_size", "device_id"} {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("layout file %s: no %q (use -1 for a field the layout lacks)", path, k)
		}
	}
	for k := range raw {
		if k != "name" && k != "allocated_value" && k != "buffer_type_width" && fieldByJSON(k) == nil && k != "buffer_impl_ptr" {
			return nil, fmt.Errorf("layout file %s: unknown key %q", path, k)
		}
	}
	// allocated_value is optional: the library's is_allocated() supplies it;
	// buffer_type_width too (4, an int enum, unless the code says otherwise).
	l := &Layout{Allocated: -1, TypeWidth: 4}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	if l.Name == "" {
		l.Name = "file " + path
	}
	if w := l.TypeWidth; w != 1 && w != 2 && w != 4 {
		return nil, fmt.Errorf("layout file %s: buffer_type_width %d: must be 1, 2 or 4", path, w)
	}
	for name, v := range map[string]int64{"device": l.Device, "size": l.Size, "address": l.Address, "device_id": l.DeviceID} {
		if v < 0 {
			return nil, fmt.Errorf("layout file %s: %q must be given (>= 0): tttrace cannot count without it", path, name)
		}
	}
	return l, nil
}
