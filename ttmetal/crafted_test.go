package ttmetal

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/internal/crafted"
)

// Crafted libraries (issue 23): under --all, root opens every mapped file
// named like a shared object. Each case must give an error or nothing,
// quickly and in bounded memory: never a panic, a hang, a fatal stack
// overflow or a SIGBUS.

// within runs fn and fails the test if it does not return in d or
// allocates more than alloc bytes.
func within(t *testing.T, d time.Duration, alloc uint64, fn func()) {
	t.Helper()
	done := make(chan uint64, 1)
	go func() {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		fn()
		runtime.ReadMemStats(&b)
		done <- b.TotalAlloc - a.TotalAlloc
	}()
	select {
	case n := <-done:
		if n > alloc {
			t.Errorf("allocated %d bytes (limit %d)", n, alloc)
		}
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
	}
}

func writeCrafted(t *testing.T, f crafted.File) string {
	t.Helper()
	p, err := f.Write(t.TempDir(), "libcrafted.so")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCraftedBuildIDNotes(t *testing.T) {
	for name, sec := range map[string]crafted.Section{
		// A 16-byte note whose sizes wrap 32 bits to 0: looped forever.
		"loop": {Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: crafted.WrapNoteLoop()},
		// A 24-byte one whose end wraps into the note: panicked.
		"panic": {Name: ".note.gnu.build-id", Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Data: crafted.WrapNotePanic()},
		// A compressed note: 1 MB decompressing to 1 GiB (6 GB from 8 MB).
		"compressed": {Name: ".note.x", Type: elf.SHT_NOTE, Flags: elf.SHF_COMPRESSED, Data: crafted.Compressed(1 << 30)},
	} {
		t.Run(name, func(t *testing.T) {
			p := writeCrafted(t, crafted.File{Sections: []crafted.Section{sec}})
			within(t, 10*time.Second, 64<<20, func() {
				lib, err := OpenLibrary(p)
				if err != nil {
					return
				}
				defer lib.Close()
				if lib.BuildID != "" {
					t.Errorf("build-id %q from a crafted note", lib.BuildID)
				}
			})
		})
	}
}

func TestCraftedEHFrame(t *testing.T) {
	p := writeCrafted(t, crafted.File{Sections: []crafted.Section{
		{Name: ".eh_frame", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC, Data: crafted.EHFrameWrap()},
	}})
	lib, err := OpenLibrary(p)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	within(t, 10*time.Second, 16<<20, func() {
		if _, err := lib.fdeRanges(); err == nil {
			t.Error("an .eh_frame entry whose 64-bit length wraps was read")
		}
	})
}

func TestCraftedDWARFLoops(t *testing.T) {
	for name, dies := range map[string][]crafted.DIE{
		"typedef": crafted.LoopTypedef("BufferType"),
		"const":   crafted.LoopConst("BufferType"),
		"pointer": {{Tag: dwarf.TagPointerType, ByteSize: 8, Type: 1}}, // a pointer to itself: String never ends
	} {
		t.Run(name, func(t *testing.T) {
			p := writeCrafted(t, crafted.File{Sections: crafted.DWARFSections(dies)})
			lib, err := OpenLibrary(p)
			if err != nil {
				t.Fatal(err)
			}
			defer lib.Close()
			d, err := elfx.DWARF(lib.file, elfx.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			within(t, 10*time.Second, 64<<20, func() {
				n, size := dwarfTypeName(d, 12)
				if name != "pointer" && size >= 0 {
					t.Errorf("%q, size %d from a looping type", n, size)
				}
			})
		})
	}
}

// Symbol names that overlap: a wanted prefix repeated with no NUL for
// 60 KB, every repetition a symbol's name: each name copied to its end
// (1 MiB file: 357 MiB and 7.7 s).
func TestCraftedSymbolNames(t *testing.T) {
	const pfx = "_ZN2tt8tt_metal"
	run := strings.Repeat(pfx, 4000) + "\x00"
	strs := "\x00" + strings.Repeat(run, 16)
	syms := make([]byte, 24)
	for i := 1; i+len(pfx) < len(strs); i += len(pfx) {
		if strs[i-1] == 0 && i > 1 {
			i++
		}
		if !strings.HasPrefix(strs[i:], pfx) {
			continue
		}
		e := make([]byte, 24)
		binary.LittleEndian.PutUint32(e, uint32(i))
		e[4] = byte(elf.STT_FUNC)
		e[6] = 1
		syms = append(syms, e...)
	}
	p := writeCrafted(t, crafted.File{Sections: []crafted.Section{
		{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: syms, Link: 2, Entsize: 24},
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: []byte(strs)},
	}})
	lib, err := OpenLibrary(p)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	within(t, 10*time.Second, 128<<20, func() {
		n := 0
		err = lib.ScanSymbols([]string{pfx}, func(Symbol) { n++ })
		if err == nil {
			t.Errorf("%d names of %d bytes from a %d-byte table", n, len(run), len(strs))
		}
	})
}

// A sparse 8 GiB .dynstr: sweeping it cost 25 s of CPU.
func TestCraftedSparseDynstr(t *testing.T) {
	p := writeCrafted(t, crafted.File{Sections: []crafted.Section{
		{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: make([]byte, 48), Link: 2, Entsize: 24},
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Size: 8 << 30, Offset: 1 << 20},
	}})
	lib, err := OpenLibrary(p)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	within(t, 5*time.Second, 64<<20, func() {
		if err := lib.ScanSymbols(attachPrefixes, func(Symbol) {}); err == nil {
			t.Error("an 8 GiB string table was swept")
		}
	})
}

// A .gnu_debuglink naming /dev/zero through "..", or a FIFO beside the
// library: read without bound, or blocked forever.
func TestCraftedDebugLink(t *testing.T) {
	for _, link := range []string{"../../../../../../../../../../../dev/zero", "fifo.debug"} {
		dir := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(dir, "fifo.debug"), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := crafted.File{Sections: []crafted.Section{
			{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: crafted.DebugLink(link, 0)},
		}}.Write(dir, "libtt_metal.so")
		if err != nil {
			t.Fatal(err)
		}
		lib, err := OpenLibrary(p)
		if err != nil {
			t.Fatal(err)
		}
		defer lib.Close()
		within(t, 5*time.Second, 64<<20, func() {
			if d := findDebugInfo(lib, elfx.Debug{Roots: []string{}}); d.path != "" {
				t.Errorf("%s: debug file %s", link, d.path)
			}
		})
	}
}

// A FIFO named like the library: opening it blocked forever.
func TestCraftedFIFOLibrary(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "libtt_metal.so")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, 16<<20, func() {
		if lib, err := OpenLibrary(fifo); err == nil {
			lib.Close()
			t.Error("a FIFO opened as a library")
		}
	})
}

// A library truncated while held: reading it through a shared mapping
// raised SIGBUS.
func TestCraftedTruncatedWhileHeld(t *testing.T) {
	in, err := os.Open("/lib/x86_64-linux-gnu/libstdc++.so.6")
	if err != nil {
		t.Skip(err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "libtt_metal.so")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	lib, err := OpenLibrary(p)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	if err := lib.ScanSymbols([]string{"_ZNSt"}, func(Symbol) {}); err == nil {
		t.Error("symbols read from a truncated file")
	}
	if _, err := lib.code(); err == nil {
		t.Error("code read from a truncated file")
	}
}
