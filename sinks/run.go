package sinks

import "github.com/tttrace/tttrace/devices"

// Run is the NDJSON stream's first line: the flags of the run that shape
// its ledger, so that `tttrace report` and `tttrace diff` replay it as it
// ran (docs/ndjson.md, "The run line").
type Run struct {
	Type            string `json:"type"` // "run"
	L1Warn          uint64 `json:"l1_warn"`
	MaxChips        int    `json:"max_chips"`
	KeepEnded       int    `json:"keep_ended"`
	KeepEndedTotals int    `json:"keep_ended_totals"`
}

// NewRun is the run line of a ledger made with these options (0 or less:
// the ledger's defaults, written as the values they stand for).
func NewRun(l1Warn uint64, maxChips, keepEnded, keepEndedTotals int) Run {
	if maxChips <= 0 {
		maxChips = devices.DefaultMaxChips
	}
	if keepEnded <= 0 {
		keepEnded = devices.DefaultKeepEnded
	}
	if keepEndedTotals <= 0 {
		keepEndedTotals = devices.DefaultKeepEndedTotals
	}
	return Run{Type: "run", L1Warn: l1Warn, MaxChips: maxChips, KeepEnded: keepEnded, KeepEndedTotals: keepEndedTotals}
}

// RunSink is implemented by sinks that write the run line: the runtime
// calls Run once, before anything else.
type RunSink interface {
	Run(r *Run) error
}
