package elfx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Call-frame information entries (DWARF 5 §6.4.1; LSB Core "Exception
// Frames" for .eh_frame): the one reader of CIE and FDE headers.

// ErrCFIEnd is returned for a zero-length entry: the terminator of
// .eh_frame, padding in .debug_frame.
var ErrCFIEnd = errors.New("end of CFI")

// CFIEntry is the header of one CIE or FDE.
type CFIEntry struct {
	Off   uint64 // where the entry starts in the section
	End   uint64 // where the next one starts
	IDPos uint64 // where the CIE id / CIE pointer is
	Pos   uint64 // where the body after the id starts
	ID    uint64
	Is64  bool // 64-bit DWARF format
	CIE   bool
}

// ReadCFIEntry reads the header of the entry at off of a CFI section
// (debugFrame: .debug_frame, else .eh_frame). Lengths are checked in 64
// bits: an entry whose length runs past the section or wraps is
// ErrShort.
func ReadCFIEntry(data []byte, off uint64, debugFrame bool) (CFIEntry, error) {
	e := CFIEntry{Off: off}
	size := uint64(len(data))
	if off > size || size-off < 4 {
		return e, ErrShort
	}
	length := uint64(binary.LittleEndian.Uint32(data[off:]))
	pos := off + 4
	if length == 0xffffffff {
		if size-pos < 8 {
			return e, ErrShort
		}
		length = binary.LittleEndian.Uint64(data[pos:])
		pos += 8
		e.Is64 = true
	}
	if length == 0 {
		e.End = pos
		return e, ErrCFIEnd
	}
	idLen := uint64(4)
	if e.Is64 {
		idLen = 8
	}
	if length > size-pos || length < idLen {
		return e, ErrShort
	}
	e.End, e.IDPos = pos+length, pos
	if e.Is64 {
		e.ID = binary.LittleEndian.Uint64(data[pos:])
	} else {
		e.ID = uint64(binary.LittleEndian.Uint32(data[pos:]))
	}
	e.Pos = pos + idLen
	if debugFrame {
		e.CIE = e.ID == 0xffffffff || (e.Is64 && e.ID == ^uint64(0))
	} else {
		e.CIE = e.ID == 0
	}
	return e, nil
}

// CIEOffset is the section offset of the CIE an FDE names.
func (e CFIEntry) CIEOffset(debugFrame bool) (uint64, bool) {
	if debugFrame {
		return e.ID, true
	}
	if e.ID > e.IDPos {
		return 0, false
	}
	return e.IDPos - e.ID, true
}

// CIE is a Common Information Entry, the part FDEs share.
type CIE struct {
	Version   byte
	Aug       string
	CodeAlign uint64
	DataAlign int64
	RAReg     uint64
	FDEEnc    byte // encoding of the FDEs' pointers (augmentation 'R')
	AugZ      bool // FDEs carry augmentation data
	Initial   []byte
}

// ParseCIE parses the CIE at off of a CFI section whose address is addr.
func ParseCIE(data []byte, off, addr uint64, debugFrame bool) (*CIE, error) {
	e, err := ReadCFIEntry(data, off, debugFrame)
	if err != nil {
		return nil, err
	}
	if !e.CIE {
		return nil, fmt.Errorf("entry at %#x is not a CIE", off)
	}
	body := data[:e.End]
	r := &Reader{Data: body, Pos: e.Pos, Base: addr}
	c := &CIE{FDEEnc: PEAbsPtr}
	if c.Version, err = r.U8(); err != nil {
		return nil, err
	}
	if c.Version != 1 && c.Version != 3 && c.Version != 4 {
		return nil, fmt.Errorf("CIE version %d", c.Version)
	}
	c.Aug = r.CString()
	if c.Aug == "eh" {
		r.Skip(8)
	}
	if c.Version == 4 {
		asz, _ := r.U8()
		ssz, _ := r.U8()
		if asz != 8 || ssz != 0 {
			return nil, fmt.Errorf("CIE address size %d, segment size %d", asz, ssz)
		}
	}
	c.CodeAlign = r.ULEB()
	c.DataAlign = r.SLEB()
	if c.Version == 1 {
		b, _ := r.U8()
		c.RAReg = uint64(b)
	} else {
		c.RAReg = r.ULEB()
	}
	if len(c.Aug) > 0 && c.Aug[0] == 'z' {
		c.AugZ = true
		n := r.ULEB()
		if r.Short || n > r.Left() {
			return nil, ErrShort
		}
		end := r.Pos + n
	letters:
		for _, ch := range c.Aug[1:] {
			switch ch {
			case 'L':
				r.Skip(1)
			case 'P':
				enc, err := r.U8()
				if err != nil {
					return nil, err
				}
				if _, err := r.Pointer(enc&^PEIndirect, 0); err != nil {
					return nil, err
				}
			case 'R':
				if c.FDEEnc, err = r.U8(); err != nil {
					return nil, err
				}
			case 'S', 'B', 'G':
			default:
				break letters // unknown letter: its data is within the length
			}
		}
		r.Pos = end
	} else if c.Aug != "" && c.Aug != "eh" {
		return nil, fmt.Errorf("CIE augmentation %q not understood", c.Aug)
	}
	if r.Short || r.Pos > uint64(len(body)) {
		return nil, ErrShort
	}
	c.Initial = body[r.Pos:]
	return c, nil
}

// FDERange reads the address range at the start of FDE e's body, whose
// CIE is c, in a section at address addr; pos is where the FDE's
// augmentation data (if c.AugZ) or instructions start.
func FDERange(data []byte, e CFIEntry, c *CIE, addr uint64) (start, end, pos uint64, err error) {
	r := &Reader{Data: data[:e.End], Pos: e.Pos, Base: addr}
	if start, err = r.Pointer(c.FDEEnc, 0); err != nil {
		return 0, 0, 0, err
	}
	n, err := r.Pointer(c.FDEEnc&0x0f, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	return start, start + n, r.Pos, nil
}

// EachFDE calls fn with the address range [start, end) of every FDE of
// an .eh_frame section's data at address addr, in section order, until fn
// returns false. A malformed entry, or an FDE naming a CIE not seen before
// it, ends the walk with an error (what fn was given before stays valid).
func EachFDE(data []byte, addr uint64, fn func(start, end uint64) bool) error {
	cies := map[uint64]*CIE{}
	for off := uint64(0); off < uint64(len(data)); {
		e, err := ReadCFIEntry(data, off, false)
		if err == ErrCFIEnd {
			return nil // terminator
		}
		if err != nil {
			return fmt.Errorf("entry at %#x overruns the section", off)
		}
		if e.CIE {
			c, err := ParseCIE(data, off, addr, false)
			if err != nil {
				return fmt.Errorf("CIE at %#x: %w", off, err)
			}
			cies[off] = c
		} else {
			co, _ := e.CIEOffset(false)
			c, ok := cies[co]
			if !ok {
				return fmt.Errorf("FDE at %#x names no CIE seen before it", off)
			}
			start, end, _, err := FDERange(data, e, c, addr)
			if err != nil {
				return fmt.Errorf("FDE at %#x: %w", off, err)
			}
			if end > start && !fn(start, end) {
				return nil
			}
		}
		off = e.End
	}
	return nil
}
