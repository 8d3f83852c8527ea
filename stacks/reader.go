package stacks

import (
	"encoding/binary"
	"fmt"
)

// DWARF exception-header pointer encodings (LSB Core, "DWARF Extensions").
const (
	pePtr      = 0x00
	peULEB     = 0x01
	peUdata2   = 0x02
	peUdata4   = 0x03
	peUdata8   = 0x04
	peSLEB     = 0x09
	peSdata2   = 0x0a
	peSdata4   = 0x0b
	peSdata8   = 0x0c
	pePCRel    = 0x10
	peDataRel  = 0x30
	peIndirect = 0x80
	peOmit     = 0xff
)

// reader reads DWARF values from data; base is the address of data[0]
// (for pc-relative pointers). Reads past the end give zero and set err.
type reader struct {
	data []byte
	pos  uint64
	base uint64
	err  bool
}

func (r *reader) u8() (byte, error) {
	if r.pos >= uint64(len(r.data)) {
		r.err = true
		return 0, errShort
	}
	r.pos++
	return r.data[r.pos-1], nil
}

func (r *reader) fixed(n uint64) (uint64, error) {
	if r.pos+n > uint64(len(r.data)) || r.pos+n < r.pos {
		r.err = true
		return 0, errShort
	}
	b := r.data[r.pos : r.pos+n]
	r.pos += n
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.LittleEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	default:
		return binary.LittleEndian.Uint64(b), nil
	}
}

func (r *reader) cstring() string {
	s := r.pos
	for r.pos < uint64(len(r.data)) && r.data[r.pos] != 0 {
		r.pos++
	}
	if r.pos >= uint64(len(r.data)) {
		r.err = true
		return string(r.data[min(s, uint64(len(r.data))):])
	}
	out := string(r.data[s:r.pos])
	r.pos++
	return out
}

func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if r.pos >= uint64(len(r.data)) {
			r.err = true
			return v
		}
		c := r.data[r.pos]
		r.pos++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var c byte
	for {
		if r.pos >= uint64(len(r.data)) {
			r.err = true
			return v
		}
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

// block reads a ULEB length and that many bytes.
func (r *reader) block() ([]byte, error) {
	n := r.uleb()
	if r.err || r.pos > uint64(len(r.data)) || n > uint64(len(r.data))-r.pos {
		r.err = true
		return nil, errShort
	}
	b := r.data[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// pointer reads one value with encoding enc. Pc-relative values add the
// value's own address; data-relative ones add dataRel.
func (r *reader) pointer(enc byte, dataRel uint64) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	at := r.base + r.pos
	var v uint64
	var err error
	switch enc & 0x0f {
	case peULEB:
		v = r.uleb()
	case peSLEB:
		v = uint64(r.sleb())
	case pePtr, peUdata8, peSdata8:
		v, err = r.fixed(8)
	case peUdata2:
		v, err = r.fixed(2)
	case peSdata2:
		v, err = r.fixed(2)
		v = uint64(int64(int16(v)))
	case peUdata4:
		v, err = r.fixed(4)
	case peSdata4:
		v, err = r.fixed(4)
		v = uint64(int64(int32(v)))
	default:
		return 0, fmt.Errorf("pointer encoding %#x not understood", enc)
	}
	if err != nil || r.err {
		return 0, errShort
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += at
	case peDataRel:
		v += dataRel
	default:
		return 0, fmt.Errorf("pointer application %#x not understood", enc&0x70)
	}
	if enc&peIndirect != 0 {
		return 0, fmt.Errorf("indirect pointer encoding %#x not understood", enc)
	}
	return v, nil
}
