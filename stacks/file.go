// Package stacks turns a copy of the top of a thread's user stack and its
// registers, captured in BPF (bpf/stack.h), into a native call stack: it
// unwinds with the DWARF call-frame information of every module the stack
// passes through (.eh_frame, .eh_frame_hdr, .debug_frame), interns identical
// stacks into one site, and symbolizes each distinct pc once, lazily, with
// ELF symbols, demangled C++ names and DWARF lines when present.
//
// The traced process may be gone when its stacks are symbolized, so
// everything is kept per file, not per process: a Cache holds each ELF file
// (by device, inode, size and mtime) open and mapped from the moment a
// process's module map is snapshotted, and parses it on first use.
// Pure Go: nothing here needs BPF or privileges.
package stacks

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// File is one ELF file (executable or shared object) that some process
// mapped. It is shared by every process that maps the same file and stays
// usable after they exit: its contents are mapped from a descriptor opened
// when it was first seen.
type File struct {
	ID      uint32 // small unique number within its Cache
	Path    string // the path the process mapped it under
	Dev     uint64 // st_dev of the file
	Inode   uint64
	BuildID string // hex of NT_GNU_BUILD_ID, "" when absent

	cache *Cache
	data  []byte // the whole file, mapped read-only
	elf   *elf.File
	loads []elf.ProgHeader

	cfiOnce sync.Once
	cfi     *cfiTable

	plt []addrRange // .plt, .plt.got, .plt.sec: code with no or odd CFI

	symOnce sync.Once
	syms    *symtab

	dwarfOnce sync.Once
	dwarf     *dwarf.Data

	debugOnce sync.Once
	debugFile *File // separate debug file by build id, nil when none

	mu       sync.Mutex
	rows     map[uint64]*row   // unwind rule at an address, memoized
	resolved map[uint64]*Frame // symbolized address (lookup address), memoized
}

type addrRange struct{ start, end uint64 }

type fileKey struct {
	dev, ino uint64
	size     int64
	mtimeNS  int64
}

// Cache holds the files every snapshotted process mapped, each opened and
// parsed once. It is safe for concurrent use. Files are kept for the life
// of the Cache (a tracer maps a few hundred at most).
type Cache struct {
	// DebugRoot is where separate debug files are looked for by build id
	// (DebugRoot/.build-id/xx/yyyy.debug): Debian's -dbg packages. Empty
	// means /usr/lib/debug.
	DebugRoot string

	mu    sync.Mutex
	files map[fileKey]*File
	next  uint32
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{files: map[fileKey]*File{}} }

// open returns the cached File for the open descriptor f (named path), or
// maps and registers it. f is closed in every case: the mapping keeps the
// contents.
func (c *Cache) open(f *os.File, path string) (*File, error) {
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNS: st.Mtim.Nano()}
	c.mu.Lock()
	if c.files == nil {
		c.files = map[fileKey]*File{}
	}
	if cf := c.files[key]; cf != nil {
		c.mu.Unlock()
		return cf, nil
	}
	c.mu.Unlock()
	if st.Size < 64 {
		return nil, fmt.Errorf("%s: not an ELF file (%d bytes)", path, st.Size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	nf, err := newFile(data, path)
	if err != nil {
		unix.Munmap(data)
		return nil, err
	}
	nf.Dev, nf.Inode, nf.cache = st.Dev, st.Ino, c
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.files[key]; cf != nil { // lost a race: keep the first
		unix.Munmap(data)
		return cf, nil
	}
	c.next++
	nf.ID = c.next
	c.files[key] = nf
	return nf, nil
}

// OpenFile opens an ELF file by path into the cache (for files that are
// not reached through a process's maps, and for tests).
func (c *Cache) OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return c.open(f, path)
}

// newFile reads the ELF headers of data (a whole file).
func newFile(data []byte, path string) (*File, error) {
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: %s %s object: only x86-64 ELF is unwound", path, ef.Class, ef.Machine)
	}
	f := &File{Path: path, data: data, elf: ef, rows: map[uint64]*row{}, resolved: map[uint64]*Frame{}}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, p.ProgHeader)
		}
	}
	f.BuildID = buildID(ef, data)
	for _, s := range ef.Sections {
		switch s.Name {
		case ".plt", ".plt.got", ".plt.sec":
			f.plt = append(f.plt, addrRange{s.Addr, s.Addr + s.Size})
		}
	}
	return f, nil
}

// section returns the bytes of an uncompressed, present section, or nil.
func (f *File) section(name string) (*elf.Section, []byte) {
	s := f.elf.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil, nil
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		b, err := s.Data()
		if err != nil {
			return nil, nil
		}
		return s, b
	}
	if s.Offset+s.Size > uint64(len(f.data)) || s.Offset+s.Size < s.Offset {
		return nil, nil
	}
	return s, f.data[s.Offset : s.Offset+s.Size]
}

// biasFor returns the value to subtract from a run-time address in the
// mapping [start, end) at file offset off to get the ELF virtual address.
func (f *File) biasFor(start, off uint64) (uint64, bool) {
	for _, p := range f.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return start - off + p.Off - p.Vaddr, true
		}
	}
	return 0, false
}

// inPLT reports whether addr is in a PLT section.
func (f *File) inPLT(addr uint64) bool {
	for _, r := range f.plt {
		if addr >= r.start && addr < r.end {
			return true
		}
	}
	return false
}

func buildID(ef *elf.File, data []byte) string {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Off+p.Filesz > uint64(len(data)) {
			continue
		}
		b := data[p.Off : p.Off+p.Filesz]
		for len(b) >= 12 {
			nsz := uint64(binary.LittleEndian.Uint32(b))
			dsz := uint64(binary.LittleEndian.Uint32(b[4:]))
			typ := binary.LittleEndian.Uint32(b[8:])
			nEnd := 12 + (nsz+3)&^3
			dEnd := nEnd + (dsz+3)&^3
			if dEnd > uint64(len(b)) || nEnd < 12 {
				break
			}
			if typ == 3 && nsz == 4 && string(b[12:15]) == "GNU" {
				return hex.EncodeToString(b[nEnd : nEnd+dsz])
			}
			b = b[dEnd:]
		}
	}
	return ""
}

// debugFile finds the separate debug file of f: by build id under the
// debug root (DebugRoot/.build-id/xx/yyyy.debug), else by .gnu_debuglink
// where gdb looks (beside f, in its .debug/, under the debug root + f's
// directory). A candidate counts when its build id is f's (when f has
// one), else when its CRC32 is the link's. Nil when none.
func (c *Cache) debugFile(f *File) *File {
	root := c.DebugRoot
	if root == "" {
		root = "/usr/lib/debug"
	}
	if len(f.BuildID) >= 4 {
		p := filepath.Join(root, ".build-id", f.BuildID[:2], f.BuildID[2:]+".debug")
		if df := openDebug(p, f.BuildID, 0, false); df != nil {
			return df
		}
	}
	_, link := f.section(".gnu_debuglink")
	end := bytes.IndexByte(link, 0)
	if end <= 0 || (end+4)&^3+4 > len(link) {
		return nil
	}
	name := string(link[:end])
	crc := binary.LittleEndian.Uint32(link[(end+4)&^3:])
	dir := filepath.Dir(f.Path)
	for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name), filepath.Join(root, dir, name)} {
		if p == f.Path {
			continue
		}
		if df := openDebug(p, f.BuildID, crc, f.BuildID == ""); df != nil {
			return df
		}
	}
	return nil
}

// openDebug maps the debug file at p when it matches: the build id
// wantID, or (checkCRC) the CRC32 crc of its contents.
func openDebug(p, wantID string, crc uint32, checkCRC bool) *File {
	fd, err := os.Open(p)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err != nil || st.Size < 64 {
		fd.Close()
		return nil
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	fd.Close()
	if err != nil {
		return nil
	}
	df, err := newFile(data, p)
	if err != nil || df.BuildID != wantID || (checkCRC && crc32.ChecksumIEEE(data) != crc) {
		unix.Munmap(data)
		return nil
	}
	return df
}
