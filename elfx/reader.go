package elfx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DWARF exception-header pointer encodings (LSB Core, "DWARF Extensions";
// DW_EH_PE_*): the low nibble is the format, bits 4-6 how the value
// applies, bit 7 an indirection.
const (
	PEAbsPtr   = 0x00
	PEULEB128  = 0x01
	PEUdata2   = 0x02
	PEUdata4   = 0x03
	PEUdata8   = 0x04
	PESLEB128  = 0x09
	PESdata2   = 0x0a
	PESdata4   = 0x0b
	PESdata8   = 0x0c
	PEPCRel    = 0x10
	PETextRel  = 0x20
	PEDataRel  = 0x30
	PEFuncRel  = 0x40
	PEAligned  = 0x50
	PEIndirect = 0x80
	PEOmit     = 0xff
)

// ErrShort is returned by a read past the end of a Reader's data.
var ErrShort = errors.New("truncated")

// Reader reads DWARF values (fixed-size, LEB128, strings, encoded
// pointers) from Data at Pos. Base is the address of Data[0], for
// pc-relative pointers. A read past the end returns zero and ErrShort and
// sets Short, which stays set: a caller may read a run of values and
// check once.
type Reader struct {
	Data  []byte
	Pos   uint64
	Base  uint64
	Short bool
}

func (r *Reader) short() error {
	r.Short = true
	return ErrShort
}

// Left is the number of bytes after Pos.
func (r *Reader) Left() uint64 {
	if r.Pos >= uint64(len(r.Data)) {
		return 0
	}
	return uint64(len(r.Data)) - r.Pos
}

// U8 reads one byte.
func (r *Reader) U8() (byte, error) {
	if r.Pos >= uint64(len(r.Data)) {
		return 0, r.short()
	}
	r.Pos++
	return r.Data[r.Pos-1], nil
}

// Skip moves Pos n bytes on (ErrShort past the end).
func (r *Reader) Skip(n uint64) error {
	if n > r.Left() {
		r.Pos = uint64(len(r.Data))
		return r.short()
	}
	r.Pos += n
	return nil
}

// Fixed reads an n-byte little-endian unsigned value (n is 1, 2, 4 or 8).
func (r *Reader) Fixed(n uint64) (uint64, error) {
	if n > r.Left() {
		return 0, r.short()
	}
	b := r.Data[r.Pos : r.Pos+n]
	r.Pos += n
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.LittleEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	case 8:
		return binary.LittleEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("%d-byte value", n)
}

// CString reads a NUL-terminated string (without the NUL). A string the
// data ends in sets Short and returns what there is.
func (r *Reader) CString() string {
	if r.Pos >= uint64(len(r.Data)) {
		r.short()
		return ""
	}
	s := r.Pos
	for r.Pos < uint64(len(r.Data)) && r.Data[r.Pos] != 0 {
		r.Pos++
	}
	out := string(r.Data[s:r.Pos])
	if r.Pos >= uint64(len(r.Data)) {
		r.short()
		return out
	}
	r.Pos++
	return out
}

// ULEB reads an unsigned LEB128 value; bits past 64 are dropped.
func (r *Reader) ULEB() uint64 {
	var v uint64
	var shift uint
	for {
		if r.Pos >= uint64(len(r.Data)) {
			r.short()
			return v
		}
		c := r.Data[r.Pos]
		r.Pos++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}

// SLEB reads a signed LEB128 value; bits past 64 are dropped.
func (r *Reader) SLEB() int64 {
	var v int64
	var shift uint
	var c byte
	for {
		if r.Pos >= uint64(len(r.Data)) {
			r.short()
			return v
		}
		c = r.Data[r.Pos]
		r.Pos++
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

// Block reads a ULEB128 length and that many bytes.
func (r *Reader) Block() ([]byte, error) {
	n := r.ULEB()
	if r.Short || n > r.Left() {
		return nil, r.short()
	}
	b := r.Data[r.Pos : r.Pos+n]
	r.Pos += n
	return b, nil
}

// Pointer reads one value in pointer encoding enc (PE*). A pc-relative
// value adds its own address (Base+Pos before the read), a data-relative
// one adds dataRel; other applications and indirect values are errors.
// PEOmit reads nothing and gives 0.
func (r *Reader) Pointer(enc byte, dataRel uint64) (uint64, error) {
	if enc == PEOmit {
		return 0, nil
	}
	at := r.Base + r.Pos
	var v uint64
	var err error
	switch enc & 0x0f {
	case PEULEB128:
		v = r.ULEB()
	case PESLEB128:
		v = uint64(r.SLEB())
	case PEAbsPtr, PEUdata8, PESdata8:
		v, err = r.Fixed(8)
	case PEUdata2:
		v, err = r.Fixed(2)
	case PESdata2:
		v, err = r.Fixed(2)
		v = uint64(int64(int16(v)))
	case PEUdata4:
		v, err = r.Fixed(4)
	case PESdata4:
		v, err = r.Fixed(4)
		v = uint64(int64(int32(v)))
	default:
		return 0, fmt.Errorf("pointer encoding %#x not understood", enc)
	}
	if err != nil || r.Short {
		return 0, ErrShort
	}
	switch enc & 0x70 {
	case 0:
	case PEPCRel:
		v += at
	case PEDataRel:
		v += dataRel
	default:
		return 0, fmt.Errorf("pointer application %#x not understood", enc&0x70)
	}
	if enc&PEIndirect != 0 {
		return 0, fmt.Errorf("indirect pointer encoding %#x not understood", enc)
	}
	return v, nil
}
