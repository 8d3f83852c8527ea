package elfx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tttrace/tttrace/procfs"
)

// Limits bound what reading one file may cost. The zero value means
// DefaultLimits.
type Limits struct {
	// Section is the largest section read into memory, after
	// decompression (.eh_frame, .gnu_debuglink, one DWARF section).
	Section uint64
	// Table is the largest symbol or string table swept (.symtab,
	// .strtab, .dynsym, .dynstr): a sparse file can claim gigabytes of
	// zeros that cost nothing on disk and seconds of CPU to sweep.
	Table uint64
	// Ratio is the largest decompressed/compressed size ratio accepted
	// for a compressed section (zlib and zstd reach 1000:1 on crafted
	// input; real debug sections compress 3 to 10 times).
	Ratio uint64
	// Name is the longest NUL-terminated string (symbol name, path) read.
	Name int
	// Note is the largest note segment or section read for the build-id.
	Note uint64
	// Headers is the largest section header string table accepted, and
	// Sections the most section headers.
	Headers  uint64
	Sections uint64
}

// DefaultLimits are far above what any real library needs (a 200+ MB
// libtt_metal.so has about 100 MB of symbol and string tables, a few MB of
// .eh_frame, and C++ names of a few KiB) and far below what hurts.
var DefaultLimits = Limits{
	Section:  2 << 30,
	Table:    1 << 30,
	Ratio:    64,
	Name:     64 << 10,
	Note:     1 << 20,
	Headers:  16 << 20,
	Sections: 1 << 16,
}

func (l Limits) orDefault() Limits {
	d := DefaultLimits
	if l.Section != 0 {
		d.Section = l.Section
	}
	if l.Table != 0 {
		d.Table = l.Table
	}
	if l.Ratio != 0 {
		d.Ratio = l.Ratio
	}
	if l.Name != 0 {
		d.Name = l.Name
	}
	if l.Note != 0 {
		d.Note = l.Note
	}
	if l.Headers != 0 {
		d.Headers = l.Headers
	}
	if l.Sections != 0 {
		d.Sections = l.Sections
	}
	return d
}

// ErrNotRegular is returned for a path that names anything but a regular
// file (a FIFO, a device, a directory, a socket).
var ErrNotRegular = procfs.ErrNotRegular

// OpenRegular opens path read-only without blocking (a FIFO would block
// the open until a writer comes) and returns it only when it is a regular
// file (procfs.OpenRegular, the one place that decides it).
func OpenRegular(path string) (*os.File, error) { return procfs.OpenRegular(path) }

// File is an ELF file read with pread. The file may change under it: a
// read past its new end is an error, never a fault.
type File struct {
	Path string
	*elf.File

	f      *os.File
	size   int64
	limits Limits
}

// Open opens path as an ELF file (OpenRegular, then NewFile).
func Open(path string, lim Limits) (*File, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	ef, err := NewFile(f, path, lim)
	if err != nil {
		f.Close()
		return nil, err
	}
	return ef, nil
}

// NewFile reads the ELF headers of the open file f, which it then owns
// (Close closes it). f must be a regular file (OpenRegular). Headers that
// would make reading them cost more than the limits allow are refused
// before debug/elf sees them.
func NewFile(f *os.File, path string, lim Limits) (*File, error) {
	lim = lim.orDefault()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	if st.Size() < 64 {
		return nil, fmt.Errorf("%s: not an ELF file (%d bytes)", path, st.Size())
	}
	if err := checkHeaders(f, st.Size(), lim); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ef, err := elf.NewFile(io.NewSectionReader(f, 0, st.Size()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Path: path, File: ef, f: f, size: st.Size(), limits: lim}, nil
}

// checkHeaders checks, for a 64-bit little-endian file, what debug/elf
// reads whole when it opens a file: the section headers and the section
// name table. Other classes are left to debug/elf (and refused by callers
// that read x86-64 only).
func checkHeaders(r io.ReaderAt, size int64, lim Limits) error {
	var h [64]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return err
	}
	if !bytes.Equal(h[:4], []byte(elf.ELFMAG)) {
		return errors.New("not an ELF file")
	}
	if elf.Class(h[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(h[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil
	}
	le := binary.LittleEndian
	shoff := le.Uint64(h[0x28:])
	shentsize := uint64(le.Uint16(h[0x3a:]))
	shnum := uint64(le.Uint16(h[0x3c:]))
	shstrndx := uint64(le.Uint16(h[0x3e:]))
	if shoff == 0 {
		return nil
	}
	if shentsize != 64 {
		return fmt.Errorf("section header size %d, not 64", shentsize)
	}
	sh := func(i uint64) ([64]byte, error) {
		var b [64]byte
		off := shoff + i*64
		if i >= 1<<32 || off < shoff || off+64 > uint64(size) {
			return b, fmt.Errorf("section header %d lies outside the file", i)
		}
		_, err := r.ReadAt(b[:], int64(off))
		return b, err
	}
	if shnum == 0 || shstrndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: the real values are in section header 0.
		s0, err := sh(0)
		if err != nil {
			return err
		}
		if shnum == 0 {
			shnum = le.Uint64(s0[0x20:])
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx = uint64(le.Uint32(s0[0x28:]))
		}
	}
	if shnum > lim.Sections {
		return fmt.Errorf("%d section headers, more than the %d read", shnum, lim.Sections)
	}
	if shnum*64 > uint64(size) || shoff > uint64(size)-shnum*64 {
		return errors.New("section headers lie outside the file")
	}
	if shstrndx == 0 || shstrndx >= shnum {
		return nil
	}
	s, err := sh(shstrndx)
	if err != nil {
		return err
	}
	flags, ssize := le.Uint64(s[0x08:]), le.Uint64(s[0x20:])
	if flags&uint64(elf.SHF_COMPRESSED) != 0 {
		return errors.New("compressed section name table")
	}
	if ssize > lim.Headers {
		return fmt.Errorf("section name table of %d bytes, more than the %d read", ssize, lim.Headers)
	}
	return nil
}

// Close closes the file. It is safe on a nil File and idempotent.
func (f *File) Close() error {
	if f == nil || f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// Size is the file's size when it was opened.
func (f *File) Size() int64 { return f.size }

// Limits are the limits the file is read under.
func (f *File) Limits() Limits { return f.limits }

// OS returns the open file (for fstat, or a /proc/self/fd path to it).
func (f *File) OS() *os.File { return f.f }

// ReadAt reads len(b) bytes at file offset off; fewer is an error.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.f.ReadAt(b, off)
	if err != nil && n == len(b) && err == io.EOF {
		err = nil
	}
	if err != nil {
		return n, fmt.Errorf("read %s at %#x: %w", f.Path, off, err)
	}
	return n, nil
}

// Bytes reads up to n bytes at file offset off (fewer at the end of the
// file).
func (f *File) Bytes(off uint64, n int) ([]byte, error) {
	if off > uint64(f.size) {
		return nil, fmt.Errorf("%s: offset %#x outside the file", f.Path, off)
	}
	b := make([]byte, min(uint64(n), uint64(f.size)-off))
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

// ErrTooLong is returned for a string longer than the limit.
var ErrTooLong = errors.New("string longer than the limit")

// CString reads the NUL-terminated string at file offset off. It ends at
// file offset end if no NUL comes first; a string of more than the Name
// limit is ErrTooLong.
func (f *File) CString(off, end uint64) (string, error) {
	var s []byte
	var buf [256]byte
	for off < end {
		n := min(end-off, uint64(len(buf)))
		if _, err := f.ReadAt(buf[:n], int64(off)); err != nil {
			return "", err
		}
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			s = append(s, buf[:i]...)
			n = 0
		} else {
			s = append(s, buf[:n]...)
		}
		if len(s) > f.limits.Name {
			return "", fmt.Errorf("%s: string at %#x: %w (%d bytes)", f.Path, off, ErrTooLong, f.limits.Name)
		}
		if n == 0 {
			break
		}
		off += n
	}
	return string(s), nil
}

// Sweep calls fn with consecutive chunks of file range [off, off+n),
// whole units of unit bytes, each followed by up to extra bytes of the
// next (for what straddles a boundary). The chunks are read with pread
// into one buffer of about chunk bytes, reused: fn must not keep them.
// base is the chunk's offset from off.
func (f *File) Sweep(off, n uint64, chunk, unit, extra int, fn func(base int, b []byte) error) error {
	if off > uint64(f.size) || n > uint64(f.size)-off {
		return fmt.Errorf("%s: range %#x+%#x lies outside the file", f.Path, off, n)
	}
	size := uint64(max(chunk/unit, 1) * unit)
	buf := make([]byte, min(size+uint64(extra), n))
	for base := uint64(0); base < n; base += size {
		end := min(base+size+uint64(extra), n)
		b := buf[:end-base]
		if _, err := f.ReadAt(b, int64(off+base)); err != nil {
			return err
		}
		if err := fn(int(base), b); err != nil {
			return err
		}
	}
	return nil
}

// Table returns the file range of a symbol or string table section,
// checked against the file's size and the Table limit. ok is false when
// the section is absent or has no bytes in the file.
func (f *File) Table(s *elf.Section) (off, size uint64, ok bool, err error) {
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return 0, 0, false, nil
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return 0, 0, false, fmt.Errorf("%s: %s is compressed", f.Path, s.Name)
	}
	if s.Offset > uint64(f.size) || s.Size > uint64(f.size)-s.Offset {
		return 0, 0, false, fmt.Errorf("%s: %s lies outside the file", f.Path, s.Name)
	}
	if s.Size > f.limits.Table {
		return 0, 0, false, fmt.Errorf("%s: %s has %d bytes, more than the %d read", f.Path, s.Name, s.Size, f.limits.Table)
	}
	return s.Offset, s.Size, true, nil
}

// ReadSection reads the named section under the limits (SectionData); nil
// and no error when it is absent or empty.
func (f *File) ReadSection(name string) (*elf.Section, []byte, error) {
	s := f.File.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil, nil, nil
	}
	b, err := SectionData(s, f.limits)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return s, b, nil
}

// Recover, deferred by a function that parses outside input (a library,
// a process's maps, its memory), turns a panic in it into an error in
// *errp: that one input is refused with a clear line, and the caller (a
// tracer serving every process) goes on. Fatal errors that are not panics
// (stack overflow, out of memory) cannot be recovered: the parsers bound
// depth and sizes instead.
//
//	func parse(path string) (err error) {
//		defer elfx.Recover(&err, path)
func Recover(errp *error, what string) {
	if r := recover(); r != nil {
		*errp = fmt.Errorf("%s: malformed input, refused (internal error: %v)", what, r)
	}
}
