package ttmetal

import (
	"debug/elf"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Mangled names tttrace probes (docs/ttmetal.md §2).
const (
	symTrackAllocate   = "_ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE"
	symTrackDeallocate = "_ZN2tt8tt_metal12GraphTracker16track_deallocateEPNS0_6BufferE"
	symTrackAllocateCB = "_ZN2tt8tt_metal12GraphTracker17track_allocate_cbERK12CoreRangeSetmmbPKNS0_7IDeviceE"
	// symTrackAllocateCBNS: the same with CoreRangeSet in tt::tt_metal
	// (2026: altNames).
	symTrackAllocateCBNS = "_ZN2tt8tt_metal12GraphTracker17track_allocate_cbERKNS0_12CoreRangeSetEmmbPKNS0_7IDeviceE"
	symTrackDeallocateCB = "_ZN2tt8tt_metal12GraphTracker19track_deallocate_cbEPKNS0_7IDeviceE"
	// Buffer::create(IDevice*, DeviceAddr address, DeviceAddr size,
	// DeviceAddr page_size, BufferType, ...): the trailing parameters differ
	// between versions, so this is a prefix.
	symBufferCreateViewPrefix = "_ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmmNS0_10BufferTypeE"
	symMarkAsDeallocated      = "_ZN2tt8tt_metal6Buffer19mark_as_deallocatedEv"
	symAllocateCBs            = "_ZN2tt8tt_metal6detail11ProgramImpl25allocate_circular_buffersEPKNS0_7IDeviceE"
	symDeallocateCBs          = "_ZN2tt8tt_metal6detail11ProgramImpl27deallocate_circular_buffersEv"
	// ProgramImpl::generate_dispatch_commands(IDevice*, bool): every enqueue
	// of a program, cached or not (docs/ttmetal.md §12).
	symGenerateDispatch = "_ZN2tt8tt_metal6detail11ProgramImpl26generate_dispatch_commandsEPNS0_7IDeviceEb"
	symProgramImplD2    = "_ZN2tt8tt_metal6detail11ProgramImplD2Ev"
	// Program::set_runtime_id(uint64_t id) (ProgramId is a uint64_t):
	// every launch of a device operation (bpf/ops.h).
	symProgramSetRuntimeID = "_ZN2tt8tt_metal7Program14set_runtime_idEm"
	symProgramImplD1       = "_ZN2tt8tt_metal6detail11ProgramImplD1Ev"
	symDeviceClose         = "_ZN2tt8tt_metal6Device5closeEv"
	symMeshDeviceClose     = "_ZN2tt8tt_metal11distributed10MeshDevice5closeEv"
	// Metal trace (docs/ttmetal.md §10). The mesh forms take a
	// MeshTraceId& whose StrongType moved from tt::stl to ttsl: prefixes
	// up to the reference.
	symDeviceBeginTrace  = "_ZN2tt8tt_metal6Device11begin_traceEhj"
	symDeviceEndTrace    = "_ZN2tt8tt_metal6Device9end_traceEhj"
	symDeviceReplayTrace = "_ZN2tt8tt_metal6Device12replay_traceEhjbb"
	// Device::replay_trace(uint8_t cq_id, uint32_t tid, bool blocking):
	// the older form, beside the two-bool one in some builds.
	symDeviceReplayTraceBlocking = "_ZN2tt8tt_metal6Device12replay_traceEhjb"
	symDeviceReleaseTrace        = "_ZN2tt8tt_metal6Device13release_traceEj"
	symMeshBeginTracePrefix      = "_ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEhRK"
	symMeshBeginTraceNoID        = "_ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEh"
	symMeshEndTracePrefix        = "_ZN2tt8tt_metal11distributed10MeshDevice14end_mesh_traceEhRK"
	symMeshReplayTracePrefix     = "_ZN2tt8tt_metal11distributed10MeshDevice17replay_mesh_traceEhRK"
	symMeshReleaseTracePrefix    = "_ZN2tt8tt_metal11distributed10MeshDevice18release_mesh_traceERK"
	// The 2026 overloads taking the MeshCommandQueue& (S1_ is
	// tt::tt_metal::distributed), which ttnn and BeginTraceCapture call.
	symMeshBeginTraceMCQ         = "_ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceERNS1_16MeshCommandQueueE"
	symMeshBeginTraceMCQIDPrefix = symMeshBeginTraceMCQ + "RK"
	symMeshEndTraceMCQPrefix     = "_ZN2tt8tt_metal11distributed10MeshDevice14end_mesh_traceERNS1_16MeshCommandQueueERK"
	symMeshReplayTraceMCQPrefix  = "_ZN2tt8tt_metal11distributed10MeshDevice17replay_mesh_traceERNS1_16MeshCommandQueueERK"
	symVtableDevice              = "_ZTVN2tt8tt_metal6DeviceE"
	symVtableMeshDevice          = "_ZTVN2tt8tt_metal11distributed10MeshDeviceE"

	// Buffer's lifecycle (docs/ttmetal.md §1), for the lifecycle plan.
	symAllocateImpl   = "_ZN2tt8tt_metal6Buffer13allocate_implEv"
	symDeallocateImpl = "_ZN2tt8tt_metal6Buffer15deallocate_implEv"
	symDeallocate     = "_ZN2tt8tt_metal6Buffer10deallocateEv"
	symBufferD2       = "_ZN2tt8tt_metal6BufferD2Ev"
	symBufferD1       = "_ZN2tt8tt_metal6BufferD1Ev"
	// Buffer::create(IDevice*, DeviceAddr size, DeviceAddr page_size,
	// BufferType, ...): the owning overload (one address argument fewer than
	// the view's).
	symBufferCreateOwningPrefix = "_ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmNS0_10BufferTypeE"

	// The 2026 pimpl-2 design (docs/ttmetal.md §1): Buffer's lifecycle
	// moved into BufferImpl, with the Buffer passed by reference.
	symImplAllocateImpl   = "_ZN2tt8tt_metal10BufferImpl13allocate_implERNS0_6BufferE"
	symImplDeallocateImpl = "_ZN2tt8tt_metal10BufferImpl15deallocate_implERNS0_6BufferE"
	symImplDeallocate     = "_ZN2tt8tt_metal10BufferImpl10deallocateERNS0_6BufferE"
	// The buffer-allocation observers, notified after track_allocate and
	// track_deallocate in the newest buffer.cpp.
	symNotifyAllocated   = "_ZN2tt8tt_metal23notify_buffer_allocatedEPKNS0_6BufferE"
	symNotifyDeallocated = "_ZN2tt8tt_metal25notify_buffer_deallocatedEPNS0_6BufferE"

	// The allocator (docs/ttmetal.md §9). Prefixes: the parameters after
	// the ones read differ between versions (2025 added
	// AllocatorDependencies and an AllocatorID), the registers read do not.
	// Device::initialize_allocator(...): the chip whose BankManagers follow.
	symInitializeAllocatorPrefix = "_ZN2tt8tt_metal6Device20initialize_allocatorE"
	// BankManager(const BufferType&, const std::vector<int64_t>&,
	// DeviceAddr size_bytes, uint32_t alignment_bytes, ...): DRAM, TRACE.
	symBankManagerVecC2Prefix = "_ZN2tt8tt_metal11BankManagerC2ERKNS0_10BufferTypeERKSt6vectorIlSaIlEEmj"
	symBankManagerVecC1Prefix = "_ZN2tt8tt_metal11BankManagerC1ERKNS0_10BufferTypeERKSt6vectorIlSaIlEEmj"
	// BankManager(const BufferType&, const std::unordered_map<uint32_t,
	// int64_t>&, DeviceAddr size_bytes, DeviceAddr interleaved_address_limit,
	// uint32_t alignment_bytes, DeviceAddr alloc_offset, ...): L1, L1_SMALL.
	symBankManagerMapC2Prefix = "_ZN2tt8tt_metal11BankManagerC2ERKNS0_10BufferTypeERKSt13unordered_mapIjlSt4hashIjESt8equal_toIjESaISt4pairIKjlEEEmmj"
	symBankManagerMapC1Prefix = "_ZN2tt8tt_metal11BankManagerC1ERKNS0_10BufferTypeERKSt13unordered_mapIjlSt4hashIjESt8equal_toIjESaISt4pairIKjlEEEmmj"
	// BankManager::allocate_buffer(DeviceAddr size, DeviceAddr page_size,
	// bool bottom_up, const CoreRangeSet&, std::optional<uint32_t>
	// num_shards[, AllocatorID]).
	symBankManagerAllocatePrefix = "_ZN2tt8tt_metal11BankManager15allocate_bufferEmmbRK12CoreRangeSetSt8optionalIjE"
	// The AllocatorID parameter's mangling (ttsl::StrongType<uint32_t,
	// AllocatorIDTag>): present in 2025-2026 builds. Its tag's substitution
	// (S0_ tt::tt_metal, S1_ in a v0 build) is left out.
	symAllocatorIDParam   = "N4ttsl10StrongTypeIjNS"
	symAllocatorIDTagName = "14AllocatorIDTagEEE"
)

// v0Name is name as it is mangled when tt::tt_metal's contents live in the
// inline namespace v0 (late-2024 builds): "2v0" after tt_metal, and every
// substitution S<n>_ shifted by one, since tt::tt_metal::v0 takes the
// substitution after tt::tt_metal (S_ = tt, S0_ = tt::tt_metal, S1_ =
// tt::tt_metal::v0, ...). Names outside tt::tt_metal come back unchanged.
func v0Name(name string) string {
	var head string
	for _, p := range []string{"_ZN2tt8tt_metal", "_ZNK2tt8tt_metal", "_ZTVN2tt8tt_metal"} {
		if strings.HasPrefix(name, p) && !strings.HasPrefix(name, p+"2v0") {
			head = p
			break
		}
	}
	if head == "" {
		return name
	}
	rest := name[len(head):]
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("2v0")
	for i := 0; i < len(rest); {
		c := rest[i]
		switch {
		case c >= '0' && c <= '9':
			// <source-name>: a length, then that many characters.
			j := i
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(rest[i:j])
			end := min(j+n, len(rest))
			b.WriteString(rest[i:end])
			i = end
		case c == 'S' && i+1 < len(rest) && rest[i+1] != '_' && isSeqID(rest[i+1:]):
			// S<seq-id>_: base-36 (0-9A-Z) index, plus one.
			j := i + 1
			for rest[j] != '_' {
				j++
			}
			v, _ := strconv.ParseUint(rest[i+1:j], 36, 64)
			b.WriteString("S" + strings.ToUpper(strconv.FormatUint(v+1, 36)) + "_")
			i = j + 1
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// isSeqID reports whether s starts with [0-9A-Z]+_.
func isSeqID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_':
			return i > 0
		case c >= '0' && c <= '9', c >= 'A' && c <= 'Z':
		default:
			return false
		}
	}
	return false
}

// spellings returns names followed by their other spellings: in the v0
// namespace (late-2024 builds), and where a parameter's type moved
// namespace, its new spelling (altNames).
func spellings(names ...string) []string {
	out := append([]string(nil), names...)
	for _, n := range names {
		if v := v0Name(n); v != n {
			out = append(out, v)
		}
	}
	for _, n := range names {
		if a, ok := altNames[n]; ok {
			out = append(out, a)
		}
	}
	return out
}

// altNames are the other manglings of names whose parameter types moved
// namespace: 2026 TT-Metal declares CoreRangeSet in tt::tt_metal
// (tt_metal/api/tt-metalium/core_coord.hpp; forward-declared there by
// 2026 headers such as ttnn's core_subset_write.hpp), so
// GraphTracker::track_allocate_cb takes a tt::tt_metal::CoreRangeSet
// (RKNS0_12CoreRangeSetE) where earlier builds had the global one
// (RK12CoreRangeSet).
var altNames = map[string]string{symTrackAllocateCB: symTrackAllocateCBNS}

// isSpelling says whether name is a spelling of canonical (spellings).
func isSpelling(name, canonical string) bool {
	return name == canonical || name == v0Name(canonical) || name == altNames[canonical]
}

// The Itanium ABI places a vtable's address point 16 bytes in: after the
// offset-to-top and the RTTI pointer.
const vtableAddressPoint = 16

// point is one row of the attach table.
type point struct {
	// Program is the BPF program (a function in bpf/tttrace.bpf.c).
	Program Program
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
	{ProgTrackAllocate, "GraphTracker::track_allocate(const Buffer*)", []string{symTrackAllocate}, true,
		"buffer allocations"},
	{ProgTrackDeallocate, "GraphTracker::track_deallocate(Buffer*)", []string{symTrackDeallocate}, true,
		"buffer frees"},
	{ProgTrackAllocateCB, "GraphTracker::track_allocate_cb(...)", []string{symTrackAllocateCB}, false,
		"circular-buffer allocations"},
	{ProgTrackDeallocateCB, "GraphTracker::track_deallocate_cb(const IDevice*)", []string{symTrackDeallocateCB}, false,
		"circular-buffer frees"},
	{ProgBufferCreateView, "Buffer::create(IDevice*, DeviceAddr address, ...)", []string{symBufferCreateViewPrefix + "*"}, false,
		"the chips of mesh buffers"},
	{ProgMarkAsDeallocated, "Buffer::mark_as_deallocated()", []string{symMarkAsDeallocated}, false,
		"buffers released after their mesh closed"},
	{ProgAllocateCBs, "detail::ProgramImpl::allocate_circular_buffers(const IDevice*)", []string{symAllocateCBs}, false,
		"which program owns a circular buffer"},
	{ProgGenerateDispatch, "detail::ProgramImpl::generate_dispatch_commands(IDevice*, bool)", []string{symGenerateDispatch}, false,
		"program dispatches (per-core CB residency)"},
	{ProgDeallocateCBs, "detail::ProgramImpl::deallocate_circular_buffers()", []string{symDeallocateCBs}, false,
		"which program's circular buffers are freed"},
	{ProgProgramDestroy, "detail::ProgramImpl::~ProgramImpl()", []string{symProgramImplD2, symProgramImplD1}, false,
		"circular buffers of destroyed programs (builds that never free them)"},
	{ProgSetRuntimeID, "Program::set_runtime_id(uint64_t)", []string{symProgramSetRuntimeID}, false,
		"the runtime id of each TT-NN op's launch"},
	{ProgDeviceClose, "Device::close()", []string{symDeviceClose}, false,
		"memory released by closing a chip"},
	{ProgMeshDeviceClose, "distributed::MeshDevice::close()", []string{symMeshDeviceClose}, false,
		"memory released by closing a mesh"},
	{ProgDeviceBeginTrace, "Device::begin_trace(cq, tid)", []string{symDeviceBeginTrace}, false,
		"trace captures"},
	{ProgDeviceEndTrace, "Device::end_trace(cq, tid)", []string{symDeviceEndTrace}, false,
		"the end of trace captures"},
	{ProgDeviceReplayTrace, "Device::replay_trace(cq, tid, bool, bool)", []string{symDeviceReplayTrace}, false,
		"trace replays (trace hazards)"},
	{ProgDeviceReplayTraceBlocking, "Device::replay_trace(cq, tid, bool)", []string{symDeviceReplayTraceBlocking}, false,
		"trace replays (trace hazards)"},
	{ProgDeviceReleaseTrace, "Device::release_trace(tid)", []string{symDeviceReleaseTrace}, false,
		"trace releases"},
	{ProgMeshBeginTrace, "distributed::MeshDevice::begin_mesh_trace(cq, const MeshTraceId&)",
		[]string{symMeshBeginTracePrefix + "*"}, false, "mesh trace captures"},
	{ProgMeshBeginTraceNoID, "distributed::MeshDevice::begin_mesh_trace(cq)", []string{symMeshBeginTraceNoID}, false,
		"mesh trace captures (2026 form)"},
	{ProgMeshEndTrace, "distributed::MeshDevice::end_mesh_trace(cq, const MeshTraceId&)",
		[]string{symMeshEndTracePrefix + "*"}, false, "the end of mesh trace captures"},
	{ProgMeshReplayTrace, "distributed::MeshDevice::replay_mesh_trace(cq, const MeshTraceId&, bool)",
		[]string{symMeshReplayTracePrefix + "*"}, false, "mesh trace replays (trace hazards)"},
	{ProgMeshReleaseTrace, "distributed::MeshDevice::release_mesh_trace(const MeshTraceId&)",
		[]string{symMeshReleaseTracePrefix + "*"}, false, "mesh trace releases"},
	{ProgMeshBeginTraceMCQ, "distributed::MeshDevice::begin_mesh_trace(MeshCommandQueue&)",
		[]string{symMeshBeginTraceMCQ}, false, "mesh trace captures through a MeshCommandQueue&"},
	{ProgMeshBeginTraceMCQID, "distributed::MeshDevice::begin_mesh_trace(MeshCommandQueue&, const MeshTraceId&)",
		[]string{symMeshBeginTraceMCQIDPrefix + "*"}, false, "mesh trace captures through a MeshCommandQueue&"},
	{ProgMeshEndTraceMCQ, "distributed::MeshDevice::end_mesh_trace(MeshCommandQueue&, const MeshTraceId&)",
		[]string{symMeshEndTraceMCQPrefix + "*"}, false, "the end of mesh trace captures through a MeshCommandQueue&"},
	{ProgMeshReplayTraceMCQ, "distributed::MeshDevice::replay_mesh_trace(MeshCommandQueue&, const MeshTraceId&, bool)",
		[]string{symMeshReplayTraceMCQPrefix + "*"}, false, "mesh trace replays through a MeshCommandQueue& (trace hazards)"},
	{ProgInitializeAllocator, "Device::initialize_allocator(...)", []string{symInitializeAllocatorPrefix + "*"}, false,
		"which chip an allocator belongs to"},
	{ProgBankManagerVec, "BankManager::BankManager(type, bank offsets, size, alignment, offset, ...)",
		[]string{symBankManagerVecC2Prefix + "*", symBankManagerVecC1Prefix + "*"}, false,
		"DRAM and TRACE capacity"},
	{ProgBankManagerMap, "BankManager::BankManager(type, bank map, size, limit, alignment, offset, ...)",
		[]string{symBankManagerMapC2Prefix + "*", symBankManagerMapC1Prefix + "*"}, false,
		"L1 and L1_SMALL capacity"},
	{ProgBankManagerAllocate, "BankManager::allocate_buffer(size, page_size, bottom_up, grid, num_shards, ...)",
		[]string{symBankManagerAllocatePrefix + "*"}, false,
		"the allocator's accounting and failed allocations"},
}

// AttachPoint is one resolved attach point: a program and a function address.
type AttachPoint struct {
	Program  Program
	Function string
	Symbol   string
	Addr     uint64 // link-time virtual address
	Offset   uint64 // file offset, for the kernel
	// Entry is the start of the function when the probe was placed below
	// its first instruction (placeEntry); 0 otherwise.
	Entry uint64
}

// Func is the start of the function the attach point probes.
func (s *AttachPoint) Func() uint64 {
	if s.Entry != 0 {
		return s.Entry
	}
	return s.Addr
}

// Missing is an attach point the library does not have.
type Missing struct {
	Program       Program
	Function, Why string
	Required      bool
}

// Symbols is what tttrace found in a library.
type Symbols struct {
	AttachPoints []AttachPoint
	Missing      []Missing
	// VtableDevice and VtableMesh are the link-time addresses of the vtable
	// address points of Device and MeshDevice (0 if absent).
	VtableDevice, VtableMesh uint64
	// seen holds every name the scan delivered: what the profiles'
	// fingerprints (profiles.go) are evaluated on.
	seen map[string]bool
}

// ResolveSymbols finds every attach point and vtable in lib.
func ResolveSymbols(lib *Library) (*Symbols, error) {
	found := map[string]Symbol{}
	var prefixed []Symbol
	res := &Symbols{seen: map[string]bool{}}
	prefixes := spellings(symBufferCreateViewPrefix)
	for _, p := range attachTable {
		for _, n := range p.Names {
			if pre, ok := strings.CutSuffix(n, "*"); ok && pre != symBufferCreateViewPrefix {
				prefixes = append(prefixes, spellings(pre)...)
			}
		}
	}
	// Only the names wanted (and the prefixes of the attach table) are asked for: a real
	// libtt_metal.so has hundreds of thousands of tt::tt_metal symbols, and
	// turning each into a string would cost time and memory in proportion.
	// A v0 build is recognised by the v0 spelling of these same names.
	want := profileSymbols()
	want = append(want, prefixes...)
	want = append(want, spellings(symVtableDevice, symVtableMeshDevice)...)
	for _, p := range attachTable {
		for _, n := range p.Names {
			if !strings.HasSuffix(n, "*") {
				want = append(want, spellings(n)...)
			}
		}
	}
	err := lib.ScanSymbols(want, func(s Symbol) {
		res.seen[s.Name] = true
		if !strings.HasPrefix(s.Name, "_ZN") && !strings.HasPrefix(s.Name, "_ZTV") {
			return // const methods: only the fingerprints are wanted
		}
		// GCC's clones and split-off parts (f.cold, f.isra.0, f.constprop.1,
		// f.part.2) are not entry points with f's ABI: never attach there.
		if strings.ContainsRune(s.Name, '.') {
			return
		}
		for _, p := range prefixes {
			if strings.HasPrefix(s.Name, p) {
				prefixed = append(prefixed, s)
				return
			}
		}
		if _, ok := found[s.Name]; !ok {
			found[s.Name] = s
		}
	})
	if err != nil {
		return nil, err
	}
	for _, n := range spellings(symVtableDevice) {
		if s, ok := found[n]; ok && res.VtableDevice == 0 {
			res.VtableDevice = s.Value + vtableAddressPoint
		}
	}
	for _, n := range spellings(symVtableMeshDevice) {
		if s, ok := found[n]; ok && res.VtableMesh == 0 {
			res.VtableMesh = s.Value + vtableAddressPoint
		}
	}
	for _, p := range attachTable {
		var syms []Symbol
		for _, n := range spellings(p.Names...) {
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
			prog := p.Program
			if prog == ProgBankManagerAllocate && !(strings.Contains(s.Name, symAllocatorIDParam) &&
				strings.HasSuffix(s.Name, symAllocatorIDTagName)) {
				// No AllocatorID parameter (mid-2025 builds): the first stack
				// argument is the caller's, not an allocator id.
				prog = ProgBankManagerAllocateNoID
			}
			res.AttachPoints = append(res.AttachPoints, AttachPoint{Program: prog, Function: p.Function, Symbol: s.Name, Addr: s.Value, Offset: off})
		}
		if len(seen) == 0 {
			res.Missing = append(res.Missing, Missing{Program: p.Program, Function: p.Function, Why: p.Why, Required: p.Required})
		}
	}
	res.programHandle()
	sort.SliceStable(res.AttachPoints, func(i, j int) bool { return res.AttachPoints[i].Addr < res.AttachPoints[j].Addr })
	return res, nil
}

// programHandle takes the _noimpl form of Program::set_runtime_id's probe
// where the library has none of detail::ProgramImpl's functions tttrace
// probes: Program is then not the handle of a ProgramImpl (upstream's
// Program_ pimpl, or a Program holding its state itself), and its first
// word is not the ProgramImpl* a cb_layout names.
func (s *Symbols) programHandle() {
	for _, a := range s.AttachPoints {
		switch a.Program {
		case ProgAllocateCBs, ProgDeallocateCBs, ProgGenerateDispatch, ProgProgramDestroy:
			return
		}
	}
	for i := range s.AttachPoints {
		if s.AttachPoints[i].Program == ProgSetRuntimeID {
			s.AttachPoints[i].Program = ProgSetRuntimeIDNoImpl
		}
	}
}

// has reports whether the library has an attach point of program p.
func (s *Symbols) has(p Program) bool {
	for _, a := range s.AttachPoints {
		if a.Program == p {
			return true
		}
	}
	return false
}

// hasMeshCQForms reports whether the library has a Metal trace overload
// taking a MeshCommandQueue&: its layout then needs MeshCommandQueue::id_.
func (s *Symbols) hasMeshCQForms() bool {
	for _, a := range s.AttachPoints {
		if meshCQPrograms[a.Program] {
			return true
		}
	}
	return false
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

// IsTTMetal reports whether lib defines GraphTracker::track_allocate (in
// namespace v0 too): how a library is recognised by its symbols rather than
// its name.
func IsTTMetal(lib *Library) bool {
	hit := false
	names := spellings(symTrackAllocate)
	_ = lib.ScanSymbols(names, func(s Symbol) {
		if slices.Contains(names, s.Name) {
			hit = true
		}
	})
	return hit
}
