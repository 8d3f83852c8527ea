package sinks

import (
	"fmt"

	"github.com/tttrace/tttrace/devices"
)

// L1CoreText says what a chip's busiest core holds (l1_busiest_core or
// peak_l1_busiest_core, docs/ndjson.md): where, its L1 buffers and
// resident circular buffers, their total and, when the core's L1 size is
// known, the share of it. The live view and the report write it.
func L1CoreText(c *devices.L1Core) string {
	if c.TotalBytes == 0 && c.SpansUnknown > 0 {
		return fmt.Sprintf("unknown: %d L1 buffer(s) whose span per bank is unknown (their allocator requests were not seen)", c.SpansUnknown)
	}
	var where string
	switch {
	case c.Core != nil && c.Bank != nil:
		// Upstream does not say which core a bank is: the two may differ.
		where = fmt.Sprintf("core (%d,%d) and the core of bank %d", c.Core[0], c.Core[1], *c.Bank)
	case c.Core != nil:
		where = fmt.Sprintf("core (%d,%d)", c.Core[0], c.Core[1])
	case c.Bank != nil:
		where = fmt.Sprintf("the core of bank %d", *c.Bank)
	default:
		where = "every core"
	}
	total := human(c.TotalBytes)
	if c.UpperBound {
		total = "at most " + total
	}
	s := fmt.Sprintf("%s: %s L1 buffers + %s CBs = %s", where, human(c.L1BufferBytes), human(c.CBBytes), total)
	if c.L1Size != nil && *c.L1Size > 0 {
		s += fmt.Sprintf(" of %s (%.1f%%)", human(*c.L1Size), 100*float64(c.TotalBytes)/float64(*c.L1Size))
	}
	if c.SpansUnknown > 0 {
		s += fmt.Sprintf("; %d L1 buffer(s) whose span per bank is unknown left out", c.SpansUnknown)
	}
	return s
}
