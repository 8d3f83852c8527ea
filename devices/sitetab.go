package devices

// Per-site accounting (Options.SiteUsage): for each chip, what each
// allocation site holds there now, what it ever put there, and what it
// held when the chip's counter of that buffer type reached its peak. It
// follows the ledger's own charges (a mesh buffer on every chip of its
// mesh, a chip joining or leaving a mesh, closes), so the sums over sites
// equal the chip's totals and peaks. Circular buffers have no site and are
// not in it. The cost, only when on, is a map update per chip charged;
// a new peak copies the sites changed since the previous one (amortized
// once per change). Beside them, what each site holds on the chip's
// busiest core at the peak of L1 per core (l1coresites.go).

// siteKey is one site's holdings of one buffer type.
type siteKey struct {
	site  uint32
	btype uint8
	// op: the row + 1 of the TT-NN op it was allocated in (opstate.go);
	// 0: none.
	op uint16
}

// siteAcct is what one site holds of one type on one chip.
type siteAcct struct {
	bytes, objs           uint64 // now
	allocBytes, allocObjs uint64 // charged here since tracing began
	peakBytes             uint64 // at the chip's peak of this type
	touched               bool   // in chipSites.touched
	// span: its lockstep L1 / L1_SMALL buffers' spans per bank (on every
	// core) now; spanPeak: at the chip's L1-per-core peak; spanTouched:
	// in chipSites.spanTouched.
	span, spanPeak uint64
	spanTouched    bool
}

// chipSites is the per-site accounting of one chip; nil when off (every
// method then does nothing).
type chipSites struct {
	accts map[siteKey]*siteAcct
	// touched[t]: accounts of type t changed since that type's last peak.
	touched [CounterCB][]*siteAcct
	l1core  coreSites // on the busiest core (l1coresites.go)
}

func newChipSites() *chipSites { return &chipSites{accts: map[siteKey]*siteAcct{}} }

func (cs *chipSites) acct(k siteKey) *siteAcct {
	a := cs.accts[k]
	if a == nil {
		a = &siteAcct{}
		cs.accts[k] = a
	}
	return a
}

func (cs *chipSites) touch(a *siteAcct, t uint8) {
	if !a.touched {
		a.touched = true
		cs.touched[t] = append(cs.touched[t], a)
	}
}

// charge puts bytes and objs of site k on the chip, span of them on
// each core (lockSpan): before the chip's counters, so that a new peak
// sees them.
func (cs *chipSites) charge(k siteKey, bytes, objs, span uint64) {
	if cs == nil || Counter(k.btype) >= CounterCB {
		return
	}
	a := cs.acct(k)
	a.bytes += bytes
	a.objs += objs
	a.allocBytes += bytes
	a.allocObjs += objs
	cs.touch(a, k.btype)
	if span != 0 {
		a.span += span
		cs.spanTouch(a)
	}
}

// uncharge takes them off again.
func (cs *chipSites) uncharge(k siteKey, bytes, objs, span uint64) {
	if cs == nil || Counter(k.btype) >= CounterCB {
		return
	}
	a := cs.acct(k)
	a.bytes -= min(a.bytes, bytes)
	a.objs -= min(a.objs, objs)
	cs.touch(a, k.btype)
	if span != 0 {
		a.span -= min(a.span, span)
		cs.spanTouch(a)
	}
}

// peak is called when the chip's counter t reached a new peak: every site
// changed since the previous peak now holds at the peak what it holds now.
func (cs *chipSites) peak(t Counter) {
	if cs == nil || t >= CounterCB {
		return
	}
	for _, a := range cs.touched[t] {
		a.peakBytes = a.bytes
		a.touched = false
	}
	cs.touched[t] = cs.touched[t][:0]
}

// clear forgets what the chip holds now (an anomaly reset its totals).
func (cs *chipSites) clear() {
	if cs == nil {
		return
	}
	for k, a := range cs.accts {
		a.bytes, a.objs = 0, 0
		cs.touch(a, k.btype)
	}
	cs.l1CoreClear()
}

// meshSite is what a mesh's buffers of one site and type hold (on each
// of its chips): their bytes, count, and lockstep spans on each core.
type meshSite struct{ bytes, objs, span uint64 }

// meshSites is a mesh's holdings by site, made at its first buffer.
type meshSites map[siteKey]*meshSite

// add adds (or, with neg, takes) one buffer of site k (span: lockSpan).
func (ms *meshSites) add(k siteKey, size, span uint64, neg bool) {
	if Counter(k.btype) >= CounterCB {
		return
	}
	if *ms == nil {
		*ms = meshSites{}
	}
	s := (*ms)[k]
	if s == nil {
		s = &meshSite{}
		(*ms)[k] = s
	}
	if neg {
		s.bytes -= min(s.bytes, size)
		s.objs -= min(s.objs, 1)
		s.span -= min(s.span, span)
		if s.bytes == 0 && s.objs == 0 {
			delete(*ms, k)
		}
		return
	}
	s.bytes += size
	s.objs++
	s.span += span
}
