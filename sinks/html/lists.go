package html

import (
	"fmt"
	"strconv"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks"
)

// The page's lists: failed allocations, L1 clashes, trace records, leaks.

// site is where site id of ps allocated, in one line ("" when unknown).
func site(ps *devices.ProcessSummary, id uint32) string {
	if id == 0 {
		return ""
	}
	if w := sinks.SiteWhere(ps, id); w != "" {
		return fmt.Sprintf("site %d: %s", id, sinks.Printable(w))
	}
	return fmt.Sprintf("site %d", id)
}

func failures(pv *procView, ctx numCtx, ps *devices.ProcessSummary, t0 uint64) {
	shown := min(len(ps.AllocFailures), MaxFailures)
	if n := uint64(shown); ps.Stats.AllocFailures > n {
		pv.FailMore = ps.Stats.AllocFailures - n
	}
	for i := range ps.AllocFailures[:shown] {
		f := &ps.AllocFailures[i]
		p := fmt.Sprintf("alloc_failures.%d.", i)
		fv := failView{Type: sinks.Printable(f.BufferType), Cause: f.Cause, Advice: sinks.Printable(sinks.FailureAdvice(f)), Thrown: f.Thrown,
			Site: site(ps, f.Site)}
		switch {
		case f.Device != nil:
			fv.Where = fmt.Sprintf("chip %d", *f.Device)
		case f.MeshDevice != "":
			fv.Where = "mesh " + sinks.Printable(f.MeshDevice)
		default:
			fv.Where = "no known chip"
		}
		if fv.Cause == "" {
			fv.Cause = "unknown"
		}
		typ := f.BufferType
		fv.Fields = []labeled{
			{"size", ctx.bytes(p+"size", typ, f.Size)},
			{"page size", ctx.bytes(p+"page_size", typ, f.PageSize)},
			{"banks", ctx.count(p+"banks", typ, uint64(f.Banks))},
			{"per bank", ctx.bytes(p+"size_per_bank", typ, f.SizePerBank)},
			{"bank size", ctx.bytes(p+"bank_size", typ, f.BankSize)},
		}
		if f.TotalAllocated != nil {
			fv.Fields = append(fv.Fields,
				labeled{"allocated then (per bank)", ctx.bytes(p+"total_allocated_bytes", typ, *f.TotalAllocated)},
				labeled{"free then (per bank)", ctx.bytes(p+"total_free_bytes", typ, *f.TotalFree)},
				labeled{"largest free block then", ctx.bytes(p+"largest_free_block_bytes", typ, *f.LargestFree)})
		}
		fv.Fields = append(fv.Fields, labeled{"at", ctx.at(p+"ts_ns", typ, f.TsNs, t0)}, labeled{"seq", ctx.count(p+"seq", typ, f.Seq)})
		fv.HoldersN = ctx.count(p+"holders_count", typ, uint64(f.HoldersCount))
		fv.HoldersB = ctx.bytes(p+"holders_bytes", typ, f.HoldersBytes)
		fv.Nothing = f.HoldersCount == 0
		for j := range f.Holders {
			h := &f.Holders[j]
			hp := fmt.Sprintf("%sholders.%d.", p, j)
			hv := holderView{Buffer: sinks.Printable(h.Buffer), Address: ctx.hex(hp+"address", typ, h.Address), Size: ctx.bytes(hp+"size", typ, h.Size),
				Who: who(h.Mesh, h.Buffer, h.MeshDevice, h.Tid, h.Seq), Site: site(ps, h.Site)}
			if h.Span != nil {
				n := ctx.bytes(hp+"span", typ, *h.Span)
				hv.Span = &n
			}
			fv.Holders = append(fv.Holders, hv)
		}
		fv.More = f.HoldersCount - len(f.Holders)
		for j := range f.HolderSites {
			h := &f.HolderSites[j]
			hp := fmt.Sprintf("%sholder_sites.%d.", p, j)
			fv.HSites = append(fv.HSites, holderSiteView{Site: site(ps, h.Site), Buffers: ctx.count(hp+"buffers", typ, h.Buffers), Size: ctx.bytes(hp+"bytes", typ, h.Bytes)})
		}
		pv.Failures = append(pv.Failures, fv)
	}
}

func who(mesh bool, buffer, meshDevice string, tid uint32, seq uint64) string {
	s := "buffer " + sinks.Printable(buffer)
	if mesh {
		s = fmt.Sprintf("mesh buffer %s on mesh %s", sinks.Printable(buffer), sinks.Printable(meshDevice))
	}
	return fmt.Sprintf("%s, tid %d seq %d", s, tid, seq)
}

func clashes(pv *procView, ctx numCtx, ps *devices.ProcessSummary) {
	pv.ClashN = ctx.count("stats.l1_clashes", "L1", ps.Stats.L1Clashes)
	shown := min(len(ps.L1Clashes), MaxClashes)
	if n := uint64(shown); ps.Stats.L1Clashes > n {
		pv.ClashMore = ps.Stats.L1Clashes - n
	}
	for i := range ps.L1Clashes[:shown] {
		n := &ps.L1Clashes[i]
		p := fmt.Sprintf("l1_clashes.%d.", i)
		cv := clashView{Chip: strconv.Itoa(int(n.Chip)), Program: sinks.Printable(n.Program), Fields: []labeled{
			{"CBs end at", ctx.hex(p+"cb_region_end", "L1", n.CBRegionEnd)},
			{"lowest L1 buffer at", ctx.hex(p+"lowest_l1_address", "L1", n.LowestL1Address)},
			{"headroom", ctx.signed(p+"headroom", "L1", n.Headroom)},
			{"L1 buffers in the way", ctx.count(p+"l1_buffers_count", "L1", uint64(n.L1BuffersCount))},
			{"their bytes", ctx.bytes(p+"l1_buffers_bytes", "L1", n.L1BuffersBytes)},
		}}
		for j := range n.L1Buffers {
			b := &n.L1Buffers[j]
			bp := fmt.Sprintf("%sl1_buffers.%d.", p, j)
			cv.Buffers = append(cv.Buffers, holderView{Buffer: sinks.Printable(b.Buffer), Address: ctx.hex(bp+"address", "L1", b.Address),
				Size: ctx.bytes(bp+"size", "L1", b.Size), Who: who(b.Mesh, b.Buffer, b.MeshDevice, b.Tid, b.Seq), Site: site(ps, b.Site)})
		}
		cv.More = n.L1BuffersCount - len(n.L1Buffers)
		pv.Clashes = append(pv.Clashes, cv)
	}
}

func traces(ctx numCtx, ps *devices.ProcessSummary, t0 uint64) *traceView {
	tr := ps.Traces
	if tr == nil {
		return nil
	}
	tv := &traceView{Counts: []labeled{
		{"captures", ctx.count("traces.captures", "", tr.Captures)},
		{"replays", ctx.count("traces.replays", "", tr.Replays)},
		{"releases", ctx.count("traces.releases", "", tr.Releases)},
		{"hazards", ctx.count("traces.hazard_count", "", tr.HazardCount)},
		{"invalid replays", ctx.count("traces.invalid_replay_count", "", tr.InvalidReplayCount)},
		{"region hazards", ctx.count("traces.region_hazard_count", "", tr.RegionHazardCount)},
		{"buffers checked", ctx.count("traces.checked", "", tr.Checked)},
	}}
	for _, l := range []struct {
		kind, field string
		list        []devices.TraceNote
		count       uint64
	}{
		{"trace_hazard: a replay overwrites a live buffer", "hazards", tr.Hazards, tr.HazardCount},
		{"trace_replay_invalid: a replay of a released trace, or of one whose device closed", "invalid_replays", tr.InvalidReplays, tr.InvalidReplayCount},
		{"trace_region_hazard: a trace buffer under another live trace's high-water mark", "region_hazards", tr.RegionHazards, tr.RegionHazardCount},
	} {
		if len(l.list) == 0 {
			continue
		}
		tl := traceList{Kind: l.kind}
		shown := min(len(l.list), MaxTraceRecords)
		if n := uint64(shown); l.count > n {
			tl.More = l.count - n
		}
		for i := range l.list[:shown] {
			n := &l.list[i]
			p := fmt.Sprintf("traces.%s.%d.", l.field, i)
			it := traceItem{Text: traceText(ps, n)}
			it.Fields = append(it.Fields, labeled{"at", ctx.at(p+"ts_ns", "", n.TsNs, t0)}, labeled{"seq", ctx.count(p+"seq", "", n.Seq)})
			if n.Replay != 0 {
				it.Fields = append(it.Fields, labeled{"replay", ctx.count(p+"replay", "", n.Replay)})
			}
			if b := n.Buffer; b != nil {
				it.Fields = append(it.Fields, labeled{"buffer at", ctx.hex(p+"buffer.address", b.BufferType, b.Address)},
					labeled{"its size", ctx.bytes(p+"buffer.size", b.BufferType, b.Size)})
			}
			if b := n.Captured; b != nil {
				it.Fields = append(it.Fields, labeled{"captured buffer at", ctx.hex(p+"captured.address", b.BufferType, b.Address)},
					labeled{"its size", ctx.bytes(p+"captured.size", b.BufferType, b.Size)})
			}
			tl.Items = append(tl.Items, it)
		}
		tv.Lists = append(tv.Lists, tl)
	}
	return tv
}

// traceText says what a trace record is about, in words.
func traceText(ps *devices.ProcessSummary, n *devices.TraceNote) string {
	s := ""
	if n.Device >= 0 {
		s = fmt.Sprintf("chip %d", n.Device)
	}
	if n.MeshDevice != "" {
		s += " mesh " + sinks.Printable(n.MeshDevice)
	}
	if n.Trace != nil {
		s += fmt.Sprintf(" trace %d", *n.Trace)
	}
	s += fmt.Sprintf(" cq %d", n.CQ)
	if n.Reason != "" {
		s += ": " + sinks.Printable(n.Reason)
	}
	if b := n.Buffer; b != nil {
		s += fmt.Sprintf("; buffer %s (%s)", sinks.Printable(b.Buffer), sinks.Printable(b.BufferType))
		if w := site(ps, b.Site); w != "" {
			s += " " + w
		}
	}
	if b := n.Captured; b != nil {
		s += fmt.Sprintf("; overlaps captured buffer %s", sinks.Printable(b.Buffer))
		if w := site(ps, b.Site); w != "" {
			s += " " + w
		}
	}
	return s
}

func leaks(ctx numCtx, ps *devices.ProcessSummary) leaksView {
	var lv leaksView
	for i, g := range ps.LeakGroups {
		p := fmt.Sprintf("leak_groups.%d.", i)
		lv.Groups = append(lv.Groups, leakGroupRow{Chip: strconv.Itoa(int(g.Device)), Type: sinks.Printable(g.Type),
			Count: ctx.count(p+"count", g.Type, g.Count), Bytes: ctx.bytes(p+"bytes", g.Type, g.Bytes)})
	}
	for i := range ps.LeakSites {
		if i == MaxLeakSites {
			lv.SiteMore = len(ps.LeakSites) - i
			break
		}
		ls := &ps.LeakSites[i]
		p := fmt.Sprintf("leak_sites.%d.", i)
		chips := ""
		for j, d := range ls.Devices {
			if j > 0 {
				chips += ", "
			}
			chips += strconv.Itoa(int(d))
		}
		where := site(ps, ls.Site)
		if where == "" {
			where = "unknown site"
		}
		lv.Sites = append(lv.Sites, leakSiteRow{Where: where, Test: sinks.Printable(ls.Test), Chips: chips,
			Count: ctx.count(p+"count", "", ls.Count), Bytes: ctx.bytes(p+"bytes", "", ls.Bytes)})
	}
	// The largest leaks, in the summary's order among them (the list's
	// index is its path).
	type ix struct {
		i    int
		size uint64
	}
	var top []ix
	n := 0
	for lk := range ps.AllLeaks() {
		top = insertTop(top, ix{n, lk.Size}, MaxLeaks, func(a, b ix) bool { return a.size > b.size || (a.size == b.size && a.i < b.i) })
		n++
	}
	lv.ListMore = n - len(top)
	want := map[int]bool{}
	for _, t := range top {
		want[t.i] = true
	}
	i := 0
	for lk := range ps.AllLeaks() {
		if want[i] {
			p := fmt.Sprintf("leaks.%d.", i)
			lv.List = append(lv.List, leakRow{Chip: strconv.Itoa(int(lk.Device)), Type: sinks.Printable(lk.Type), Buffer: sinks.Printable(lk.Buffer),
				Site: site(ps, lk.Site), Address: ctx.hex(p+"address", lk.Type, lk.Address), Size: ctx.bytes(p+"size", lk.Type, lk.Size),
				Marked: lk.MarkedDeallocated})
		}
		i++
	}
	lv.Unplaced = ps.UnplacedLeakCount()
	if t := ps.Trimmed; t != nil && t.Leaks > 0 {
		lv.Trimmed = fmt.Sprintf("%d leak(s) not listed: the process is kept as totals only (past --keep-ended)", t.Leaks)
	}
	return lv
}

// insertTop keeps the max best of a sorted list with x added (less: x
// comes first).
func insertTop[T any](top []T, x T, max int, less func(a, b T) bool) []T {
	if len(top) == max && !less(x, top[len(top)-1]) {
		return top
	}
	i := len(top)
	for i > 0 && less(x, top[i-1]) {
		i--
	}
	if len(top) < max {
		top = append(top, x)
	}
	copy(top[i+1:], top[i:len(top)-1])
	top[i] = x
	return top
}
