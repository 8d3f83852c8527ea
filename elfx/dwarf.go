package elfx

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"strings"
)

// DWARF reads the file's DWARF (debug/elf's File.DWARF) once every debug
// section has been checked against the limits: none may claim more than
// lim.Section bytes, and a compressed one more than lim.Ratio times its
// size in the file. debug/elf reads every section it uses whole, so this
// is what bounds its memory.
func DWARF(ef *elf.File, lim Limits) (*dwarf.Data, error) {
	lim = lim.orDefault()
	for _, s := range ef.Sections {
		if !strings.HasPrefix(s.Name, ".debug_") && !strings.HasPrefix(s.Name, ".zdebug_") {
			continue
		}
		if s.Type == elf.SHT_NOBITS {
			continue
		}
		if err := checkSize(s, lim); err != nil {
			return nil, err
		}
	}
	return ef.DWARF()
}

// checkSize applies SectionData's limits to s without reading it.
func checkSize(s *elf.Section, lim Limits) error {
	size, compressed := s.Size, s.Flags&elf.SHF_COMPRESSED != 0
	if !compressed && strings.HasPrefix(s.Name, ".zdebug") {
		var h [12]byte
		if n, _ := s.ReadAt(h[:], 0); n == 12 && string(h[:4]) == "ZLIB" {
			size, compressed = uint64(h[4])<<56|uint64(h[5])<<48|uint64(h[6])<<40|uint64(h[7])<<32|
				uint64(h[8])<<24|uint64(h[9])<<16|uint64(h[10])<<8|uint64(h[11]), true
		}
	}
	if size > lim.Section {
		return fmt.Errorf("section %s has %d bytes, more than the %d read", s.Name, size, lim.Section)
	}
	if compressed && size > lim.Ratio*max(s.FileSize, 1) {
		return fmt.Errorf("section %s decompresses %d bytes into %d: more than %d times, refused", s.Name, s.FileSize, size, lim.Ratio)
	}
	return nil
}

// MaxTypeDepth is how many typedefs, qualifiers and nested types a walk
// down a DWARF type chain follows: real C++ chains have a handful; a
// crafted file can make one loop (a typedef of itself).
const MaxTypeDepth = 64

// ErrTypeDepth is returned for a type chain longer than MaxTypeDepth.
var ErrTypeDepth = errors.New("DWARF type chain too deep (a loop?)")

// Underlying strips typedefs and cv-qualifiers from t, following at most
// MaxTypeDepth of them.
func Underlying(t dwarf.Type) (dwarf.Type, error) {
	for i := 0; i < MaxTypeDepth; i++ {
		switch v := t.(type) {
		case *dwarf.TypedefType:
			t = v.Type
		case *dwarf.QualType:
			t = v.Type
		default:
			return t, nil
		}
	}
	return nil, ErrTypeDepth
}

// TypeSize is t.Size() walked with a depth limit (Size of a looping
// typedef, qualifier or array recurses until Go's stack overflows, which
// no recover catches); -1 when the chain is too deep.
func TypeSize(t dwarf.Type) int64 { return typeSize(t, 0) }

func typeSize(t dwarf.Type, depth int) int64 {
	if t == nil || depth > MaxTypeDepth {
		return -1
	}
	switch v := t.(type) {
	case *dwarf.TypedefType:
		return typeSize(v.Type, depth+1)
	case *dwarf.QualType:
		return typeSize(v.Type, depth+1)
	case *dwarf.ArrayType:
		if v.Count == -1 {
			return 0
		}
		n := typeSize(v.Type, depth+1)
		if n < 0 {
			return -1
		}
		return n * v.Count
	}
	return t.Size()
}

// MaxTypeNodes bounds how many DWARF entries CheckType visits (debug/dwarf
// reads a type's graph recursively, so this also bounds its depth).
const MaxTypeNodes = 1 << 19

// sizeChain reports whether debug/dwarf computes the size of an entry
// with this tag from the type it names (TypedefType.Size, QualType.Size,
// ArrayType.Size call the named type's Size).
func sizeChain(tag dwarf.Tag) bool {
	switch tag {
	case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType,
		dwarf.TagAtomicType, dwarf.TagImmutableType, dwarf.TagSharedType, dwarf.TagArrayType:
		return true
	}
	return false
}

// CheckType makes d.Type(off) safe to call on crafted DWARF: it walks
// every entry the type's graph reaches (DW_AT_type of the entry and of its
// children), at most MaxTypeNodes of them, and refuses a graph in which a
// chain of typedefs, qualifiers and arrays loops or runs deeper than
// MaxTypeDepth. debug/dwarf sizes every typedef it reads by recursing down
// such chains: a loop there overflows Go's stack, which ends the process
// whatever recover() is in place.
func CheckType(d *dwarf.Data, off dwarf.Offset) error {
	r := d.Reader()
	type node struct {
		tag  dwarf.Tag
		next dwarf.Offset // DW_AT_type, 0 when none
		ok   bool         // next is set
	}
	nodes := map[dwarf.Offset]*node{}
	read := func(o dwarf.Offset) (*node, []dwarf.Offset, error) {
		r.Seek(o)
		e, err := r.Next()
		if err != nil {
			return nil, nil, err
		}
		if e == nil || e.Offset != o {
			return nil, nil, fmt.Errorf("DWARF type at %#x: no entry", o)
		}
		n := &node{tag: e.Tag}
		n.next, n.ok = e.Val(dwarf.AttrType).(dwarf.Offset)
		var kids []dwarf.Offset
		if e.Children {
			for {
				k, err := r.Next()
				if err != nil {
					return nil, nil, err
				}
				if k == nil || k.Tag == 0 {
					break
				}
				if t, ok := k.Val(dwarf.AttrType).(dwarf.Offset); ok {
					kids = append(kids, t)
				}
				if k.Children {
					r.SkipChildren()
				}
				if len(kids) > MaxTypeNodes {
					return nil, nil, fmt.Errorf("DWARF type at %#x: more than %d members", o, MaxTypeNodes)
				}
			}
		}
		return n, kids, nil
	}
	stack := []dwarf.Offset{off}
	for len(stack) > 0 {
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if nodes[o] != nil {
			continue
		}
		if len(nodes) >= MaxTypeNodes {
			return fmt.Errorf("DWARF type at %#x reaches more than %d entries", off, MaxTypeNodes)
		}
		n, kids, err := read(o)
		if err != nil {
			return err
		}
		nodes[o] = n
		if n.ok {
			stack = append(stack, n.next)
		}
		stack = append(stack, kids...)
	}
	// Every size chain must end within MaxTypeDepth steps.
	done := map[dwarf.Offset]bool{}
	for o, n := range nodes {
		if !sizeChain(n.tag) || done[o] {
			continue
		}
		var path []dwarf.Offset
		cur, ended := o, false
		for i := 0; i <= MaxTypeDepth; i++ {
			m := nodes[cur]
			if m == nil || !sizeChain(m.tag) || !m.ok || done[cur] {
				ended = true
				break
			}
			path = append(path, cur)
			cur = m.next
		}
		if !ended {
			return fmt.Errorf("DWARF type at %#x: %w", o, ErrTypeDepth)
		}
		for _, p := range path {
			done[p] = true
		}
	}
	return nil
}

// Type is d.Type(off) after CheckType.
func Type(d *dwarf.Data, off dwarf.Offset) (dwarf.Type, error) {
	if err := CheckType(d, off); err != nil {
		return nil, err
	}
	return d.Type(off)
}

// TypeName names t as people read it ("*const T"), walking at most
// MaxTypeDepth pointers and qualifiers (debug/dwarf's String recurses
// through them without a limit: a pointer to itself never ends). A
// struct, union or class is named by its tag name, never by its members.
func TypeName(t dwarf.Type) string {
	var b strings.Builder
	for i := 0; i < MaxTypeDepth && t != nil; i++ {
		switch v := t.(type) {
		case *dwarf.PtrType:
			b.WriteString("*")
			t = v.Type
			continue
		case *dwarf.QualType:
			b.WriteString(v.Qual + " ")
			t = v.Type
			continue
		case *dwarf.StructType:
			b.WriteString(v.Kind + " " + v.StructName)
		default:
			b.WriteString(t.Common().Name)
		}
		return b.String()
	}
	if t == nil {
		return b.String() + "void"
	}
	return b.String() + "..."
}
