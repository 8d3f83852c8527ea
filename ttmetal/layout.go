package ttmetal

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tttrace/tttrace/procfs"
)

// Layout gives the byte offsets tttrace reads in TT-Metal objects. Offsets
// of fields a layout lacks are -1. Wrong numbers are worse than none: a
// Layout is only ever taken from a source that matched the library. What
// each field is, its JSON key and what its absence costs are in the field
// table (fields.go), which also writes and reads a Layout as JSON.
type Layout struct {
	// Name of the layout ("V1", ...) or a description of its source.
	Name string
	// BufferImplPtr is the offset of the BufferImpl pointer in a pimpl
	// Buffer; when >= 0 the Buffer* offsets below are inside BufferImpl.
	BufferImplPtr int64
	Device        int64
	Size          int64
	Type          int64
	OwnsData      int64
	Status        int64
	Hooked        int64
	Address       int64
	PageSize      int64
	// DeviceID is the offset of Device::id_.
	DeviceID int64
	// TypeWidth is the size of buffer_type_ in bytes: BufferType is an int
	// enum in most builds, one byte in some. BPF reads exactly this many
	// bytes: the bytes after a one-byte field are padding, and may hold
	// anything.
	TypeWidth int64
	// Allocated is the value of AllocationStatus::ALLOCATED (1; 2 in the
	// V0 layout), -1 when unknown. Only the lifecycle plan reads the status.
	Allocated int64
	// MeshCQID is the offset of distributed::MeshCommandQueue::id_, -1
	// when unknown: the trace calls through a MeshCommandQueue& (2026) are
	// probed only when it is known (docs/ttmetal.md §10).
	MeshCQID int64
	// CoreRangeSet and its elements (the CB probe's core ranges, bpf/cb.h):
	// the offset of ranges_ (a std::vector<CoreRange>), sizeof(CoreRange),
	// start_coord and end_coord in CoreRange, x and y in CoreCoord, and the
	// coordinates' width in bytes; -1 when unknown.
	CoreRanges, CoreRangeSize, CoreRangeStart, CoreRangeEnd int64
	CoreCoordX, CoreCoordY, CoreCoordWidth                  int64
}

// The built-in layouts (profiles/*.json).
var (
	// LayoutV0 is the late-2024 Buffer (no enable_shared_from_this, an
	// atomic status with four states).
	LayoutV0 = builtinProfile("V0").Layout
	// LayoutV1 is tt::tt_metal::Buffer as 2025 to early-2026 mainline lays
	// it out (docs/ttmetal.md §3).
	LayoutV1 = builtinProfile("V1").Layout
	// LayoutV2 is the 2026 pimpl Buffer: the fields in BufferImpl.
	LayoutV2 = builtinProfile("V2").Layout
)

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
	// Fields says, for each value of the layout, where it came from and
	// whether the library's code or DWARF verifies it.
	Fields []FieldCheck `json:"fields"`
}

// disagreements compares a layout with the library's own code. With fill,
// fields the layout lacks (-1) are taken from the code instead.
func disagreements(l *Layout, ev []Evidence, fill bool) (diffs, filled []string) {
	width := map[string]Evidence{} // the first width the code gave each field
	for _, e := range ev {
		f := fieldByJSON(e.Field)
		if f == nil {
			continue
		}
		if w, ok := width[e.Field]; !ok {
			width[e.Field] = e
		} else if w.Width != e.Width {
			diffs = append(diffs, fmt.Sprintf("the library's code reads %s at %d byte(s) (%s) and at %d (%s)",
				f.member, w.Width, w.Source, e.Width, e.Source))
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

// ResolveLayout chooses the layout for lib, from the first source that has
// one: a layout file (the user's word: it wins, but where the library's own
// code disagrees the user is warned), the DWARF of the library or of its
// separate debug file, or the built-in profile (V0, V1, V2) whose symbol
// fingerprint matches. DWARF and profiles are checked against the library's
// own code (disassembly of out-of-line accessors), which also supplies
// offsets a profile lacks; any disagreement refuses the library with what
// was checked. opts.LayoutFile and opts.Debug are used.
func ResolveLayout(lib *Library, syms *Symbols, opts Options) (*LayoutSource, error) {
	layoutFile := opts.LayoutFile
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
		src.Fields = fieldChecks(l, ev, originFile, nil)
		return src, nil
	}
	src.Checked = append(src.Checked, "--layout: not given")

	dbg := findDebugInfo(lib, opts.Debug)
	dwarfNote := "DWARF: " + strings.Join(dbg.checked, "; ")
	if dbg.path != "" {
		l, where, err := dwarfLayout(dbg.path, dwarfWants{meshCQ: syms.hasMeshCQForms(), coreRanges: syms.has(ProgTrackAllocateCB)})
		if err != nil {
			dwarfNote += "; not usable: " + err.Error()
		} else {
			src.Checked = append(src.Checked, dwarfNote+"; "+where, disasm)
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
			src.Fields = fieldChecks(l, ev, originDWARF, nil)
			return src, nil
		}
	}
	src.Checked = append(src.Checked, dwarfNote, disasm)

	var tried []string
	for _, p := range builtinProfiles() {
		if !p.matches(syms) {
			tried = append(tried, fmt.Sprintf("profile %s needs %s: not this library", p.Name, p.fingerprint()))
			continue
		}
		l := p.Layout
		diffs, filled := disagreements(&l, ev, true)
		if len(diffs) > 0 {
			tried = append(tried, fmt.Sprintf("profile %s (%s) matches the symbols, but the library's code disagrees: %s",
				p.Name, p.fingerprint(), strings.Join(diffs, "; ")))
			continue
		}
		widths := widthFromCode(&l, ev)
		for _, w := range widths {
			src.Corrections = append(src.Corrections, "profile "+l.Name+" does not match the library: "+w)
		}
		src.Layout = l
		src.From = fmt.Sprintf("built-in profile %s (symbol fingerprint: %s)", l.Name, p.fingerprint())
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
		src.Fields = fieldChecks(&l, ev, originProfile, filled)
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

// ReadLayoutFile reads a layout written as JSON with the keys of the field
// table (docs/layout.md). Every field must be present but allocated_value
// and buffer_type_width: a missing offset is an error, not 0.
func ReadLayoutFile(path string) (*Layout, error) {
	b, err := procfs.ReadFile(path, 1<<20) // a regular file, never a FIFO
	if err != nil {
		return nil, fmt.Errorf("layout file: %w", err)
	}
	// allocated_value is optional: the library's is_allocated() supplies it;
	// buffer_type_width too (4, an int enum, unless the code says otherwise).
	l := &Layout{}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	if l.Name == "" {
		l.Name = "file " + path
	}
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	return l, nil
}
