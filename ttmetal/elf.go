package ttmetal

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"sort"

	"github.com/tttrace/tttrace/elfx"
)

// Library is an ELF shared object opened for symbol look-ups. It is read
// with pread through elfx, never mapped (a file its owner truncates gives
// read errors, not a SIGBUS): the symbol tables and the code are swept a
// chunk at a time through one buffer, and the scattered small reads go
// through the file (symscan.go). Look-ups allocate only for the symbols
// they match, so memory does not grow with the library's symbol count (a
// real libtt_metal.so has hundreds of thousands).
type Library struct {
	Path    string
	BuildID string // hex of NT_GNU_BUILD_ID, "" when absent

	ef    *elfx.File       // the open file, read with pread under elfx's limits
	file  *elf.File        // ef's headers
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

// OpenLibrary opens path (a regular file only: a FIFO named like the
// library must not block the tracer) and reads its ELF headers.
func OpenLibrary(path string) (*Library, error) {
	ef, err := elfx.Open(path, elfx.Limits{})
	if err != nil {
		return nil, err
	}
	lib := &Library{Path: path, ef: ef, file: ef.File}
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
	lib.BuildID = elfx.BuildID(ef.File, ef.Limits())
	return lib, nil
}

// Pinned is a path to the very file OpenLibrary opened, valid while the
// Library is open: the kernel resolves it through this process's open
// descriptor. A path under /proc/PID/root stops resolving when PID ends,
// possibly between reading the file and attaching to it; the uprobes must
// still go on the inode that was read (AttachPlan).
func (l *Library) Pinned() string {
	return fmt.Sprintf("/proc/self/fd/%d", l.ef.OS().Fd())
}

// Stat describes the open file.
func (l *Library) Stat() (os.FileInfo, error) { return l.ef.OS().Stat() }

// Close closes the file. It is safe on a nil Library and idempotent.
func (l *Library) Close() error {
	if l == nil || l.ef == nil {
		return nil
	}
	err := l.ef.Close()
	l.ef = nil
	return err
}

// ELF exposes the parsed headers (sections, program headers).
func (l *Library) ELF() *elf.File { return l.file }

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
// pointers) go through here.
func (l *Library) readAt(off uint64, n int) ([]byte, error) { return l.ef.Bytes(off, n) }

// cstring reads the NUL-terminated string at file offset off; it ends at
// file offset end if no NUL comes first. A string longer than elfx's name
// limit (64 KiB) is an error.
func (l *Library) cstring(off, end uint64) (string, error) { return l.ef.CString(off, end) }
