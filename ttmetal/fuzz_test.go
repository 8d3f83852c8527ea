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
// layout and type names, the debug-file look-up, the op table (FindOps).
// Seeded with issue 23's crafted files. Nothing may panic, hang or grow
// without bound.
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
		FindOps(lib)
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

// FuzzOpNames runs the op classifier (ops.go) on arbitrary names: the
// byte-level free-function and launch checks, the demangling of launches,
// registrations and invokes. Nothing may panic or hang; what it takes is
// a bounded, well-formed name.
func FuzzOpNames(f *testing.F) {
	for _, s := range []string{
		"_ZN4ttnn6matmulERKN2tt8tt_metal6TensorES5_",
		"_ZN4ttnn10op_summaryB5cxx11ERKN2tt8tt_metal6TensorE",
		"_ZN4ttnn12experimental16nlp_concat_headsERKN2tt8tt_metal6TensorE",
		"_ZN4ttnn16device_operation6detail6launchINS_10operations6matmul21MatmulDeviceOperationEEENT_21tensor_return_value_tERKNS6_22operation_attributes_tERKNS6_13tensor_args_tE",
		"_ZN4ttnn16device_operation6detail29launch_operation_with_adapterINS0_26MeshDeviceOperationAdapterINS_10operations6matmul21MatmulDeviceOperationEEEEEvRKNT_22operation_attributes_tERKNS8_13tensor_args_tERNS8_21tensor_return_value_tE.isra.0",
		"_ZTIN4ttnn10decorators22registered_operation_tIXtlN7reflect6v1_2_212fixed_stringIcLm9EEEtlA10_cLc116ELc116ELc110ELc110ELc58ELc58ELc97ELc100ELc100EEEENS_10operations6binary15BinaryOperationILNS8_12BinaryOpTypeE0EEEEE",
		"_ZN4ttnn10operations6binary15BinaryOperationILNS1_12BinaryOpTypeE0EE6invokeERKN2tt8tt_metal6TensorES9_",
		"_ZN4ttnn16device_operation6detail6launchIN1aIN1aIN1aIS1_S2_EEEEEEvv.part.0",
	} {
		f.Add([]byte(s))
	}
	regs := &OpRegistrations{byType: map[string]string{
		"ttnn::operations::binary::BinaryOperation<(ttnn::operations::binary::BinaryOpType)0>": "ttnn.add"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &opScan{regs: regs, budget: opDemangleBudget}
		name, whole := b, true
		if len(name) > maxOpSymbol {
			name, whole = name[:maxOpSymbol], false
		}
		if c, ok, tooLong := s.classify(name, whole); ok {
			if tooLong || c.name == "" || len(c.name) > maxOpName || (c.kind != OpTop && c.kind != OpDevice) {
				t.Fatalf("%q: %+v (too long %v)", b, c, tooLong)
			}
			for _, r := range c.name {
				if !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
					t.Fatalf("%q: name %q", b, c.name)
				}
			}
		}
		if typ, py, ok := s.registration(name); ok && (typ == "" || !strings.HasPrefix(py, "ttnn.") || len(py) > maxOpName) {
			t.Fatalf("%q: registration %q %q", b, typ, py)
		}
	})
}
