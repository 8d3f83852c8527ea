package elfx

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// ntGNUBuildID is NT_GNU_BUILD_ID, the note type of the build-id.
const ntGNUBuildID = 3

// BuildID returns the hex of the file's NT_GNU_BUILD_ID note, "" when it
// has none. The PT_NOTE segments are read first (what the loader maps),
// then the SHT_NOTE sections (a separate debug file has no segments);
// each note area is read only when it has at most lim.Note bytes.
func BuildID(ef *elf.File, lim Limits) string {
	lim = lim.orDefault()
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 || p.Filesz > lim.Note {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), b); err != nil {
			continue
		}
		if id := buildIDNote(b); id != "" {
			return id
		}
	}
	nl := lim
	nl.Section = lim.Note
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Size == 0 {
			continue
		}
		b, err := SectionData(s, nl)
		if err != nil {
			continue
		}
		if id := buildIDNote(b); id != "" {
			return id
		}
	}
	return ""
}

// buildIDNote finds the GNU build-id in a note area.
func buildIDNote(b []byte) string {
	id := ""
	EachNote(b, func(name string, typ uint32, desc []byte) bool {
		if typ == ntGNUBuildID && name == "GNU" && len(desc) > 0 {
			id = hex.EncodeToString(desc)
			return false
		}
		return true
	})
	return id
}

// EachNote calls fn with each note of a little-endian note area (name
// without its NUL), until fn returns false. A note whose sizes run past
// the area ends the walk: sizes are 32-bit and summed in 64 bits, so none
// can wrap.
func EachNote(b []byte, fn func(name string, typ uint32, desc []byte) bool) {
	for len(b) >= 12 {
		nameSz := uint64(binary.LittleEndian.Uint32(b[0:]))
		descSz := uint64(binary.LittleEndian.Uint32(b[4:]))
		typ := binary.LittleEndian.Uint32(b[8:])
		nameEnd := 12 + align4(nameSz)
		descEnd := nameEnd + align4(descSz)
		if descEnd > uint64(len(b)) {
			return
		}
		name := b[12 : 12+nameSz]
		if n := len(name); n > 0 && name[n-1] == 0 {
			name = name[:n-1]
		}
		if !fn(string(name), typ, b[nameEnd:nameEnd+descSz]) {
			return
		}
		b = b[descEnd:]
	}
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
