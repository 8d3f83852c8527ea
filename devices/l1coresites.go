package devices

// What filled the busiest core at the peak of L1 per core, by site
// (Options.SiteUsage; docs/pprof.md, l1_core_peak_space).
//
// A chip's L1 per core (l1core.go) is the lockstep L1 and L1_SMALL spans
// per bank of its live buffers, the per-core spans on its busiest bank
// and the resident CBs of its busiest core. The ledger keeps, per site
// (siteKey: site, type, op), the first as a running sum (siteAcct.span,
// charged with the site's bytes) and the second per bank (coreSites.banks,
// charged when a per-core buffer is placed and released); the CBs are one
// program's (l1Snap.prog). When the chip's total reaches a new peak, the
// sites whose spans changed since the previous one take their span as
// spanPeak (each change copied once, as sitetab.go's peaks), and the
// busiest bank's per-core sites are copied when per-core buffers came or
// went since. So the peak's sites, the busiest bank's and the CB bytes
// sum exactly to peak_l1_busiest_core.total_bytes, at a cost per event
// bounded by what it changed.

// coreSites is a chip's per-site holdings on its busiest core.
type coreSites struct {
	// spanTouched: accounts whose span changed since the last peak.
	spanTouched []*siteAcct
	// banks: per L1 bank, per site, the per-core spans there; gen counts
	// their changes.
	banks map[uint32]map[siteKey]uint64
	gen   uint64
	// peakBank's sites at the peak (peakHas: the peak had per-core
	// buffers), copied when banks' generation was peakGen.
	peak     map[siteKey]uint64
	peakBank uint32
	peakGen  uint64
	peakHas  bool
}

// spanTouch notes that a's span changed since the last peak.
func (cs *chipSites) spanTouch(a *siteAcct) {
	if !a.spanTouched {
		a.spanTouched = true
		cs.l1core.spanTouched = append(cs.l1core.spanTouched, a)
	}
}

// respan makes one of site k's lockstep buffers hold span on each core
// instead of old (setSpan).
func (cs *chipSites) respan(k siteKey, old, span uint64) {
	if cs == nil || Counter(k.btype) >= CounterCB || old == span {
		return
	}
	a := cs.acct(k)
	a.span -= min(a.span, old)
	a.span += span
	cs.spanTouch(a)
}

// perCoreSpan adds (or takes away) span bytes of site k's per-core
// buffers on bank.
func (cs *chipSites) perCoreSpan(bank uint32, k siteKey, span uint64, add bool) {
	if cs == nil || span == 0 {
		return
	}
	l := &cs.l1core
	m := l.banks[bank]
	if m == nil {
		if !add {
			return
		}
		if l.banks == nil {
			l.banks = map[uint32]map[siteKey]uint64{}
		}
		m = map[siteKey]uint64{}
		l.banks[bank] = m
	}
	v := m[k]
	if add {
		v += span
	} else {
		v -= min(v, span)
	}
	if v == 0 {
		delete(m, k)
		if len(m) == 0 {
			delete(l.banks, bank)
		}
	} else {
		m[k] = v
	}
	l.gen++
}

// l1CorePeak keeps what each site holds on the busiest core at s, the
// chip's new L1-per-core peak.
func (cs *chipSites) l1CorePeak(s *l1Snap) {
	if cs == nil {
		return
	}
	l := &cs.l1core
	for _, a := range l.spanTouched {
		a.spanPeak = a.span
		a.spanTouched = false
	}
	clear(l.spanTouched)
	l.spanTouched = l.spanTouched[:0]
	switch {
	case s.hasBank && (!l.peakHas || l.peakBank != s.bank || l.peakGen != l.gen):
		if l.peak == nil {
			l.peak = map[siteKey]uint64{}
		}
		clear(l.peak)
		for k, v := range l.banks[s.bank] {
			l.peak[k] = v
		}
		l.peakHas, l.peakBank, l.peakGen = true, s.bank, l.gen
	case !s.hasBank && l.peakHas:
		clear(l.peak)
		l.peakHas = false
	}
}

// l1CoreClear forgets what the chip's cores hold now (it closed, or an
// anomaly reset its totals); the peak's holdings stay.
func (cs *chipSites) l1CoreClear() {
	if cs == nil {
		return
	}
	for _, a := range cs.accts {
		if a.span != 0 {
			a.span = 0
			cs.spanTouch(a)
		}
	}
	if len(cs.l1core.banks) > 0 {
		clear(cs.l1core.banks)
		cs.l1core.gen++
	}
}

// l1CorePeakOf is what site k held on the busiest core at the chip's
// L1-per-core peak.
func (cs *chipSites) l1CorePeakOf(k siteKey, a *siteAcct) uint64 {
	return a.spanPeak + cs.l1core.peak[k]
}

// perCoreSites charges (or uncharges) per-core buffer idx's spans on its
// banks to its site, on its chip; it runs once the buffer's op is known
// (after core.opAlloc) and before its slot goes.
func (p *allocView) perCoreSites(idx uint32, add bool) {
	if !p.sitesOn {
		return
	}
	pb := p.pcBufs[idx]
	if pb == nil {
		return
	}
	b := p.bufs.slots.at(idx)
	c := p.chip(b.chip)
	k := siteKey{b.site, b.btype, p.ops.bufOf(idx)}
	for _, pc := range pb.cores {
		if pc.spanKnown {
			c.sites.perCoreSpan(pc.bank, k, pc.span, add)
		}
	}
}
