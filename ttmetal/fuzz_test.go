package ttmetal

import (
	"debug/dwarf"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/internal/crafted"
)

// FuzzLibrary opens arbitrary bytes as a TT-Metal library and runs the
// parsers of outside input on it: the symbol scans (streamed and cached,
// with their name limits), .eh_frame, relocations and code, the DWARF
// layout and type names, the debug-file look-up. Seeded with issue 23's
// crafted files. Nothing may panic, hang or grow without bound.
func FuzzLibrary(f *testing.F) {
	const pfx = "_ZN2tt8tt_metal"
	for _, cf := range []crafted.File{
		{Sections: []crafted.Section{{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: crafted.WrapNoteLoop()}}},
		{Sections: []crafted.Section{{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: crafted.WrapNotePanic()}}},
		{Sections: []crafted.Section{{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: crafted.EHFrameWrap()}}},
		{Sections: crafted.DWARFSections(crafted.LoopTypedef("BufferType"))},
		{Sections: crafted.DWARFSections(crafted.LoopConst("BufferType"))},
		{Sections: crafted.DWARFSections([]crafted.DIE{{Tag: dwarf.TagPointerType, ByteSize: 8, Type: 1}})},
		{Sections: []crafted.Section{
			{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: append(make([]byte, 24), 1, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), Link: 2, Entsize: 24},
			{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: []byte("\x00" + strings.Repeat(pfx, 8))},
		}},
		{Sections: []crafted.Section{{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: crafted.DebugLink("../../dev/zero", 0)}}},
	} {
		f.Add(cf.Bytes())
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "libtt_metal.so")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		lib, err := OpenLibrary(p)
		if err != nil {
			return
		}
		defer lib.Close()
		lib.ScanSymbols([]string{pfx}, func(Symbol) {})
		lib.ScanSymbols(attachPrefixes, func(Symbol) {})
		IsTTMetal(lib)
		lib.fdeRanges()
		lib.code()
		findDebugInfo(lib, elfx.Debug{Roots: []string{}})
		dwarfLayout(p, dwarfWants{meshCQ: true, coreRanges: true})
		if d, err := elfx.DWARF(lib.file, elfx.Limits{}); err == nil {
			r := d.Reader()
			for n := 0; n < 64; n++ {
				e, err := r.Next()
				if err != nil || e == nil {
					break
				}
				dwarfTypeName(d, e.Offset)
			}
		}
	})
}
