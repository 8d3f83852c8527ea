package session

// A child forked by a registered interpreter runs its parent's interpreter
// at the same addresses: BPF walks its Python stacks with a copy of its
// parent's registration, taken at the fork if the parent had one then
// (bpf/python.h, py_fork), else at the child's first capture after the
// parent's registration (bpf/pyheir.h). User space registers such a child
// itself as soon as it knows of both (heir), whichever comes first: the
// child's fork record (inherit) or the parent's registration (heirs). A
// child that ended before either keeps its parent's interpreter, through
// which its Python stacks are read.

// heir registers child, forked at ts by the process whose stack state is
// pp, which is registered (pp.py): its interpreter's files are read, so now,
// before it imports and allocates (pytest-xdist's workers,
// multiprocessing), not at its next link-map change.
func (a *allocSites) heir(child uint32, ps, pp *procStacks, ts uint64) {
	a.pythonOf(child)
	if ps.py != nil || ps.pyInfo != nil || pp.pyInfo == nil {
		return
	}
	// It could not be read (it ended already). Its Python stacks were
	// walked with a copy of its parent's registration from when both the
	// fork and the registration had happened: those of its parent's
	// interpreter, at the same addresses. Allocations before that have
	// none (python_not_registered).
	info := *pp.pyInfo
	ps.py, ps.pyShared, ps.pyInfo, ps.pyAt = pp.py, true, &info, max(pp.pyAt, ts)
	if ps.py != nil {
		a.evalStops(child, ps)
	}
}

// heirs: pid was just registered (ps.py). Its children known by their fork
// records (forked by this incarnation of pid) that have no interpreter yet
// were forked before it was registered; each is registered now, or if it
// ended, keeps pid's.
func (a *allocSites) heirs(pid uint32, ps *procStacks) {
	for child, cs := range a.procs {
		if cs.forker == ps && child != pid && cs.py == nil && cs.pyInfo == nil && !cs.pyWait {
			a.heir(child, cs, ps, 0)
		}
	}
}
