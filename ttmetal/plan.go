package ttmetal

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Probe plans. A plan is the list of instructions tttrace probes in one
// library, chosen at start-up from the library's code:
//
//   - tracker: the entries of GraphTracker::track_allocate/track_deallocate,
//     where the address is final. Only valid when the library really calls
//     them: an LTO build can inline them into Buffer, and their entry
//     probes would then never fire.
//   - lifecycle: Buffer's own lifecycle (bpf/tttrace.bpf.c, "lifecycle
//     plan"): allocate_impl at its entry and at each of its exits (never a
//     uretprobe), deallocate_impl at its entry; where the compiler inlined
//     those into Buffer::create, deallocate() or ~Buffer(), those instead.
//
// Both share the other attach points (views, CBs, closes,
// mark_as_deallocated). Every attach point's instruction must be one the
// kernel can probe; a plan that needs one it cannot is refused.

// ProbeMode selects the plan: auto (from the code; the zero value),
// tracker or lifecycle. It is a pflag.Value: --probes parses into it once.
type ProbeMode uint8

// Probe modes.
const (
	ProbesAuto ProbeMode = iota
	ProbesTracker
	ProbesLifecycle
)

var probeModeNames = [...]string{ProbesAuto: "auto", ProbesTracker: "tracker", ProbesLifecycle: "lifecycle"}

func (m ProbeMode) String() string {
	if int(m) < len(probeModeNames) {
		return probeModeNames[m]
	}
	return fmt.Sprintf("ProbeMode(%d)", uint8(m))
}

// Set reads --probes: tracker, lifecycle or auto ("" is auto).
func (m *ProbeMode) Set(s string) error {
	if s == "" {
		*m = ProbesAuto
		return nil
	}
	for v, name := range probeModeNames {
		if s == name {
			*m = ProbeMode(v)
			return nil
		}
	}
	return fmt.Errorf("%q: want tracker, lifecycle or auto", s)
}

// Type names the value in flag usage.
func (m *ProbeMode) Type() string { return "plan" }

// MarshalText writes the mode's name.
func (m ProbeMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// PlanKind is a probe plan.
type PlanKind string

// Probe plans.
const (
	PlanTracker   PlanKind = "tracker"
	PlanLifecycle PlanKind = "lifecycle"
)

// PointStatus is what a plan does with an attach point.
type PointStatus string

// Attach point statuses.
const (
	// StatusAttached: in the plan.
	StatusAttached PointStatus = "attached"
	// StatusInlined: its code lives in its callers: not probed there.
	StatusInlined PointStatus = "inlined"
	// StatusUnprobeable: the kernel cannot probe its instruction.
	StatusUnprobeable PointStatus = "unprobeable"
	// StatusMissing: the library does not have it.
	StatusMissing PointStatus = "missing"
	// StatusNotNeeded: the plan does without it.
	StatusNotNeeded PointStatus = "not needed"
)

// Plan is what tttrace attaches in one library and why.
type Plan struct {
	Kind PlanKind `json:"kind"`
	Why  string   `json:"why"`
	// AttachPoints are the probes to attach.
	AttachPoints []AttachPoint `json:"-"`
	// Points describes every attach point considered, for doctor.
	Points []PlanPoint `json:"points"`
	// Missing lists optional attach points the library lacks.
	Missing []Missing `json:"-"`
	// Exact says whether the plan sees every change of device memory; when
	// not, Caveats says what is not seen.
	Exact   bool     `json:"exact"`
	Caveats []string `json:"caveats"`
	// Notes are facts about the plan that do not make it inexact.
	Notes []string `json:"notes"`
	// CallSites counts the calls and jumps to the functions the choice
	// depends on, inside the library.
	CallSites map[string]int `json:"call_sites"`
	// DisposeOffset is where the shared_ptr control block whose
	// _M_dispose() is probed holds its Buffer (0: none is probed).
	DisposeOffset uint64 `json:"dispose_offset,omitempty"`
	// atEntry: entry probes stay on first instructions (Options.AtEntry).
	atEntry bool
}

// PlanPoint is one attach point of a plan, or a function the plan decided
// not to probe.
type PlanPoint struct {
	Program  Program     `json:"program"`
	Function string      `json:"function"`
	Symbol   string      `json:"symbol,omitempty"`
	Addr     uint64      `json:"addr,omitempty"`
	Insn     string      `json:"insn,omitempty"`
	Status   PointStatus `json:"status"`
	Detail   string      `json:"detail,omitempty"`
}

// Program names a BPF program of bpf/tttrace.bpf.c.
type Program string

// The programs of the attach table (both plans).
const (
	ProgTrackAllocate     Program = "track_allocate"
	ProgTrackDeallocate   Program = "track_deallocate"
	ProgTrackAllocateCB   Program = "track_allocate_cb"
	ProgTrackDeallocateCB Program = "track_deallocate_cb"
	ProgBufferCreateView  Program = "buffer_create_view"
	ProgMarkAsDeallocated Program = "mark_as_deallocated"
	ProgAllocateCBs       Program = "allocate_circular_buffers"
	ProgDeallocateCBs     Program = "deallocate_circular_buffers"
	ProgGenerateDispatch  Program = "generate_dispatch_commands"
	ProgProgramDestroy    Program = "program_destroy"
	ProgDeviceClose       Program = "device_close"
	ProgMeshDeviceClose   Program = "mesh_device_close"
	// Metal trace (docs/ttmetal.md §10).
	ProgDeviceBeginTrace   Program = "device_begin_trace"
	ProgDeviceEndTrace     Program = "device_end_trace"
	ProgDeviceReplayTrace  Program = "device_replay_trace"
	ProgDeviceReleaseTrace Program = "device_release_trace"
	ProgMeshBeginTrace     Program = "mesh_begin_trace"
	ProgMeshBeginTraceNoID Program = "mesh_begin_trace_noid"
	ProgMeshEndTrace       Program = "mesh_end_trace"
	ProgMeshReplayTrace    Program = "mesh_replay_trace"
	ProgMeshReleaseTrace   Program = "mesh_release_trace"
	// The older one-bool Device::replay_trace (same registers as the
	// two-bool form) and the 2026 MeshCommandQueue& overloads (bpf/trace.h).
	ProgDeviceReplayTraceBlocking Program = "device_replay_trace_blocking"
	ProgMeshBeginTraceMCQ         Program = "mesh_begin_trace_mcq"
	ProgMeshBeginTraceMCQID       Program = "mesh_begin_trace_mcq_id"
	ProgMeshEndTraceMCQ           Program = "mesh_end_trace_mcq"
	ProgMeshReplayTraceMCQ        Program = "mesh_replay_trace_mcq"
	// The allocator (docs/ttmetal.md §9).
	ProgInitializeAllocator Program = "initialize_allocator"
	ProgBankManagerVec      Program = "bank_manager_vec"
	ProgBankManagerMap      Program = "bank_manager_map"
	ProgBankManagerAllocate Program = "bank_manager_allocate"
	// BankManager::allocate_buffer of builds without its AllocatorID
	// parameter (ResolveSymbols picks it from the mangled name).
	ProgBankManagerAllocateNoID Program = "bank_manager_allocate_noid"
	// Program::set_runtime_id(uint64_t): the id of a device operation's
	// launch (bpf/ops.h); ResolveSymbols takes the _noimpl form where the
	// library has no detail::ProgramImpl (Program is then not its handle).
	ProgSetRuntimeID       Program = "program_set_runtime_id"
	ProgSetRuntimeIDNoImpl Program = "program_set_runtime_id_noimpl"
)

// ProgOpEnter is the entry of every op function of a TT-NN library
// (bpf/ops.h), attached from its OpTable (probes.Tracer.AttachOps), not a
// plan.
const ProgOpEnter Program = "op_enter"

// The programs of Buffer's lifecycle (lifecycle plan), and the teardown.
const (
	ProgAllocEnter      Program = "lc_alloc_enter"
	ProgAllocExit       Program = "lc_alloc_exit"
	ProgCreateEnter     Program = "lc_create_enter"
	ProgCreateExit      Program = "lc_create_exit"
	ProgFree            Program = "lc_free"
	ProgFreeOwned       Program = "lc_free_owned"
	ProgDestroyTeardown Program = "program_destroy_teardown"
	ProgFreeDispose     Program = "lc_free_dispose"
)

// LifecyclePrograms are the programs only the lifecycle plan attaches.
var LifecyclePrograms = []Program{ProgAllocEnter, ProgAllocExit, ProgCreateEnter, ProgCreateExit, ProgFree,
	ProgFreeOwned, ProgDestroyTeardown, ProgFreeDispose}

// AttachTablePrograms are the programs of the attach table's rows, in its
// order, then the ones ResolveSymbols may put in a row's place, then the
// one placed inside a row's function from its code (oom.go).
func AttachTablePrograms() []Program {
	out := make([]Program, len(attachTable), len(attachTable)+3)
	for i, p := range attachTable {
		out[i] = p.Program
	}
	return append(out, ProgBankManagerAllocateNoID, ProgSetRuntimeIDNoImpl, ProgBankManagerOOM)
}

// ChoosePlan decides the probe plan of lib. syms comes from ResolveSymbols,
// layout from ResolveLayout; opts.Mode and opts.AtEntry are used.
func ChoosePlan(lib *Library, syms *Symbols, layout Layout, opts Options) (*Plan, error) {
	c, err := lib.code()
	if err != nil {
		return nil, fmt.Errorf("%s: read its code: %w", lib.Path, err)
	}
	fns, sites, unconfirmed, err := planFunctions(lib, c)
	if err != nil {
		return nil, err
	}
	p := &Plan{CallSites: map[string]int{}, Exact: true, atEntry: opts.AtEntry}
	for _, n := range countedFunctions {
		p.CallSites[demangledName(n)] = callCount(fns[n], sites)
	}
	p.choose(opts.Mode, p.CallSites[demangledName(symTrackAllocate)], p.CallSites[demangledName(symTrackDeallocate)], unconfirmed)
	if err := p.pimpl2(lib, fns); err != nil {
		return nil, err
	}
	if err := p.attachTable(lib, syms, layout); err != nil {
		return nil, err
	}
	if err := p.oomSites(lib, c, syms); err != nil {
		return nil, err
	}
	if err := p.checkCallers(lib, c, fns, sites); err != nil {
		return nil, err
	}
	if err := p.programTeardown(lib, c, fns); err != nil {
		return nil, err
	}
	if p.Kind == PlanLifecycle {
		if err := p.lifecycle(lib, c, fns, sites, layout); err != nil {
			return nil, err
		}
	}
	if layout.Hooked < 0 {
		p.Exact = false
		p.Caveats = append(p.Caveats, "the layout has no hooked_allocation_: allocations made during graph capture count as real")
	}
	p.residency(layout)
	for _, pt := range p.Points {
		if pt.Status == StatusUnprobeable {
			return nil, fmt.Errorf("%s: cannot probe %s at %#x: %s", lib.Path, pt.Function, pt.Addr, pt.Detail)
		}
	}
	if opts.NoAllocator {
		p.dropAllocator()
	}
	sort.SliceStable(p.AttachPoints, func(i, j int) bool { return p.AttachPoints[i].Addr < p.AttachPoints[j].Addr })
	return p, nil
}

// allocatorPrograms are the programs of the allocator's view.
var allocatorPrograms = map[Program]bool{ProgInitializeAllocator: true, ProgBankManagerVec: true, ProgBankManagerMap: true,
	ProgBankManagerAllocate: true, ProgBankManagerAllocateNoID: true, ProgBankManagerOOM: true}

// dropAllocator takes the allocator's probes out of the plan
// (Options.NoAllocator).
func (p *Plan) dropAllocator() {
	kept := p.AttachPoints[:0]
	for _, s := range p.AttachPoints {
		if !allocatorPrograms[s.Program] {
			kept = append(kept, s)
		}
	}
	p.AttachPoints = kept
	for i := range p.Points {
		if allocatorPrograms[p.Points[i].Program] && p.Points[i].Status == StatusAttached {
			p.Points[i].Status, p.Points[i].Detail = StatusNotNeeded, "allocator probes left out (measurement)"
		}
	}
	p.Notes = append(p.Notes, "the allocator's probes are left out: no allocator view")
}

// countedFunctions are the functions whose call sites the plan reports
// (Plan.CallSites): the choice depends on them.
var countedFunctions = []string{symTrackAllocate, symTrackDeallocate, symTrackAllocateCB, symTrackDeallocateCB,
	symAllocateImpl, symDeallocateImpl, symDeallocate, symBufferD2, symDeallocateCBs, symProgramImplD2}

// planFunctions looks up the functions the plan depends on (the known
// callers' too) and finds every call site of them in the library.
func planFunctions(lib *Library, c *codeIndex) (fns map[string][]Symbol, sites map[string][]CallSite, unconfirmed int, err error) {
	callerNames, callerPrefixes := knownCallerNames()
	fns, err = lib.lookupFuncs(append(spellings(symTrackAllocate, symTrackDeallocate, symTrackAllocateCB, symTrackDeallocateCB,
		symAllocateImpl, symDeallocateImpl, symDeallocate, symBufferD2, symBufferD1, symDeallocateCBs,
		symProgramImplD2, symProgramImplD1, symImplAllocateImpl, symImplDeallocateImpl, symImplDeallocate,
		symNotifyAllocated, symNotifyDeallocated), callerNames...), append(spellings(symBufferCreateOwningPrefix), callerPrefixes...))
	if err != nil {
		return nil, nil, 0, err
	}
	var all []Symbol
	for _, ss := range fns {
		all = append(all, ss...)
	}
	sites, unconfirmed, err = c.callSites(all)
	return fns, sites, unconfirmed, err
}

// choose sets the plan's kind from the mode and the tracker's call sites:
// --probes tracker and lifecycle are obeyed (a tracker without call sites
// then makes the plan inexact); auto takes the tracker where the library
// calls it, the lifecycle plan where its calls were inlined.
func (p *Plan) choose(mode ProbeMode, nAlloc, nFree, unconfirmed int) {
	trackerCalled := nAlloc > 0 && nFree > 0
	why := fmt.Sprintf("GraphTracker::track_allocate has %d call sites in the library, track_deallocate %d", nAlloc, nFree)
	if unconfirmed > 0 {
		why += fmt.Sprintf(" (%d byte patterns outside any unwind entry could not be confirmed as calls and are not counted)", unconfirmed)
	}
	switch {
	case mode == ProbesTracker:
		p.Kind, p.Why = PlanTracker, "--probes tracker; "+why
		if !trackerCalled {
			p.Exact = false
			p.Caveats = append(p.Caveats, "the tracker is not called everywhere (inlined?): its entry probes miss allocations or frees")
		}
	case mode == ProbesLifecycle:
		p.Kind, p.Why = PlanLifecycle, "--probes lifecycle; "+why
	case trackerCalled:
		p.Kind, p.Why = PlanTracker, why
	default:
		p.Kind, p.Why = PlanLifecycle, why+": their bodies are inlined into their callers, so Buffer's lifecycle functions are probed instead"
	}
}

// pimpl2 handles the 2026 pimpl-2 design, where Buffer's lifecycle lives
// in BufferImpl (BufferImpl::create, allocate_impl(Buffer&),
// deallocate(Buffer&), deallocate_impl(Buffer&); mark_as_deallocated
// inline). The tracker plan is unaffected: GraphTracker::track_* are still
// called with the Buffer*. The lifecycle plan's functions are gone (and
// BufferImpl's take BufferImpl* and Buffer& where its programs read a
// Buffer*): it is refused, saying so, rather than attached to an owning
// Buffer::create that no longer holds the allocation.
func (p *Plan) pimpl2(lib *Library, fns map[string][]Symbol) error {
	var moved []string
	for _, n := range []string{symImplAllocateImpl, symImplDeallocateImpl, symImplDeallocate} {
		if first(fns, n) != nil {
			moved = append(moved, demangledName(n))
		}
	}
	if len(moved) == 0 {
		return nil
	}
	if p.Kind == PlanLifecycle {
		return fmt.Errorf("%s: the 2026 pimpl design moved Buffer's lifecycle into BufferImpl (%s take a Buffer&): "+
			"the lifecycle probe plan (%s) does not probe them, and only the tracker plan can trace this build; "+
			"GraphTracker::track_allocate/track_deallocate must be called (not inlined): use --probes tracker",
			lib.Path, strings.Join(moved, ", "), p.Why)
	}
	note := "2026 pimpl design (" + strings.Join(moved, ", ") + " in BufferImpl): the tracker plan sees every buffer " +
		"through GraphTracker::track_*, called with the Buffer*"
	if first(fns, symNotifyAllocated) != nil || first(fns, symNotifyDeallocated) != nil {
		note += "; notify_buffer_allocated/notify_buffer_deallocated (buffer-allocation observers, called after track_*) are not needed"
	}
	p.Notes = append(p.Notes, note)
	return nil
}

// traceForms groups the forms of each Metal trace call (docs/ttmetal.md
// §10): a build has some of them (upstream changed signatures, added the
// MeshCommandQueue& overloads in 2026 and took the trace functions out of
// Device), and a missing form is no loss when its call has another. Every
// form the library has is probed: each is entered by its own callers (the
// MeshCommandQueue& overloads forward to the implementation, not to the
// cq-id forms).
var traceForms = []struct {
	call  string
	progs []Program
}{
	{"begin", []Program{ProgDeviceBeginTrace, ProgMeshBeginTrace, ProgMeshBeginTraceNoID, ProgMeshBeginTraceMCQ,
		ProgMeshBeginTraceMCQID}},
	{"end", []Program{ProgDeviceEndTrace, ProgMeshEndTrace, ProgMeshEndTraceMCQ}},
	{"replay", []Program{ProgDeviceReplayTrace, ProgDeviceReplayTraceBlocking, ProgMeshReplayTrace, ProgMeshReplayTraceMCQ}},
	{"release", []Program{ProgDeviceReleaseTrace, ProgMeshReleaseTrace}},
}

// meshCQPrograms read MeshCommandQueue::id_: attached only where the
// layout has its offset.
var meshCQPrograms = map[Program]bool{ProgMeshBeginTraceMCQ: true, ProgMeshBeginTraceMCQID: true,
	ProgMeshEndTraceMCQ: true, ProgMeshReplayTraceMCQ: true}

// traceCall is the trace call prog is a form of ("" for other programs).
func traceCall(prog Program) string {
	for _, f := range traceForms {
		if slices.Contains(f.progs, prog) {
			return f.call
		}
	}
	return ""
}

// attachTable puts the attach table's points in the plan, both plans,
// except the tracker's own in the lifecycle plan. A required point the
// library lacks refuses it.
func (p *Plan) attachTable(lib *Library, syms *Symbols, layout Layout) error {
	trackerOwn := func(prog Program) bool {
		return p.Kind == PlanLifecycle && (prog == ProgTrackAllocate || prog == ProgTrackDeallocate)
	}
	// forms: the trace forms attached, per call, for people.
	forms := map[string][]string{}
	for _, s := range syms.AttachPoints {
		if trackerOwn(s.Program) {
			p.Points = append(p.Points, PlanPoint{Program: s.Program, Function: s.Function, Symbol: s.Symbol, Addr: s.Addr,
				Status: StatusNotNeeded, Detail: "lifecycle plan"})
			continue
		}
		if meshCQPrograms[s.Program] && layout.MeshCQID < 0 {
			// Without the offset of MeshCommandQueue::id_ the command queue
			// cannot be read, and a capture cannot be matched with its end.
			why := "the offset of distributed::MeshCommandQueue::id_ is unknown (no DWARF defines it, no built-in " +
				"profile or layout file gives mesh_cq_id): " + s.Function + " is not probed, the trace calls made " +
				"through it are not seen"
			p.Points = append(p.Points, PlanPoint{Program: s.Program, Function: s.Function, Symbol: s.Symbol, Addr: s.Addr,
				Status: StatusMissing, Detail: why})
			p.Notes = append(p.Notes, why)
			continue
		}
		p.add(lib, s, "")
		if c := traceCall(s.Program); c != "" && !slices.Contains(forms[c], s.Function) {
			forms[c] = append(forms[c], s.Function)
		}
	}
	found := map[Program]bool{}
	for _, s := range syms.AttachPoints {
		found[s.Program] = true
	}
	for _, m := range syms.Missing {
		if trackerOwn(m.Program) {
			continue
		}
		if c := traceCall(m.Program); c != "" && len(forms[c]) > 0 {
			// The build has other forms of this call: not a loss.
			p.Points = append(p.Points, PlanPoint{Program: m.Program, Function: m.Function, Status: StatusNotNeeded,
				Detail: "this library's " + c + " is " + strings.Join(forms[c], ", ")})
			continue
		}
		p.Missing = append(p.Missing, m)
		p.Points = append(p.Points, PlanPoint{Program: m.Program, Function: m.Function, Status: StatusMissing, Detail: m.Why + " will not be seen"})
		if m.Required {
			return fmt.Errorf("%s: %s is missing: %s cannot be seen", lib.Path, m.Function, m.Why)
		}
	}
	var named []string
	for _, f := range traceForms {
		if len(forms[f.call]) > 0 {
			named = append(named, f.call+": "+strings.Join(forms[f.call], ", "))
		}
	}
	if len(named) > 0 {
		p.Notes = append(p.Notes, "Metal trace forms probed: "+strings.Join(named, "; "))
	}
	return nil
}

// residency notes when the CBs resident per core cannot be known from
// this library (devices/resident.go: they come from each CB's core ranges
// and each program's dispatch): cb_bytes then stays 0 while
// cb_registered_bytes is whole, so it is a note, not a caveat on the other
// figures. A build that probes both still learns nothing under slow
// dispatch, which never calls generate_dispatch_commands.
func (p *Plan) residency(layout Layout) {
	attached := func(prog Program) bool {
		for _, pt := range p.Points {
			if pt.Program == prog && pt.Status == StatusAttached {
				return true
			}
		}
		return false
	}
	if !attached(ProgTrackAllocateCB) {
		return // no CB is seen at all: the missing point says so
	}
	var why []string
	if !attached(ProgGenerateDispatch) {
		why = append(why, "ProgramImpl::generate_dispatch_commands is not probed")
	}
	if layout.CoreRanges < 0 {
		why = append(why, "the layout gives no CoreRangeSet offsets")
	}
	if len(why) > 0 {
		p.Notes = append(p.Notes, "circular buffers resident per core unknown ("+strings.Join(why, "; ")+
			"): cb_bytes stays 0, cb_registered_bytes is whole")
	}
}

// add puts attach point s in the plan, if its instruction can be probed. An entry
// probe goes where the kernel emulates the instruction, when that can be
// done without changing what it sees (placeEntry).
func (p *Plan) add(lib *Library, s AttachPoint, detail string) {
	if pl := lib.placeEntry(s.Addr, p.atEntry); pl.why != "" {
		if off, err := lib.FileOffset(pl.addr); err == nil {
			s.Symbol = fmt.Sprintf("%s+%#x", s.Symbol, pl.addr-s.Addr)
			s.Entry, s.Addr, s.Offset = s.Addr, pl.addr, off
			if detail != "" {
				detail += "; "
			}
			detail += pl.why
		}
	}
	p.addAt(lib, s, detail)
}

// addAt puts attach point s in the plan at its own address, if its
// instruction can be probed.
func (p *Plan) addAt(lib *Library, s AttachPoint, detail string) {
	pt := PlanPoint{Program: s.Program, Function: s.Function, Symbol: s.Symbol, Addr: s.Addr, Status: StatusAttached, Detail: detail}
	in, err := lib.decodeAt(s.Addr)
	if err == nil {
		pt.Insn = in.String()
		err = probeable(&in)
	}
	if err != nil {
		pt.Status, pt.Detail = StatusUnprobeable, err.Error()
	} else {
		p.AttachPoints = append(p.AttachPoints, s)
	}
	p.Points = append(p.Points, pt)
}

// attachPoint makes an AttachPoint for the instruction at addr of function sym.
func attachPoint(lib *Library, program Program, function string, sym Symbol, addr uint64) (AttachPoint, error) {
	off, err := lib.FileOffset(addr)
	if err != nil {
		return AttachPoint{}, err
	}
	name := sym.Name
	if addr != sym.Value {
		name = fmt.Sprintf("%s+%#x", sym.Name, addr-sym.Value)
	}
	return AttachPoint{Program: program, Function: function, Symbol: name, Addr: addr, Offset: off}, nil
}

// programTeardown handles ~ProgramImpl with deallocate_circular_buffers
// inlined into it (clang -O3): the destructor's entry must then also be
// the teardown's entry, or the track_deallocate_cb calls that follow are
// attributed to no program.
func (p *Plan) programTeardown(lib *Library, c *codeIndex, fns map[string][]Symbol) error {
	teardown := first(fns, symDeallocateCBs)
	if teardown == nil {
		return nil
	}
	for i := range p.AttachPoints {
		s := &p.AttachPoints[i]
		if s.Program != ProgProgramDestroy {
			continue
		}
		fc, err := c.analyze(Symbol{Name: strings.SplitN(s.Symbol, "+", 2)[0], Value: s.Func(), Size: symSize(fns, s.Func())})
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Path, err)
		}
		if fc.calls(*teardown) {
			continue
		}
		s.Program = ProgDestroyTeardown
		for j := range p.Points {
			if p.Points[j].Addr == s.Addr && p.Points[j].Program == ProgProgramDestroy {
				p.Points[j].Program = ProgDestroyTeardown
				p.Points[j].Detail = "deallocate_circular_buffers() is inlined into it: its entry is also the teardown's"
			}
		}
		p.Points = append(p.Points, PlanPoint{Program: ProgDeallocateCBs, Function: "detail::ProgramImpl::deallocate_circular_buffers()",
			Symbol: teardown.Name, Addr: teardown.Value, Status: StatusInlined,
			Detail: "inlined into ~ProgramImpl (whose entry stands for it); its own entry is probed for other callers"})
	}
	return nil
}

func symSize(fns map[string][]Symbol, addr uint64) uint64 {
	for _, ss := range fns {
		for _, s := range ss {
			if s.Value == addr {
				return s.Size
			}
		}
	}
	return 0
}

// lifecycle adds Buffer's lifecycle probes: allocations, then frees.
func (p *Plan) lifecycle(lib *Library, c *codeIndex, fns map[string][]Symbol, sites map[string][]CallSite, layout Layout) error {
	if err := lifecycleReads(lib, layout); err != nil {
		return err
	}
	if err := p.lifecycleAllocs(lib, c, fns); err != nil {
		return err
	}
	inner, err := p.lifecycleFrees(lib, c, fns)
	if err != nil {
		return err
	}
	if err := p.lifecycleDestructors(lib, c, fns, sites, layout, inner); err != nil {
		return err
	}
	p.Notes = append(p.Notes, "frees are seen at deallocate_impl's entry, also for buffers whose device was closed first "+
		"(the tracker is not called for those; the ledger released them at the close and counts them as frees_after_release)")
	return nil
}

// lifecycleReads refuses a layout without the fields the lifecycle
// programs read.
func lifecycleReads(lib *Library, layout Layout) error {
	var need []string
	if layout.Status < 0 || layout.Allocated < 0 {
		need = append(need, "allocation_status_ and the value of ALLOCATED")
	}
	if layout.Size < 0 {
		need = append(need, "size_")
	}
	if layout.OwnsData < 0 {
		need = append(need, "owns_data_")
	}
	if len(need) > 0 {
		return fmt.Errorf("%s: the lifecycle plan reads %s, which the layout (%s) lacks", lib.Path, strings.Join(need, ", "), layout.Name)
	}
	if layout.Allocated > 255 {
		return fmt.Errorf("%s: ALLOCATED = %d does not fit allocation_status_ (one byte)", lib.Path, layout.Allocated)
	}
	return nil
}

// lifecycleAllocs probes allocate_impl, and the owning creates that
// inlined it.
func (p *Plan) lifecycleAllocs(lib *Library, c *codeIndex, fns map[string][]Symbol) error {
	alloc := first(fns, symAllocateImpl)
	creates := fns[symBufferCreateOwningPrefix]
	if alloc == nil && len(creates) == 0 {
		return errors.New(lib.Path + ": neither Buffer::allocate_impl() nor an owning Buffer::create(...) is in the library: allocations cannot be seen")
	}
	if alloc != nil {
		if err := p.entryAndExits(lib, c, *alloc, "Buffer::allocate_impl()", ProgAllocEnter, ProgAllocExit, ""); err != nil {
			return err
		}
	}
	for _, cr := range creates {
		fc, err := c.analyze(cr)
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Path, err)
		}
		if alloc != nil && fc.calls(*alloc) {
			p.Points = append(p.Points, PlanPoint{Program: ProgCreateEnter, Function: "Buffer::create(IDevice*, size, ...)",
				Symbol: cr.Name, Addr: cr.Value, Status: StatusNotNeeded, Detail: "calls allocate_impl(), which is probed"})
			continue
		}
		if err := p.entryAndExits(lib, c, cr, "Buffer::create(IDevice*, size, ...)", ProgCreateEnter, ProgCreateExit,
			"allocate_impl() is inlined into it"); err != nil {
			return err
		}
		if alloc != nil {
			p.Points = append(p.Points, PlanPoint{Program: ProgAllocEnter, Function: "Buffer::allocate_impl()", Symbol: alloc.Name,
				Addr: alloc.Value, Status: StatusInlined, Detail: "inlined into " + demangledName(cr.Name) + ", probed there"})
		}
	}
	return nil
}

// lifecycleFrees probes deallocate_impl, and deallocate() where the free
// was inlined into it (it calls no deallocate_impl: the free happens in
// its own code). It returns the free functions the library has, innermost
// first.
func (p *Plan) lifecycleFrees(lib *Library, c *codeIndex, fns map[string][]Symbol) ([]Symbol, error) {
	dimpl := first(fns, symDeallocateImpl)
	dealloc := first(fns, symDeallocate)
	if dimpl == nil && dealloc == nil {
		return nil, errors.New(lib.Path + ": neither Buffer::deallocate_impl() nor Buffer::deallocate() is in the library: frees cannot be seen")
	}
	var inner []Symbol
	if dimpl != nil {
		p.add(lib, mustAttachPoint(lib, ProgFree, "Buffer::deallocate_impl()", *dimpl, dimpl.Value), "")
		inner = append(inner, *dimpl)
	}
	if dealloc != nil {
		fc, err := c.analyze(*dealloc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lib.Path, err)
		}
		if len(inner) > 0 && fc.calls(inner...) {
			p.Points = append(p.Points, PlanPoint{Program: ProgFreeOwned, Function: "Buffer::deallocate()", Symbol: dealloc.Name,
				Addr: dealloc.Value, Status: StatusNotNeeded, Detail: "calls deallocate_impl(), which is probed"})
		} else {
			p.add(lib, mustAttachPoint(lib, ProgFreeOwned, "Buffer::deallocate()", *dealloc, dealloc.Value), "deallocate_impl() is inlined into it")
		}
		inner = append(inner, *dealloc)
	}
	return inner, nil
}

// bufferDestructors returns ~Buffer()'s distinct definitions, D2 first.
func bufferDestructors(fns map[string][]Symbol) []Symbol {
	dtors := map[uint64]Symbol{}
	for _, n := range []string{symBufferD2, symBufferD1} {
		if s := first(fns, n); s != nil {
			if _, dup := dtors[s.Value]; !dup {
				dtors[s.Value] = *s
			}
		}
	}
	var out []Symbol
	for _, s := range dtors {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name > out[j].Name }) // D2 first
	return out
}

// lifecycleDestructors probes ~Buffer() where deallocate() was inlined into
// it, and the shared_ptr control block's dispose where ~Buffer() itself was
// inlined there. inner are the free functions already planned.
func (p *Plan) lifecycleDestructors(lib *Library, c *codeIndex, fns map[string][]Symbol, sites map[string][]CallSite,
	layout Layout, inner []Symbol) error {
	dtorList := bufferDestructors(fns)
	for i, d := range dtorList {
		fc, err := c.analyze(d)
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Path, err)
		}
		calls := append(append([]Symbol(nil), inner...), dtorList[:i]...)
		if fc.calls(calls...) {
			p.Points = append(p.Points, PlanPoint{Program: ProgFreeOwned, Function: "Buffer::~Buffer()", Symbol: d.Name,
				Addr: d.Value, Status: StatusNotNeeded, Detail: "calls deallocate() or deallocate_impl(), which are probed"})
			continue
		}
		p.add(lib, mustAttachPoint(lib, ProgFreeOwned, "Buffer::~Buffer()", d, d.Value), "deallocate() is inlined into it")
	}
	// ~Buffer() is only ever called by the shared_ptr control block
	// make_shared gave the Buffer (its constructor is private to create).
	// Never called from the library: it was inlined into that block's
	// _M_dispose(), which must be probed instead.
	dtorCalls := 0
	for _, d := range dtorList {
		for _, n := range []string{symBufferD2, symBufferD1} {
			for _, s := range fns[n] {
				if s.Value == d.Value {
					dtorCalls += len(sites[s.Name])
				}
			}
		}
	}
	if len(dtorList) > 0 && dtorCalls == 0 {
		return p.disposeOfBuffer(lib, c, layout, append(inner, dtorList...))
	}
	return nil
}

// Control blocks of std::make_shared<Buffer>: libstdc++ and libc++. Both
// have _M_dispose / __on_zero_shared in vtable slot 2 (after the two
// destructors); the Buffer lies in the block after its counts.
var controlBlockVtables = []string{
	"_ZTVSt23_Sp_counted_ptr_inplaceIN2tt8tt_metal6BufferE",
	"_ZTVSt23_Sp_counted_ptr_inplaceIN2tt8tt_metal2v06BufferE",
	"_ZTVNSt3__120__shared_ptr_emplaceIN2tt8tt_metal6BufferE",
	"_ZTVNSt3__120__shared_ptr_emplaceIN2tt8tt_metal2v06BufferE",
}

// disposeOfBuffer finds the control block's dispose function that has
// ~Buffer() inlined, confirms from its code where the block holds the
// Buffer, and plans a probe at its entry. Anything it cannot confirm
// refuses the plan: frees would be missed.
func (p *Plan) disposeOfBuffer(lib *Library, c *codeIndex, layout Layout, frees []Symbol) error {
	refuse := func(why string) error {
		return fmt.Errorf("%s: Buffer::~Buffer() is never called in the library (inlined into its callers) and %s: "+
			"frees cannot be seen, so the lifecycle plan is refused", lib.Path, why)
	}
	var vts []Symbol
	seenVT := map[uint64]bool{}
	for _, p := range controlBlockVtables {
		ss, err := lib.knownWithPrefix(p)
		if err != nil {
			return err
		}
		for _, s := range ss {
			if s.Type == 1 /* STT_OBJECT */ && s.Value != 0 && !seenVT[s.Value] {
				seenVT[s.Value] = true
				vts = append(vts, s)
			}
		}
	}
	if len(vts) == 0 {
		return refuse("the vtable of its shared_ptr control block (std::_Sp_counted_ptr_inplace<Buffer> or libc++'s __shared_ptr_emplace) is not exported")
	}
	resolve := func(name string) (uint64, bool) {
		m, err := lib.lookup([]string{name})
		if err != nil {
			return 0, false
		}
		s, ok := m[name]
		return s.Value, ok
	}
	planned := false
	for _, vt := range vts {
		fn, err := c.readPointer(vt.Value+vtableAddressPoint+2*8, resolve)
		if err != nil {
			return refuse(fmt.Sprintf("slot 2 of %s cannot be read: %v", vt.Name, err))
		}
		// Named by where it is found: vtable symbol and slot.
		sym := Symbol{Name: vt.Name + "[2]", Value: fn}
		fc, err := c.analyze(sym)
		if err != nil {
			return refuse(err.Error())
		}
		if fc.calls(frees...) {
			continue // it calls ~Buffer, deallocate or deallocate_impl: probed there
		}
		off, how, err := bufferInBlock(lib, fn, layout)
		if err != nil {
			return refuse(fmt.Sprintf("where %s's dispose (at %#x) holds the Buffer cannot be confirmed: %v", vt.Name, fn, err))
		}
		if p.DisposeOffset != 0 && p.DisposeOffset != off {
			return refuse("two control blocks hold the Buffer at different offsets")
		}
		p.DisposeOffset = off
		p.add(lib, mustAttachPoint(lib, ProgFreeDispose, "shared_ptr<Buffer> control block: dispose", sym, fn),
			fmt.Sprintf("~Buffer() is inlined into it; the Buffer is at +%d (%s)", off, how))
		planned = true
	}
	if !planned {
		return refuse("no control block's dispose function contains it")
	}
	return nil
}

// bufferInBlock reads the start of a dispose function for its first use
// of this (rdi) as a Buffer: an access to [rdi+K+f] for a Buffer field f
// ~Buffer() reads first (allocation_status_, owns_data_, or the BufferImpl
// pointer), with K one of the control-block sizes of libstdc++ (16) and
// libc++ (24).
func bufferInBlock(lib *Library, fn uint64, layout Layout) (uint64, string, error) {
	fields := map[int64]string{}
	if layout.BufferImplPtr >= 0 {
		fields[layout.BufferImplPtr] = "the BufferImpl pointer"
	} else {
		fields[layout.Status] = "allocation_status_"
		fields[layout.OwnsData] = "owns_data_"
	}
	at := fn
	for n := 0; n < 16; n++ {
		in, err := lib.decodeAt(at)
		if err != nil {
			return 0, "", err
		}
		for _, a := range in.Args {
			m, ok := a.(x86asm.Mem)
			if !ok || m.Base != x86asm.RDI || m.Index != 0 {
				continue
			}
			for _, k := range []int64{16, 24} {
				if f, ok := fields[m.Disp-k]; ok {
					return uint64(k), fmt.Sprintf("%q reads %s there", in.String(), f), nil
				}
			}
		}
		if in.Op == x86asm.RET || in.Op == x86asm.JMP || in.Op == x86asm.CALL || condJumps[in.Op] {
			break
		}
		if r, ok := in.Args[0].(x86asm.Reg); ok && canonReg(r) == x86asm.RDI {
			break // rdi overwritten
		}
		at = in.next()
	}
	return 0, "", errors.New("no access to a Buffer field through it before the first branch")
}

func mustAttachPoint(lib *Library, program Program, function string, sym Symbol, addr uint64) AttachPoint {
	s, err := attachPoint(lib, program, function, sym, addr)
	if err != nil {
		// A symbol of the library always lies in a loaded segment.
		s = AttachPoint{Program: program, Function: function, Symbol: sym.Name, Addr: addr}
	}
	return s
}

// entryAndExits plans the entry probe and one probe per exit of fn.
func (p *Plan) entryAndExits(lib *Library, c *codeIndex, fn Symbol, function string, enter, exit Program, detail string) error {
	fc, err := c.analyze(fn)
	if err != nil {
		return fmt.Errorf("%s: %w", lib.Path, err)
	}
	if len(fc.Exits) == 0 {
		return fmt.Errorf("%s: %s has no ret and no jump out of it: where it returns cannot be probed", lib.Path, function)
	}
	p.add(lib, mustAttachPoint(lib, enter, function, fn, fn.Value), detail)
	for _, x := range fc.Exits {
		p.add(lib, mustAttachPoint(lib, exit, function+" exit ("+x.Why+")", fn, x.Addr), "")
	}
	return nil
}

// first returns the first symbol found under name (or its v0 spelling).
func first(fns map[string][]Symbol, name string) *Symbol {
	if ss := fns[name]; len(ss) > 0 {
		return &ss[0]
	}
	return nil
}

// lookupFuncs finds defined functions by exact name and by prefix, keyed by
// the name or prefix as given in its first spelling (spellings). Clones (f.cold,
// f.isra.0) are never entry points and are left out.
func (l *Library) lookupFuncs(names, prefixes []string) (map[string][]Symbol, error) {
	key := map[string]string{}
	for _, n := range append(append([]string(nil), names...), prefixes...) {
		k := n
		for _, m := range append(append([]string(nil), names...), prefixes...) {
			if m != n && isSpelling(n, m) {
				k = m
			}
		}
		key[n] = k
	}
	out := map[string][]Symbol{}
	seen := map[uint64]map[string]bool{}
	var cands []Symbol
	for _, n := range names {
		m, err := l.lookupAll(n)
		if err != nil {
			return nil, err
		}
		cands = append(cands, m...)
	}
	for _, p := range prefixes {
		m, err := l.knownWithPrefix(p)
		if err != nil {
			return nil, err
		}
		cands = append(cands, m...)
	}
	for _, s := range cands {
		if s.Type != 2 /* STT_FUNC */ || s.Value == 0 || strings.ContainsRune(s.Name, '.') {
			continue
		}
		k, ok := key[s.Name]
		if !ok {
			for _, p := range prefixes {
				if strings.HasPrefix(s.Name, p) {
					k, ok = key[p], true
					break
				}
			}
		}
		if !ok {
			continue
		}
		if seen[s.Value] == nil {
			seen[s.Value] = map[string]bool{}
		}
		if seen[s.Value][k] {
			continue // the same function in .dynsym and .symtab
		}
		seen[s.Value][k] = true
		out[k] = append(out[k], s)
	}
	return out, nil
}

// lookupAll returns every definition of name (.dynsym and .symtab).
func (l *Library) lookupAll(name string) ([]Symbol, error) {
	if err := l.scanKnown(); err != nil {
		return nil, err
	}
	if ss, ok := l.known[name]; ok {
		return ss, nil
	}
	var out []Symbol
	err := l.ScanSymbols([]string{name}, func(s Symbol) {
		if s.Name == name {
			out = append(out, s)
		}
	})
	return out, err
}

// demangledName gives a short readable name for the mangled names tttrace
// knows (not a demangler).
func demangledName(name string) string {
	known := map[string]string{
		symTrackAllocate: "GraphTracker::track_allocate", symTrackDeallocate: "GraphTracker::track_deallocate",
		symTrackAllocateCB: "GraphTracker::track_allocate_cb", symTrackDeallocateCB: "GraphTracker::track_deallocate_cb",
		symAllocateImpl: "Buffer::allocate_impl", symDeallocateImpl: "Buffer::deallocate_impl",
		symDeallocate: "Buffer::deallocate", symBufferD2: "Buffer::~Buffer", symBufferD1: "Buffer::~Buffer (D1)",
		symDeallocateCBs: "ProgramImpl::deallocate_circular_buffers", symProgramImplD2: "ProgramImpl::~ProgramImpl",
		symImplAllocateImpl: "BufferImpl::allocate_impl(Buffer&)", symImplDeallocateImpl: "BufferImpl::deallocate_impl(Buffer&)",
		symImplDeallocate: "BufferImpl::deallocate(Buffer&)",
	}
	for k, v := range known {
		if isSpelling(name, k) {
			return v
		}
	}
	if strings.HasPrefix(name, symBufferCreateOwningPrefix) || strings.HasPrefix(name, v0Name(symBufferCreateOwningPrefix)) {
		return "Buffer::create (owning)"
	}
	return name
}
