package session

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/tttrace/tttrace/ttmetal"
)

// prepared is a TT-Metal library ready to attach: its symbols, layout and
// probe plan.
type prepared struct {
	syms   *ttmetal.Symbols
	layout *ttmetal.LayoutSource
	plan   *ttmetal.Plan
}

// prepareLibrary resolves what tracing lib needs, in the order the user
// sees it reported: symbols, the layout (--layout, DWARF, disassembly,
// profiles) and the probe plan (--probes or the library's code). Errors
// carry the exit status they deserve.
func prepareLibrary(lib *ttmetal.Library, layoutFile, probeMode string) (*prepared, error) {
	mode, err := ttmetal.ParseProbeMode(probeMode)
	if err != nil {
		return nil, errorf(ErrUsage, "%w", err)
	}
	syms, err := ttmetal.ResolveSymbols(lib)
	if err != nil {
		return nil, errorf(ErrUnsupported, "read symbols of %s: %w", lib.Path, err)
	}
	if err := syms.Check(lib); err != nil {
		return nil, errorf(ErrUnsupported, "%w", err)
	}
	layout, err := ttmetal.ResolveLayout(lib, syms, layoutFile)
	if err != nil {
		return nil, errorf(ErrUnsupported, "%w", err)
	}
	plan, err := ttmetal.ChoosePlan(lib, syms, layout.Layout, mode)
	if err != nil {
		return nil, errorf(ErrUnsupported, "%w", err)
	}
	return &prepared{syms: syms, layout: layout, plan: plan}, nil
}

// report tells the user what is probed in the library at path, and what
// will not be seen.
func (p *prepared) report(w io.Writer, path string) {
	fmt.Fprintf(w, "tttrace: probing %s (layout %s from %s; %s probe plan: %s)\n",
		path, p.layout.Layout.Name, p.layout.From, p.plan.Kind, p.plan.Why)
	for _, warn := range p.layout.Warnings {
		fmt.Fprintf(w, "tttrace: warning: %s\n", warn)
	}
	for _, c := range p.layout.Corrections {
		fmt.Fprintf(w, "tttrace: note: %s\n", c)
	}
	for _, m := range p.plan.Missing {
		fmt.Fprintf(w, "tttrace: note: %s not found in %s: %s will not be seen\n", m.Function, filepath.Base(path), m.Why)
	}
	for _, c := range p.plan.Caveats {
		fmt.Fprintf(w, "tttrace: warning: not exact: %s\n", c)
	}
}
