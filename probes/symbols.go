package probes

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// Mangled names tttrace probes (ttmetal-facts.md §2).
const (
	symTrackAllocate     = "_ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE"
	symTrackDeallocate   = "_ZN2tt8tt_metal12GraphTracker16track_deallocateEPNS0_6BufferE"
	symTrackAllocateCB   = "_ZN2tt8tt_metal12GraphTracker17track_allocate_cbERK12CoreRangeSetmmbPKNS0_7IDeviceE"
	symTrackDeallocateCB = "_ZN2tt8tt_metal12GraphTracker19track_deallocate_cbEPKNS0_7IDeviceE"
	// Buffer::create(IDevice*, DeviceAddr address, DeviceAddr size,
	// DeviceAddr page_size, BufferType, ...): the trailing parameters differ
	// between versions, so this is a prefix.
	symBufferCreateViewPrefix = "_ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmmNS0_10BufferTypeE"
	symMarkAsDeallocated      = "_ZN2tt8tt_metal6Buffer19mark_as_deallocatedEv"
	symAllocateCBs            = "_ZN2tt8tt_metal6detail11ProgramImpl25allocate_circular_buffersEPKNS0_7IDeviceE"
	symDeallocateCBs          = "_ZN2tt8tt_metal6detail11ProgramImpl27deallocate_circular_buffersEv"
	symProgramImplD2          = "_ZN2tt8tt_metal6detail11ProgramImplD2Ev"
	symProgramImplD1          = "_ZN2tt8tt_metal6detail11ProgramImplD1Ev"
	symDeviceClose            = "_ZN2tt8tt_metal6Device5closeEv"
	symMeshDeviceClose        = "_ZN2tt8tt_metal11distributed10MeshDevice5closeEv"
	symVtableDevice           = "_ZTVN2tt8tt_metal6DeviceE"
	symVtableMeshDevice       = "_ZTVN2tt8tt_metal11distributed10MeshDeviceE"

	// Fingerprints of layouts other than V1 (ttmetal-facts.md §3).
	symPimplSize   = "_ZNK2tt8tt_metal6Buffer4sizeEv"
	symPimplDevice = "_ZNK2tt8tt_metal6Buffer6deviceEv"
	symV0Namespace = "_ZN2tt8tt_metal2v0"
)

// The Itanium ABI places a vtable's address point 16 bytes in: after the
// offset-to-top and the RTTI pointer.
const vtableAddressPoint = 16

// point is one row of the attach table.
type point struct {
	// Program is the BPF program (a function in bpf/tttrace.bpf.c).
	Program string
	// Function is the C++ function, for people.
	Function string
	// Names are the mangled names, tried in order; the first that exists
	// is used. A name ending in '*' is a prefix and every match is used.
	Names []string
	// Required points make tracing impossible when missing.
	Required bool
	// Why says what is lost without this point.
	Why string
}

// attachTable lists every attach point of the tracker plan.
var attachTable = []point{
	{"track_allocate", "GraphTracker::track_allocate(const Buffer*)", []string{symTrackAllocate}, true,
		"buffer allocations"},
	{"track_deallocate", "GraphTracker::track_deallocate(Buffer*)", []string{symTrackDeallocate}, true,
		"buffer frees"},
	{"track_allocate_cb", "GraphTracker::track_allocate_cb(...)", []string{symTrackAllocateCB}, false,
		"circular-buffer allocations"},
	{"track_deallocate_cb", "GraphTracker::track_deallocate_cb(const IDevice*)", []string{symTrackDeallocateCB}, false,
		"circular-buffer frees"},
	{"buffer_create_view", "Buffer::create(IDevice*, DeviceAddr address, ...)", []string{symBufferCreateViewPrefix + "*"}, false,
		"the chips of mesh buffers"},
	{"mark_as_deallocated", "Buffer::mark_as_deallocated()", []string{symMarkAsDeallocated}, false,
		"buffers released after their mesh closed"},
	{"allocate_circular_buffers", "detail::ProgramImpl::allocate_circular_buffers(const IDevice*)", []string{symAllocateCBs}, false,
		"which program owns a circular buffer"},
	{"deallocate_circular_buffers", "detail::ProgramImpl::deallocate_circular_buffers()", []string{symDeallocateCBs}, false,
		"which program's circular buffers are freed"},
	{"program_destroy", "detail::ProgramImpl::~ProgramImpl()", []string{symProgramImplD2, symProgramImplD1}, false,
		"circular buffers of destroyed programs (builds that never free them)"},
	{"device_close", "Device::close()", []string{symDeviceClose}, false,
		"memory released by closing a chip"},
	{"mesh_device_close", "distributed::MeshDevice::close()", []string{symMeshDeviceClose}, false,
		"memory released by closing a mesh"},
}

// Site is one resolved attach point: a program and a function address.
type Site struct {
	Program  string
	Function string
	Symbol   string
	Addr     uint64 // link-time virtual address
	Offset   uint64 // file offset, for the kernel
}

// Missing is an attach point the library does not have.
type Missing struct {
	Program, Function, Why string
	Required               bool
}

// Symbols is what tttrace found in a library.
type Symbols struct {
	Sites   []Site
	Missing []Missing
	// VtableDevice and VtableMesh are the link-time addresses of the vtable
	// address points of Device and MeshDevice (0 if absent).
	VtableDevice, VtableMesh uint64
	// Fingerprints of other layouts.
	HasPimplAccessors bool
	HasV0Namespace    bool
}

// ResolveSymbols finds every attach point and vtable in lib.
func ResolveSymbols(lib *Library) (*Symbols, error) {
	found := map[string]Symbol{}
	var prefixed []Symbol
	res := &Symbols{}
	err := lib.ScanSymbols([]string{"_ZN2tt8tt_metal", "_ZNK2tt8tt_metal6Buffer", "_ZTVN2tt8tt_metal"}, func(s Symbol) {
		if strings.HasPrefix(s.Name, symV0Namespace) {
			res.HasV0Namespace = true
		}
		if s.Name == symPimplSize || s.Name == symPimplDevice {
			res.HasPimplAccessors = true
		}
		// GCC's clones and split-off parts (f.cold, f.isra.0, f.constprop.1,
		// f.part.2) are not entry points with f's ABI: never attach there.
		if strings.ContainsRune(s.Name, '.') {
			return
		}
		if strings.HasPrefix(s.Name, symBufferCreateViewPrefix) {
			prefixed = append(prefixed, s)
			return
		}
		if _, ok := found[s.Name]; !ok {
			found[s.Name] = s
		}
	})
	if err != nil {
		return nil, err
	}
	if s, ok := found[symVtableDevice]; ok {
		res.VtableDevice = s.Value + vtableAddressPoint
	}
	if s, ok := found[symVtableMeshDevice]; ok {
		res.VtableMesh = s.Value + vtableAddressPoint
	}
	for _, p := range attachTable {
		var syms []Symbol
		for _, n := range p.Names {
			if pre, ok := strings.CutSuffix(n, "*"); ok {
				for _, s := range prefixed {
					if strings.HasPrefix(s.Name, pre) {
						syms = append(syms, s)
					}
				}
			} else if s, ok := found[n]; ok {
				syms = append(syms, s)
			}
			if len(syms) > 0 {
				break
			}
		}
		seen := map[uint64]bool{}
		for _, s := range syms {
			if s.Type != elf.STT_FUNC || s.Value == 0 || seen[s.Value] {
				continue
			}
			seen[s.Value] = true
			off, err := lib.FileOffset(s.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.Name, err)
			}
			res.Sites = append(res.Sites, Site{Program: p.Program, Function: p.Function, Symbol: s.Name, Addr: s.Value, Offset: off})
		}
		if len(seen) == 0 {
			res.Missing = append(res.Missing, Missing{Program: p.Program, Function: p.Function, Why: p.Why, Required: p.Required})
		}
	}
	sort.SliceStable(res.Sites, func(i, j int) bool { return res.Sites[i].Addr < res.Sites[j].Addr })
	return res, nil
}

// Check returns an error naming every required attach point that is
// missing, and the vtable tttrace needs to read chip ids.
func (s *Symbols) Check(lib *Library) error {
	var miss []string
	for _, m := range s.Missing {
		if m.Required {
			miss = append(miss, m.Function)
		}
	}
	if s.VtableDevice == 0 {
		miss = append(miss, "the vtable of tt::tt_metal::Device ("+symVtableDevice+")")
	}
	if len(miss) > 0 {
		return fmt.Errorf("%s is not a TT-Metal library tttrace can trace: missing %s (searched .dynsym and .symtab)",
			lib.Path, strings.Join(miss, ", "))
	}
	return nil
}

// IsTTMetal reports whether lib defines the tracker functions tttrace needs:
// how a library is recognised by its symbols rather than its name.
func IsTTMetal(lib *Library) bool {
	hit := false
	_ = lib.ScanSymbols([]string{symTrackAllocate}, func(s Symbol) {
		if s.Name == symTrackAllocate {
			hit = true
		}
	})
	return hit
}
