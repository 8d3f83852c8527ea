package ttmetal

// The open chips' allocators, found from the process's own root of its
// devices (docs/ttmetal.md §9, "Finding the allocators at attach"): when
// tttrace attaches after the chips opened, it walks
// tt::tt_metal::g_instances (the MetalContexts) -> MetalContext::device_manager_
// -> DeviceManager::devices_ -> Device (id_, initialized_, default_allocator_)
// -> the allocator's std::unique_ptr<BankManager> members, so every chip's
// bank managers are read at attach, not at the first request naming one.
// Member offsets come from DWARF only; the allocator class is the one
// Device::default_allocator_ points to (upstream's AllocatorImpl), and its
// bank managers are its members of type std::unique_ptr<BankManager> (or
// arrays of them). Process memory is hostile: every count is bounded and
// every pointer is checked before it is followed.

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/tttrace/tttrace/elfx"
)

// SymContexts is upstream's array of MetalContext pointers
// (tt_metal/impl/context/metal_context.cpp, 2026).
const SymContexts = "_ZN2tt8tt_metal11g_instancesE"

// Limits of the walk.
const (
	maxContexts      = 64   // g_instances slots (upstream: MAX_CONTEXT_COUNT, 32)
	maxRootDevices   = 4096 // DeviceManager::devices_ entries
	maxManagerFields = 16   // unique_ptr<BankManager> slots in an allocator
)

// RootLayout is what walking from g_instances to the bank managers needs.
type RootLayout struct {
	// Contexts: g_instances' link-time address; Slots: its pointers.
	Contexts, Slots uint64
	DeviceManager   int64 // MetalContext::device_manager_ (unique_ptr)
	Devices         int64 // DeviceManager::devices_ (vector<unique_ptr<Device>>)
	DeviceID        int64 // Device::id_
	DeviceInit      int64 // Device::initialized_ (one byte)
	DeviceAlloc     int64 // Device::default_allocator_ (unique_ptr)
	// Allocator is the class default_allocator_ points to; Managers the
	// offsets in it of its unique_ptr<BankManager>s.
	Allocator string
	Managers  []int64
	// UID: where a Device's UMD unique id is (chipuid.go); nil with
	// UIDErr saying why it cannot be read.
	UID    *UIDLayout
	UIDErr error
	// Desc: where UMD's cluster descriptor is (clusterdesc.go); nil with
	// DescErr saying why it cannot be read.
	Desc    *DescLayout
	DescErr error
}

// RootSymbol is g_instances' link-time address and its pointer slots in
// lib, or why it has none.
func RootSymbol(lib *Library) (addr, slots uint64, err error) {
	syms, err := lib.lookup([]string{SymContexts})
	if err != nil {
		return 0, 0, err
	}
	root, ok := syms[SymContexts]
	if !ok {
		return 0, 0, fmt.Errorf("no symbol tt::tt_metal::g_instances (%s) in %s: not a 2026 TT-Metal with MetalContext instances", SymContexts, lib.Path)
	}
	if root.Size == 0 || root.Size%8 != 0 || root.Size/8 > maxContexts {
		return 0, 0, fmt.Errorf("tt::tt_metal::g_instances is %d bytes: not an array of up to %d pointers", root.Size, maxContexts)
	}
	return root.Value, root.Size / 8, nil
}

// rootLayout reads the member offsets of the walk from d.
func rootLayout(d *dwarf.Data) (*RootLayout, error) {
	l := &RootLayout{}
	var allocType string
	var prov dwarfMember
	provFound := false
	classes := []*bmClass{
		{name: "MetalContext", members: []bmMember{
			{name: "device_manager_", typePrefix: "unique_ptr<", size: 8, dst: &l.DeviceManager},
		}},
		{name: "DeviceManager", members: []bmMember{
			{name: "devices_", typePrefix: "vector<", size: 24, dst: &l.Devices},
		}},
		{name: "Device", members: []bmMember{
			{name: "id_", size: 4, dst: &l.DeviceID},
			{name: "initialized_", size: 1, dst: &l.DeviceInit},
			{name: "default_allocator_", typePrefix: "unique_ptr<", size: 8, dst: &l.DeviceAlloc, typeName: &allocType},
		}, all: func(_ *dwarf.Data, m dwarfMember) {
			if m.name == "shm_stats_provider_" {
				prov, provFound = m, true
			}
		}},
	}
	if err := scanClasses(d, classes); err != nil {
		return nil, err
	}
	name, ok := ttClassArg(allocType)
	if !ok {
		return nil, fmt.Errorf("DWARF: Device::default_allocator_ is a %q, not a unique_ptr to a class of tt::tt_metal", allocType)
	}
	l.Allocator = name
	l.UID, l.UIDErr = uidLayout(d, prov, provFound)
	l.Desc, l.DescErr = descLayout(d)
	alloc := &bmClass{name: name, all: func(d *dwarf.Data, m dwarfMember) {
		l.Managers = append(l.Managers, bankManagerSlots(d, m)...)
	}}
	if err := scanClasses(d, []*bmClass{alloc}); err != nil {
		return nil, err
	}
	if len(l.Managers) == 0 || len(l.Managers) > maxManagerFields {
		return nil, fmt.Errorf("DWARF: tt::tt_metal::%s has %d std::unique_ptr<BankManager> members", name, len(l.Managers))
	}
	return l, nil
}

// ttClassArg is the class a unique_ptr's type name points to, when it is
// a class directly in tt::tt_metal (or tt::tt_metal::v0).
func ttClassArg(typeName string) (string, bool) {
	n := bareTypeName(typeName)
	arg, ok := strings.CutPrefix(n, "unique_ptr<")
	if !ok {
		return "", false
	}
	if i := strings.IndexAny(arg, ",>"); i >= 0 {
		arg = arg[:i]
	}
	arg = strings.TrimSpace(arg)
	for _, ns := range []string{"tt::tt_metal::v0::", "tt::tt_metal::"} {
		if rest, ok := strings.CutPrefix(arg, ns); ok && rest != "" && !strings.ContainsAny(rest, ":<") {
			return rest, true
		}
	}
	return "", false
}

// bankManagerSlots are the offsets of the unique_ptr<BankManager>s member
// m holds: itself, or each element of an array of them.
func bankManagerSlots(d *dwarf.Data, m dwarfMember) []int64 {
	t, err := elfx.Type(d, m.typ)
	if err != nil {
		return nil
	}
	u, err := elfx.Underlying(t)
	if err != nil || u == nil {
		return nil
	}
	if a, ok := u.(*dwarf.ArrayType); ok {
		e, err := elfx.Underlying(a.Type)
		if err != nil || !isBankManagerPtr(e) || a.Count <= 0 || a.Count > maxManagerFields {
			return nil
		}
		out := make([]int64, a.Count)
		for i := range out {
			out[i] = m.off + int64(i)*8
		}
		return out
	}
	if isBankManagerPtr(u) {
		return []int64{m.off}
	}
	return nil
}

// isBankManagerPtr: t is std::unique_ptr<tt::tt_metal::BankManager, ...>
// (one pointer with the default deleter).
func isBankManagerPtr(t dwarf.Type) bool {
	s, ok := t.(*dwarf.StructType)
	if !ok || s.ByteSize != 8 {
		return false
	}
	name, ok := ttClassArg(s.StructName)
	return ok && name == "BankManager"
}

// AnyContext reports whether any of the slots pointers at contexts (the
// process's g_instances) is set: without a MetalContext there are no open
// chips, and no layout is needed to say so.
func AnyContext(mem io.ReaderAt, contexts, slots uint64) (bool, error) {
	rd := memReader{mem: mem}
	b := rd.bytes(contexts, min(slots, maxContexts)*8)
	if rd.err != nil {
		return false, fmt.Errorf("g_instances at %#x: %w", contexts, rd.err)
	}
	for i := 0; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != 0 {
			return true, nil
		}
	}
	return false, nil
}

// MemDevice is one open chip found from the root: its id and the
// addresses of its allocator's bank managers (null ones left out).
type MemDevice struct {
	Chip     int32
	Managers []uint64
	UID      ChipUID // the chip's UMD unique id (chipuid.go), or why not
}

// ReadDevices walks the root at contexts (g_instances' address in the
// process) with layout l, returning the open chips (Device::initialized_
// set) of every MetalContext. A chip id met twice among open devices is an
// error: the walk does not read what it expects.
func ReadDevices(mem io.ReaderAt, contexts uint64, l *RootLayout) ([]MemDevice, error) {
	rd := memReader{mem: mem}
	var out []MemDevice
	seen := map[int32]bool{}
	for slot := range min(l.Slots, maxContexts) {
		ctx := rd.u64(contexts + slot*8)
		if rd.err != nil {
			return nil, fmt.Errorf("g_instances at %#x: %w", contexts, rd.err)
		}
		if ctx == 0 {
			continue
		}
		dm := rd.u64(ctx + uint64(l.DeviceManager))
		if rd.err != nil || dm == 0 {
			if rd.err != nil {
				return nil, fmt.Errorf("MetalContext %d at %#x: %w", slot, ctx, rd.err)
			}
			continue // no DeviceManager: no devices in this context
		}
		begin := rd.u64(dm + uint64(l.Devices))
		end := rd.u64(dm + uint64(l.Devices) + 8)
		if rd.err != nil {
			return nil, fmt.Errorf("DeviceManager at %#x: %w", dm, rd.err)
		}
		if end < begin || (end-begin)%8 != 0 || (end-begin)/8 > maxRootDevices {
			return nil, fmt.Errorf("DeviceManager at %#x: devices_ [%#x, %#x) is no vector of up to %d pointers", dm, begin, end, maxRootDevices)
		}
		ptrs := rd.bytes(begin, end-begin)
		for i := uint64(0); i+8 <= uint64(len(ptrs)); i += 8 {
			dev := binary.LittleEndian.Uint64(ptrs[i:])
			if dev == 0 {
				continue
			}
			on := rd.bytes(dev+uint64(l.DeviceInit), 1)
			id := int32(rd.u32(dev + uint64(l.DeviceID)))
			al := rd.u64(dev + uint64(l.DeviceAlloc))
			if rd.err != nil {
				return nil, fmt.Errorf("Device at %#x: %w", dev, rd.err)
			}
			if on[0] == 0 || al == 0 {
				continue // closed: its allocator is cleared or gone
			}
			if seen[id] {
				return nil, fmt.Errorf("two open devices with id %d (Device at %#x)", id, dev)
			}
			seen[id] = true
			md := MemDevice{Chip: id, UID: readChipUID(mem, dev, id, l)}
			for _, off := range l.Managers {
				if bm := rd.u64(al + uint64(off)); bm != 0 {
					md.Managers = append(md.Managers, bm)
				}
			}
			if rd.err != nil {
				return nil, fmt.Errorf("%s at %#x (chip %d): %w", l.Allocator, al, id, rd.err)
			}
			out = append(out, md)
		}
	}
	return out, nil
}
