package ttmetal

import (
	"fmt"
	"sort"

	"github.com/tttrace/tttrace/elfx"
)

// Function ranges from .eh_frame. Every function a C++ compiler emits with
// unwind tables (the default on x86-64) has an FDE giving its first address
// and length, including the parts GCC splits off (f.cold), and this survives
// stripping .symtab: it is how tttrace finds instruction boundaries to
// decode from and the extent of code that has no symbol.

// addrRange is [Start, End) of link-time addresses.
type addrRange struct{ Start, End uint64 }

// fdeRanges returns the address ranges of every FDE in .eh_frame, sorted by
// start. A library without .eh_frame gives none. The section is read
// under elfx's limits and its entries with elfx's one CIE/FDE reader
// (lengths checked in 64 bits: a length that wraps is an error).
func (l *Library) fdeRanges() ([]addrRange, error) {
	sec, data, err := l.ef.ReadSection(".eh_frame")
	if err != nil {
		return nil, fmt.Errorf(".eh_frame: %w", err)
	}
	if sec == nil {
		return nil, nil
	}
	var out []addrRange
	err = elfx.EachFDE(data, sec.Addr, func(start, end uint64) bool {
		out = append(out, addrRange{start, end})
		return true
	})
	if err != nil {
		return nil, fmt.Errorf(".eh_frame: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}
