package devices

// Retention of ended processes. A service (--all) meets processes for as
// long as it runs; keeping each ended one in full (its buffer table, leak
// list, anomalies) grew tttrace without bound (600 short processes: +128
// MB, never returned). So the ledger keeps the last keepEnded ended
// processes in full; older ones are trimmed to their totals and counters
// (a ProcessSummary without its lists, what was dropped counted in
// Trimmed), and past keepTotals trimmed ones the oldest are folded into
// the summary's DroppedProcesses counts. What a report or an exit status
// needs from them (leak counts and bytes, anomalies, events) survives
// both steps.

// Defaults of Options.KeepEnded and Options.KeepEndedTotals.
const (
	DefaultKeepEnded       = 100
	DefaultKeepEndedTotals = 10000
)

// retention is the ledger's retention state.
type retention struct {
	keepEnded, keepTotals int
	ended                 []*proc          // in full, in the order they ended
	trimmed               []ProcessSummary // in the order they ended
	trimmedHead           int              // trimmed[:trimmedHead] are folded (reused lazily)
	dropped               DroppedProcesses
}

// setRetention sets how many ended processes are kept in full (keepEnded)
// and how many more as totals only (keepTotals); 0 or less: the defaults.
func newRetention(keepEnded, keepTotals int) retention {
	if keepEnded <= 0 {
		keepEnded = DefaultKeepEnded
	}
	if keepTotals <= 0 {
		keepTotals = DefaultKeepEndedTotals
	}
	return retention{keepEnded: keepEnded, keepTotals: keepTotals}
}

// processEnded notes that p exited, for Trim.
func (r *retention) processEnded(p *proc) {
	r.ended = append(r.ended, p)
}
