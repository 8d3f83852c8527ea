package elfx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Symbols reads the symbol table section name (".symtab", ".dynsym") as
// debug/elf's File.Symbols does (entry 0 left out, so index i of the table
// is element i-1), under limits debug/elf does not have: both tables at
// most lim.Table bytes, each name at most lim.Name, all names together at
// most lim.Table bytes (names that overlap in the string table, as a
// crafted one makes every name, are counted each time). A missing table
// gives nil and no error.
func Symbols(ef *elf.File, name string, lim Limits) ([]elf.Symbol, error) {
	lim = lim.orDefault()
	ss := ef.Section(name)
	if ss == nil || ss.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if ss.Link == 0 || int(ss.Link) >= len(ef.Sections) {
		return nil, fmt.Errorf("%s: no string table", name)
	}
	tl := lim
	tl.Section = lim.Table
	syms, err := SectionData(ss, tl)
	if err != nil {
		return nil, err
	}
	strs, err := SectionData(ef.Sections[ss.Link], tl)
	if err != nil {
		return nil, err
	}
	if len(syms)%24 != 0 {
		return nil, fmt.Errorf("%s: %d bytes, not whole entries", name, len(syms))
	}
	var out []elf.Symbol
	total := uint64(0)
	for off := 24; off+24 <= len(syms); off += 24 {
		e := syms[off : off+24]
		n, err := cstringIn(strs, binary.LittleEndian.Uint32(e), lim.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: symbol %d: %w", name, off/24, err)
		}
		total += uint64(len(n))
		if total > lim.Table {
			return nil, fmt.Errorf("%s: names of more than %d bytes together", name, lim.Table)
		}
		out = append(out, elf.Symbol{
			Name:    n,
			Info:    e[4],
			Other:   e[5],
			Section: elf.SectionIndex(binary.LittleEndian.Uint16(e[6:])),
			Value:   binary.LittleEndian.Uint64(e[8:]),
			Size:    binary.LittleEndian.Uint64(e[16:]),
		})
	}
	return out, nil
}

// cstringIn is the NUL-terminated string at off of a string table.
func cstringIn(tab []byte, off uint32, max int) (string, error) {
	if uint64(off) >= uint64(len(tab)) {
		if off == 0 {
			return "", nil
		}
		return "", fmt.Errorf("name at %#x outside the string table", off)
	}
	b := tab[off:]
	i := bytes.IndexByte(b[:min(len(b), max+1)], 0)
	if i < 0 {
		if len(b) > max {
			return "", fmt.Errorf("name at %#x: %w (%d bytes)", off, ErrTooLong, max)
		}
		i = len(b)
	}
	return string(b[:i]), nil
}

// CheckSections refuses a file one of whose sections SectionData would
// refuse (more than lim.Section bytes, or decompressing more than
// lim.Ratio times): once it passes, reading any of its sections whole
// (debug/elf's Section.Data) is bounded.
func CheckSections(ef *elf.File, lim Limits) error {
	lim = lim.orDefault()
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOBITS {
			continue
		}
		if err := checkSize(s, lim); err != nil {
			return err
		}
	}
	return nil
}
