package ttmetal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Function ranges from .eh_frame. Every function a C++ compiler emits with
// unwind tables (the default on x86-64) has an FDE giving its first address
// and length, including the parts GCC splits off (f.cold), and this survives
// stripping .symtab: it is how tttrace finds instruction boundaries to
// decode from and the extent of code that has no symbol.

// addrRange is [Start, End) of link-time addresses.
type addrRange struct{ Start, End uint64 }

// DWARF exception-header pointer encodings (LSB Core, "DWARF Extensions").
const (
	pePtr     = 0x00
	peULEB    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peDataRel = 0x30
	peOmit    = 0xff
)

// fdeRanges returns the address ranges of every FDE in .eh_frame, sorted by
// start. A library without .eh_frame gives none.
func (l *Library) fdeRanges() ([]addrRange, error) {
	sec := l.file.Section(".eh_frame")
	if sec == nil || sec.Size == 0 {
		return nil, nil
	}
	data, err := l.slice(sec.Offset, sec.Size)
	if err != nil {
		return nil, fmt.Errorf(".eh_frame: %w", err)
	}
	defer l.release(sec.Offset, sec.Size)
	var out []addrRange
	fdeEnc := map[uint64]byte{} // CIE offset -> FDE pointer encoding
	for off := uint64(0); off+4 <= uint64(len(data)); {
		start := off
		length := uint64(binary.LittleEndian.Uint32(data[off:]))
		off += 4
		if length == 0 {
			break // terminator
		}
		if length == 0xffffffff {
			if off+8 > uint64(len(data)) {
				return nil, errors.New(".eh_frame: truncated 64-bit length")
			}
			length = binary.LittleEndian.Uint64(data[off:])
			off += 8
		}
		end := off + length
		if end > uint64(len(data)) || length < 4 {
			return nil, fmt.Errorf(".eh_frame: entry at %#x overruns the section", start)
		}
		idPos := off
		id := binary.LittleEndian.Uint32(data[off:])
		off += 4
		if id == 0 {
			enc, err := cieFDEEncoding(data[off:end])
			if err != nil {
				return nil, fmt.Errorf(".eh_frame: CIE at %#x: %w", start, err)
			}
			fdeEnc[start] = enc
		} else {
			cie := idPos - uint64(id)
			enc, ok := fdeEnc[cie]
			if !ok {
				return nil, fmt.Errorf(".eh_frame: FDE at %#x names no CIE seen before it", start)
			}
			b := &ehReader{data: data[:end], pos: off, base: sec.Addr}
			pc, err := b.pointer(enc, true)
			if err != nil {
				return nil, fmt.Errorf(".eh_frame: FDE at %#x: %w", start, err)
			}
			n, err := b.pointer(enc&0x0f, false)
			if err != nil {
				return nil, fmt.Errorf(".eh_frame: FDE at %#x: %w", start, err)
			}
			if n > 0 {
				out = append(out, addrRange{pc, pc + n})
			}
		}
		off = end
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

// cieFDEEncoding reads a CIE body (after its id) and returns the encoding
// of the pointers in its FDEs (augmentation 'R'; absolute otherwise).
func cieFDEEncoding(b []byte) (byte, error) {
	r := &ehReader{data: b}
	ver, err := r.u8()
	if err != nil {
		return 0, err
	}
	aug := r.cstring()
	if aug == "eh" {
		r.pos += 8
	}
	r.uleb()      // code alignment
	r.sleb()      // data alignment
	if ver == 1 { // return address register
		r.pos++
	} else {
		r.uleb()
	}
	if len(aug) == 0 || aug[0] != 'z' {
		return pePtr, nil
	}
	r.uleb() // augmentation data length
	for _, c := range aug[1:] {
		switch c {
		case 'L':
			r.pos++
		case 'P':
			enc, err := r.u8()
			if err != nil {
				return 0, err
			}
			if _, err := r.pointer(enc, false); err != nil {
				return 0, err
			}
		case 'R':
			return r.u8()
		case 'S', 'B':
		default:
			return 0, fmt.Errorf("augmentation %q not understood", aug)
		}
	}
	return pePtr, nil
}

// ehReader reads encoded values from a section; base is the section's
// address, for pc-relative pointers.
type ehReader struct {
	data []byte
	pos  uint64
	base uint64
}

var errEHShort = errors.New("truncated")

func (r *ehReader) u8() (byte, error) {
	if r.pos >= uint64(len(r.data)) {
		return 0, errEHShort
	}
	r.pos++
	return r.data[r.pos-1], nil
}

func (r *ehReader) cstring() string {
	s := r.pos
	for r.pos < uint64(len(r.data)) && r.data[r.pos] != 0 {
		r.pos++
	}
	out := string(r.data[s:r.pos])
	r.pos++
	return out
}

func (r *ehReader) uleb() uint64 {
	var v uint64
	var shift uint
	for r.pos < uint64(len(r.data)) {
		c := r.data[r.pos]
		r.pos++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	return v
}

func (r *ehReader) sleb() int64 {
	var v int64
	var shift uint
	var c byte
	for r.pos < uint64(len(r.data)) {
		c = r.data[r.pos]
		r.pos++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

// pointer reads one value with encoding enc; apply adds the pc-relative
// base (the address of the value itself).
func (r *ehReader) pointer(enc byte, apply bool) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	at := r.base + r.pos
	need := map[byte]uint64{pePtr: 8, peUdata2: 2, peUdata4: 4, peUdata8: 8, peSdata2: 2, peSdata4: 4, peSdata8: 8}
	var v uint64
	switch f := enc & 0x0f; f {
	case peULEB:
		v = r.uleb()
	case peSLEB:
		v = uint64(r.sleb())
	default:
		n, ok := need[f]
		if !ok {
			return 0, fmt.Errorf("pointer encoding %#x not understood", enc)
		}
		if r.pos+n > uint64(len(r.data)) {
			return 0, errEHShort
		}
		b := r.data[r.pos : r.pos+n]
		r.pos += n
		switch f {
		case pePtr, peUdata8, peSdata8:
			v = binary.LittleEndian.Uint64(b)
		case peUdata2:
			v = uint64(binary.LittleEndian.Uint16(b))
		case peSdata2:
			v = uint64(int64(int16(binary.LittleEndian.Uint16(b))))
		case peUdata4:
			v = uint64(binary.LittleEndian.Uint32(b))
		case peSdata4:
			v = uint64(int64(int32(binary.LittleEndian.Uint32(b))))
		}
	}
	if !apply {
		return v, nil
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += at
	default:
		return 0, fmt.Errorf("pointer application %#x not understood", enc&0x70)
	}
	return v, nil
}
