package ttmetal

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// Library is an ELF shared object opened for symbol look-ups. Its file is
// mapped read-only; the symbol tables and the code are swept through the
// mapping a chunk at a time and each chunk's pages dropped after, and the
// scattered small reads go through the file (symscan.go). Look-ups
// allocate only for the symbols they match, so memory does not grow with
// the library's symbol count (a real libtt_metal.so has hundreds of
// thousands).
type Library struct {
	Path    string
	BuildID string // hex of NT_GNU_BUILD_ID, "" when absent

	data  []byte   // the whole file, mapped
	f     *os.File // the file, for the scattered small reads (readAt)
	file  *elf.File
	loads []elf.ProgHeader // PT_LOAD segments, for address -> file offset
	// HasSymtab reports whether the file still has a .symtab section.
	HasSymtab bool
	// HasDWARF reports whether the file has a .debug_info section.
	HasDWARF bool

	// Machine-code analysis (code.go), built on first use.
	codeIdx *codeIndex
	codeErr error
	symAt   map[uint64][]Symbol
	known   map[string][]Symbol // scanKnown (accessors.go)
	cache   *symCache           // cachedScan (symscan.go)
}

// Symbol is one defined ELF symbol.
type Symbol struct {
	Name  string
	Value uint64 // link-time virtual address
	Size  uint64
	Type  elf.SymType
	// Dynamic is true when the symbol came from .dynsym.
	Dynamic bool
}

// OpenLibrary maps path and reads its ELF headers.
func OpenLibrary(path string) (*Library, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() < 64 {
		f.Close()
		return nil, fmt.Errorf("%s: not an ELF file (%d bytes)", path, st.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	lib := &Library{Path: path, data: data, f: f}
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		lib.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lib.file = ef
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		lib.Close()
		return nil, fmt.Errorf("%s: %s %s object, tttrace reads x86-64 ELF only", path, ef.Class, ef.Machine)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			lib.loads = append(lib.loads, p.ProgHeader)
		}
	}
	lib.HasSymtab = ef.Section(".symtab") != nil
	lib.HasDWARF = ef.Section(".debug_info") != nil
	lib.BuildID = buildID(ef)
	return lib, nil
}

// Pinned is a path to the very file OpenLibrary opened, valid while the
// Library is open: the kernel resolves it through this process's open
// descriptor. A path under /proc/PID/root stops resolving when PID ends,
// possibly between reading the file and attaching to it; the uprobes must
// still go on the inode that was read (AttachPlan).
func (l *Library) Pinned() string {
	return fmt.Sprintf("/proc/self/fd/%d", l.f.Fd())
}

// Stat describes the open file.
func (l *Library) Stat() (os.FileInfo, error) { return l.f.Stat() }

// Close unmaps and closes the file. It is safe on a nil Library and
// idempotent.
func (l *Library) Close() error {
	if l == nil || l.data == nil {
		return nil
	}
	err := unix.Munmap(l.data)
	l.data = nil
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ELF exposes the parsed headers (sections, program headers).
func (l *Library) ELF() *elf.File { return l.file }

func buildID(ef *elf.File) string {
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nameSz := binary.LittleEndian.Uint32(b[0:])
			descSz := binary.LittleEndian.Uint32(b[4:])
			typ := binary.LittleEndian.Uint32(b[8:])
			nameEnd := 12 + align4(nameSz)
			descEnd := nameEnd + align4(descSz)
			if uint64(descEnd) > uint64(len(b)) {
				break
			}
			if typ == 3 /* NT_GNU_BUILD_ID */ && nameSz == 4 && string(b[12:15]) == "GNU" {
				return fmt.Sprintf("%x", b[nameEnd:nameEnd+descSz])
			}
			b = b[descEnd:]
		}
	}
	return ""
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// ScanSymbols calls fn for every defined symbol of .dynsym and then .symtab
// whose name has one of the given prefixes. Names that do not match are
// never turned into strings. Scans for names the attach path uses are
// answered from one scan of the library for all of them (cachedScan).
func (l *Library) ScanSymbols(prefixes []string, fn func(Symbol)) error {
	if ok, err := l.cachedScan(prefixes, fn); ok {
		return err
	}
	return l.scanStream(prefixSet(prefixes), fn)
}

const sym64Size = 24

// prefixSet sorts the prefixes and drops those another one covers, so that
// at most one can be a prefix of a given name (hasAnyPrefix).
func prefixSet(prefixes []string) [][]byte {
	ps := append([]string(nil), prefixes...)
	sort.Strings(ps)
	var out [][]byte
	for _, p := range ps {
		if n := len(out); n > 0 && bytes.HasPrefix([]byte(p), out[n-1]) {
			continue // covered by a shorter prefix, sorted just before it
		}
		out = append(out, []byte(p))
	}
	return out
}

// hasAnyPrefix reports whether name (which runs on into the next strings
// of its string table; its NUL ends the comparison) starts with one of the
// prefixes of a prefixSet. In sorted order the prefixes below name's
// first bytes compare lower and those above higher; the one that is a
// prefix compares equal, and no other can (none covers another).
func hasAnyPrefix(name []byte, ps [][]byte) bool {
	i := sort.Search(len(ps), func(i int) bool {
		p := ps[i]
		return bytes.Compare(p, name[:min(len(p), len(name))]) >= 0
	})
	return i < len(ps) && len(name) >= len(ps[i]) && bytes.Equal(name[:len(ps[i])], ps[i])
}

func (l *Library) slice(off, size uint64) ([]byte, error) {
	if off > uint64(len(l.data)) || size > uint64(len(l.data))-off {
		return nil, errors.New("section lies outside the file")
	}
	return l.data[off : off+size], nil
}

// FileOffset converts a link-time virtual address of code into the file
// offset the kernel's uprobe interface takes.
func (l *Library) FileOffset(vaddr uint64) (uint64, error) {
	for _, p := range l.loads {
		if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no loaded segment of %s", vaddr, l.Path)
}

// Bytes returns up to n bytes of the file image at link-time address vaddr.
func (l *Library) Bytes(vaddr uint64, n int) ([]byte, error) {
	off, err := l.FileOffset(vaddr)
	if err != nil {
		return nil, err
	}
	return l.readAt(off, n)
}

// readAt reads up to n bytes at file offset off (fewer at the end of the
// file). The scattered small reads of the analysis (names, instructions,
// pointers) go through the file, not its mapping: a fault on the mapping
// maps the pages around it too (fault-around), and each would leave tens
// of KiB resident.
func (l *Library) readAt(off uint64, n int) ([]byte, error) {
	if off > uint64(len(l.data)) {
		return nil, errors.New("offset outside the file")
	}
	b := make([]byte, min(uint64(n), uint64(len(l.data))-off))
	if _, err := l.f.ReadAt(b, int64(off)); err != nil {
		return nil, fmt.Errorf("read %s: %w", l.Path, err)
	}
	return b, nil
}

// cstring reads the NUL-terminated string at file offset off; it ends at
// file offset end if no NUL comes first.
func (l *Library) cstring(off, end uint64) (string, error) {
	var s []byte
	for off < end {
		b, err := l.readAt(off, int(min(end-off, 256)))
		if err != nil {
			return "", err
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(append(s, b[:i]...)), nil
		}
		s = append(s, b...)
		off += uint64(len(b))
	}
	return string(s), nil
}
