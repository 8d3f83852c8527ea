package elfx

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/internal/crafted"
)

// within fails the test when fn does not return in d (a parser that
// loops or blocks on crafted input).
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
	}
}

// allocated runs fn and returns the bytes it allocated.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func write(t *testing.T, f crafted.File) string {
	t.Helper()
	p, err := f.Write(t.TempDir(), "libcrafted.so")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func open(t *testing.T, p string) *File {
	t.Helper()
	f, err := Open(p, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

var goodID = []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}

func TestBuildID(t *testing.T) {
	note := func(b []byte) crafted.Section {
		return crafted.Section{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: b}
	}
	for _, tc := range []struct {
		name  string
		file  crafted.File
		want  string
		alloc uint64
	}{
		{"segment", crafted.File{Sections: []crafted.Section{note(crafted.GoodBuildID(goodID))}, Notes: []string{".note.gnu.build-id"}}, hex.EncodeToString(goodID), 1 << 20},
		{"section", crafted.File{Sections: []crafted.Section{note(crafted.GoodBuildID(goodID))}}, hex.EncodeToString(goodID), 1 << 20},
		// Sizes that wrap 32 bits: a reader summing them in 32 bits
		// loops forever on the first, panics on the second.
		{"wrap-loop", crafted.File{Sections: []crafted.Section{note(crafted.WrapNoteLoop())}, Notes: []string{".note.gnu.build-id"}}, "", 1 << 20},
		{"wrap-panic", crafted.File{Sections: []crafted.Section{note(crafted.WrapNotePanic())}, Notes: []string{".note.gnu.build-id"}}, "", 1 << 20},
		{"wrap-then-good", crafted.File{Sections: []crafted.Section{
			note(crafted.WrapNoteLoop()),
			{Name: ".note.b", Type: elf.SHT_NOTE, Data: crafted.GoodBuildID(goodID)},
		}}, hex.EncodeToString(goodID), 1 << 20},
		// A compressed note claiming 1 GiB (from about 1 MB) is not
		// decompressed: the limit is checked first.
		{"compressed-bomb", crafted.File{Sections: []crafted.Section{
			{Name: ".note.z", Type: elf.SHT_NOTE, Flags: elf.SHF_COMPRESSED, Data: crafted.Compressed(1 << 30)},
		}}, "", 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := open(t, write(t, tc.file))
			var got string
			within(t, 5*time.Second, func() {
				if n := allocated(func() { got = BuildID(f.File, Limits{}) }); n > tc.alloc {
					t.Errorf("allocated %d bytes", n)
				}
			})
			if got != tc.want {
				t.Errorf("build-id %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSectionLimits(t *testing.T) {
	p := write(t, crafted.File{Sections: []crafted.Section{
		{Name: ".debug_str", Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: crafted.Compressed(64 << 20)},
		{Name: ".data", Type: elf.SHT_PROGBITS, Data: []byte("0123456789")},
		{Name: ".liar", Type: elf.SHT_PROGBITS, Size: 1 << 40},
	}})
	f := open(t, p)
	if _, _, err := f.ReadSection(".debug_str"); err == nil || !strings.Contains(err.Error(), "times") {
		t.Errorf("compressed 64 MiB from about 64 KiB: %v", err)
	}
	if _, err := DWARF(f.File, Limits{}); err == nil {
		t.Error("DWARF read a section the limits refuse")
	}
	if _, b, err := f.ReadSection(".data"); err != nil || string(b) != "0123456789" {
		t.Errorf(".data: %q %v", b, err)
	}
	if _, _, err := f.ReadSection(".liar"); err == nil {
		t.Error("a section larger than the file was read")
	}
	if _, err := SectionData(f.File.Section(".debug_str"), Limits{Ratio: 2000}); err != nil {
		t.Errorf("within a higher ratio: %v", err)
	}
}

// A file truncated while open gives read errors, never a fault.
func TestTruncated(t *testing.T) {
	p := write(t, crafted.File{Sections: []crafted.Section{
		{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Data: make([]byte, 1<<16)},
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Data: []byte("\x00abc\x00")},
	}})
	f := open(t, p)
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.ReadSection(".eh_frame"); err == nil {
		t.Error("a truncated section was read")
	}
	off, size, ok, err := f.Table(f.File.Section(".dynstr"))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := f.Sweep(off, size, 4096, 1, 0, func(int, []byte) error { return nil }); err == nil {
		t.Error("swept a truncated table")
	}
	if _, err := f.CString(off+1, off+size); err == nil {
		t.Error("read a string of a truncated table")
	}
}

func TestOpenRefusesFIFOAndDevices(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "libtt_metal.so")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", t.TempDir()} {
		within(t, 5*time.Second, func() {
			if _, err := Open(p, Limits{}); !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v", p, err)
			}
		})
	}
}

func TestCString(t *testing.T) {
	long := strings.Repeat("x", 70<<10)
	p := write(t, crafted.File{Sections: []crafted.Section{
		{Name: ".strtab", Type: elf.SHT_STRTAB, Data: []byte("\x00short\x00" + long + "\x00")},
	}})
	f := open(t, p)
	off, size, _, _ := f.Table(f.File.Section(".strtab"))
	if s, err := f.CString(off+1, off+size); s != "short" || err != nil {
		t.Errorf("%q %v", s, err)
	}
	if _, err := f.CString(off+7, off+size); !errors.Is(err, ErrTooLong) {
		t.Errorf("a 70 KiB name: %v", err)
	}
	if s, err := f.CString(off+3, off+5); s != "or" || err != nil {
		t.Errorf("bounded by end: %q %v", s, err)
	}
}

// Names in a string table without NULs, each symbol starting one byte
// further: debug/elf's Symbols copies 1 MiB per symbol (gigabytes).
func TestSymbolsNameBomb(t *testing.T) {
	strs := []byte(strings.Repeat("_ZN2tt8tt_metal", 1<<16)) // 960 KiB, no NUL
	var syms []byte
	syms = append(syms, make([]byte, 24)...)
	for i := 0; i < 40000; i++ {
		e := make([]byte, 24)
		e[0], e[1], e[2] = byte(i), byte(i>>8), byte(i>>16)
		e[4] = byte(elf.STT_FUNC)
		e[6] = 1
		syms = append(syms, e...)
	}
	p := write(t, crafted.File{Sections: []crafted.Section{
		{Name: ".dynsym", Type: elf.SHT_DYNSYM, Data: syms, Link: 2, Entsize: 24},
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Data: strs},
	}})
	f := open(t, p)
	var err error
	within(t, 5*time.Second, func() {
		if n := allocated(func() { _, err = Symbols(f.File, ".dynsym", Limits{Table: 16 << 20}) }); n > 64<<20 {
			t.Errorf("allocated %d bytes", n)
		}
	})
	if err == nil {
		t.Error("no error")
	}
}

func TestFindDebug(t *testing.T) {
	dir := t.TempDir()
	dbg := crafted.File{Sections: append([]crafted.Section{
		{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Data: crafted.GoodBuildID(goodID)},
	}, crafted.DWARFSections(crafted.LoopTypedef("T"))...)}
	dbgPath, err := dbg.Write(dir, "lib.so.debug")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(dbgPath)
	crc := crc32.ChecksumIEEE(raw)
	fifo := filepath.Join(dir, "fifo.debug")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := func(link string) (*File, string) {
		p, err := crafted.File{Sections: []crafted.Section{
			{Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Data: crafted.GoodBuildID(goodID)},
			{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: crafted.DebugLink(link, crc)},
		}}.Write(dir, "lib.so")
		if err != nil {
			t.Fatal(err)
		}
		return open(t, p), p
	}
	d := Debug{Roots: []string{}}
	for _, tc := range []struct{ link, want, why string }{
		{"lib.so.debug", dbgPath, ".gnu_debuglink CRC matches"},
		{"../../../../../../../../../../../dev/zero", "", "not a file name"},
		{"fifo.debug", "", "not a regular file"},
		{"lib.so", "", "no .gnu_debuglink"}, // itself: skipped
	} {
		f, p := lib(tc.link)
		var found string
		var checked []string
		within(t, 5*time.Second, func() { found, checked = d.FindDebug(f.File, p, hex.EncodeToString(goodID), ".debug_info") })
		if found != tc.want {
			t.Errorf("%s: found %q, want %q (%q)", tc.link, found, tc.want, checked)
		}
		if tc.why != "no .gnu_debuglink" && !strings.Contains(strings.Join(checked, "\n"), tc.why) {
			t.Errorf("%s: checked %q, want %q", tc.link, checked, tc.why)
		}
	}
	// By build-id under a root; another build's id is refused.
	root := t.TempDir()
	bid := filepath.Join(root, ".build-id", "de")
	os.MkdirAll(bid, 0o755)
	os.Symlink(dbgPath, filepath.Join(bid, "adbeef01020304.debug"))
	f, p := lib("none")
	if found, checked := (Debug{Roots: []string{root}}).FindDebug(f.File, p, hex.EncodeToString(goodID), ""); found == "" {
		t.Errorf("by build-id: %q", checked)
	}
	if found, _ := (Debug{Roots: []string{root}}).FindDebug(f.File, p, "de00", ""); found != "" {
		t.Errorf("another build's file used: %s", found)
	}
}

func TestTypeLoops(t *testing.T) {
	for name, dies := range map[string][]crafted.DIE{
		"typedef": crafted.LoopTypedef("T"),
		"const":   crafted.LoopConst("T"),
		"member": {
			{Tag: dwarf.TagStructType, Name: "S", ByteSize: 8, Kids: []crafted.DIE{{Tag: dwarf.TagMember, Name: "m", Type: 2}}},
			{Tag: dwarf.TagTypedef, Name: "T", Type: 2},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := open(t, write(t, crafted.File{Sections: crafted.DWARFSections(dies)}))
			d, err := DWARF(f.File, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Type(d, 12); !errors.Is(err, ErrTypeDepth) {
				t.Errorf("got %v", err)
			}
		})
	}
	// A sound chain: typedef -> const -> struct.
	f := open(t, write(t, crafted.File{Sections: crafted.DWARFSections([]crafted.DIE{
		{Tag: dwarf.TagTypedef, Name: "T", Type: 2},
		{Tag: dwarf.TagConstType, Type: 3},
		{Tag: dwarf.TagStructType, Name: "S", ByteSize: 24},
	})}))
	d, err := DWARF(f.File, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ty, err := Type(d, 12)
	if err != nil {
		t.Fatal(err)
	}
	u, err := Underlying(ty)
	if err != nil || u.(*dwarf.StructType).StructName != "S" || TypeSize(ty) != 24 {
		t.Errorf("%v %v %d", u, err, TypeSize(ty))
	}
}

func TestRecover(t *testing.T) {
	parse := func(b []byte) (n int, err error) {
		defer Recover(&err, "crafted.so")
		return int(b[len(b)]), nil // a parser's out-of-range read
	}
	if _, err := parse([]byte{1}); err == nil || !strings.Contains(err.Error(), "crafted.so: malformed input") {
		t.Fatalf("got %v", err)
	}
}
