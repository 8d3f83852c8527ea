package ttmetal

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"

	"github.com/tttrace/tttrace/elfx"
)

// Field offsets from DWARF: the definitions of tt::tt_metal::Buffer (and
// BufferImpl in a pimpl build), Device and the enum AllocationStatus (and,
// for a library with the Metal trace overloads taking one,
// tt::tt_metal::distributed::MeshCommandQueue), read
// from the library's debug sections (compressed ones too: debug/elf
// decompresses SHF_COMPRESSED zlib and zstd) or from a separate debug file
// found by build-id or .gnu_debuglink.

// debugFile is where the DWARF of a library was looked for and found.
type debugFile struct {
	path    string   // the file holding .debug_info ("" if none)
	checked []string // every place looked at, for people
}

// findDebugInfo returns the file that holds lib's DWARF: the library
// itself, or a separate debug file (elfx.Debug.FindDebug: by build-id,
// then .gnu_debuglink, under Options.Debug's roots) whose build-id (and
// debuglink CRC) matches it. A debug file that does not match is never
// used: its offsets could be another build's.
func findDebugInfo(lib *Library, dbg elfx.Debug) debugFile {
	var d debugFile
	if lib.HasDWARF {
		d.path = lib.Path
		d.checked = append(d.checked, lib.Path+": .debug_info present")
		return d
	}
	d.checked = append(d.checked, lib.Path+": no .debug_info")
	p, checked := dbg.FindDebug(lib.file, lib.Path, lib.BuildID, ".debug_info")
	d.path = p
	d.checked = append(d.checked, checked...)
	return d
}

// dwarfTypes are the definitions tttrace reads.
type dwarfTypes struct {
	buffer, bufferImpl, device map[string]int64 // member name -> offset
	bufferMembers              []dwarfMember
	bufferImplMembers          []dwarfMember
	allocated                  int64 // AllocationStatus::ALLOCATED, -1 unknown
	ns                         string
	// meshCQ: distributed::MeshCommandQueue's members, looked for only
	// when wantMeshCQ (the library has the overloads that take one).
	meshCQ     []dwarfMember
	wantMeshCQ bool
	// coreRangeSet, coreRange: the definitions of CoreRangeSet and
	// CoreRange (in the global namespace, or in tt::tt_metal as 2026
	// upstream has them), looked for only when wantCoreRanges (the library
	// has the CB probe's function).
	coreRangeSet, coreRange *dwarfClass
	wantCoreRanges          bool
}

// dwarfClass is a class's definition: its name as written in a template
// argument (with its namespaces), size and data members.
type dwarfClass struct {
	qual    string
	size    int64
	members []dwarfMember
}

func (c *dwarfClass) member(name string) (dwarfMember, bool) {
	for _, m := range c.members {
		if m.name == name {
			return m, true
		}
	}
	return dwarfMember{}, false
}

type dwarfMember struct {
	name string
	off  int64
	typ  dwarf.Offset
}

// dwarfWants are the definitions beyond Buffer's and Device's a library
// needs, from what its symbols say it has; the scan goes on until it has
// found each of them or read every unit.
type dwarfWants struct {
	// meshCQ: distributed::MeshCommandQueue::id_ (the Metal trace
	// overloads taking a MeshCommandQueue&).
	meshCQ bool
	// coreRanges: CoreRangeSet, CoreRange and CoreCoord (the CB probe).
	coreRanges bool
}

// dwarfLayout reads the layout of Buffer and Device from the DWARF in
// path. It returns an error saying what is missing when the types are not
// there in full, and otherwise what it read, for people.
func dwarfLayout(path string, want dwarfWants) (*Layout, string, error) {
	ef, err := elfx.Open(path, elfx.Limits{})
	if err != nil {
		return nil, "", err
	}
	defer ef.Close()
	d, err := elfx.DWARF(ef.File, ef.Limits())
	if err != nil {
		return nil, "", fmt.Errorf("read DWARF: %w", err)
	}
	t, err := scanDWARF(d, want)
	if err != nil {
		return nil, "", err
	}
	l := emptyLayout("DWARF")
	l.Allocated = t.allocated
	for _, m := range t.meshCQ {
		// Only a 4-byte id_ (uint32_t): anything else is not the class the
		// probes read.
		if _, size := dwarfTypeName(d, m.typ); m.name == "id_" && size == 4 {
			l.MeshCQID = m.off
		}
	}
	fields, members := t.buffer, t.bufferMembers
	where := "tt::tt_metal" + t.ns + "::Buffer"
	if _, direct := fields["address_"]; !direct {
		// Pimpl: the members are in BufferImpl, reached through a pointer
		// member of Buffer (a std::unique_ptr<BufferImpl>, 8 bytes).
		if t.bufferImpl == nil {
			return nil, "", fmt.Errorf("DWARF defines %s without address_ and no BufferImpl", where)
		}
		impl := int64(-1)
		for _, m := range t.bufferMembers {
			if n, size := dwarfTypeName(d, m.typ); strings.Contains(n, "BufferImpl") && size == 8 {
				impl = m.off
			}
		}
		if impl < 0 {
			return nil, "", fmt.Errorf("DWARF: %s has no 8-byte pointer to BufferImpl", where)
		}
		l.BufferImplPtr = impl
		fields, members = t.bufferImpl, t.bufferImplMembers
		where = "tt::tt_metal" + t.ns + "::BufferImpl"
	}
	for _, f := range layoutFields {
		if v, ok := dwarfMemberOf(t, fields, &f); ok {
			*f.get(&l) = v
		}
	}
	for _, m := range members {
		if m.name == "buffer_type_" {
			if _, size := dwarfTypeName(d, m.typ); size > 0 {
				l.TypeWidth = size
			}
		}
	}
	var miss []string
	for _, f := range layoutFields {
		if !f.required || *f.get(&l) >= 0 {
			continue
		}
		if f.buffer {
			miss = append(miss, where+"::"+f.member)
		} else {
			miss = append(miss, "tt::tt_metal"+t.ns+"::"+f.member)
		}
	}
	if len(miss) > 0 {
		return nil, "", fmt.Errorf("DWARF lacks %s", strings.Join(miss, ", "))
	}
	where += " read"
	if want.coreRanges {
		if err := dwarfCoreRanges(d, t, &l); err != nil {
			where += "; " + err.Error() + ": circular buffers carry no core ranges"
		} else {
			where += "; " + t.coreRangeSet.qual + " read"
		}
	}
	return &l, where, nil
}

// dwarfCoreRanges sets l's CoreRangeSet rows from the definitions t found,
// all of them or none: ranges_ must be a std::vector (24 bytes: begin, end,
// capacity) of the CoreRange found, start_coord and end_coord one class
// whose x and y are integers of one width, and the layout must pass
// checkCoreRanges (what BPF can copy). It says why when they are not set.
func dwarfCoreRanges(d *dwarf.Data, t *dwarfTypes, l *Layout) error {
	set, rng := t.coreRangeSet, t.coreRange
	if set == nil || rng == nil {
		return errors.New("DWARF has no definition of CoreRangeSet and CoreRange")
	}
	ranges, ok := set.member("ranges_")
	if !ok {
		return fmt.Errorf("DWARF's %s has no ranges_", set.qual)
	}
	vec, err := dwarfClassAt(d, ranges.typ)
	if err != nil {
		return fmt.Errorf("%s::ranges_: %w", set.qual, err)
	}
	if !strings.HasPrefix(vec.qual, "vector<"+rng.qual+",") && vec.qual != "vector<"+rng.qual+">" ||
		vec.size != 24 || ranges.off+vec.size > set.size {
		return fmt.Errorf("%s::ranges_ is a %s of %d bytes at %d, not a std::vector<%s> inside its %d bytes",
			set.qual, vec.qual, vec.size, ranges.off, rng.qual, set.size)
	}
	var coords [2]dwarfMember
	var coord *dwarfClass
	var x, y dwarfMember
	var width int64
	for i, name := range []string{"start_coord", "end_coord"} {
		m, ok := rng.member(name)
		if !ok {
			return fmt.Errorf("DWARF's %s has no %s", rng.qual, name)
		}
		c, err := dwarfClassAt(d, m.typ)
		if err != nil {
			return fmt.Errorf("%s::%s: %w", rng.qual, name, err)
		}
		cx, okx := c.member("x")
		cy, oky := c.member("y")
		if !okx || !oky {
			return fmt.Errorf("%s::%s is a %s without x and y", rng.qual, name, c.qual)
		}
		wx, errx := dwarfIntSize(d, cx.typ)
		wy, erry := dwarfIntSize(d, cy.typ)
		if err := errors.Join(errx, erry); err != nil || wx != wy {
			return fmt.Errorf("%s::%s: x and y are not integers of one width (%d and %d bytes)", rng.qual, name, wx, wy)
		}
		if i == 1 && (c.size != coord.size || cx.off != x.off || cy.off != y.off || wx != width) {
			return fmt.Errorf("%s's start_coord and end_coord are laid out differently", rng.qual)
		}
		coords[i], coord, x, y, width = m, c, cx, cy, wx
	}
	for _, m := range coords {
		if m.off < 0 || m.off+coord.size > rng.size {
			return fmt.Errorf("%s::%s at %d (%d bytes) is not inside its %d bytes", rng.qual, m.name, m.off, coord.size, rng.size)
		}
	}
	c := *l
	c.CoreRanges, c.CoreRangeSize, c.CoreRangeStart, c.CoreRangeEnd = ranges.off, rng.size, coords[0].off, coords[1].off
	c.CoreCoordX, c.CoreCoordY, c.CoreCoordWidth = x.off, y.off, width
	if err := c.checkCoreRanges(); err != nil {
		return fmt.Errorf("%s as DWARF lays it out: %w", set.qual, err)
	}
	*l = c
	return nil
}

// dwarfResolve reads the entry of the type at off, through at most
// elfx.MaxTypeDepth typedefs and qualifiers; the reader returned is just
// past it (at its children).
func dwarfResolve(d *dwarf.Data, off dwarf.Offset) (*dwarf.Entry, *dwarf.Reader, error) {
	r := d.Reader()
	for range elfx.MaxTypeDepth {
		r.Seek(off)
		e, err := r.Next()
		if err != nil {
			return nil, nil, err
		}
		if e == nil || e.Offset != off {
			return nil, nil, fmt.Errorf("DWARF has no type at %#x", off)
		}
		switch e.Tag {
		case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType:
			next, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
			if !ok {
				return nil, nil, fmt.Errorf("DWARF type at %#x names no type", off)
			}
			off = next
		default:
			return e, r, nil
		}
	}
	return nil, nil, elfx.ErrTypeDepth
}

// dwarfClassAt reads the class or struct defined at off (through typedefs
// and qualifiers): its name, size and data members. A declaration alone is
// an error: its layout is not there.
func dwarfClassAt(d *dwarf.Data, off dwarf.Offset) (*dwarfClass, error) {
	e, r, err := dwarfResolve(d, off)
	if err != nil {
		return nil, err
	}
	name, _ := e.Val(dwarf.AttrName).(string)
	if e.Tag != dwarf.TagClassType && e.Tag != dwarf.TagStructType {
		return nil, fmt.Errorf("%q is not a class", name)
	}
	size, ok := e.Val(dwarf.AttrByteSize).(int64)
	if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl || !ok || !e.Children {
		return nil, fmt.Errorf("DWARF declares %q without its definition", name)
	}
	members, err := readMembers(r)
	if err != nil {
		return nil, err
	}
	return &dwarfClass{qual: name, size: size, members: members}, nil
}

// dwarfIntSize is the size of the integer type at off (through typedefs
// and qualifiers).
func dwarfIntSize(d *dwarf.Data, off dwarf.Offset) (int64, error) {
	e, _, err := dwarfResolve(d, off)
	if err != nil {
		return 0, err
	}
	enc, _ := e.Val(dwarf.AttrEncoding).(int64)
	size, ok := e.Val(dwarf.AttrByteSize).(int64)
	if e.Tag != dwarf.TagBaseType || !ok || (enc != encSigned && enc != encUnsigned) {
		return 0, fmt.Errorf("DWARF type at %#x is not an integer", off)
	}
	return size, nil
}

// DW_ATE_signed and DW_ATE_unsigned (DWARF 5, 7.8).
const (
	encSigned   = 0x05
	encUnsigned = 0x07
)

// dwarfMemberOf finds the member of a field-table row in the DWARF types:
// Buffer's (or BufferImpl's: fields) by the member's name, Device's by the
// name after "Device::". Rows of neither kind are not DWARF members.
func dwarfMemberOf(t *dwarfTypes, fields map[string]int64, f *field) (int64, bool) {
	if f.kind != kindOffset {
		return 0, false
	}
	if f.buffer {
		v, ok := fields[f.member]
		return v, ok
	}
	if m, ok := strings.CutPrefix(f.member, "Device::"); ok {
		v, ok := t.device[m]
		return v, ok
	}
	return 0, false
}

// dwarfTypeName names the type at off (through typedefs and cv) and its
// size. The type's graph is checked first (elfx.Type) and every walk down
// it is bounded: a crafted chain can loop.
func dwarfTypeName(d *dwarf.Data, off dwarf.Offset) (string, int64) {
	typ, err := elfx.Type(d, off)
	if err != nil {
		return "", -1
	}
	u, err := elfx.Underlying(typ)
	if err != nil || u == nil {
		return "", -1
	}
	if p, ok := u.(*dwarf.PtrType); ok {
		return "*" + elfx.TypeName(p.Type), p.Size()
	}
	return elfx.TypeName(u), elfx.TypeSize(u)
}

// dwarfClasses are the classes scanDWARF collects (in namespace
// tt::tt_metal or tt::tt_metal::v0), and where each goes.
var dwarfClasses = []struct {
	name string
	have func(*dwarfTypes) bool
	set  func(t *dwarfTypes, members []dwarfMember, v0 bool)
}{
	{"Buffer", func(t *dwarfTypes) bool { return t.buffer != nil },
		func(t *dwarfTypes, m []dwarfMember, v0 bool) {
			t.buffer, t.bufferMembers = memberOffsets(m), m
			if v0 {
				t.ns = "::v0"
			}
		}},
	{"BufferImpl", func(t *dwarfTypes) bool { return t.bufferImpl != nil },
		func(t *dwarfTypes, m []dwarfMember, _ bool) { t.bufferImpl, t.bufferImplMembers = memberOffsets(m), m }},
	{"Device", func(t *dwarfTypes) bool { return t.device != nil },
		func(t *dwarfTypes, m []dwarfMember, _ bool) { t.device = memberOffsets(m) }},
}

func memberOffsets(members []dwarfMember) map[string]int64 {
	m := map[string]int64{}
	for _, x := range members {
		m[x.name] = x.off
	}
	return m
}

// done reports whether every definition wanted has been found.
func (t *dwarfTypes) done() bool {
	return t.device != nil && t.allocated >= 0 && t.buffer != nil &&
		(t.bufferImpl != nil || hasKey(t.buffer, "address_")) && (!t.wantMeshCQ || t.meshCQ != nil) &&
		(!t.wantCoreRanges || t.coreRangeSet != nil && t.coreRange != nil)
}

// ttPath reports whether path (the enclosing namespaces) is tt::tt_metal
// or tt::tt_metal::v0.
func ttPath(path []string) bool {
	return len(path) >= 2 && path[0] == "tt" && path[1] == "tt_metal" &&
		(len(path) == 2 || len(path) == 3 && path[2] == "v0")
}

// ttNamespaceStep reports whether namespace name inside path leads towards
// tt::tt_metal(::v0).
func ttNamespaceStep(path []string, name string) bool {
	switch len(path) {
	case 0:
		return name == "tt"
	case 1:
		return path[0] == "tt" && name == "tt_metal"
	case 2:
		return ttPath(path) && name == "v0"
	}
	return false
}

// dwarfScan is one walk of the DWARF entries.
type dwarfScan struct {
	r *dwarf.Reader
	t *dwarfTypes
}

// eachUnit reads r's top-level entries while more says go on, skipping
// all but compile (and partial) units, and calls walk at each unit with
// children, r on its first child (walk reads them to the unit's end).
func eachUnit(r *dwarf.Reader, more func() bool, walk func() error) error {
	for more() {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		if e.Children {
			if err := walk(); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanDWARF walks the compile units' namespaces tt::tt_metal (and ::v0)
// for the full definitions of Buffer, BufferImpl, Device and
// AllocationStatus, skipping everything else, and stops when it has them.
func scanDWARF(d *dwarf.Data, want dwarfWants) (*dwarfTypes, error) {
	sc := &dwarfScan{r: d.Reader(), t: &dwarfTypes{allocated: -1, wantMeshCQ: want.meshCQ, wantCoreRanges: want.coreRanges}}
	if err := eachUnit(sc.r, func() bool { return !sc.t.done() }, func() error { return sc.walk(nil) }); err != nil {
		return nil, err
	}
	if sc.t.buffer == nil {
		return nil, errors.New("DWARF has no definition of tt::tt_metal::Buffer")
	}
	if sc.t.device == nil {
		return nil, errors.New("DWARF has no definition of tt::tt_metal::Device")
	}
	return sc.t, nil
}

func (sc *dwarfScan) skip(e *dwarf.Entry) {
	if e.Children {
		sc.r.SkipChildren()
	}
}

// walk reads the children of the current entry, whose enclosing namespaces
// are path, descending into the namespaces that lead to tt::tt_metal.
func (sc *dwarfScan) walk(path []string) error {
	for {
		e, err := sc.r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if e.Tag == dwarf.TagNamespace && e.Children && ttNamespaceStep(path, name) {
			if err := sc.walk(append(path, name)); err != nil {
				return err
			}
			continue
		}
		if e.Tag == dwarf.TagNamespace && e.Children && sc.t.wantMeshCQ && ttPath(path) && name == "distributed" {
			if err := sc.distributed(); err != nil {
				return err
			}
			continue
		}
		if (e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagStructType) && sc.t.wantCoreRanges &&
			(len(path) == 0 || ttPath(path)) && (name == "CoreRangeSet" || name == "CoreRange") {
			if err := sc.coreClass(e, name, path); err != nil {
				return err
			}
			continue
		}
		if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); !ttPath(path) || decl || !e.Children {
			sc.skip(e)
			continue
		}
		var handled bool
		switch e.Tag {
		case dwarf.TagClassType, dwarf.TagStructType:
			handled, err = sc.class(name, len(path) == 3)
		case dwarf.TagEnumerationType:
			handled, err = sc.enum(name)
		}
		if err != nil {
			return err
		}
		if !handled {
			sc.r.SkipChildren()
		}
	}
}

// distributed reads the children of a namespace tt::tt_metal::distributed:
// the definition of MeshCommandQueue, if not found yet.
func (sc *dwarfScan) distributed() error {
	for {
		e, err := sc.r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
		if (e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagStructType) && name == "MeshCommandQueue" && !decl &&
			e.Children && sc.t.meshCQ == nil {
			m, err := readMembers(sc.r)
			if err != nil {
				return err
			}
			sc.t.meshCQ = append([]dwarfMember{}, m...)
			continue
		}
		sc.skip(e)
	}
}

// coreClass reads the definition of CoreRangeSet or CoreRange (name),
// entry e in the namespaces path, if not found yet.
func (sc *dwarfScan) coreClass(e *dwarf.Entry, name string, path []string) error {
	slot := &sc.t.coreRange
	if name == "CoreRangeSet" {
		slot = &sc.t.coreRangeSet
	}
	size, ok := e.Val(dwarf.AttrByteSize).(int64)
	if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); *slot != nil || decl || !ok || !e.Children {
		sc.skip(e)
		return nil
	}
	m, err := readMembers(sc.r)
	if err != nil {
		return err
	}
	*slot = &dwarfClass{qual: strings.Join(append(append([]string{}, path...), name), "::"), size: size, members: m}
	return nil
}

// class reads the members of a wanted class not found yet.
func (sc *dwarfScan) class(name string, v0 bool) (bool, error) {
	for _, c := range dwarfClasses {
		if c.name != name || c.have(sc.t) {
			continue
		}
		members, err := readMembers(sc.r)
		if err != nil {
			return true, err
		}
		c.set(sc.t, members, v0)
		return true, nil
	}
	return false, nil
}

// enum reads ALLOCATED from the enumerators of AllocationStatus.
func (sc *dwarfScan) enum(name string) (bool, error) {
	if name != "AllocationStatus" {
		return false, nil
	}
	for {
		c, err := sc.r.Next()
		if err != nil {
			return true, err
		}
		if c == nil || c.Tag == 0 {
			return true, nil
		}
		if n, _ := c.Val(dwarf.AttrName).(string); n == "ALLOCATED" {
			switch v := c.Val(dwarf.AttrConstValue).(type) {
			case int64:
				sc.t.allocated = v
			case uint64:
				sc.t.allocated = int64(v)
			}
		}
		sc.skip(c)
	}
}

func hasKey(m map[string]int64, k string) bool { _, ok := m[k]; return ok }

// readMembers reads the data members (with a constant location) of the
// class whose children come next, and skips the rest.
func readMembers(r *dwarf.Reader) ([]dwarfMember, error) {
	var out []dwarfMember
	for {
		c, err := r.Next()
		if err != nil {
			return nil, err
		}
		if c == nil || c.Tag == 0 {
			return out, nil
		}
		if c.Tag == dwarf.TagMember {
			n, _ := c.Val(dwarf.AttrName).(string)
			typ, _ := c.Val(dwarf.AttrType).(dwarf.Offset)
			switch v := c.Val(dwarf.AttrDataMemberLoc).(type) {
			case int64:
				out = append(out, dwarfMember{n, v, typ})
			case uint64:
				out = append(out, dwarfMember{n, int64(v), typ})
			}
		}
		if c.Children {
			r.SkipChildren()
		}
	}
}
