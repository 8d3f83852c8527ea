package ttmetal

import (
	"fmt"
	"strings"
)

// Known callers of probed functions (docs/ttmetal.md). An entry probe sees
// only the calls that reach the function: where a caller tttrace knows of
// is in the library but its code does not call the probed function, the
// compiler inlined it there, and what that caller does is not seen. A probed
// function nothing in the library calls is reported as that ("no caller in
// this library"), not as inlined.

// Buffer::view(const BufferRegion&): makes a pre-allocated view through
// Buffer::create(device, address, ...).
const symBufferView = "_ZN2tt8tt_metal6Buffer4viewERKNS0_12BufferRegionE"

// AllocatorImpl::allocate_buffer(Buffer*) (2026; Allocator:: before):
// calls the type's BankManager::allocate_buffer (docs/ttmetal.md §9).
const (
	symAllocatorImplAllocate = "_ZN2tt8tt_metal13AllocatorImpl15allocate_bufferEPNS0_6BufferE"
	symAllocatorAllocate     = "_ZN2tt8tt_metal9Allocator15allocate_bufferEPNS0_6BufferE"
)

// What is not seen where BankManager::allocate_buffer is inlined.
const (
	bankAllocateInlined = "the allocator's requests made there are not seen: the chips' allocator numbers are " +
		"unknown (each chip says why) and failed allocations are not reported"
	bankAllocateNoCaller = "the allocator's requests are not seen (inlined into every caller?): the chips' allocator " +
		"numbers are unknown (each chip says why) and failed allocations are not reported"
)

// knownCaller is a probed function and a function known to call it
// directly: a caller that reaches it through other functions would look as
// if it had inlined it.
type knownCaller struct {
	// program is the attach-table program of the probed function.
	program Program
	// callee is its mangled name, or a prefix ending in '*'.
	callee     string
	calleeName string
	// caller is the mangled name of the known caller ("": none known).
	caller     string
	callerName string
	// inlined says what is not seen when caller inlines callee; noCaller
	// what is not seen when nothing in the library calls callee ("":
	// nothing, since callers outside the library reach it).
	inlined, noCaller string
	// exact: what is not seen changes no total (a note, not a caveat).
	exact bool
	// onlyIf names a function that must have call sites for the check to
	// matter (its own absence is reported already).
	onlyIf string
}

var knownCallers = []knownCaller{
	{program: ProgBufferCreateView, callee: symBufferCreateViewPrefix + "*", calleeName: "Buffer::create(device, address, ...)",
		caller: symBufferView, callerName: "Buffer::view(const BufferRegion&)",
		inlined: "the pre-allocated views Buffer::view() makes are not seen (totals unaffected: views count nothing)",
		exact:   true},
	{program: ProgTrackAllocateCB, callee: symTrackAllocateCB, calleeName: "GraphTracker::track_allocate_cb",
		caller: symAllocateCBs, callerName: "detail::ProgramImpl::allocate_circular_buffers(const IDevice*)",
		inlined: "the circular buffers it allocates are not seen", noCaller: "circular buffers are not seen"},
	// deallocate_circular_buffers() reaches it through helpers (a direct
	// caller is needed to tell inlined from not called): no caller named.
	{program: ProgTrackDeallocateCB, callee: symTrackDeallocateCB, calleeName: "GraphTracker::track_deallocate_cb",
		noCaller: "CBs are released with their program", exact: true, onlyIf: symTrackAllocateCB},
	// The allocator's requests: only the allocator calls the bank
	// managers, so a library that never calls allocate_buffer inlined it.
	{program: ProgBankManagerAllocate, callee: symBankManagerAllocatePrefix + "*", calleeName: "BankManager::allocate_buffer",
		caller: symAllocatorImplAllocate, callerName: "AllocatorImpl::allocate_buffer(Buffer*)",
		inlined: bankAllocateInlined, noCaller: bankAllocateNoCaller},
	{program: ProgBankManagerAllocate, callee: symBankManagerAllocatePrefix + "*", calleeName: "BankManager::allocate_buffer",
		caller: symAllocatorAllocate, callerName: "Allocator::allocate_buffer(Buffer*)", inlined: bankAllocateInlined},
}

// knownCallerNames and knownCallerPrefixes are the symbols the check
// looks up (ChoosePlan, scanKnown).
func knownCallerNames() (names, prefixes []string) {
	for _, k := range knownCallers {
		if p, ok := strings.CutSuffix(k.callee, "*"); ok {
			prefixes = append(prefixes, p)
		} else {
			names = append(names, k.callee)
		}
		if k.caller != "" {
			names = append(names, k.caller)
		}
	}
	return spellings(names...), spellings(prefixes...)
}

// symbolsOf returns the functions of fns (from lookupFuncs, keyed by the
// name or prefix outside namespace v0) a name or prefix* stands for.
func symbolsOf(fns map[string][]Symbol, name string) []Symbol {
	return fns[strings.TrimSuffix(name, "*")]
}

// checkCallers reports, for every known caller, whether the library's code
// reaches the probed function from it; sites are the call sites of fns.
func (p *Plan) checkCallers(lib *Library, c *codeIndex, fns map[string][]Symbol, sites map[string][]CallSite) error {
	for _, k := range knownCallers {
		callees := symbolsOf(fns, k.callee)
		if len(callees) == 0 {
			continue // not in the library: reported as missing
		}
		if k.onlyIf != "" && callCount(symbolsOf(fns, k.onlyIf), sites) == 0 {
			continue
		}
		var callers []Symbol
		if k.caller != "" {
			callers = symbolsOf(fns, k.caller)
		}
		for _, cr := range callers {
			fc, err := c.analyze(cr)
			if err != nil {
				return fmt.Errorf("%s: %w", lib.Path, err)
			}
			if fc.calls(callees...) {
				continue
			}
			p.Points = append(p.Points, PlanPoint{Program: k.program, Function: k.calleeName, Symbol: cr.Name, Addr: cr.Value,
				Status: StatusInlined, Detail: "inlined into " + k.callerName + ", which does not call it: " + k.inlined})
			p.unseen(k.exact, fmt.Sprintf("%s is inlined into %s (in the library, but its code does not call it): %s",
				k.calleeName, k.callerName, k.inlined))
		}
		if len(callers) == 0 && k.noCaller != "" && callCount(callees, sites) == 0 {
			p.unseen(k.exact, fmt.Sprintf("%s has no caller in this library: %s", k.calleeName, k.noCaller))
		}
	}
	return nil
}

// unseen records something the plan does not see: a caveat (and not exact)
// unless no total depends on it.
func (p *Plan) unseen(exact bool, what string) {
	if exact {
		p.Notes = append(p.Notes, what)
		return
	}
	p.Exact = false
	p.Caveats = append(p.Caveats, what)
}

func callCount(fns []Symbol, sites map[string][]CallSite) int {
	n := 0
	for _, s := range fns {
		n += len(sites[s.Name])
	}
	return n
}
