package pyframes

// Line tables: the map from a bytecode offset to a source line that a code
// object carries, in the two encodings CPython 3.10 to 3.13 use. Both are
// decoded in full on each lookup: a table is a few hundred bytes, and a
// code object's lines are looked up once per distinct offset (the caller
// caches).

// NoLine is the line of an instruction the compiler gave no line.
const NoLine = -1

// line310 returns the line of the instruction at byte offset addr in a
// CPython 3.10 co_linetable (PEP 626): a sequence of (bytecode delta,
// signed line delta) byte pairs starting at co_firstlineno; a line delta of
// -128 marks a range without a line, a pair with bytecode delta 0 only moves
// the line. An address no range covers gives NoLine.
func line310(table []byte, firstLine, addr int) int {
	if addr < 0 {
		return firstLine
	}
	line, end := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int(table[i])
		ld := int8(table[i+1])
		rangeLine := NoLine
		if ld != -128 {
			line += int(ld)
			rangeLine = line
		}
		if start <= addr && addr < end {
			return rangeLine
		}
	}
	return NoLine
}

// Location-table entry codes (3.11+, Objects/locations.md).
const (
	locShortMax  = 9  // 0-9: short form, same line
	locOneLine0  = 10 // 10-12: one-line form, line delta 0, 1, 2
	locNoColumns = 13 // line delta as a signed varint
	locLong      = 14 // line delta, end line, columns: varints
	locNone      = 15 // no location
)

// line311 returns the line of the instruction at byte offset addr in a
// CPython 3.11+ location table (co_linetable). Each entry starts with a byte
// with the top bit set: bits 3-6 its code, bits 0-2 its length in code units
// minus one; varints follow for some codes. A malformed or short table
// gives NoLine for addresses past what could be decoded.
func line311(table []byte, firstLine, addr int) int {
	if addr < 0 {
		return firstLine
	}
	line, end := firstLine, 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return NoLine // not at an entry start: corrupt
		}
		code := int(b>>3) & 15
		start := end
		end += (int(b&7) + 1) * 2
		delta := 0
		switch {
		case code == locNoColumns || code == locLong:
			v, ok := svarint(table, i+1)
			if !ok {
				return NoLine
			}
			delta = v
		case code >= locOneLine0 && code <= locOneLine0+2:
			delta = code - locOneLine0
		}
		line += delta
		if start <= addr && addr < end {
			if code == locNone {
				return NoLine
			}
			return line
		}
		// Skip to the next entry start.
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return NoLine
}

// varint reads an unsigned varint of 6-bit groups, low first, bit 6 set on
// every group but the last.
func varint(b []byte, i int) (int, bool) {
	v, shift := 0, 0
	for ; i < len(b) && shift < 32; i++ {
		v |= int(b[i]&63) << shift
		if b[i]&64 == 0 {
			return v, true
		}
		shift += 6
	}
	return 0, false
}

// svarint reads a signed varint: the sign in the low bit of the magnitude.
func svarint(b []byte, i int) (int, bool) {
	u, ok := varint(b, i)
	if !ok {
		return 0, false
	}
	if u&1 != 0 {
		return -(u >> 1), true
	}
	return u >> 1, true
}
