package devices

// meshState is one distributed::MeshDevice. Its chips are not in any event
// that names it: they are learned from the per-chip views created right
// after a mesh allocation. Everything the mesh holds (its buffers and the CB
// groups aimed at it) is charged on exactly its current chip set, and tot
// is the sum of it, so a chip joining or leaving moves tot at once.
type meshState struct {
	ptr   uint64  // MeshDevice*
	chips []int32 // in the order learned
	tot   [NumCounters]uint64
	l1    l1Heap    // live L1 mesh buffers
	cbEnd cbEnds    // of the CB groups aimed at the mesh
	sites meshSites // per-site accounting, when on
	// alloc: the mesh's own allocator, once a mesh buffer was allocated
	// through one of its bank managers (allocator.go).
	alloc *chipAlloc
	// l1Lock, l1NoSpan: its lockstep spans on each of its chips (l1core.go).
	l1Lock, l1NoSpan uint64
}

func (m *meshState) has(chip int32) bool {
	for _, c := range m.chips {
		if c == chip {
			return true
		}
	}
	return false
}
