package stacks

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
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
	Path       string // "" for anonymous memory
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// ParseMaps parses the text of /proc/PID/maps.
func ParseMaps(text []byte) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		// start-end perms offset dev inode [path]; path may hold spaces.
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %d: %q", n, line)
		}
		se := strings.SplitN(f[0], "-", 2)
		if len(se) != 2 {
			return nil, fmt.Errorf("maps line %d: range %q", n, f[0])
		}
		var m Mapping
		var err [5]error
		m.Start, err[0] = strconv.ParseUint(se[0], 16, 64)
		m.End, err[1] = strconv.ParseUint(se[1], 16, 64)
		m.Offset, err[2] = strconv.ParseUint(f[2], 16, 64)
		m.Inode, err[3] = strconv.ParseUint(f[4], 10, 64)
		if e := errors.Join(err[:]...); e != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, e)
		}
		m.Perms, m.Dev = f[1], f[3]
		if len(f) > 5 {
			// The path is everything after the inode column.
			rest := line
			for k := 0; k < 5; k++ {
				rest = strings.TrimLeft(rest, " \t")
				if i := strings.IndexAny(rest, " \t"); i >= 0 {
					rest = rest[i:]
				}
			}
			m.Path = strings.TrimLeft(rest, " \t")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// module is an executable mapping bound to its file.
type module struct {
	start, end uint64
	bias       uint64 // run-time address - bias = ELF virtual address
	file       *File
}

// Modules is a snapshot of the executable file mappings of one process:
// what its pcs meant when the snapshot was taken. Take a new one when the
// process maps a library (dlopen); old snapshots stay valid for the stacks
// captured under them.
type Modules struct {
	mods []module // sorted by start, disjoint
	// Skipped says which executable mappings could not be bound to an ELF
	// file, and why (a pc in one stops the unwind, as an unmapped pc).
	Skipped []string
}

// Snapshot reads /proc/PID/maps and binds every executable file mapping to
// a cached File, opened through /proc/PID/map_files (which reaches files in
// other mount namespaces and deleted ones), else /proc/PID/root/PATH.
func (c *Cache) Snapshot(pid int) (*Modules, error) {
	text, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	maps, err := ParseMaps(text)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return c.Bind(maps, func(m Mapping) (*os.File, error) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End))
		if err == nil {
			return f, nil
		}
		return os.Open(fmt.Sprintf("/proc/%d/root%s", pid, m.Path))
	}), nil
}

// Bind binds the executable file mappings of maps to cached Files, opening
// each with open when its file is not cached yet (open's result is closed
// by Bind). A mapping that cannot be opened or is not ELF is listed in
// Skipped.
func (c *Cache) Bind(maps []Mapping, open func(Mapping) (*os.File, error)) *Modules {
	ms := &Modules{}
	for _, m := range maps {
		if !m.Exec() || m.Inode == 0 || !strings.HasPrefix(m.Path, "/") {
			continue // anonymous, [vdso], JIT: no CFI to read
		}
		fd, err := open(m)
		if err != nil {
			ms.Skipped = append(ms.Skipped, fmt.Sprintf("%s: %v", m.Path, err))
			continue
		}
		f, err := c.open(fd, m.Path)
		if err != nil {
			ms.Skipped = append(ms.Skipped, err.Error())
			continue
		}
		bias, ok := f.biasFor(m.Start, m.Offset)
		if !ok {
			ms.Skipped = append(ms.Skipped, fmt.Sprintf("%s: offset %#x is in no PT_LOAD segment", m.Path, m.Offset))
			continue
		}
		ms.mods = append(ms.mods, module{start: m.Start, end: m.End, bias: bias, file: f})
	}
	sort.Slice(ms.mods, func(i, j int) bool { return ms.mods[i].start < ms.mods[j].start })
	return ms
}

// find returns the module holding pc, or nil.
func (ms *Modules) find(pc uint64) *module {
	if ms == nil {
		return nil
	}
	i := sort.Search(len(ms.mods), func(i int) bool { return ms.mods[i].end > pc })
	if i < len(ms.mods) && ms.mods[i].start <= pc {
		return &ms.mods[i]
	}
	return nil
}

// Lookup returns the file mapped at pc and pc's ELF virtual address in it.
func (ms *Modules) Lookup(pc uint64) (*File, uint64, bool) {
	m := ms.find(pc)
	if m == nil {
		return nil, 0, false
	}
	return m.file, pc - m.bias, true
}
