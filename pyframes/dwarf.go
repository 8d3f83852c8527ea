package pyframes

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"strings"

	"github.com/tttrace/tttrace/elfx"
)

// dwarfField names one Offsets field by the C struct (tag or typedef name)
// and member path that hold it.
type dwarfField struct {
	dst    func(*Offsets) *int64
	typ    string
	member string // dotted path through nested structs
}

// dwarfFields lists, per minor version, where DWARF finds each table field.
func dwarfFields(minor int) []dwarfField {
	f := func(dst func(*Offsets) *int64, typ, member string) dwarfField {
		return dwarfField{dst, typ, member}
	}
	common := []dwarfField{
		f(func(o *Offsets) *int64 { return &o.RuntimeInterpHead }, "pyruntimestate", "interpreters.head"),
		f(func(o *Offsets) *int64 { return &o.InterpNext }, "_is", "next"),
		f(func(o *Offsets) *int64 { return &o.TsNext }, "_ts", "next"),
		f(func(o *Offsets) *int64 { return &o.TsPrev }, "_ts", "prev"),
		f(func(o *Offsets) *int64 { return &o.CodeFilename }, "PyCodeObject", "co_filename"),
		f(func(o *Offsets) *int64 { return &o.CodeName }, "PyCodeObject", "co_name"),
		f(func(o *Offsets) *int64 { return &o.CodeFirstLine }, "PyCodeObject", "co_firstlineno"),
		f(func(o *Offsets) *int64 { return &o.CodeLinetable }, "PyCodeObject", "co_linetable"),
		f(func(o *Offsets) *int64 { return &o.ObType }, "_object", "ob_type"),
		f(func(o *Offsets) *int64 { return &o.VarSize }, "PyVarObject", "ob_size"),
		f(func(o *Offsets) *int64 { return &o.BytesData }, "PyBytesObject", "ob_sval"),
		f(func(o *Offsets) *int64 { return &o.StrLength }, "PyASCIIObject", "length"),
		f(func(o *Offsets) *int64 { return &o.StrState }, "PyASCIIObject", "state"),
	}
	switch minor {
	case 10:
		return append(common,
			f(func(o *Offsets) *int64 { return &o.InterpThreadsHead }, "_is", "tstate_head"),
			f(func(o *Offsets) *int64 { return &o.TsThread }, "_ts", "thread_id"),
			f(func(o *Offsets) *int64 { return &o.TsFrame }, "_ts", "frame"),
			f(func(o *Offsets) *int64 { return &o.FramePrevious }, "_frame", "f_back"),
			f(func(o *Offsets) *int64 { return &o.FrameCode }, "_frame", "f_code"),
			f(func(o *Offsets) *int64 { return &o.FrameInstr }, "_frame", "f_lasti"),
			f(func(o *Offsets) *int64 { return &o.CodeCode }, "PyCodeObject", "co_code"),
		)
	case 11, 12:
		return append(common,
			f(func(o *Offsets) *int64 { return &o.InterpThreadsHead }, "_is", "threads.head"),
			f(func(o *Offsets) *int64 { return &o.TsThread }, "_ts", "native_thread_id"),
			f(func(o *Offsets) *int64 { return &o.TsFrame }, "_ts", "cframe"),
			f(func(o *Offsets) *int64 { return &o.CframeCurrent }, "_PyCFrame", "current_frame"),
			f(func(o *Offsets) *int64 { return &o.FramePrevious }, "_PyInterpreterFrame", "previous"),
			f(func(o *Offsets) *int64 { return &o.FrameCode }, "_PyInterpreterFrame", "f_code"),
			f(func(o *Offsets) *int64 { return &o.FrameInstr }, "_PyInterpreterFrame", "prev_instr"),
			f(func(o *Offsets) *int64 { return &o.FrameOwner }, "_PyInterpreterFrame", "owner"),
			f(func(o *Offsets) *int64 { return &o.CodeQualname }, "PyCodeObject", "co_qualname"),
			f(func(o *Offsets) *int64 { return &o.CodeAdaptive }, "PyCodeObject", "co_code_adaptive"),
		)
	case 13:
		// 3.13 takes its offsets from _Py_DebugOffsets; these let the
		// tests check that reading against the DWARF of a 3.13 build.
		return append(common,
			f(func(o *Offsets) *int64 { return &o.InterpThreadsHead }, "_is", "threads.head"),
			f(func(o *Offsets) *int64 { return &o.TsThread }, "_ts", "native_thread_id"),
			f(func(o *Offsets) *int64 { return &o.TsFrame }, "_ts", "current_frame"),
			f(func(o *Offsets) *int64 { return &o.FramePrevious }, "_PyInterpreterFrame", "previous"),
			f(func(o *Offsets) *int64 { return &o.FrameCode }, "_PyInterpreterFrame", "f_executable"),
			f(func(o *Offsets) *int64 { return &o.FrameInstr }, "_PyInterpreterFrame", "instr_ptr"),
			f(func(o *Offsets) *int64 { return &o.FrameOwner }, "_PyInterpreterFrame", "owner"),
			f(func(o *Offsets) *int64 { return &o.CodeQualname }, "PyCodeObject", "co_qualname"),
			f(func(o *Offsets) *int64 { return &o.CodeAdaptive }, "PyCodeObject", "co_code_adaptive"),
		)
	}
	return nil
}

// dwarfSizes are the struct sizes the table also needs.
var dwarfSizes = []struct {
	dst func(*Offsets) *int64
	typ string
}{
	{func(o *Offsets) *int64 { return &o.StrASCIISize }, "PyASCIIObject"},
	{func(o *Offsets) *int64 { return &o.StrCompactSz }, "PyCompactUnicodeObject"},
}

// offsetsFromDWARF derives the table's fields from the file's DWARF. It
// returns (nil, nil) when the file has no DWARF.
func offsetsFromDWARF(ef *elf.File, minor int, base Offsets) (*Offsets, error) {
	if ef.Section(".debug_info") == nil {
		return nil, nil
	}
	d, err := elfx.DWARF(ef, limits)
	if err != nil {
		return nil, fmt.Errorf("read DWARF: %w", err)
	}
	fields := dwarfFields(minor)
	want := map[string]bool{}
	for _, f := range fields {
		want[f.typ] = true
	}
	for _, s := range dwarfSizes {
		want[s.typ] = true
	}
	types := map[string]dwarf.Type{}
	r := d.Reader()
	for len(types) < len(want) {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("read DWARF: %w", err)
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType && e.Tag != dwarf.TagTypedef {
			if e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if !want[name] || types[name] != nil {
			r.SkipChildren()
			continue
		}
		if e.Tag == dwarf.TagStructType {
			if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
				r.SkipChildren()
				continue
			}
		}
		t, err := elfx.Type(d, e.Offset) // bounded: a crafted chain can loop
		if err != nil {
			return nil, fmt.Errorf("DWARF type %s: %w", name, err)
		}
		if st := structOf(t); st != nil && !st.Incomplete {
			types[name] = st
		}
		r.SkipChildren()
	}
	o := base
	for _, f := range fields {
		st := structOf(types[f.typ])
		if st == nil {
			return nil, fmt.Errorf("DWARF has no struct %s", f.typ)
		}
		off, ok := memberOffset(st, f.member)
		if !ok {
			return nil, fmt.Errorf("DWARF struct %s has no member %s", f.typ, f.member)
		}
		*f.dst(&o) = off
	}
	for _, s := range dwarfSizes {
		st := structOf(types[s.typ])
		if st == nil {
			return nil, fmt.Errorf("DWARF has no struct %s", s.typ)
		}
		*s.dst(&o) = st.ByteSize
	}
	return &o, nil
}

// structOf is the struct t names through typedefs and qualifiers (at
// most elfx.MaxTypeDepth of them: a crafted chain can loop), nil if none.
func structOf(t dwarf.Type) *dwarf.StructType {
	u, err := elfx.Underlying(t)
	if err != nil {
		return nil
	}
	st, _ := u.(*dwarf.StructType)
	return st
}

func memberOffset(st *dwarf.StructType, path string) (int64, bool) {
	name, rest, nested := strings.Cut(path, ".")
	for _, f := range st.Field {
		if f.Name != name {
			continue
		}
		if !nested {
			return f.ByteOffset, true
		}
		inner := structOf(f.Type)
		if inner == nil {
			return 0, false
		}
		off, ok := memberOffset(inner, rest)
		return f.ByteOffset + off, ok
	}
	return 0, false
}
