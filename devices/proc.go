package devices

import "github.com/tttrace/tttrace/events"

// proc is the ledger of one traced process: its lifecycle core (core.go)
// and the rule families that read it, each with its own state. apply
// hands each event to the core or to the family whose event it is; the
// core tells the families of its own moments through the rules methods
// below, the one place where the families meet.
type proc struct {
	core
	allocs allocView  // the allocator's view (allocator.go, allocmem.go)
	l1     l1Rules    // CB groups, L1 headroom and clashes (cb.go, l1.go)
	traces traceRules // Metal trace (trace.go)

	win procWindows // its windows (tttrace mark: window.go)
}

func newProc(pid uint32, set *settings) *proc {
	p := &proc{core: newCore(pid)}
	p.set = set
	p.rules = p
	p.allocs = allocView{core: &p.core}
	p.l1 = l1Rules{core: &p.core, av: &p.allocs, progs: make(map[uint64]*progCBs)}
	p.traces = traceRules{core: &p.core}
	return p
}

func (p *proc) apply(e *events.Event) {
	p.stats.Events++
	if p.l1.nchecks > 0 {
		// The layout a check waits for is over (l1.go).
		switch {
		case e.Kind == events.KindExit:
			p.l1.flushChecks()
		case e.Kind != events.KindCBAlloc:
			if t := p.threads[e.Tid]; t != nil && t.checkPending {
				p.l1.runCheck(t)
			}
		}
	}
	if p.allocs.nreqs > 0 {
		// A request's alloc is the thread's next event; anything else
		// means it threw (allocator.go).
		switch {
		case e.Kind == events.KindExit:
			p.allocs.flushRequests()
		case e.Kind == events.KindAllocOom:
			// Handled below: the thread's request failed, seen failing.
		case e.Kind != events.KindAlloc:
			if t := p.threads[e.Tid]; t != nil && t.req != nil &&
				!(e.Kind == events.KindAllocRequest && perCoreNext(t.req, e)) {
				p.allocs.failRequest(t)
			}
		}
	}
	if p.exited {
		p.anomaly(anAfterExit, e, "%s after the process exited", e.Kind)
		return
	}
	if e.DeviceKind == events.DeviceChip && p.refuseChip(e) {
		return
	}
	if e.ReadError {
		p.anomaly(anReadError, e, "%s: the probe could not read the object", e.Kind)
	}
	if p.npending > 0 && e.Kind != events.KindView {
		if t := p.threads[e.Tid]; t != nil && t.pending {
			p.endPending(t, e)
		}
	}
	if e.DeviceKind == events.DeviceChip {
		c := p.chip(e.Chip)
		switch e.Kind {
		case events.KindAlloc, events.KindView, events.KindCBAlloc, events.KindCBLayout:
			c.closed = false // activity on a closed chip reopens it
		}
	}

	switch e.Kind {
	case events.KindAlloc:
		p.alloc(e)
	case events.KindFree:
		p.free(e)
	case events.KindView:
		p.view(e)
	case events.KindMarkDeallocated:
		p.stats.MarkDeallocated++
		if idx, ok := p.bufs.lookup(e.Object); ok {
			// "Without releasing underlying device memory": the chip's
			// allocator holds it until the chip (or its mesh) closes.
			p.bufs.detach(idx, slotReleased)
			p.stats.MarkedHeld++
		}
	case events.KindCBLayout:
		p.stats.CBLayouts++
		t := p.thread(e.Tid)
		t.hasLayout, t.layoutProg, t.layoutID = true, e.Object, e.Seq
		p.l1.rerunCheck(t, e)
	case events.KindCBAlloc:
		p.l1.cbAlloc(e, p.opCB(e))
	case events.KindCBTeardown:
		p.stats.CBTeardowns++
		t := p.thread(e.Tid)
		t.hasTeardown, t.teardownProg = true, e.Object
	case events.KindCBFree:
		p.l1.cbFree(e)
	case events.KindProgramDestroy:
		p.l1.programDestroy(e)
	case events.KindDeviceClose:
		p.stats.DeviceCloses++
		if e.DeviceKind != events.DeviceChip {
			p.anomaly(anUnknownDevice, e, "device_close of a %s device %#x", e.DeviceKind, e.Device)
			return
		}
		p.closeChip(e.Chip, e)
	case events.KindMeshClose:
		p.meshClose(e)
	case events.KindAllocCapacity:
		p.allocs.capacity(e)
	case events.KindAllocRequest:
		p.allocs.request(e)
	case events.KindAllocOom:
		p.allocs.oom(e)
	case events.KindTrace:
		if t := p.traces.trace(e); t != nil && len(t.cbPeak) > 0 {
			p.l1.applyPeak(t.cbPeak, e)
		}
	case events.KindProgramDispatch:
		p.dispatch(e)
	case events.KindOpEnter:
		p.opEnter(e)
	case events.KindRuntimeID:
		// Its id is on the records of its launch (the runtime's join).
	case events.KindExit:
		p.exited, p.exitCode, p.exitSignal = true, e.ExitCode, e.ExitSignal
	default:
		p.anomaly(anUnknownKind, e, "event kind %d", uint8(e.Kind))
	}
}

// alloc handles GraphTracker::track_allocate: the core records the
// buffer, the allocator's view places it (by the thread's
// BankManager::allocate_buffer request, if any: a request whose buffer
// does not count is unplaced), Metal trace sees it, and the core charges
// it.
func (p *proc) alloc(e *events.Event) {
	var req *allocReq
	if p.allocs.nreqs > 0 {
		if t := p.threads[e.Tid]; t != nil && t.req != nil {
			req = p.allocs.takeRequest(t)
		}
	}
	idx, ok := p.core.record(e)
	if !ok {
		if req != nil {
			p.allocs.unplaced(req, e)
		}
		return
	}
	p.allocs.allocPlace(idx, e, req)
	p.traces.traceAlloc(idx, e)
	op := p.core.opAlloc(idx, e) // before the charge: its site is per op
	p.core.charge(idx, e)
	p.allocs.perCoreSites(idx, true) // its op known (l1coresites.go)
	p.core.opPeak(op)
}

// dispatch handles ProgramImpl::generate_dispatch_commands: program
// e.Object is enqueued on e's device (every enqueue, cache hit or miss).
// On each chip of the device, every core the program's CBs cover now
// holds exactly them, unless a trace is captured on the chip: then the
// capture keeps each core's peak, made resident at its replays
// (resident.go).
func (p *proc) dispatch(e *events.Event) {
	p.stats.ProgramDispatches++
	var mesh uint32
	one := [1]int32{e.Chip}
	chips := one[:]
	switch e.DeviceKind {
	case events.DeviceChip:
	case events.DeviceMesh:
		// A mesh's chips, or, when the ledger learnt none (no mesh
		// buffer taught them), those its CBs were laid out on: TT-Metal
		// lays a mesh workload's CBs out per chip.
		mesh = p.meshIdx[e.Device]
		if m := p.meshes[mesh]; mesh != 0 && m != nil && len(m.chips) > 0 {
			chips = m.chips
		} else {
			chips = p.l1.programChips(e.Object)
		}
	default:
		p.anomaly(anUnknownDevice, e, "program %#x dispatched on a %s device %#x", e.Object, e.DeviceKind, e.Device)
		return
	}
	known := len(chips) > 0
	for _, id := range chips {
		cores, ok := p.l1.programCores(e.Object, mesh, id)
		if !ok {
			known = false
			continue
		}
		if p.traces.capturing(id) {
			p.traces.noteCBs(id, e.Object, cores)
			continue
		}
		p.l1.setResident(p.chip(id), e.Object, cores, e)
	}
	if !known {
		p.stats.DispatchesUnknown++
	}
}

// free hands GraphTracker::track_deallocate to the core; a buffer
// allocated before tracing began may still be freed in the allocator's
// view.
func (p *proc) free(e *events.Event) {
	if p.core.free(e) {
		p.allocs.unknownFreeMem(e)
	}
}

// closeChip handles Device::close of chip id: the core releases its
// buffers, its CB groups and allocator go, and it is closed.
func (p *proc) closeChip(id int32, e *events.Event) {
	c := p.core.releaseChip(id, e)
	p.l1.releaseCBGroups(cbMatch{chip: id}, e)
	p.l1.clearResidency(c, e)
	c.l1Clear()
	p.allocs.closeAlloc(c)
	p.core.closedChip(c, e)
	p.traces.traceClosed(id)
}

// meshClose handles distributed::MeshDevice::close: the mesh's buffers and
// CB groups go, its chips are closed, its own allocator (bank managers)
// is dropped, and the pointer is forgotten.
func (p *proc) meshClose(e *events.Event) {
	p.stats.MeshCloses++
	idx, ok := p.meshIdx[e.Device]
	if !ok {
		return
	}
	m := p.meshes[idx]
	p.core.releaseMesh(idx, e)
	p.l1.releaseCBGroups(cbMatch{mesh: idx}, e)
	chips := append([]int32(nil), m.chips...)
	for _, id := range chips {
		p.closeChip(id, e)
	}
	if m.alloc != nil {
		p.allocs.dropGroup(m.alloc) // its allocator goes with it
	}
	p.core.forgetMesh(e.Device, idx)
}

// released is the core's one moment the families hear of (rules).
func (p *proc) released(idx uint32, b *bufEntry, ts uint64) { p.allocs.allocRelease(idx, b, ts) }
