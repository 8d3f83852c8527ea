package session

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/tttrace/tttrace/ttmetal"
)

// reportPrepared tells the user what is probed in the library at path (as
// ttmetal.Prepare analysed it), and what will not be seen.
func reportPrepared(w io.Writer, path string, p *ttmetal.Prepared) {
	fmt.Fprintf(w, "tttrace: probing %s (layout %s from %s; %s probe plan: %s)\n",
		path, p.Layout.Layout.Name, p.Layout.From, p.Plan.Kind, p.Plan.Why)
	for _, warn := range p.Layout.Warnings {
		fmt.Fprintf(w, "tttrace: warning: %s\n", warn)
	}
	for _, c := range p.Layout.Corrections {
		fmt.Fprintf(w, "tttrace: note: %s\n", c)
	}
	for _, m := range p.Plan.Missing {
		fmt.Fprintf(w, "tttrace: note: %s not found in %s: %s will not be seen\n", m.Function, filepath.Base(path), m.Why)
	}
	for _, c := range p.Plan.Caveats {
		fmt.Fprintf(w, "tttrace: warning: not exact: %s\n", c)
	}
}
