package devices

import "sort"

// What the runtime asks of the ledger between events, family by family:
// each answer is read from a process's rule families through the process.

// LayoutAnomalies counts, over every process, the anomalies only a wrong
// layout (or a bad read) makes: a buffer_type outside TT-Metal's enum
// (invalid_buffer_type), a size no device has (implausible_size). Any is
// a sign that the offsets or widths tttrace reads Buffer with do not fit
// the library: its numbers cannot be trusted.
func (l *Ledger) LayoutAnomalies() uint64 { return l.hooks.layoutBad }

// L1Headroom returns the current L1 headroom of every chip pid touched,
// sorted by chip id: what a live view shows. Nil for an unknown pid.
func (l *Ledger) L1Headroom(pid uint32) []Headroom {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	out := make([]Headroom, 0, len(p.chips))
	for id, c := range p.chips {
		out = append(out, Headroom{Device: id, HasHeadroom: c.hr.has, Headroom: c.hr.cur, LowestL1Address: c.hr.low, CBRegionEnd: c.hr.end})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// Flush runs the clash checks still waiting for the end of a CB layout
// (the thread did nothing since): call it before a final Summary.
func (l *Ledger) Flush() {
	for _, p := range l.retired {
		p.flushChecks()
		p.flushRequests()
	}
	for _, p := range l.procs {
		p.flushChecks()
		p.flushRequests()
	}
}

// LastTs returns the latest event time (ts_ns) applied.
func (l *Ledger) LastTs() uint64 { return l.lastTs }

// FlushBefore runs the waiting clash checks whose layout's last CB came
// before tsNs: a layout quiet that long is complete even if its thread made
// no TT-Metal call since (TT-Metal threw, and the program went on without
// one). The caller picks tsNs far enough back that no CB of a layout still
// being tracked can be pending in the ring.
func (l *Ledger) FlushBefore(tsNs uint64) {
	for _, p := range l.procs {
		p.failRequestsBefore(tsNs)
		if p.nchecks == 0 {
			continue
		}
		for _, t := range p.threads {
			if t.checkPending && t.checkTs < tsNs {
				p.runCheck(t)
			}
		}
	}
}
