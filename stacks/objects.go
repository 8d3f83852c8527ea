package stacks

import (
	"debug/elf"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/elfx"
)

// LoadedObject is one object of a process's dynamic-loader link map (what
// BPF sends at _dl_debug_state, events.LinkObject): where ld.so loaded it
// and which file it is. It places the process's pcs without
// /proc/PID/maps, which is gone once the process has ended.
type LoadedObject struct {
	Bias     uint64 // l_addr: run-time address - ELF virtual address
	Dev, Ino uint64 // the file's st_dev and st_ino (the kernel's word)
	// Name is l_name, or for the main program the path it was executed by
	// ("" when not known): the process's word.
	Name string
	Main bool // the main program (the first object of the list)
}

// maxObjectPaths bounds the paths tried per object.
const maxObjectPaths = 6

// pageSize is the granule ld.so maps segments in on x86-64.
const pageSize = 4096

// BindObjects makes a module of every executable PT_LOAD segment of each
// object's file, at Bias plus the segment's address, as ld.so maps it. The
// file is the one the cache holds with the object's device and inode, else
// the first of paths(o) (at most 6 tried) that opens as a regular file with
// that device and inode: a path that names another file now is never
// taken. An object whose file is not found, is not x86-64 ELF, or whose
// segments fall outside the address space or overlap another object's, is
// listed in Skipped.
func (c *Cache) BindObjects(objs []LoadedObject, paths func(LoadedObject) []string) (_ *Modules, err error) {
	defer elfx.Recover(&err, "link map objects")
	ms := &Modules{}
	for _, o := range objs {
		f, why := c.objectFile(o, paths)
		if f == nil {
			ms.Skipped = append(ms.Skipped, why)
			continue
		}
		n := 0
		for _, p := range f.loads {
			if p.Flags&elf.PF_X == 0 || p.Memsz == 0 {
				continue
			}
			lo := p.Vaddr &^ (pageSize - 1)
			hi := p.Vaddr + p.Memsz
			if hi < p.Vaddr || hi > ^uint64(0)-(pageSize-1) {
				n = -1
				break
			}
			hi = (hi + pageSize - 1) &^ (pageSize - 1)
			start, end := o.Bias+lo, o.Bias+hi
			if start < o.Bias || end < start {
				n = -1
				break
			}
			ms.mods = append(ms.mods, module{start: start, end: end, bias: o.Bias, file: f})
			n++
		}
		switch {
		case n < 0:
			ms.Skipped = append(ms.Skipped, fmt.Sprintf("%s: load bias %#x puts a segment outside the address space", objectName(o), o.Bias))
			ms.mods = dropFile(ms.mods, f, o.Bias)
		case n == 0:
			ms.Skipped = append(ms.Skipped, fmt.Sprintf("%s: no executable segment", objectName(o)))
		}
	}
	sort.Slice(ms.mods, func(i, j int) bool { return ms.mods[i].start < ms.mods[j].start })
	// Disjoint, as find needs: a module overlapping the one before it is
	// dropped (a link map the process wrote wrong, or one object listed
	// twice).
	kept := ms.mods[:0]
	for _, m := range ms.mods {
		if n := len(kept); n > 0 && m.start < kept[n-1].end {
			ms.Skipped = append(ms.Skipped, fmt.Sprintf("%s: segment at %#x overlaps %s", m.file.Path, m.start, kept[n-1].file.Path))
			continue
		}
		kept = append(kept, m)
	}
	ms.mods = kept
	return ms, nil
}

// dropFile removes the modules of f at bias (an object given up after some
// of its segments were added).
func dropFile(mods []module, f *File, bias uint64) []module {
	out := mods[:0]
	for _, m := range mods {
		if m.file != f || m.bias != bias {
			out = append(out, m)
		}
	}
	return out
}

func objectName(o LoadedObject) string {
	if o.Name == "" {
		return "the main program"
	}
	return o.Name
}

// objectFile is o's file, from the cache or a path naming it; else nil and
// why.
func (c *Cache) objectFile(o LoadedObject, paths func(LoadedObject) []string) (*File, string) {
	if o.Ino == 0 {
		return nil, fmt.Sprintf("%s: no file identity", objectName(o))
	}
	if f := c.byIdentity(o.Dev, o.Ino); f != nil {
		return f, ""
	}
	why := "no path to try"
	var cands []string
	if paths != nil {
		cands = paths(o)
	}
	for i, p := range cands {
		if i == maxObjectPaths {
			break
		}
		fd, err := elfx.OpenRegular(p)
		if err != nil {
			why = err.Error()
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(fd.Fd()), &st); err != nil || st.Dev != o.Dev || st.Ino != o.Ino {
			fd.Close()
			why = fmt.Sprintf("%s is not the file mapped (device %d:%d inode %d)", p, unix.Major(o.Dev), unix.Minor(o.Dev), o.Ino)
			continue
		}
		// Named as the process names it (stack frames show it), the main
		// program by what its link says.
		name := o.Name
		if name == "" {
			if name, err = os.Readlink(p); err != nil {
				name = p
			}
		}
		f, err := c.open(fd, name)
		if err != nil {
			return nil, err.Error()
		}
		return f, ""
	}
	return nil, fmt.Sprintf("%s: %s", objectName(o), why)
}
