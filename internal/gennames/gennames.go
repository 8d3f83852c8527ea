// Package gennames turns the C names of bpf/ (enum values, struct and
// field names) into the Go names the generators (events/internal/genwire,
// ttmetal/internal/genfield) give them, one rule for both.
package gennames

import "strings"

// initialisms stay upper case in Go names.
var initialisms = map[string]bool{"CB": true, "ID": true}

// Camel is s, words split at underscores, each but its first letter made
// lower case (an initialism kept as it is): "EV_ALLOC_REQUEST" is
// EvAllocRequest, "CB_ID" is CBID.
func Camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(s, "_") {
		if w == "" {
			continue
		}
		if initialisms[w] {
			b.WriteString(w)
			continue
		}
		b.WriteString(w[:1])
		b.WriteString(strings.ToLower(w[1:]))
	}
	return b.String()
}
