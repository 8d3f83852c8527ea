package ttmetal

import (
	"fmt"

	"github.com/tttrace/tttrace/elfx"
)

// Options are the choices that shape the analysis of a library, passed
// down from the command line (there are no package-level knobs).
type Options struct {
	// LayoutFile is a layout given by the user ("": find it).
	LayoutFile string
	// Debug is where separate debug files are looked for (its Roots:
	// ROOT/.build-id/xx/yyyy.debug, ROOT/<library dir>/<debuglink>; nil
	// means /usr/lib/debug): elfx's one look-up, shared with stacks.
	Debug elfx.Debug
	// Mode selects the probe plan.
	Mode ProbeMode
	// AtEntry keeps every entry probe on its function's first instruction
	// instead of placing it where the kernel emulates (for measurements).
	AtEntry bool
	// NoAllocator leaves the allocator's probes out of the plan (the
	// bank managers' making, requests and out-of-memory path), for
	// measuring what the allocator's view costs.
	NoAllocator bool
}

// DefaultOptions are the options of a run without flags.
func DefaultOptions() Options { return Options{} }

// Prepared is a TT-Metal library's analysis: what attaching to it needs.
type Prepared struct {
	Symbols *Symbols
	Layout  *LayoutSource
	Plan    *Plan
}

// Prepare resolves what tracing lib needs, in the order it is reported:
// the symbols (and that they are TT-Metal's), the layout (Options'
// layout file, DWARF, the library's code, profiles) and the probe plan.
// Tracing and doctor both call it. On failure it returns what it resolved
// before the step that failed (never nil) with that step's error; a
// *LayoutError says what was checked for the layout.
func Prepare(lib *Library, opts Options) (*Prepared, error) {
	p := &Prepared{}
	syms, err := ResolveSymbols(lib)
	if err != nil {
		return p, fmt.Errorf("read symbols of %s: %w", lib.Path, err)
	}
	p.Symbols = syms
	if err := syms.Check(lib); err != nil {
		return p, err
	}
	layout, err := ResolveLayout(lib, syms, opts)
	if err != nil {
		return p, err
	}
	p.Layout = layout
	plan, err := ChoosePlan(lib, syms, layout.Layout, opts)
	if err != nil {
		return p, err
	}
	p.Plan = plan
	return p, nil
}
