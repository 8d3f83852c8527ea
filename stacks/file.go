// Package stacks turns a copy of the top of a thread's user stack and its
// registers, captured in BPF (bpf/stack.h), into a native call stack: it
// unwinds with the DWARF call-frame information of every module the stack
// passes through (.eh_frame, .eh_frame_hdr, .debug_frame), interns identical
// stacks into one (an allocation site names one), and symbolizes each
// distinct pc once, lazily, with ELF symbols, demangled C++ names and DWARF
// lines when present.
//
// The traced process may be gone when its stacks are symbolized, so
// everything is kept per file, not per process: a Cache holds each ELF file
// (by device, inode, size and mtime) open from the moment a process's
// module map is snapshotted, and parses it on first use. Files are read
// with pread through elfx, never mapped: a file truncated by its owner
// gives read errors, not a SIGBUS.
// Pure Go: nothing here needs BPF or privileges.
package stacks

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/elfx"
)

// File is one ELF file (executable or shared object) that some process
// mapped. It is shared by every process that maps the same file and stays
// usable after they exit: it is read from a descriptor opened when it was
// first seen.
type File struct {
	ID      uint32 // small unique number within its Cache
	Path    string // the path the process mapped it under
	Dev     uint64 // st_dev of the file
	Inode   uint64
	BuildID string // hex of NT_GNU_BUILD_ID, "" when absent

	cache *Cache
	ef    *elfx.File // the open file, read with pread
	elf   *elf.File  // ef's headers
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
	// Debug is where separate debug files are looked for (by build id:
	// Debian's -dbg packages; by .gnu_debuglink), and the limits every
	// file is read under.
	Debug elfx.Debug

	mu    sync.Mutex
	files map[fileKey]*File
	byID  map[fileID]*File // the last file cached with a device and inode
	next  uint32
}

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{files: map[fileKey]*File{}} }

// open returns the cached File for the open descriptor f (named path), or
// reads and registers it. f is kept open by the File it becomes, closed
// otherwise.
func (c *Cache) open(f *os.File, path string) (*File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNS: st.Mtim.Nano()}
	c.mu.Lock()
	if c.files == nil {
		c.files = map[fileKey]*File{}
	}
	if cf := c.files[key]; cf != nil {
		c.mu.Unlock()
		f.Close()
		return cf, nil
	}
	c.mu.Unlock()
	nf, err := newFile(f, path, c.Debug.Limits)
	if err != nil {
		f.Close()
		return nil, err
	}
	nf.Dev, nf.Inode, nf.cache = st.Dev, st.Ino, c
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.files[key]; cf != nil { // lost a race: keep the first
		nf.ef.Close()
		return cf, nil
	}
	c.next++
	nf.ID = c.next
	c.files[key] = nf
	if c.byID == nil {
		c.byID = map[fileID]*File{}
	}
	c.byID[fileID{st.Dev, st.Ino}] = nf
	return nf, nil
}

// byIdentity is the file last cached with device dev and inode ino, or nil.
// Its size or mtime may differ from the inode's now (rewritten in place):
// it reads the same inode as a new descriptor would.
func (c *Cache) byIdentity(dev, ino uint64) *File {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[fileID{dev, ino}]
}

// OpenFile opens an ELF file by path into the cache (for files that are
// not reached through a process's maps, and for tests). Only a regular
// file is opened.
func (c *Cache) OpenFile(path string) (*File, error) {
	f, err := elfx.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	return c.open(f, path)
}

// newFile reads the ELF headers of the open file f.
func newFile(f *os.File, path string, lim elfx.Limits) (*File, error) {
	ef, err := elfx.NewFile(f, path, lim)
	if err != nil {
		return nil, err
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: %s %s object: only x86-64 ELF is unwound", path, ef.Class, ef.Machine)
	}
	nf := &File{Path: path, ef: ef, elf: ef.File, rows: map[uint64]*row{}, resolved: map[uint64]*Frame{}}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			nf.loads = append(nf.loads, p.ProgHeader)
		}
	}
	nf.BuildID = elfx.BuildID(ef.File, lim)
	for _, s := range ef.Sections {
		switch s.Name {
		case ".plt", ".plt.got", ".plt.sec":
			nf.plt = append(nf.plt, addrRange{s.Addr, s.Addr + s.Size})
		}
	}
	return nf, nil
}

// section returns the bytes of a present section read under the
// limits, or nil (absent, empty, too large, unreadable).
func (f *File) section(name string) (*elf.Section, []byte) {
	s, b, err := f.ef.ReadSection(name)
	if err != nil || len(b) == 0 {
		return nil, nil
	}
	return s, b
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

// debugFile finds the separate debug file of f (elfx.Debug.FindDebug:
// by build id, else by .gnu_debuglink), nil when none.
func (c *Cache) debugFile(f *File) *File {
	p, _ := c.Debug.FindDebug(f.elf, f.Path, f.BuildID, "")
	if p == "" {
		return nil
	}
	fd, err := elfx.OpenRegular(p)
	if err != nil {
		return nil
	}
	df, err := newFile(fd, p, c.Debug.Limits)
	if err != nil {
		fd.Close()
		return nil
	}
	return df
}
