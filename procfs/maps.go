package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) in the process
	Offset     uint64 // file offset of Start
	Perms      string // "r-xp"
	Dev        string // "fd:01" as the kernel prints it
	Inode      uint64
	// Path as the kernel prints it: "" for anonymous memory, "[heap]",
	// "[vdso]", a path in the process's mount namespace (a newline in it
	// printed as "\012"), with " (deleted)" after a file removed since.
	Path string
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// File reports whether the mapping is of a file (a path, not anonymous
// memory or a [special] region).
func (m Mapping) File() bool { return strings.HasPrefix(m.Path, "/") }

// Deleted reports whether the file was removed since it was mapped.
func (m Mapping) Deleted() bool { return strings.HasSuffix(m.Path, " (deleted)") }

// MapFile is the path of the very file mapped (/proc/PID/map_files/...):
// it opens even when the file was replaced or removed, or lives in
// another mount namespace.
func (m Mapping) MapFile(pid int) string {
	return fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
}

// ParseMaps parses the text of /proc/PID/maps. The path is everything
// after the inode column and the spaces that pad it: spaces inside a path
// (and at its end) are kept as they are.
func ParseMaps(text []byte) ([]Mapping, error) {
	var out []Mapping
	for n := 1; len(text) > 0; n++ {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if len(line) == 0 {
			continue
		}
		m, err := parseLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseLine parses "start-end perms offset dev inode [path]".
func parseLine(line string) (Mapping, error) {
	var m Mapping
	var f [5]string
	rest := line
	for k := range f {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			if k < 4 {
				return m, fmt.Errorf("%q: %d fields", line, k+1)
			}
			i = len(rest)
		}
		f[k], rest = rest[:i], rest[i:]
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return m, fmt.Errorf("range %q", f[0])
	}
	var err [4]error
	m.Start, err[0] = strconv.ParseUint(lo, 16, 64)
	m.End, err[1] = strconv.ParseUint(hi, 16, 64)
	m.Offset, err[2] = strconv.ParseUint(f[2], 16, 64)
	m.Inode, err[3] = strconv.ParseUint(f[4], 10, 64)
	if e := errors.Join(err[:]...); e != nil {
		return m, e
	}
	m.Perms, m.Dev = f[1], f[3]
	m.Path = strings.TrimLeft(rest, " ")
	return m, nil
}

// Maps reads and parses /proc/PID/maps.
func Maps(pid int) ([]Mapping, error) {
	text, err := procFile(pid, "maps", MaxFile)
	if err != nil {
		return nil, err
	}
	maps, err := ParseMaps(text)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return maps, nil
}
