// Package crafted builds the hostile ELF files tttrace's parsers are
// tested against (issue 23's crafted cases): every one is a small,
// well-formed x86-64 shared object but for the one thing that attacks a
// reader. Tests of every package that reads ELF files use it, and so do
// the end-to-end test (a process maps them) and the fuzz seeds.
package crafted

import (
	"bytes"
	"compress/flate"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
)

// Section is one section of a built file.
type Section struct {
	Name  string
	Type  elf.SectionType
	Flags elf.SectionFlag
	Data  []byte
	// Size, when not 0, is written as the header's size instead of
	// len(Data) (the bytes may lie, or lie outside the file).
	Size    uint64
	Link    uint32 // section index (1-based as in the file: 0 is the null section)
	Entsize uint64
	Align   uint64
	// Offset, when not 0, places the data at this file offset (beyond
	// the end makes a sparse file: the caller writes it with WriteSparse).
	Offset uint64
}

// File is a file to build.
type File struct {
	Sections []Section
	// Notes lists section names each given a PT_NOTE segment.
	Notes []string
	// Load gives the file one PT_LOAD segment mapping its first Load
	// bytes at address 0 (0: the whole file before the section headers).
	Load uint64
}

// Bytes lays the file out: ELF header, program headers, section data,
// .shstrtab, section headers.
func (f File) Bytes() []byte {
	le := binary.LittleEndian
	secs := append([]Section(nil), f.Sections...)
	var shstr bytes.Buffer
	shstr.WriteByte(0)
	names := make([]uint32, len(secs)+1)
	for i, s := range secs {
		names[i] = uint32(shstr.Len())
		shstr.WriteString(s.Name)
		shstr.WriteByte(0)
	}
	names[len(secs)] = uint32(shstr.Len())
	shstr.WriteString(".shstrtab\x00")
	secs = append(secs, Section{Name: ".shstrtab", Type: elf.SHT_STRTAB, Data: shstr.Bytes()})

	nph := len(f.Notes) + 1
	out := make([]byte, 64+56*nph)
	offs := make([]uint64, len(secs))
	for i, s := range secs {
		if s.Offset != 0 {
			offs[i] = s.Offset
			continue
		}
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		offs[i] = uint64(len(out))
		if s.Type != elf.SHT_NOBITS {
			out = append(out, s.Data...)
		}
	}
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	dataEnd := uint64(len(out))
	shoff := uint64(len(out))
	sh := make([]byte, 64*(len(secs)+1))
	for i, s := range secs {
		h := sh[64*(i+1):]
		le.PutUint32(h[0:], names[i])
		le.PutUint32(h[4:], uint32(s.Type))
		le.PutUint64(h[8:], uint64(s.Flags))
		le.PutUint64(h[16:], offs[i]) // address = offset (one PT_LOAD at 0)
		le.PutUint64(h[24:], offs[i])
		size := uint64(len(s.Data))
		if s.Size != 0 {
			size = s.Size
		}
		le.PutUint64(h[32:], size)
		le.PutUint32(h[40:], s.Link)
		le.PutUint64(h[48:], max(s.Align, 1))
		le.PutUint64(h[56:], s.Entsize)
	}
	out = append(out, sh...)

	h := out[:64]
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(h[16:], uint16(elf.ET_DYN))
	le.PutUint16(h[18:], uint16(elf.EM_X86_64))
	le.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(h[32:], 64) // phoff
	le.PutUint64(h[40:], shoff)
	le.PutUint16(h[52:], 64)
	le.PutUint16(h[54:], 56)
	le.PutUint16(h[56:], uint16(nph))
	le.PutUint16(h[58:], 64)
	le.PutUint16(h[60:], uint16(len(secs)+1))
	le.PutUint16(h[62:], uint16(len(secs))) // .shstrtab, last
	load := f.Load
	if load == 0 {
		load = dataEnd
	}
	ph := out[64:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[32:], load)
	le.PutUint64(ph[40:], load)
	le.PutUint64(ph[48:], 0x1000)
	for k, name := range f.Notes {
		p := ph[56*(k+1):]
		for i, s := range secs {
			if s.Name == name {
				le.PutUint32(p[0:], uint32(elf.PT_NOTE))
				le.PutUint32(p[4:], uint32(elf.PF_R))
				le.PutUint64(p[8:], offs[i])
				le.PutUint64(p[16:], offs[i])
				le.PutUint64(p[24:], offs[i])
				le.PutUint64(p[32:], uint64(len(s.Data)))
				le.PutUint64(p[40:], uint64(len(s.Data)))
				le.PutUint64(p[48:], 4)
			}
		}
	}
	return out
}

// Write writes the file to dir/name and returns its path. Sections whose
// Offset lies past the bytes built make the file that long, sparse.
func (f File) Write(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	b := f.Bytes()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", err
	}
	end := uint64(len(b))
	for _, s := range f.Sections {
		size := uint64(len(s.Data))
		if s.Size != 0 {
			size = s.Size
		}
		if s.Offset != 0 && s.Type != elf.SHT_NOBITS {
			end = max(end, s.Offset+size)
		}
	}
	if end > uint64(len(b)) {
		if err := os.Truncate(p, int64(end)); err != nil {
			return "", err
		}
	}
	return p, nil
}

// Note is one ELF note with sizes as given (they may lie).
func Note(nameSz, descSz, typ uint32, rest []byte) []byte {
	b := make([]byte, 12, 12+len(rest))
	binary.LittleEndian.PutUint32(b[0:], nameSz)
	binary.LittleEndian.PutUint32(b[4:], descSz)
	binary.LittleEndian.PutUint32(b[8:], typ)
	return append(b, rest...)
}

// GoodBuildID is a well-formed NT_GNU_BUILD_ID note of id.
func GoodBuildID(id []byte) []byte {
	return Note(4, uint32(len(id)), 3, append([]byte("GNU\x00"), pad4(id)...))
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// WrapNoteLoop is a 16-byte note whose name and descriptor sizes wrap a
// 32-bit sum to zero: a reader adding them in 32 bits stays on it forever.
func WrapNoteLoop() []byte {
	return Note(0xfffffffd, 0xfffffff4, 3, []byte("GNU\x00"))
}

// WrapNotePanic is a 24-byte GNU build-id note whose descriptor size
// wraps a 32-bit end back into the note: a reader slicing the
// descriptor by its size runs off the end.
func WrapNotePanic() []byte {
	return Note(4, 0xfffffff4, 3, []byte("GNU\x00\x01\x02\x03\x04\x05\x06\x07\x08"))
}

// Compressed returns an SHF_COMPRESSED (zlib) section body whose data is
// size zero bytes (size a multiple of 1 MiB): about 1 KB per MiB, made
// at once by repeating one self-contained deflate run of 1 MiB.
func Compressed(size uint64) []byte {
	var run bytes.Buffer
	w, _ := flate.NewWriter(&run, flate.BestCompression)
	w.Write(make([]byte, 1<<20))
	w.Flush() // byte-aligned, non-final: runs concatenate
	var b bytes.Buffer
	h := make([]byte, 24)
	binary.LittleEndian.PutUint32(h[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(h[8:], size)
	binary.LittleEndian.PutUint64(h[16:], 1)
	b.Write(h)
	b.Write([]byte{0x78, 0xda})
	for n := uint64(0); n < size>>20; n++ {
		b.Write(run.Bytes())
	}
	b.Write([]byte{0x03, 0x00}) // a final, empty fixed-Huffman block
	// Adler-32 of size zero bytes: A stays 1, B adds A per byte.
	return binary.BigEndian.AppendUint32(b.Bytes(), uint32(size%65521)<<16|1)
}

// EHFrameWrap is an .eh_frame whose first entry has a 64-bit length that
// wraps its end to before its start.
func EHFrameWrap() []byte {
	b := make([]byte, 32)
	binary.LittleEndian.PutUint32(b[0:], 0xffffffff)
	binary.LittleEndian.PutUint64(b[4:], ^uint64(0)-3) // end = 12 + len wraps to 8
	return b
}

// DebugLink is a .gnu_debuglink section naming name.
func DebugLink(name string, crc uint32) []byte {
	b := pad4(append([]byte(name), 0))
	return binary.LittleEndian.AppendUint32(b, crc)
}
