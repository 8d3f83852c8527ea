package crafted

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
)

// DIE is one debugging entry of a DWARF 4 compile unit built by DWARF.
type DIE struct {
	Tag  dwarf.Tag
	Name string // "" for none
	// Type is the 1-based index, in the unit's top-level list, of the
	// entry DW_AT_type names (0: none). An entry may name itself.
	Type     int
	ByteSize int // DW_AT_byte_size when > 0
	Offset   int // DW_AT_data_member_location of a member
	Kids     []DIE
}

// DWARF builds .debug_abbrev and .debug_info holding one compile unit
// with dies at its top level (namespaces are not needed by the cases).
func DWARF(dies []DIE) (abbrev, info []byte) {
	type abbr struct {
		tag                     dwarf.Tag
		name, typ, size, offset bool
		kids                    bool
	}
	var abbrevs []abbr
	code := func(d DIE) byte {
		a := abbr{d.Tag, d.Name != "", d.Type > 0, d.ByteSize > 0, d.Tag == dwarf.TagMember, len(d.Kids) > 0}
		for i, x := range abbrevs {
			if x == a {
				return byte(i + 2)
			}
		}
		abbrevs = append(abbrevs, a)
		return byte(len(abbrevs) + 1)
	}
	// Offsets of top-level entries: the header is 11 bytes, the unit
	// entry 1 (no attributes).
	size := func(d DIE) int {
		n := 1
		if d.Name != "" {
			n += len(d.Name) + 1
		}
		if d.Type > 0 {
			n += 4
		}
		if d.ByteSize > 0 {
			n++
		}
		if d.Tag == dwarf.TagMember {
			n++
		}
		return n
	}
	offs := make([]int, len(dies))
	at := 12
	for i, d := range dies {
		offs[i] = at
		at += size(d)
		for _, k := range d.Kids {
			at += size(k)
		}
		if len(d.Kids) > 0 {
			at++ // the children's terminator
		}
	}
	body := []byte{1} // the compile unit (abbrev 1)
	put := func(d DIE) {
		body = append(body, code(d))
		if d.Name != "" {
			body = append(append(body, d.Name...), 0)
		}
		if d.Type > 0 {
			body = binary.LittleEndian.AppendUint32(body, uint32(offs[d.Type-1]))
		}
		if d.ByteSize > 0 {
			body = append(body, byte(d.ByteSize))
		}
		if d.Tag == dwarf.TagMember {
			body = append(body, byte(d.Offset))
		}
	}
	for _, d := range dies {
		put(d)
		for _, k := range d.Kids {
			put(k)
		}
		if len(d.Kids) > 0 {
			body = append(body, 0)
		}
	}
	body = append(body, 0) // end of the unit's children
	hdr := binary.LittleEndian.AppendUint32(nil, uint32(7+len(body)))
	hdr = binary.LittleEndian.AppendUint16(hdr, 4)
	hdr = binary.LittleEndian.AppendUint32(hdr, 0)
	hdr = append(hdr, 8)
	info = append(hdr, body...)

	abbrev = []byte{1, byte(dwarf.TagCompileUnit), 1, 0, 0}
	for i, a := range abbrevs {
		abbrev = append(abbrev, byte(i+2))
		abbrev = appendULEB(abbrev, uint64(a.tag))
		if a.kids {
			abbrev = append(abbrev, 1)
		} else {
			abbrev = append(abbrev, 0)
		}
		if a.name {
			abbrev = append(abbrev, byte(dwarf.AttrName), 0x08) // DW_FORM_string
		}
		if a.typ {
			abbrev = append(abbrev, byte(dwarf.AttrType), 0x13) // DW_FORM_ref4
		}
		if a.size {
			abbrev = append(abbrev, byte(dwarf.AttrByteSize), 0x0b) // DW_FORM_data1
		}
		if a.offset {
			abbrev = append(abbrev, byte(dwarf.AttrDataMemberLoc), 0x0b)
		}
		abbrev = append(abbrev, 0, 0)
	}
	abbrev = append(abbrev, 0)
	return abbrev, info
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

// DWARFSections are .debug_abbrev and .debug_info for a File.
func DWARFSections(dies []DIE) []Section {
	a, i := DWARF(dies)
	return []Section{
		{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: a},
		{Name: ".debug_info", Type: elf.SHT_PROGBITS, Data: i},
	}
}

// LoopTypedef is a typedef named name whose type is itself.
func LoopTypedef(name string) []DIE {
	return []DIE{{Tag: dwarf.TagTypedef, Name: name, Type: 1}}
}

// LoopConst is a typedef named name of a const type whose type is itself.
func LoopConst(name string) []DIE {
	return []DIE{{Tag: dwarf.TagTypedef, Name: name, Type: 2}, {Tag: dwarf.TagConstType, Type: 2}}
}
