package probes

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
)

// Field offsets from DWARF: the definitions of tt::tt_metal::Buffer (and
// BufferImpl in a pimpl build), Device and the enum AllocationStatus, read
// from the library's debug sections (compressed ones too: debug/elf
// decompresses SHF_COMPRESSED zlib and zstd) or from a separate debug file
// found by build-id or .gnu_debuglink.

// DebugRoots are the directories searched for separate debug files
// (ROOT/.build-id/xx/yyyy.debug, ROOT/<library dir>/<debuglink>).
var DebugRoots = []string{"/usr/lib/debug"}

// debugFile is where the DWARF of a library was looked for and found.
type debugFile struct {
	path    string   // the file holding .debug_info ("" if none)
	checked []string // every place looked at, for people
}

// findDebugInfo returns the file that holds lib's DWARF: the library
// itself, or a separate debug file whose build-id (or debuglink CRC)
// matches it. A debug file that does not match is never used: its offsets
// could be another build's.
func findDebugInfo(lib *Library) debugFile {
	var d debugFile
	if lib.HasDWARF {
		d.path = lib.Path
		d.checked = append(d.checked, lib.Path+": .debug_info present")
		return d
	}
	d.checked = append(d.checked, lib.Path+": no .debug_info")
	if lib.BuildID != "" && len(lib.BuildID) > 2 {
		for _, root := range DebugRoots {
			p := filepath.Join(root, ".build-id", lib.BuildID[:2], lib.BuildID[2:]+".debug")
			switch ok, why := debugMatches(p, lib.BuildID, 0, false); {
			case ok:
				d.path = p
				d.checked = append(d.checked, p+": build-id matches")
				return d
			default:
				d.checked = append(d.checked, p+": "+why)
			}
		}
	} else {
		d.checked = append(d.checked, "no build-id note: no /usr/lib/debug/.build-id look-up")
	}
	if name, crc, ok := debugLink(lib); ok {
		dir := filepath.Dir(lib.Path)
		cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
		for _, root := range DebugRoots {
			cands = append(cands, filepath.Join(root, dir, name))
		}
		for _, p := range cands {
			if p == lib.Path {
				continue
			}
			ok, why := debugMatches(p, lib.BuildID, crc, true)
			if ok {
				d.path = p
				d.checked = append(d.checked, p+": .gnu_debuglink CRC matches")
				return d
			}
			d.checked = append(d.checked, p+": "+why)
		}
	} else {
		d.checked = append(d.checked, "no .gnu_debuglink")
	}
	return d
}

// debugMatches checks that path is a debug file for the library: same
// build-id (when the library has one) and, for a debuglink, the CRC32 the
// link records.
func debugMatches(path, wantID string, crc uint32, checkCRC bool) (bool, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, "absent"
		}
		return false, err.Error()
	}
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false, "not ELF: " + err.Error()
	}
	defer ef.Close()
	if ef.Section(".debug_info") == nil {
		return false, "has no .debug_info"
	}
	if id := buildID(ef); wantID != "" && id != wantID {
		return false, fmt.Sprintf("build-id %s, the library's is %s: another build, not used", id, wantID)
	}
	if checkCRC && crc32.ChecksumIEEE(b) != crc {
		return false, "CRC32 differs from .gnu_debuglink's: another build, not used"
	}
	return true, ""
}

// debugLink reads .gnu_debuglink: a file name, padding, a CRC32.
func debugLink(lib *Library) (string, uint32, bool) {
	s := lib.file.Section(".gnu_debuglink")
	if s == nil {
		return "", 0, false
	}
	b, err := s.Data()
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

// dwarfTypes are the definitions tttrace reads.
type dwarfTypes struct {
	buffer, bufferImpl, device map[string]int64 // member name -> offset
	bufferMembers              []dwarfMember
	bufferImplMembers          []dwarfMember
	allocated                  int64 // AllocationStatus::ALLOCATED, -1 unknown
	ns                         string
}

type dwarfMember struct {
	name string
	off  int64
	typ  dwarf.Offset
}

// dwarfLayout reads the layout of Buffer and Device from the DWARF in
// path. It returns an error saying what is missing when the types are not
// there in full.
func dwarfLayout(path string) (*Layout, string, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		return nil, "", fmt.Errorf("read DWARF: %w", err)
	}
	t, err := scanDWARF(d)
	if err != nil {
		return nil, "", err
	}
	l := Layout{Name: "DWARF", BufferImplPtr: -1, Device: -1, Size: -1, Type: -1, OwnsData: -1, Status: -1,
		Hooked: -1, Address: -1, PageSize: -1, DeviceID: -1, Allocated: t.allocated, TypeWidth: 4}
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
	for name, dst := range map[string]*int64{"device_": &l.Device, "size_": &l.Size, "buffer_type_": &l.Type,
		"owns_data_": &l.OwnsData, "allocation_status_": &l.Status, "hooked_allocation_": &l.Hooked,
		"address_": &l.Address, "page_size_": &l.PageSize} {
		if v, ok := fields[name]; ok {
			*dst = v
		}
	}
	if v, ok := t.device["id_"]; ok {
		l.DeviceID = v
	}
	for _, m := range members {
		if m.name == "buffer_type_" {
			if _, size := dwarfTypeName(d, m.typ); size > 0 {
				l.TypeWidth = size
			}
		}
	}
	var miss []string
	for name, v := range map[string]int64{where + "::device_": l.Device, where + "::size_": l.Size,
		where + "::address_": l.Address, "tt::tt_metal" + t.ns + "::Device::id_": l.DeviceID} {
		if v < 0 {
			miss = append(miss, name)
		}
	}
	if len(miss) > 0 {
		return nil, "", fmt.Errorf("DWARF lacks %s", strings.Join(miss, ", "))
	}
	return &l, where, nil
}

// dwarfTypeName names the type at off (through typedefs and cv) and its size.
func dwarfTypeName(d *dwarf.Data, off dwarf.Offset) (string, int64) {
	typ, err := d.Type(off)
	if err != nil {
		return "", -1
	}
	for {
		switch t := typ.(type) {
		case *dwarf.TypedefType:
			typ = t.Type
			continue
		case *dwarf.QualType:
			typ = t.Type
			continue
		case *dwarf.PtrType:
			return "*" + t.Type.String(), t.Size()
		}
		return typ.String(), typ.Size()
	}
}

// scanDWARF walks the compile units' namespaces tt::tt_metal (and ::v0)
// for the full definitions of Buffer, BufferImpl, Device and
// AllocationStatus, skipping everything else, and stops when it has them.
func scanDWARF(d *dwarf.Data) (*dwarfTypes, error) {
	t := &dwarfTypes{allocated: -1}
	r := d.Reader()
	done := func() bool {
		return t.device != nil && t.allocated >= 0 && t.buffer != nil &&
			(t.bufferImpl != nil || hasKey(t.buffer, "address_"))
	}
	var walk func(path []string) error
	walk = func(path []string) error {
		for {
			e, err := r.Next()
			if err != nil {
				return err
			}
			if e == nil || e.Tag == 0 {
				return nil
			}
			name, _ := e.Val(dwarf.AttrName).(string)
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			inTT := len(path) >= 2 && path[0] == "tt" && path[1] == "tt_metal" &&
				(len(path) == 2 || len(path) == 3 && path[2] == "v0")
			switch {
			case e.Tag == dwarf.TagNamespace && e.Children &&
				(len(path) == 0 && name == "tt" || len(path) == 1 && path[0] == "tt" && name == "tt_metal" ||
					len(path) == 2 && inTT && name == "v0"):
				if err := walk(append(path, name)); err != nil {
					return err
				}
				continue
			case inTT && !decl && e.Children && (e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagStructType) &&
				(name == "Buffer" && t.buffer == nil || name == "BufferImpl" && t.bufferImpl == nil ||
					name == "Device" && t.device == nil):
				members, err := readMembers(r)
				if err != nil {
					return err
				}
				m := map[string]int64{}
				for _, x := range members {
					m[x.name] = x.off
				}
				switch name {
				case "Buffer":
					t.buffer, t.bufferMembers = m, members
					if len(path) == 3 {
						t.ns = "::v0"
					}
				case "BufferImpl":
					t.bufferImpl, t.bufferImplMembers = m, members
				case "Device":
					t.device = m
				}
				continue
			case inTT && !decl && e.Tag == dwarf.TagEnumerationType && name == "AllocationStatus" && e.Children:
				for {
					c, err := r.Next()
					if err != nil {
						return err
					}
					if c == nil || c.Tag == 0 {
						break
					}
					if n, _ := c.Val(dwarf.AttrName).(string); n == "ALLOCATED" {
						switch v := c.Val(dwarf.AttrConstValue).(type) {
						case int64:
							t.allocated = v
						case uint64:
							t.allocated = int64(v)
						}
					}
					if c.Children {
						r.SkipChildren()
					}
				}
				continue
			}
			if e.Children {
				r.SkipChildren()
			}
		}
	}
	for !done() {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		if !e.Children {
			continue
		}
		if err := walk(nil); err != nil {
			return nil, err
		}
	}
	if t.buffer == nil {
		return nil, errors.New("DWARF has no definition of tt::tt_metal::Buffer")
	}
	if t.device == nil {
		return nil, errors.New("DWARF has no definition of tt::tt_metal::Device")
	}
	return t, nil
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
