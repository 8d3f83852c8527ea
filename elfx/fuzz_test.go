package elfx

import (
	"debug/dwarf"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/tttrace/tttrace/internal/crafted"
)

// craftedSeeds are issue 23's crafted files, small enough to fuzz from.
func craftedSeeds() [][]byte {
	note := func(b []byte) crafted.File {
		return crafted.File{Sections: []crafted.Section{{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: b}},
			Notes: []string{".note.gnu.build-id"}}
	}
	files := []crafted.File{
		note(crafted.GoodBuildID([]byte{1, 2, 3, 4, 5, 6, 7, 8})),
		note(crafted.WrapNoteLoop()),
		note(crafted.WrapNotePanic()),
		{Sections: []crafted.Section{{Name: ".note.z", Type: elf.SHT_NOTE, Flags: elf.SHF_COMPRESSED, Data: crafted.Compressed(1 << 20)}}},
		{Sections: []crafted.Section{{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: crafted.EHFrameWrap()}}},
		{Sections: []crafted.Section{{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: crafted.DebugLink("../../dev/zero", 0)}}},
		{Sections: crafted.DWARFSections(crafted.LoopTypedef("T"))},
		{Sections: crafted.DWARFSections(crafted.LoopConst("T"))},
		{Sections: crafted.DWARFSections([]crafted.DIE{
			{Tag: dwarf.TagStructType, Name: "S", ByteSize: 8, Kids: []crafted.DIE{{Tag: dwarf.TagMember, Name: "m", Type: 2}}},
			{Tag: dwarf.TagPointerType, ByteSize: 8, Type: 2},
		})},
		{Sections: []crafted.Section{
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: make([]byte, 72), Link: 2, Entsize: 24},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: []byte("\x00_ZN2tt8tt_metal_ZN2tt8tt_metal")},
		}},
	}
	var out [][]byte
	for _, f := range files {
		out = append(out, f.Bytes())
	}
	return out
}

// FuzzFile opens arbitrary bytes as an ELF file and runs every reader of
// elfx on it: build-id, debuglink and the debug look-up, sections,
// symbols, DWARF with its type checks. Nothing may panic, hang or
// allocate without bound.
func FuzzFile(f *testing.F) {
	for _, b := range craftedSeeds() {
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f.so")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		lim := Limits{Section: 16 << 20, Table: 16 << 20}
		ef, err := Open(p, lim)
		if err != nil {
			return
		}
		defer ef.Close()
		BuildID(ef.File, lim)
		(Debug{Roots: []string{}, Limits: lim}).FindDebug(ef.File, p, "", "")
		for _, s := range ef.Sections {
			ef.ReadSection(s.Name)
		}
		Symbols(ef.File, ".dynsym", lim)
		Symbols(ef.File, ".symtab", lim)
		d, err := DWARF(ef.File, lim)
		if err != nil {
			return
		}
		r := d.Reader()
		for n := 0; n < 64; n++ {
			e, err := r.Next()
			if err != nil || e == nil {
				return
			}
			if t, err := Type(d, e.Offset); err == nil {
				TypeName(t)
				TypeSize(t)
				Underlying(t)
			}
		}
	})
}

// FuzzNotes walks arbitrary note areas.
func FuzzNotes(f *testing.F) {
	f.Add(crafted.WrapNoteLoop())
	f.Add(crafted.WrapNotePanic())
	f.Add(crafted.GoodBuildID([]byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		EachNote(b, func(string, uint32, []byte) bool { n++; return true })
		if n > len(b)/12 {
			t.Fatalf("%d notes in %d bytes", n, len(b))
		}
	})
}

// FuzzCFI reads arbitrary bytes as .eh_frame or .debug_frame with the one
// CIE/FDE reader, and every pointer encoding.
func FuzzCFI(f *testing.F) {
	f.Add(crafted.EHFrameWrap(), false)
	f.Add([]byte{0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0,
		0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0xd0, 0xff, 0xff, 0xff, 0x10, 0, 0, 0, 0, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, b []byte, debug bool) {
		for off, n := uint64(0), 0; off < uint64(len(b)); n++ {
			e, err := ReadCFIEntry(b, off, debug)
			if err != nil && err != ErrCFIEnd {
				return
			}
			if e.End <= off {
				t.Fatalf("entry at %#x ends at %#x", off, e.End)
			}
			if err == nil && !e.CIE {
				if co, ok := e.CIEOffset(debug); ok {
					if c, err := ParseCIE(b, co, 0x1000, debug); err == nil {
						FDERange(b, e, c, 0x1000)
					}
				}
			}
			off = e.End
		}
		r := &Reader{Data: b, Base: 0x1000}
		for r.Left() > 0 {
			enc, _ := r.U8()
			r.Pointer(enc, 0x2000)
			r.Block()
		}
	})
}
