package ttmetal

// UMD's cluster descriptor read from the process that uses it
// (docs/ttmetal.md §11, "A chip's place: tray and ASIC location"): 2026
// TT-Metal's MetalContext::env_ (MetalEnv*) -> MetalEnv::impl_
// (unique_ptr<MetalEnvImpl>) -> MetalEnvImpl::cluster_ (unique_ptr<tt::Cluster>)
// -> tt::Cluster::cluster_desc_ (tt::umd::ClusterDescriptor*), whose maps,
// keyed by the logical chip id, give each chip its unique id
// (chip_unique_ids), board type (chip_board_type), PCI bus id
// (chip_to_bus_id) and ASIC location (asic_locations, a std::map). Member
// offsets and the maps' element types come from DWARF (the template
// arguments of each member's type; BoardType's enumerators by name), the
// containers' node layouts are libstdc++'s: an unordered_map's nodes are a
// singly linked list from _M_before_begin (offset 16) counted by
// _M_element_count (offset 24), each node its next pointer then the
// std::pair (no cached hash for an int key); a std::map is a red-black
// tree whose header is at offset 8 (root at 16, node count at 40), each
// node color, parent, left, right, then the pair. Process memory is
// hostile: every count is bounded, a list is walked at most its count
// long and must end there, a tree is walked once per node with its links
// checked (a node met twice, a child whose parent is not the node it hangs
// from, keys out of order: refused), no key met twice.

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tttrace/tttrace/elfx"
)

// maxDescChips bounds the entries of one of the descriptor's maps (a host
// has at most a few dozen chips).
const maxDescChips = 4096

// DescLayout is where the cluster descriptor and its maps are.
type DescLayout struct {
	Env     int64 // MetalContext::env_ (MetalEnv*)
	Impl    int64 // MetalEnv::impl_ (unique_ptr<MetalEnvImpl>)
	Cluster int64 // MetalEnvImpl::cluster_ (unique_ptr<tt::Cluster>)
	Desc    int64 // tt::Cluster::cluster_desc_ (tt::umd::ClusterDescriptor*)
	// The maps, each with the offset of its value in a node.
	UniqueIDs, BoardTypes, BusIDs, AsicLocations descMap
	// Boards: BoardType's enumerator names by value.
	Boards map[uint32][]string
}

// descMap is one of the descriptor's maps keyed by a 4-byte chip id: its
// offset in the descriptor, where a node's value is and its size.
type descMap struct {
	Off, ValueOff, ValueSize int64
}

// The node layouts (libstdc++): a hash node's pair after its next
// pointer, a tree node's after color, parent, left and right.
const (
	hashNodePair = 8
	treeNodePair = 32
)

// descLayout reads the descriptor's layout from d.
func descLayout(d *dwarf.Data) (*DescLayout, error) {
	l := &DescLayout{}
	want := []*pathClass{
		{path: "tt::tt_metal::MetalContext", members: map[string]*int64{"env_": &l.Env}},
		{path: "tt::tt_metal::MetalEnv", members: map[string]*int64{"impl_": &l.Impl}},
		{path: "tt::tt_metal::MetalEnvImpl", members: map[string]*int64{"cluster_": &l.Cluster}},
		{path: "tt::Cluster", members: map[string]*int64{"cluster_desc_": &l.Desc}},
		{path: "tt::umd::ClusterDescriptor", members: map[string]*int64{
			"chip_unique_ids": &l.UniqueIDs.Off, "chip_board_type": &l.BoardTypes.Off,
			"chip_to_bus_id": &l.BusIDs.Off, "asic_locations": &l.AsicLocations.Off,
		}},
	}
	if err := scanPathClasses(d, want); err != nil {
		return nil, err
	}
	var problems []string
	ptr := func(c *pathClass, member, kind, target string) {
		m := c.found[member]
		tn, size := dwarfTypeName(d, m.typ)
		ok := size == 8
		switch kind {
		case "*":
			// A pointer's target is named by its own (unqualified) name.
			_, last, _ := strings.Cut(target, "::")
			for strings.Contains(last, "::") {
				_, last, _ = strings.Cut(last, "::")
			}
			ok = ok && strings.HasPrefix(tn, "*") && bareTypeName(tn[1:]) == last
		case "unique_ptr":
			arg, _ := uniquePtrArg(tn)
			ok = ok && arg == target
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s::%s is a %q of %d bytes, not a %s to %s", c.path, member, tn, size, kind, target))
		}
	}
	ptr(want[0], "env_", "*", "tt::tt_metal::MetalEnv")
	ptr(want[1], "impl_", "unique_ptr", "tt::tt_metal::MetalEnvImpl")
	ptr(want[2], "cluster_", "unique_ptr", "tt::Cluster")
	ptr(want[3], "cluster_desc_", "*", "tt::umd::ClusterDescriptor")
	cd := want[4]
	maps := []struct {
		member string
		dst    *descMap
		tree   bool
		size   int64
		enum   bool
	}{
		{"chip_unique_ids", &l.UniqueIDs, false, 8, false},
		{"chip_board_type", &l.BoardTypes, false, 4, true},
		{"chip_to_bus_id", &l.BusIDs, false, 2, false},
		{"asic_locations", &l.AsicLocations, true, 1, false},
	}
	for _, mp := range maps {
		m := cd.found[mp.member]
		tn, size := dwarfTypeName(d, m.typ)
		prefix, wantSize, pair := "unordered_map<", int64(56), int64(hashNodePair)
		if mp.tree {
			prefix, wantSize, pair = "map<", 48, treeNodePair
		}
		if !strings.HasPrefix(bareTypeName(tn), prefix) || size != wantSize {
			problems = append(problems, fmt.Sprintf("ClusterDescriptor::%s is a %q of %d bytes, not a std::%s...> of %d", mp.member, tn, size, prefix, wantSize))
			continue
		}
		key, kerr := templateArg(d, m.typ, "_Key")
		val, verr := templateArg(d, m.typ, "_Tp")
		if kerr != nil || verr != nil {
			problems = append(problems, fmt.Sprintf("ClusterDescriptor::%s: its key and value types: %v", mp.member, errors.Join(kerr, verr)))
			continue
		}
		ki, kok := key.(*dwarf.IntType)
		vs := val.Size()
		_, venum := val.(*dwarf.EnumType)
		_, vuint := val.(*dwarf.UintType)
		if !kok || ki.Size() != 4 || vs != mp.size || venum != mp.enum || (!mp.enum && !vuint && !isUchar(val)) {
			problems = append(problems, fmt.Sprintf("ClusterDescriptor::%s maps %s to %s: not a 4-byte chip id to a %d-byte value of the kind tttrace reads", mp.member, elfx.TypeName(key), elfx.TypeName(val), mp.size))
			continue
		}
		// The pair's second member follows the int key at its own
		// alignment (a scalar's: its size).
		mp.dst.ValueOff, mp.dst.ValueSize = pair+max(4, vs), vs
		if mp.enum {
			l.Boards = map[uint32][]string{}
			for _, v := range val.(*dwarf.EnumType).Val {
				l.Boards[uint32(v.Val)] = append(l.Boards[uint32(v.Val)], v.Name)
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.New("DWARF: " + strings.Join(problems, "; "))
	}
	return l, nil
}

// isUchar: an unsigned char (DWARF's DW_ATE_unsigned_char, a CharType
// unless the producer says uint8).
func isUchar(t dwarf.Type) bool {
	_, ok := t.(*dwarf.UcharType)
	return ok
}

// uniquePtrArg is the class a std::unique_ptr's type name points to.
func uniquePtrArg(typeName string) (string, bool) {
	arg, ok := strings.CutPrefix(bareTypeName(typeName), "unique_ptr<")
	if !ok {
		return "", false
	}
	if i := strings.IndexAny(arg, ",>"); i >= 0 {
		arg = arg[:i]
	}
	return strings.TrimSpace(arg), true
}

// templateArg is the type of the template type parameter name of the
// class at off (its typedefs resolved).
func templateArg(d *dwarf.Data, off dwarf.Offset, name string) (dwarf.Type, error) {
	t, err := elfx.Type(d, off)
	if err != nil {
		return nil, err
	}
	u, err := elfx.Underlying(t)
	if err != nil {
		return nil, err
	}
	s, ok := u.(*dwarf.StructType)
	if !ok {
		return nil, fmt.Errorf("%s is not a class", elfx.TypeName(u))
	}
	// The class's entry: the underlying type's own, found again by name
	// from the member's type entry (a typedef chain ends at it).
	r := d.Reader()
	r.Seek(off)
	for range 16 {
		e, err := r.Next()
		if err != nil || e == nil {
			return nil, fmt.Errorf("%s: its entry is not readable", s.StructName)
		}
		if e.Tag == dwarf.TagTypedef {
			next, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
			if !ok {
				break
			}
			r.Seek(next)
			continue
		}
		if !e.Children {
			break
		}
		for {
			c, err := r.Next()
			if err != nil || c == nil || c.Tag == 0 {
				return nil, fmt.Errorf("%s has no template parameter %s", s.StructName, name)
			}
			if c.Tag == dwarf.TagTemplateTypeParameter {
				if n, _ := c.Val(dwarf.AttrName).(string); n == name {
					to, ok := c.Val(dwarf.AttrType).(dwarf.Offset)
					if !ok {
						break
					}
					at, err := elfx.Type(d, to)
					if err != nil {
						return nil, err
					}
					return elfx.Underlying(at)
				}
			}
			if c.Children {
				r.SkipChildren()
			}
		}
		break
	}
	return nil, fmt.Errorf("%s has no template parameter %s", s.StructName, name)
}

// pathClass is a class wanted by its full name, and the members wanted of
// it (their offsets written to the pointers).
type pathClass struct {
	path    string
	members map[string]*int64
	found   map[string]dwarfMember
}

// scanPathClasses walks the compile units for the definitions of the
// classes, in any namespace on their paths.
func scanPathClasses(d *dwarf.Data, classes []*pathClass) error {
	byPath := map[string]*pathClass{}
	prefixes := map[string]bool{}
	for _, c := range classes {
		byPath[c.path] = c
		parts := strings.Split(c.path, "::")
		for i := 1; i < len(parts); i++ {
			prefixes[strings.Join(parts[:i], "::")] = true
		}
	}
	remaining := len(classes)
	r := d.Reader()
	var walk func(ns string) error
	walk = func(ns string) error {
		for remaining > 0 {
			e, err := r.Next()
			if err != nil {
				return err
			}
			if e == nil || e.Tag == 0 {
				return nil
			}
			name, _ := e.Val(dwarf.AttrName).(string)
			full := name
			if ns != "" {
				full = ns + "::" + name
			}
			if e.Tag == dwarf.TagNamespace && e.Children && prefixes[full] {
				if err := walk(full); err != nil {
					return err
				}
				continue
			}
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			c := byPath[full]
			if c == nil || c.found != nil || decl || !e.Children || (e.Tag != dwarf.TagClassType && e.Tag != dwarf.TagStructType) {
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
			members, err := readMembers(r)
			if err != nil {
				return err
			}
			c.found = map[string]dwarfMember{}
			for _, m := range members {
				if _, ok := c.members[m.name]; ok {
					c.found[m.name] = m
				}
			}
			remaining--
		}
		return nil
	}
	if err := eachUnit(r, func() bool { return remaining > 0 }, func() error { return walk("") }); err != nil {
		return err
	}
	var problems []string
	for _, c := range classes {
		if c.found == nil {
			problems = append(problems, "no definition of "+c.path)
			continue
		}
		for name, dst := range c.members {
			m, ok := c.found[name]
			if !ok {
				problems = append(problems, c.path+"::"+name+" missing")
				continue
			}
			*dst = m.off
		}
	}
	if len(problems) > 0 {
		return errors.New("DWARF: " + strings.Join(problems, "; "))
	}
	return nil
}

// DescChip is what one cluster descriptor says of one chip id; a Has*
// false: the chip is not in that map.
type DescChip struct {
	UniqueID        uint64
	HasUniqueID     bool
	Board           uint32
	BoardNames      []string // BoardType's enumerators of that value
	HasBoard        bool
	Bus             uint16
	HasBus          bool
	AsicLocation    uint8
	HasAsicLocation bool
}

// ReadClusterDescriptors reads the cluster descriptor of every
// MetalContext at contexts (g_instances' address in the process), each
// descriptor once: per descriptor, what it says of each chip id.
func ReadClusterDescriptors(mem io.ReaderAt, contexts uint64, l *RootLayout) ([]map[int32]*DescChip, error) {
	if l.Desc == nil {
		return nil, l.DescErr
	}
	dl := l.Desc
	rd := memReader{mem: mem}
	seen := map[uint64]bool{}
	var out []map[int32]*DescChip
	for slot := range min(l.Slots, maxContexts) {
		ctx := rd.u64(contexts + slot*8)
		if rd.err != nil {
			return nil, fmt.Errorf("g_instances at %#x: %w", contexts, rd.err)
		}
		if ctx == 0 {
			continue
		}
		env := rd.u64(ctx + uint64(dl.Env))
		var impl, cl, desc uint64
		if env != 0 {
			impl = rd.u64(env + uint64(dl.Impl))
		}
		if impl != 0 {
			cl = rd.u64(impl + uint64(dl.Cluster))
		}
		if cl != 0 {
			desc = rd.u64(cl + uint64(dl.Desc))
		}
		if rd.err != nil {
			return nil, fmt.Errorf("MetalContext %d at %#x, its MetalEnv to its cluster descriptor: %w", slot, ctx, rd.err)
		}
		if desc == 0 || seen[desc] {
			continue // no cluster (yet), or a descriptor read already
		}
		seen[desc] = true
		chips, err := readDescriptor(mem, desc, dl)
		if err != nil {
			return nil, fmt.Errorf("cluster descriptor at %#x: %w", desc, err)
		}
		out = append(out, chips)
	}
	return out, nil
}

// readDescriptor reads one descriptor's four maps.
func readDescriptor(mem io.ReaderAt, desc uint64, dl *DescLayout) (map[int32]*DescChip, error) {
	chips := map[int32]*DescChip{}
	at := func(k int32) *DescChip {
		c := chips[k]
		if c == nil {
			c = &DescChip{}
			chips[k] = c
		}
		return c
	}
	err := walkHash(mem, desc+uint64(dl.UniqueIDs.Off), dl.UniqueIDs, func(k int32, v uint64) {
		at(k).UniqueID, at(k).HasUniqueID = v, true
	})
	if err == nil {
		err = walkHash(mem, desc+uint64(dl.BoardTypes.Off), dl.BoardTypes, func(k int32, v uint64) {
			c := at(k)
			c.Board, c.HasBoard, c.BoardNames = uint32(v), true, dl.Boards[uint32(v)]
		})
	}
	if err == nil {
		err = walkHash(mem, desc+uint64(dl.BusIDs.Off), dl.BusIDs, func(k int32, v uint64) {
			at(k).Bus, at(k).HasBus = uint16(v), true
		})
	}
	if err == nil {
		err = walkTree(mem, desc+uint64(dl.AsicLocations.Off), dl.AsicLocations, func(k int32, v uint64) {
			at(k).AsicLocation, at(k).HasAsicLocation = uint8(v), true
		})
	}
	if err != nil {
		return nil, err
	}
	return chips, nil
}

// value reads a node's value of m's size from b (the pair read whole).
func (m descMap) value(b []byte, pairAt int64) uint64 {
	o := m.ValueOff - pairAt
	switch m.ValueSize {
	case 1:
		return uint64(b[o])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[o:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[o:]))
	}
	return binary.LittleEndian.Uint64(b[o:])
}

// walkHash calls f for each element of the unordered_map at addr:
// _M_element_count elements at most maxDescChips, the list ending there,
// no key twice.
func walkHash(mem io.ReaderAt, addr uint64, m descMap, f func(int32, uint64)) error {
	rd := memReader{mem: mem}
	node := rd.u64(addr + 16)
	n := rd.u64(addr + 24)
	if rd.err != nil {
		return fmt.Errorf("unordered_map at %#x: %w", addr, rd.err)
	}
	if n > maxDescChips {
		return fmt.Errorf("unordered_map at %#x holds %d elements, more than the %d chips tttrace reads", addr, n, maxDescChips)
	}
	keys := map[int32]bool{}
	span := uint64(m.ValueOff + m.ValueSize - hashNodePair)
	for i := uint64(0); i < n; i++ {
		if node == 0 {
			return fmt.Errorf("unordered_map at %#x: its list ends after %d of its %d elements", addr, i, n)
		}
		b := rd.bytes(node, hashNodePair+span)
		if rd.err != nil {
			return fmt.Errorf("unordered_map at %#x, node %d: %w", addr, i, rd.err)
		}
		k := int32(binary.LittleEndian.Uint32(b[hashNodePair:]))
		if keys[k] {
			return fmt.Errorf("unordered_map at %#x: key %d met twice (a loop, or not the map tttrace expects)", addr, k)
		}
		keys[k] = true
		f(k, m.value(b, 0))
		node = binary.LittleEndian.Uint64(b)
	}
	if node != 0 {
		return fmt.Errorf("unordered_map at %#x: its list goes on past its %d elements", addr, n)
	}
	return nil
}

// walkTree calls f for each element of the std::map at addr, in key
// order: at most its node count (itself at most maxDescChips), each node
// once, every child's parent link the node it hangs from, keys strictly
// increasing.
func walkTree(mem io.ReaderAt, addr uint64, m descMap, f func(int32, uint64)) error {
	rd := memReader{mem: mem}
	header := addr + 8
	root := rd.u64(header + 8)
	n := rd.u64(header + 32)
	if rd.err != nil {
		return fmt.Errorf("std::map at %#x: %w", addr, rd.err)
	}
	if n > maxDescChips {
		return fmt.Errorf("std::map at %#x holds %d nodes, more than the %d chips tttrace reads", addr, n, maxDescChips)
	}
	if (root == 0) != (n == 0) {
		return fmt.Errorf("std::map at %#x: root %#x with %d nodes", addr, root, n)
	}
	type frame struct {
		node, parent uint64
		left, right  uint64
		key          int32
		val          uint64
	}
	read := func(node, parent uint64) (frame, error) {
		b := rd.bytes(node, uint64(m.ValueOff+m.ValueSize))
		if rd.err != nil {
			return frame{}, fmt.Errorf("std::map at %#x, node %#x: %w", addr, node, rd.err)
		}
		fr := frame{node: node, parent: binary.LittleEndian.Uint64(b[8:]), left: binary.LittleEndian.Uint64(b[16:]),
			right: binary.LittleEndian.Uint64(b[24:]), key: int32(binary.LittleEndian.Uint32(b[treeNodePair:])), val: m.value(b, 0)}
		if fr.parent != parent {
			return frame{}, fmt.Errorf("std::map at %#x: node %#x names %#x its parent, not %#x", addr, node, fr.parent, parent)
		}
		return fr, nil
	}
	visited := map[uint64]bool{}
	var stack []frame
	var count uint64
	var last int32
	cur, parent := root, header
	for cur != 0 || len(stack) > 0 {
		for cur != 0 {
			if visited[cur] || count+uint64(len(stack)) >= n {
				return fmt.Errorf("std::map at %#x: more nodes than its %d, or a node met twice", addr, n)
			}
			visited[cur] = true
			fr, err := read(cur, parent)
			if err != nil {
				return err
			}
			stack = append(stack, fr)
			cur, parent = fr.left, fr.node
		}
		fr := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if count > 0 && fr.key <= last {
			return fmt.Errorf("std::map at %#x: key %d after %d (not in order)", addr, fr.key, last)
		}
		last = fr.key
		count++
		f(fr.key, fr.val)
		cur, parent = fr.right, fr.node
	}
	if count != n {
		return fmt.Errorf("std::map at %#x: %d nodes reached, its count says %d", addr, count, n)
	}
	return nil
}

// ChipPlace is a chip's place as TT-Metal's physical system descriptor
// gives it (tt_metal/fabric/physical_system_descriptor.cpp,
// get_asic_position), which tt-telemetry labels its series with (tray,
// chip): its tray and its ASIC location, or why not.
type ChipPlace struct {
	Tray, AsicLocation uint32
	Known              bool
	Why                string
}

// The trays' PCI bus ids (the bus id's high nibble) of a UBB Galaxy, tray
// 1 first, per architecture (tt_metal/fabric/control_plane.cpp,
// ubb_bus_ids), and the hosts whose motherboard puts other boards in trays
// by their exact bus id (physical_system_descriptor.cpp, mobo_to_bus_ids).
var (
	ubbTrayBusWormhole  = []uint16{0xC0, 0x80, 0x00, 0x40}
	ubbTrayBusBlackhole = []uint16{0x00, 0x40, 0xC0, 0x80}
	moboTrayBus         = map[string][]uint16{
		"SIENAD8-2L2T": {0xc1, 0x01, 0x41, 0x42},
		"X12DPG-QT6":   {0xb1, 0xca, 0x31, 0x4b},
	}
)

// PlaceOf is the place of the chip c says, on a host whose motherboard is
// boardName (/sys/class/dmi/id/board_name's first line, "" when it cannot
// be read, as upstream's get_mobo_name gives it):
//   - a UBB board (6U Galaxy: BoardType UBB, UBB_WORMHOLE, UBB_BLACKHOLE):
//     tray = 1 + the position of the bus id's high nibble in the
//     architecture's tray list, ASIC location = its low nibble
//     (control_plane.cpp, get_ubb_id); a chip with no bus id in the
//     descriptor (upstream would read 0) or one of no tray of the list
//     (upstream: tray 0, location 0, "invalid") has none;
//   - a Blackhole board (P100, P150, P300): its ASIC location from the
//     descriptor's asic_locations; its tray 1 + the position of its exact
//     bus id in the list of the host's motherboard, 0 on any other host
//     (a listed motherboard without its bus id: none; upstream throws);
//   - a Wormhole board off UBB (N150, N300, GALAXY): none (upstream takes
//     its ASIC location from the Ethernet tunnels of its PCIe chip,
//     tunnels_from_mmio_device.cpp, which tttrace does not follow);
//   - any other board type: none.
func PlaceOf(c *DescChip, boardName string) ChipPlace {
	if !c.HasBoard {
		return ChipPlace{Why: "the cluster descriptor gives the chip no board type"}
	}
	has := func(names ...string) bool {
		for _, n := range names {
			for _, b := range c.BoardNames {
				if b == n {
					return true
				}
			}
		}
		return false
	}
	board := strings.Join(c.BoardNames, "/")
	if board == "" {
		board = fmt.Sprintf("%d (not a BoardType enumerator)", c.Board)
	}
	switch {
	case has("UBB", "UBB_WORMHOLE", "UBB_BLACKHOLE"):
		trays := ubbTrayBusWormhole
		if has("UBB_BLACKHOLE") {
			trays = ubbTrayBusBlackhole
		}
		if !c.HasBus {
			return ChipPlace{Why: "a UBB chip with no PCI bus id in the cluster descriptor: its tray is not known"}
		}
		for i, b := range trays {
			if b == c.Bus&0xF0 {
				return ChipPlace{Tray: uint32(i) + 1, AsicLocation: uint32(c.Bus & 0x0F), Known: true}
			}
		}
		return ChipPlace{Why: fmt.Sprintf("a UBB chip on PCI bus %#02x, which is on no tray of its architecture's", c.Bus)}
	case has("P100", "P150", "P300"):
		if !c.HasAsicLocation {
			return ChipPlace{Why: "a Blackhole chip without an ASIC location in the cluster descriptor"}
		}
		p := ChipPlace{AsicLocation: uint32(c.AsicLocation), Known: true}
		buses, ok := moboTrayBus[boardName]
		if !ok {
			return p // tray 0: the host's motherboard puts no board in a tray
		}
		for i, b := range buses {
			if c.HasBus && b == c.Bus {
				p.Tray = uint32(i) + 1
				return p
			}
		}
		return ChipPlace{Why: fmt.Sprintf("the host's motherboard is %s, whose trays' PCI bus ids do not hold the chip's", boardName)}
	case has("N150", "N300", "GALAXY"):
		return ChipPlace{Why: "a Wormhole chip off a UBB tray (board " + board + "): TT-Metal derives its ASIC location from the Ethernet tunnels of its PCIe chip, which tttrace does not follow"}
	}
	return ChipPlace{Why: "board type " + board + ": no rule of TT-Metal's system descriptor tttrace follows"}
}
