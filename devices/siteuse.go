package devices

import (
	"sort"

	"github.com/tttrace/tttrace/events"
)

// Per-site accounting (Options.SiteUsage): for each chip, what each
// allocation site holds there now, what it ever put there, and what it
// held when the chip's counter of that buffer type reached its peak. It
// follows the ledger's own charges (a mesh buffer on every chip of its
// mesh, a chip joining or leaving a mesh, closes), so the sums over sites
// equal the chip's totals and peaks. Circular buffers have no site and are
// not in it. The cost, only when on, is a map update per chip charged;
// a new peak copies the sites changed since the previous one (amortized
// once per change).

// siteKey is one site's holdings of one buffer type.
type siteKey struct {
	site  uint32
	btype uint8
}

// siteAcct is what one site holds of one type on one chip.
type siteAcct struct {
	bytes, objs           uint64 // now
	allocBytes, allocObjs uint64 // charged here since tracing began
	peakBytes             uint64 // at the chip's peak of this type
	touched               bool   // in chipSites.touched
}

// chipSites is the per-site accounting of one chip.
type chipSites struct {
	accts map[siteKey]*siteAcct
	// touched[t]: accounts of type t changed since that type's last peak.
	touched [CounterCB][]*siteAcct
}

// meshSite is what a mesh's buffers of one site and type hold (on each
// of its chips).
type meshSite struct{ bytes, objs uint64 }

func (c *chipState) siteAcct(k siteKey) *siteAcct {
	if c.sites == nil {
		c.sites = &chipSites{accts: map[siteKey]*siteAcct{}}
	}
	a := c.sites.accts[k]
	if a == nil {
		a = &siteAcct{}
		c.sites.accts[k] = a
	}
	return a
}

func (cs *chipSites) touch(a *siteAcct, t uint8) {
	if !a.touched {
		a.touched = true
		cs.touched[t] = append(cs.touched[t], a)
	}
}

// siteCharge puts bytes and objs of site k on chip c: before the chip's
// counters, so that a new peak sees them.
func (p *proc) siteCharge(c *chipState, k siteKey, bytes, objs uint64) {
	if !p.sitesOn || Counter(k.btype) >= CounterCB {
		return
	}
	a := c.siteAcct(k)
	a.bytes += bytes
	a.objs += objs
	a.allocBytes += bytes
	a.allocObjs += objs
	c.sites.touch(a, k.btype)
}

// siteUncharge takes them off again.
func (p *proc) siteUncharge(c *chipState, k siteKey, bytes, objs uint64) {
	if !p.sitesOn || Counter(k.btype) >= CounterCB {
		return
	}
	a := c.siteAcct(k)
	a.bytes -= min(a.bytes, bytes)
	a.objs -= min(a.objs, objs)
	c.sites.touch(a, k.btype)
}

// sitePeak is called when counter t of c reached a new peak: every site
// changed since the previous peak now holds at the peak what it holds now.
func (c *chipState) sitePeak(t Counter) {
	if c.sites == nil || t >= CounterCB {
		return
	}
	for _, a := range c.sites.touched[t] {
		a.peakBytes = a.bytes
		a.touched = false
	}
	c.sites.touched[t] = c.sites.touched[t][:0]
}

// siteClear forgets what c holds now (an anomaly reset its totals).
func (c *chipState) siteClear() {
	if c.sites == nil {
		return
	}
	for k, a := range c.sites.accts {
		a.bytes, a.objs = 0, 0
		c.sites.touch(a, k.btype)
	}
}

// meshSiteAdd adds (or, with neg, takes) one buffer of site k to mesh m's
// holdings.
func (p *proc) meshSiteAdd(m *meshState, k siteKey, size uint64, neg bool) {
	if !p.sitesOn || Counter(k.btype) >= CounterCB {
		return
	}
	if m.sites == nil {
		m.sites = map[siteKey]*meshSite{}
	}
	s := m.sites[k]
	if s == nil {
		s = &meshSite{}
		m.sites[k] = s
	}
	if neg {
		s.bytes -= min(s.bytes, size)
		s.objs -= min(s.objs, 1)
		if s.bytes == 0 && s.objs == 0 {
			delete(m.sites, k)
		}
		return
	}
	s.bytes += size
	s.objs++
}

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
	// Desc describes the site (from the process's SiteSource; nil:
	// unknown).
	Desc *Site

	btype uint8
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
			if a.bytes == 0 && a.objs == 0 && a.allocBytes == 0 && a.allocObjs == 0 && a.peakBytes == 0 {
				continue
			}
			out = append(out, SiteUsage{
				Site: k.site, Device: id, Type: events.BufferType(k.btype).String(), btype: k.btype,
				InuseBytes: a.bytes, InuseObjects: a.objs,
				AllocBytes: a.allocBytes, AllocObjects: a.allocObjs,
				PeakBytes: a.peakBytes,
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
		}
		return a.btype < b.btype
	})
	return out
}
