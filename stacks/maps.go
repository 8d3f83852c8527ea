package stacks

import (
	"fmt"
	"os"
	"sort"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
)

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

// Snapshot reads /proc/PID/maps (procfs) and binds every executable file mapping to
// a cached File, opened through /proc/PID/map_files (which reaches files in
// other mount namespaces and deleted ones), else /proc/PID/root/PATH.
func (c *Cache) Snapshot(pid int) (_ *Modules, err error) {
	defer elfx.Recover(&err, fmt.Sprintf("pid %d: its mapped files", pid))
	maps, err := procfs.Maps(pid)
	if err != nil {
		return nil, err
	}
	return c.Bind(maps, func(m procfs.Mapping) (*os.File, error) {
		f, err := procfs.OpenRegular(m.MapFile(pid))
		if err == nil {
			return f, nil
		}
		return procfs.OpenRegular(procfs.Path(pid, m.Path))
	}), nil
}

// Bind binds the executable file mappings of maps to cached Files, opening
// each with open when its file is not cached yet (open's result is closed
// by Bind). A mapping that cannot be opened or is not ELF is listed in
// Skipped.
func (c *Cache) Bind(maps []procfs.Mapping, open func(procfs.Mapping) (*os.File, error)) *Modules {
	ms := &Modules{}
	for _, m := range maps {
		if !m.Exec() || m.Inode == 0 || !m.File() {
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

// Len is the number of modules bound (0 for the maps of a process that
// has ended but not been reaped: /proc lists none).
func (ms *Modules) Len() int {
	if ms == nil {
		return 0
	}
	return len(ms.mods)
}

// Files lists the files of the snapshot's modules, each once.
func (ms *Modules) Files() []*File {
	if ms == nil {
		return nil
	}
	var out []*File
	seen := map[*File]bool{}
	for _, m := range ms.mods {
		if !seen[m.file] {
			seen[m.file] = true
			out = append(out, m.file)
		}
	}
	return out
}
