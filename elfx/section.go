package elfx

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// SectionData reads section s (decompressing an SHF_COMPRESSED or .zdebug
// one) when its size is within the limits: at most lim.Section bytes, and
// for a compressed section at most lim.Ratio times its size in the file.
// The bytes read are bounded by the size checked, whatever the stream
// holds.
func SectionData(s *elf.Section, lim Limits) ([]byte, error) {
	lim = lim.orDefault()
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s has no data in the file", s.Name)
	}
	size := s.Size
	compressed := s.Flags&elf.SHF_COMPRESSED != 0
	if !compressed && strings.HasPrefix(s.Name, ".zdebug") {
		// GNU's older form: "ZLIB", then the big-endian size.
		var h [12]byte
		if n, _ := s.ReadAt(h[:], 0); n == 12 && string(h[:4]) == "ZLIB" {
			size, compressed = binary.BigEndian.Uint64(h[4:]), true
		}
	}
	if size > lim.Section {
		return nil, fmt.Errorf("section %s has %d bytes, more than the %d read", s.Name, size, lim.Section)
	}
	if compressed && size > lim.Ratio*max(s.FileSize, 1) {
		return nil, fmt.Errorf("section %s decompresses %d bytes into %d: more than %d times, refused", s.Name, s.FileSize, size, lim.Ratio)
	}
	// The section's bytes must be in the file (a header may claim more):
	// check its last byte before allocating anything. (debug/elf gives a
	// compressed section no ReaderAt: its stream ends with the file.)
	if n := s.FileSize; n > 0 && s.ReaderAt != nil {
		var last [1]byte
		if _, err := s.ReadAt(last[:], int64(n-1)); err != nil {
			return nil, fmt.Errorf("section %s lies outside the file", s.Name)
		}
	}
	b := make([]byte, 0, min(size, 1<<20)) // grows as bytes really come
	w := &limitedBuffer{b: b, max: size}
	n, err := io.Copy(w, io.LimitReader(s.Open(), int64(size)))
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	if uint64(n) != size {
		return nil, fmt.Errorf("section %s: %d bytes of %d", s.Name, n, size)
	}
	return w.b, nil
}

type limitedBuffer struct {
	b   []byte
	max uint64
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	if uint64(len(w.b))+uint64(len(p)) > w.max {
		return 0, io.ErrShortWrite
	}
	w.b = append(w.b, p...)
	return len(p), nil
}
