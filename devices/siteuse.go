package devices

import (
	"sort"

	"github.com/tttrace/tttrace/events"
)

// The per-site accounting seen from a summary (sitetab.go keeps it).

// SiteUsage is what one allocation site did on one chip with one buffer
// type: the rows of a memory profile (sinks/pprof). The sums over sites
// of InuseBytes and PeakBytes equal the chip's current total and peak of
// that type (DeviceSummary); site 0 holds the buffers whose stack is
// unknown.
type SiteUsage struct {
	Site   uint32
	Device int32
	Type   string // DRAM, L1, SYSTEM_MEMORY, L1_SMALL, TRACE
	// InuseBytes, InuseObjects: held now (at the end: the leaks).
	InuseBytes, InuseObjects uint64
	// AllocBytes, AllocObjects: charged on the chip while traced (a mesh
	// buffer on each chip of its mesh, also a chip that joined later).
	AllocBytes, AllocObjects uint64
	// PeakBytes: held when the chip's counter of this type first reached
	// its peak (Peaks).
	PeakBytes uint64
	// L1CorePeakBytes: held on the chip's busiest core when L1 per core
	// first reached its peak (peak_l1_busiest_core): its lockstep L1 /
	// L1_SMALL buffers' spans per bank plus its per-core buffers' spans
	// on the busiest bank. With the busiest core's CBs
	// (PeakL1BusiestCore.CBBytes) the chip's rows sum to its TotalBytes.
	L1CorePeakBytes uint64
	// Op: the TT-NN op its buffers were allocated in; nil: none.
	Op *OpRef
	// Desc describes the site (from the process's SiteSource; nil:
	// unknown).
	Desc *Site

	btype uint8
	op    uint16
}

// siteUsage lists p's per-site accounting by site, chip and type.
func (p *proc) siteUsage() []SiteUsage {
	if !p.sitesOn {
		return nil
	}
	var out []SiteUsage
	for id, c := range p.chips {
		if c.sites == nil {
			continue
		}
		// Sites changed since the last peak hold there what they held
		// then: their peakBytes is already that.
		for k, a := range c.sites.accts {
			l1c := c.sites.l1CorePeakOf(k, a)
			if a.bytes == 0 && a.objs == 0 && a.allocBytes == 0 && a.allocObjs == 0 && a.peakBytes == 0 && l1c == 0 {
				continue
			}
			out = append(out, SiteUsage{
				Site: k.site, Device: id, Type: events.BufferType(k.btype).String(), btype: k.btype, op: k.op, Op: p.ops.ref(k.op),
				InuseBytes: a.bytes, InuseObjects: a.objs,
				AllocBytes: a.allocBytes, AllocObjects: a.allocObjs,
				PeakBytes: a.peakBytes, L1CorePeakBytes: l1c,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		switch {
		case a.Site != b.Site:
			return a.Site < b.Site
		case a.Device != b.Device:
			return a.Device < b.Device
		case a.btype != b.btype:
			return a.btype < b.btype
		}
		return a.op < b.op
	})
	return out
}
