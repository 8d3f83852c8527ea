package stacks

import (
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/procfs"
)

// objectsOf is the link map a process with these maps would have: one
// object per file with an executable mapping, its bias from the mapping of
// its file's offset 0 (where ld.so put its first segment), its identity
// from the kernel's maps line. The main program (exe) is named "".
func objectsOf(t *testing.T, maps []procfs.Mapping, exe string) []LoadedObject {
	t.Helper()
	var objs []LoadedObject
	seen := map[uint64]bool{}
	for _, m := range maps {
		if !m.Exec() || !m.File() || seen[m.Inode] {
			continue
		}
		seen[m.Inode] = true
		var lo uint64 = 1<<64 - 1
		for _, n := range maps {
			if n.Inode == m.Inode && n.Path == m.Path && n.Offset == 0 && n.Start < lo {
				lo = n.Start
			}
		}
		ef, err := elf.Open(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		var first uint64
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD {
				first = p.Vaddr &^ (pageSize - 1)
				break
			}
		}
		ef.Close()
		name := m.Path
		if m.Path == exe {
			name = ""
		}
		objs = append(objs, LoadedObject{Bias: lo - first, Dev: mapsDev(t, m.Dev), Ino: m.Inode, Name: name})
	}
	return objs
}

// mapsDev parses a maps line's "fd:01" (hex major:minor) into st_dev.
func mapsDev(t *testing.T, s string) uint64 {
	t.Helper()
	maj, min, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("maps device %q", s)
	}
	return unix.Mkdev(uint32(a), uint32(b))
}

// A stack unwinds to the same frames, pc for pc and file for file, through
// the modules of the process's link map as through its /proc/PID/maps:
// the segments ld.so mapped, placed from the ELF headers and the load bias
// alone, cover every pc the kernel's maps do.
func TestBindObjectsUnwindsAsMaps(t *testing.T) {
	for _, v := range []chainVariant{chainVariants[0], chainVariants[2]} {
		t.Run(v.name, func(t *testing.T) {
			b := buildChain(t, v)
			regs, stack, maps := b.capture(t, 0)
			c := NewCache()
			want, _ := Unwind(bindByPath(c, maps), regs, stack, 0, nil)

			objs := objectsOf(t, maps, b.exe)
			if len(objs) < 4 { // chain, libchain, libstdc++, libc, ld.so, ...
				t.Fatalf("%d objects from the maps", len(objs))
			}
			paths := func(o LoadedObject) []string {
				if o.Name == "" {
					return []string{b.exe}
				}
				return []string{o.Name}
			}
			fresh := NewCache()
			mods, err := fresh.BindObjects(objs, paths)
			if err != nil || len(mods.Skipped) != 0 {
				t.Fatalf("BindObjects: %v, skipped %q", err, mods.Skipped)
			}
			got, _ := Unwind(mods, regs, stack, 0, nil)
			if len(want) < 5 || len(got) != len(want) {
				t.Fatalf("%d frames through the link map, %d through the maps", len(got), len(want))
			}
			for i := range want {
				if got[i].PC != want[i].PC || got[i].File == nil || want[i].File == nil ||
					got[i].File.Dev != want[i].File.Dev || got[i].File.Inode != want[i].File.Inode {
					t.Errorf("frame %d: %#x in %v, want %#x in %v", i, got[i].PC, fileOf(got[i]), want[i].PC, fileOf(want[i]))
				}
			}
			// Every pc of every executable mapping the kernel lists lands
			// in the same file at the same ELF address.
			byMaps := bindByPath(c, maps)
			for _, m := range maps {
				if !m.Exec() || !m.File() {
					continue
				}
				for _, pc := range []uint64{m.Start, m.End - 1} {
					f1, a1, ok1 := byMaps.Lookup(pc)
					f2, a2, ok2 := mods.Lookup(pc)
					if !ok1 || !ok2 || a1 != a2 || f1.Inode != f2.Inode {
						t.Errorf("%s pc %#x: link map %v %#x %v, maps %v %#x %v", m.Path, pc, ok2, a2, f2, ok1, a1, f1)
					}
				}
			}
		})
	}
}

func fileOf(l Loc) string {
	if l.File == nil {
		return "no file"
	}
	return l.File.Path
}

// What the process wrote (a bias, a name) is checked against what the
// kernel said (the file's device and inode) and bounded: a path naming
// another file is never taken, at most 6 paths are tried, a bias that
// wraps the address space or objects that overlap are dropped, and a file
// the cache holds is taken by its identity without opening anything.
func TestBindObjectsBounds(t *testing.T) {
	b := buildChain(t, chainVariants[0])
	id := func(path string) (uint64, uint64) {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev, st.Ino
	}
	dev, ino := id(b.lib)
	lib := LoadedObject{Bias: 0x7f0000000000, Dev: dev, Ino: ino, Name: "/libchain-as-named.so"}
	skipped := func(mods *Modules, want string) {
		t.Helper()
		if mods.Len() != 0 || len(mods.Skipped) != 1 || !strings.Contains(mods.Skipped[0], want) {
			t.Errorf("modules %d, skipped %q; want none and one skip saying %q", mods.Len(), mods.Skipped, want)
		}
	}
	bind := func(c *Cache, objs []LoadedObject, paths ...string) *Modules {
		t.Helper()
		mods, err := c.BindObjects(objs, func(LoadedObject) []string { return paths })
		if err != nil {
			t.Fatal(err)
		}
		return mods
	}

	// Another file at the path: not taken.
	skipped(bind(NewCache(), []LoadedObject{lib}, b.exe), "is not the file mapped")
	// The right file only seventh: not reached.
	skipped(bind(NewCache(), []LoadedObject{lib}, "/nonexistent/1", "/nonexistent/2", "/nonexistent/3", "/nonexistent/4",
		"/nonexistent/5", "/nonexistent/6", b.lib), "no such file")
	// Not ELF, with the right identity.
	txt := t.TempDir() + "/notelf"
	if err := os.WriteFile(txt, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	tdev, tino := id(txt)
	skipped(bind(NewCache(), []LoadedObject{{Dev: tdev, Ino: tino, Name: txt}}, txt), "notelf")
	// No identity.
	skipped(bind(NewCache(), []LoadedObject{{Name: b.lib}}, b.lib), "no file identity")
	// A bias that wraps the address space.
	wrap := lib
	wrap.Bias = ^uint64(0) - 0x1000
	skipped(bind(NewCache(), []LoadedObject{wrap}, b.lib), "outside the address space")

	// The right file: bound, its executable segment where the bias puts it.
	c := NewCache()
	mods := bind(c, []LoadedObject{lib}, "/nonexistent", b.lib)
	if mods.Len() == 0 || len(mods.Skipped) != 0 {
		t.Fatalf("modules %d, skipped %q", mods.Len(), mods.Skipped)
	}
	ef, err := elf.Open(b.lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			f, addr, ok := mods.Lookup(lib.Bias + p.Vaddr)
			if !ok || f.Inode != ino || addr != p.Vaddr {
				t.Errorf("segment at %#x: %v %#x %v", p.Vaddr, f, addr, ok)
			}
		}
	}
	// Cached: found by identity, no path tried.
	again, err := c.BindObjects([]LoadedObject{lib}, func(LoadedObject) []string {
		t.Error("a path was asked for a file the cache holds")
		return nil
	})
	if err != nil || again.Len() != mods.Len() {
		t.Errorf("from the cache: %d modules (%v), want %d", again.Len(), err, mods.Len())
	}
	// The same object twice, and one overlapping it: one kept.
	over := lib
	over.Bias += 16
	twice, _ := c.BindObjects([]LoadedObject{lib, lib, over}, nil)
	if twice.Len() != mods.Len() || len(twice.Skipped) != 2*mods.Len() || !strings.Contains(fmt.Sprint(twice.Skipped), "overlaps") {
		t.Errorf("overlapping objects: %d modules, skipped %q", twice.Len(), twice.Skipped)
	}
}
