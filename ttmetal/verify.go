package ttmetal

import (
	"fmt"
	"strings"
)

// FieldCheck says how one value of the chosen layout is known: which
// source gave it and whether the library's own code (or its DWARF)
// confirms it. Doctor lists them; a value no source verifies is one the
// user should know is taken on trust.
type FieldCheck struct {
	Field    string `json:"field"`
	Value    int64  `json:"value"`
	Verified bool   `json:"verified"`
	How      string `json:"how"`
}

// layoutOrigin is where a layout came from, for its field checks.
type layoutOrigin uint8

const (
	originFile layoutOrigin = iota
	originDWARF
	originProfile
)

// fieldChecks lists, in the field table's order, every value l has (>= 0)
// and how it is known: from DWARF (verified: the library's own debug
// information), confirmed by the code of accessors (verified), or only
// from the layout file or the profile (not verified). buffer_type_'s width
// is checked on its own: it decides how many bytes BPF reads.
func fieldChecks(l *Layout, ev []Evidence, origin layoutOrigin, filled []string) []FieldCheck {
	var out []FieldCheck
	given := map[layoutOrigin]string{
		originFile:    "from the layout file (the user's word)",
		originDWARF:   "from DWARF",
		originProfile: "from the profile " + l.Name,
	}[origin]
	for _, f := range layoutFields {
		v := *f.get(l)
		if v < 0 || f.key == "buffer_type_width" {
			continue
		}
		var code []string
		for _, e := range ev {
			if f.key == "buffer_impl_ptr" && e.ImplPtr == v {
				code = append(code, e.Source) // every read through the pointer confirms it
				continue
			}
			if e.Field != f.key {
				continue
			}
			if (f.key == "allocated_value" && e.Allocated == v) || (f.key != "allocated_value" && e.Offset == v) {
				code = append(code, e.Source)
			}
		}
		if f.key == "allocated_value" {
			for _, e := range ev {
				if e.Field == "allocation_status" && e.Allocated == v {
					code = append(code, e.Source)
				}
			}
		}
		c := FieldCheck{Field: f.key, Value: v}
		fromCode := false
		for _, s := range filled {
			if strings.HasPrefix(s, f.member+" at ") {
				fromCode = true
			}
		}
		switch {
		case fromCode:
			c.Verified, c.How = true, "from the library's code: "+strings.Join(code, "; ")
		case len(code) > 0:
			c.Verified, c.How = true, given+", confirmed by the library's code: "+strings.Join(code, "; ")
		case origin == originDWARF:
			c.Verified, c.How = true, given
		default:
			c.How = given + ", not checked against the library's code (no out-of-line accessor reads it)"
		}
		out = append(out, c)
	}
	w := FieldCheck{Field: "buffer_type_width", Value: l.TypeWidth}
	var code []string
	for _, e := range ev {
		if e.Field == "buffer_type" && e.Width == l.TypeWidth {
			code = append(code, e.Source)
		}
	}
	switch {
	case len(code) > 0:
		w.Verified, w.How = true, fmt.Sprintf("the library's code reads buffer_type_ as %d byte(s): %s", l.TypeWidth, strings.Join(code, "; "))
	case origin == originDWARF:
		w.Verified, w.How = true, "the size of buffer_type_'s type in DWARF"
	case origin == originFile:
		w.How = "from the layout file (the user's word), not checked against the library's code"
	default:
		w.How = "the profile's default, not checked against the library's code (no out-of-line accessor or is_trace/is_dram/is_l1 reads buffer_type_)"
	}
	return append(out, w)
}
