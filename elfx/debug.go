package elfx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// DebugLink reads .gnu_debuglink: a file name, padding to 4 bytes, the
// CRC32 of the debug file. ok is false when there is none or it is
// malformed.
func DebugLink(ef *elf.File, lim Limits) (name string, crc uint32, ok bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", 0, false
	}
	lim = lim.orDefault()
	nl := lim
	nl.Section = uint64(lim.Name) + 8
	b, err := SectionData(s, nl)
	if err != nil {
		return "", 0, false
	}
	end := bytes.IndexByte(b, 0)
	if end <= 0 {
		return "", 0, false
	}
	off := (end + 4) &^ 3
	if off+4 > len(b) {
		return "", 0, false
	}
	return string(b[:end]), binary.LittleEndian.Uint32(b[off:]), true
}

// DefaultDebugRoot is where distributions install separate debug files.
const DefaultDebugRoot = "/usr/lib/debug"

// Debug is how separate debug files are looked for: the one option of
// the one look-up (FindDebug).
type Debug struct {
	// Roots are the directories searched (ROOT/.build-id/xx/yyyy.debug,
	// ROOT/<library's directory>/<debuglink>). Nil means
	// DefaultDebugRoot; an empty non-nil slice searches none.
	Roots []string
	// Limits bound the reading of each candidate.
	Limits Limits
}

func (d Debug) roots() []string {
	if d.Roots == nil {
		return []string{DefaultDebugRoot}
	}
	return d.Roots
}

// FindDebug returns the separate debug file of the ELF file ef at path
// (hex build-id id, "" when it has none): by build-id under each root,
// then by .gnu_debuglink beside the file, in its .debug/ and under each
// root + the file's directory. A candidate counts only when it is a
// regular file, its build-id is id (when id is set), for a debuglink its
// CRC32 is the link's, and it holds the section need ("" for any). A
// debuglink that is not a plain file name (a '/', "..") is refused: the
// look-up never leaves those directories. checked says, for people, every
// place looked at and why it did not count. found is "" when none does.
func (d Debug) FindDebug(ef *elf.File, path, id, need string) (found string, checked []string) {
	if len(id) > 2 {
		for _, root := range d.roots() {
			p := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
			if why := d.matches(p, id, 0, false, need); why != "" {
				checked = append(checked, p+": "+why)
				continue
			}
			return p, append(checked, p+": build-id matches")
		}
	} else {
		checked = append(checked, "no build-id note: no .build-id look-up")
	}
	name, crc, ok := DebugLink(ef, d.Limits)
	if !ok {
		return "", append(checked, "no .gnu_debuglink")
	}
	if name != filepath.Base(name) || name == "." || name == ".." || strings.ContainsRune(name, 0) {
		return "", append(checked, fmt.Sprintf(".gnu_debuglink %q is not a file name: refused", name))
	}
	dir := filepath.Dir(path)
	cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
	for _, root := range d.roots() {
		cands = append(cands, filepath.Join(root, dir, name))
	}
	for _, p := range cands {
		if p == path {
			continue
		}
		if why := d.matches(p, id, crc, true, need); why != "" {
			checked = append(checked, p+": "+why)
			continue
		}
		return p, append(checked, p+": .gnu_debuglink CRC matches")
	}
	return "", checked
}

// maxDebugFile bounds the bytes read for a debuglink's CRC.
const maxDebugFile = 8 << 30

// matches says why the file at p is not the debug file wanted ("" when it
// is).
func (d Debug) matches(p, id string, crc uint32, checkCRC bool, need string) string {
	f, err := OpenRegular(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "absent"
		}
		return err.Error()
	}
	ef, err := NewFile(f, p, d.Limits)
	if err != nil {
		f.Close()
		return "not ELF: " + err.Error()
	}
	defer ef.Close()
	if need != "" {
		if s := ef.File.Section(need); s == nil || s.Type == elf.SHT_NOBITS {
			return "has no " + need
		}
	}
	if got := BuildID(ef.File, d.Limits); id != "" && got != id {
		return fmt.Sprintf("build-id %s, the library's is %s: another build, not used", got, id)
	}
	if checkCRC {
		if ef.Size() > maxDebugFile {
			return fmt.Sprintf("%d bytes: too large to check", ef.Size())
		}
		h := crc32.NewIEEE()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, ef.Size())); err != nil {
			return err.Error()
		}
		if h.Sum32() != crc {
			return "CRC32 differs from .gnu_debuglink's: another build, not used"
		}
	}
	return ""
}
