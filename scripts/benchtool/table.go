package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

// row is one line of the table: which goal, the figure, what was
// measured, the goal and whether it is met ("" when the row is context).
type row struct {
	item, figure, measured, goal, met string
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func (r *results) print(w io.Writer, c *config) {
	m := r.Machine
	hv := ""
	if m.Hypervisor {
		hv = ", virtualized"
	}
	fmt.Fprintf(w, "\n## tttrace benchmarks, %s\n\n", m.Date)
	fmt.Fprintf(w, "Machine: %s, %d CPUs%s, %.0f GiB, **kernel %s**, %s. Load average at start %s, at end %s; %s.\n",
		m.CPU, m.CPUs, hv, m.MemGiB, m.Kernel, m.Go, m.LoadStart, m.LoadEnd, quietVerdict(m.OtherBefore, m.OtherDuring))
	burst := fmt.Sprintf("`ttwork --scenario burst --events %d` (alloc + free on 2 threads)", c.events)
	if c.threads > 0 {
		burst = fmt.Sprintf("`ttwork --scenario burst --events %d --threads %d` (alloc + free on %d threads)", c.events, c.threads, c.threads)
	}
	fmt.Fprintf(w, "Burst: replica %s; %d interleaved rounds, medians. Took %.0f s.\n\n", burst, c.rounds, r.Seconds)
	var rows []row
	rows = append(rows, r.costRows(c)...)
	rows = append(rows, r.placementRows(c)...)
	rows = append(rows, r.lossRows(c)...)
	rows = append(rows, r.consumerRows()...)
	rows = append(rows, r.attachRows(c)...)
	rows = append(rows, r.memoryRows(c)...)
	rows = append(rows, r.fixedRows()...)
	rows = append(rows, r.allocatorRows(c)...)
	rows = append(rows, r.pythonRows()...)
	rows = append(rows, r.opsRows(c)...)
	fmt.Fprintln(w, "| # | figure | measured | goal | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	noisy := 0
	for _, x := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", x.item, x.figure, x.measured, x.goal, x.met)
		if strings.Contains(x.measured, spreadMark) {
			noisy++
		}
	}
	fmt.Fprintln(w)
	if noisy > 0 {
		what := fmt.Sprintf("%d rows are", noisy)
		if noisy == 1 {
			what = "1 row is"
		}
		fmt.Fprintf(w, "%s marked ⚠: the rounds spread more than %.0f%% ((max - min) / median of the rounds' values): "+
			"such a median is not a figure to compare on its own.\n\n", what, spreadLimit*100)
	}
}

// byMode returns the burst seconds of the good runs of each mode, by round.
func (r *results) byMode() (map[string]map[int]float64, map[string][]string) {
	return byModeOf(r.Cost)
}

// byModeOf returns the burst seconds of the good runs of each mode of runs, by round.
func byModeOf(runs []costRun) (map[string]map[int]float64, map[string][]string) {
	secs := map[string]map[int]float64{}
	bad := map[string][]string{}
	for _, x := range runs {
		if secs[x.Mode] == nil {
			secs[x.Mode] = map[int]float64{}
		}
		if x.Err != "" || x.Exit != 0 {
			bad[x.Mode] = append(bad[x.Mode], fmt.Sprintf("round %d: exit %d %s", x.Round+1, x.Exit, x.Err))
			continue
		}
		secs[x.Mode][x.Round] = x.BurstSecs
	}
	return secs, bad
}

func values(m map[int]float64) []float64 {
	var v []float64
	for _, x := range m {
		v = append(v, x)
	}
	return v
}

func (r *results) costRows(c *config) []row {
	if len(r.Cost) == 0 {
		return nil
	}
	secs, bad := r.byMode()
	n := float64(c.events)
	const un, floor, rep = "untraced", floorMode, "in-process socket reporter"
	u := median(values(secs[un]))
	added := func(mode string) float64 { return (median(values(secs[mode])) - u) / n * 1e6 }
	// Per-round ratio of added costs, to show the spread of the ratio.
	ratios := func(mode, ref string) []float64 {
		var v []float64
		for round, s := range secs[mode] {
			uu, ok1 := secs[un][round]
			f, ok2 := secs[ref][round]
			if ok1 && ok2 && f-uu > 0 {
				v = append(v, (s-uu)/(f-uu))
			}
		}
		return v
	}
	// What a row reports, per round: the mode's added cost per event
	// over its round's untraced run (the untraced run's own seconds).
	perRound := func(mode string) []float64 {
		if mode == un {
			return values(secs[un])
		}
		var v []float64
		for round, s := range secs[mode] {
			if uu, ok := secs[un][round]; ok {
				v = append(v, (s-uu)/n*1e6)
			}
		}
		return v
	}
	timing := func(mode string) string {
		v := values(secs[mode])
		lo, hi := minMax(v)
		s := fmt.Sprintf("%.2f s (%.2f-%.2f, %d runs)", median(v), lo, hi, len(v))
		if len(bad[mode]) > 0 {
			s += fmt.Sprintf("; %d failed: %s", len(bad[mode]), strings.Join(bad[mode], "; "))
		}
		return s + spreadFlag(perRound(mode))
	}
	fa, ra, fr := added(floor), added(rep), added(recordMode)
	recLo, recHi := minMax(ratios(recordMode, floor))
	rows := []row{
		{"1", "burst untraced", timing(un) + fmt.Sprintf(", %.3f µs/event", u/n*1e6), "", ""},
		{"1", "floor: count-only uprobes at the addresses tttrace attaches (" + floorSites(c) + "), placed as tttrace places them (rows 2p): " +
			"one program built with cilium/ebpf's assembler that only counts hits (benchtool -floor-lib)",
			timing(floor) + fmt.Sprintf("; added **%.2f µs/event**", fa) + r.countCheck(floor, c), "(reference)", ""},
		{"1", "recording floor: the floor's program also writes one 128-byte ring record per hit with the time, pid and tid and " +
			"what tttrace reads there (a Buffer's 96 bytes and 16 of its device at track_allocate / track_deallocate, 8 bytes of the " +
			"stack elsewhere), never waking the reader, which polls and throws the records away (benchtool -floor-lib -floor-record): " +
			"the least a tracer handing the same facts to user space pays",
			timing(recordMode) + fmt.Sprintf("; added **%.2f µs/event** = **%.2fx floor** (rounds %.2f-%.2f)", fr, fr/fa, recLo, recHi) +
				r.countCheck(recordMode, c), "(reference)", ""},
		{"1", "in-process reporter: blocking Unix-socket send per event (REPORTER=socket)",
			// The floor is what the traps alone cost: a tracer at these
			// addresses adds at least that, so at or above the reporter
			// no tracer there can be under it (issue #33 part 1).
			timing(rep) + fmt.Sprintf("; added **%.2f µs/event**; the floor (the traps alone) is %.2fx it", ra, fa/ra) + r.countCheck(rep, c), "(alternative)", ""},
	}
	const stacksOn, stacksOff = "tttrace --json -o /dev/null", "tttrace --json -o /dev/null --no-stacks"
	for _, mode := range []string{stacksOn, "tttrace (human report) -o /dev/null", "tttrace --json --no-events", stacksOff, copyMode} {
		if len(secs[mode]) == 0 {
			rows = append(rows, row{"1", mode, "no successful run: " + strings.Join(bad[mode], "; "), "", "**no**"})
			continue
		}
		// Issue 21: allocation sites (on by default) at almost the cost of
		// a counter, and the records alone at the counter's.
		goal := 1.15
		if mode == stacksOff {
			goal = 1.05
		}
		a := added(mode)
		rf := a / fa
		lo, hi := minMax(ratios(mode, floor))
		rows = append(rows, row{"1", mode,
			timing(mode) + fmt.Sprintf("; added **%.2f µs/event** = **%.2fx floor** (rounds %.2f-%.2f), %.2fx the recording floor, %.1fx reporter",
				a, rf, lo, hi, a/fr, a/ra) + r.countCheck(mode, c),
			fmt.Sprintf("≤ %.2fx floor; < reporter", goal),
			fmt.Sprintf("floor: %s; reporter: %s", yesNo(len(secs[floor]) > 0 && fa > 0 && rf <= goal), yesNo(a < ra))})
	}
	if len(secs[stacksOn]) > 0 && len(secs[stacksOff]) > 0 {
		// Half the burst's events are allocations, the ones with a stack:
		// an allocation and its free cost twice the added per event.
		on, off := added(stacksOn)*2, added(stacksOff)*2
		rows = append(rows, row{"1", "allocation stacks: added per allocation (and its free), stacks on (default: known stacks) vs --no-stacks",
			fmt.Sprintf("%.2f µs vs %.2f µs = **%.2fx** (the stack: %.2f µs)", on, off, on/off, on-off), "≤ 2x", yesNo(on <= 2*off)})
		if len(secs[copyMode]) > 0 {
			k := added(copyMode) * 2
			rows = append(rows, row{"1", "allocation stacks: added per allocation, stacks on (default: a site's stack copied until the kernel knows it, then a token) vs --known-stacks=false (every stack copied) and --no-stacks",
				fmt.Sprintf("%.2f µs vs %.2f µs vs %.2f µs: the stack costs %.2f µs known, %.2f µs copied", on, k, off, on-off, k-off), "less than copied", yesNo(on < k)})
		}
	}
	perHit := map[string]float64{}
	for _, p := range r.Profile {
		if p.Err == "" && p.ProgRuns > 0 {
			perHit[p.Mode] = p.ProgNsPerRun
		}
	}
	if base, ok := perHit[floorMode]; ok {
		rd, ok1 := perHit[opMode(opRead)]
		rd2, ok2 := perHit[opMode(opRead2)]
		rg, ok3 := perHit[opMode(opRing)]
		if ok1 && ok2 && ok3 {
			rows = append(rows, row{"1", "what one operation of a uprobe program costs here: the count-only program with one more operation per hit, less the count-only program (one run each, kernel BPF stats on; 8 bytes each, so the operation, not the bytes)",
				fmt.Sprintf("count-only program %.0f ns per hit; a user-memory read (bpf_probe_read_user of the stack) **%.0f ns**, a second one %.0f ns; a ring record (reserve + submit, reader not woken) **%.0f ns**",
					base, rd-base, rd2-rd, rg-base), "", ""})
		}
	}
	for _, p := range r.Profile {
		if p.Err != "" && p.ProgRuns == 0 {
			rows = append(rows, row{"1", "BPF program time, " + p.Mode, "not measured: " + p.Err, "", ""})
			continue
		}
		rows = append(rows, row{"1", "where it goes, " + p.Mode + " (one run, kernel BPF stats on)",
			fmt.Sprintf("uprobe program %.2f µs per hit (%d hits); tracer process CPU %.2f µs/event",
				p.ProgNsPerRun/1e3, p.ProgRuns, p.TracerCPUSecs/n*1e6), "", ""})
	}
	return rows
}

// floorSites says how many sites the floor probes, in how many functions.
func floorSites(c *config) string {
	plan, err := floorPlan(filepath.Join(c.replica, "libtt_metal.so"), false, false)
	if err != nil {
		return "?"
	}
	fns := map[uint64]bool{}
	for _, s := range plan.AttachPoints {
		fns[s.Func()] = true
	}
	return fmt.Sprintf("%d sites in %d functions, %s plan", len(plan.AttachPoints), len(fns), plan.Kind)
}

// countCheck says whether every run of mode saw every event.
func (r *results) countCheck(mode string, c *config) string {
	known, ok := 0, 0
	lost := int64(0)
	for _, x := range r.Cost {
		if x.Mode != mode || x.Counted < 0 {
			continue
		}
		known++
		if x.Counted == int64(c.events) {
			ok++
		}
		if x.Lost > 0 {
			lost += x.Lost
		}
	}
	if known == 0 {
		return ""
	}
	s := fmt.Sprintf("; saw all %d events in %d/%d runs", c.events, ok, known)
	if lost > 0 {
		s += fmt.Sprintf(", %d lost", lost)
	}
	return s
}

func (r *results) lossRows(c *config) []row {
	var rows []row
	if len(r.Cost) > 0 {
		var rates []float64
		runs, clean, knownLost := 0, 0, 0
		for _, x := range r.Cost {
			if !strings.HasPrefix(x.Mode, "tttrace") || x.BurstSecs <= 0 {
				continue
			}
			runs++
			rates = append(rates, float64(c.events)/x.BurstSecs)
			// Exit 7 is tttrace's "events were lost".
			if x.Exit == 0 && x.Lost <= 0 {
				clean++
			}
			if x.Lost >= 0 {
				knownLost++
			}
		}
		lo, hi := minMax(rates)
		rows = append(rows, row{"2", "loss at the default ring (64 MiB), every tttrace run of the burst",
			fmt.Sprintf("%d of %d runs lost nothing (exit 0; lost_events 0 in the %d with a summary); traced rate %.0fk events/s median, %.0fk-%.0fk",
				clean, runs, knownLost, median(rates)/1e3, lo/1e3, hi/1e3),
			"0 lost at ≥ 1M events/s from 2 threads",
			fmt.Sprintf("0 lost: %s; rate ≥ 1M/s: %s", yesNo(clean == runs && runs > 0), yesNo(hi >= 1e6))})
	}
	bySize := map[string][]lossRun{}
	var order []string
	for _, l := range r.Loss {
		if bySize[l.RingSize] == nil {
			order = append(order, l.RingSize)
		}
		bySize[l.RingSize] = append(bySize[l.RingSize], l)
	}
	for _, size := range order {
		ls := bySize[size]
		exact, flagged := 0, 0
		var parts []string
		for _, l := range ls {
			if l.Err == "" && l.Lost == l.Missing {
				exact++
			}
			if !l.Complete && l.Exit == 7 {
				flagged++
			}
			parts = append(parts, fmt.Sprintf("%d/%d", l.Lost, l.Missing))
		}
		rows = append(rows, row{"2", fmt.Sprintf("`--ring-size %s`: lost calls (lost_records alloc+free) / really missing (truth calls - ledger allocs+frees)", size),
			fmt.Sprintf("%s; equal in %d/%d runs; complete:false and exit 7 in %d/%d", strings.Join(parts, ", "), exact, len(ls), flagged, len(ls)),
			"equal; complete:false; exit 7",
			yesNo(exact == len(ls) && flagged == len(ls) && len(ls) > 0)})
	}
	return rows
}

func (r *results) consumerRows() []row {
	if len(r.Consumer) == 0 {
		return nil
	}
	by := map[string][]consumerRun{}
	var order []string
	for _, x := range r.Consumer {
		if by[x.Name] == nil {
			order = append(order, x.Name)
		}
		by[x.Name] = append(by[x.Name], x)
	}
	var rows []row
	for _, name := range order {
		var rate, ns, allocs []float64
		for _, x := range by[name] {
			rate = append(rate, x.EventsPerS)
			ns = append(ns, x.NsPerEvent)
			allocs = append(allocs, x.AllocsEvent)
		}
		lo, hi := minMax(rate)
		_, amax := minMax(allocs)
		what := map[string]string{
			"AllocFree/JSON":   "consumer, decode + ledger + NDJSON, burst records, 1 CPU",
			"AllocFree/Ledger": "consumer, decode + ledger (report mode), burst records, 1 CPU",
			"Mixed/JSON":       "consumer, decode + ledger + NDJSON, with mesh buffers and CBs, 1 CPU",
			"Mixed/Ledger":     "consumer, decode + ledger, with mesh buffers and CBs, 1 CPU",
			"CBRecords":        "ledger, a program cache's CB records (cb_layout, cb_alloc with core ranges, program_dispatch; an L1 buffer between programs), 1 CPU",
		}[name]
		if what == "" {
			what = "consumer " + name
		}
		goal, met := "", ""
		if name == "AllocFree/JSON" {
			goal = "≥ 3M events/s; 0 allocs/event"
			met = fmt.Sprintf("rate: %s; allocs: %s", yesNo(median(rate) >= 3e6), yesNo(amax == 0))
		} else if strings.HasPrefix(name, "Mixed") || name == "CBRecords" {
			goal = "0 allocs/event"
			met = yesNo(amax == 0)
			if amax > 0 {
				met += " (devices/ allocates per CB program; events/ nothing)"
			}
		}
		rows = append(rows, row{"3", what,
			fmt.Sprintf("**%.2fM events/s** median (%.0f ns/event; runs %.2f-%.2fM, %d of them), %.4f allocs/event",
				median(rate)/1e6, median(ns), lo/1e6, hi/1e6, len(rate), amax), goal, met})
	}
	return rows
}

func (r *results) attachRows(c *config) []row {
	if len(r.Attach) == 0 {
		return nil
	}
	small, errS := symbolCounts(filepath.Join(c.replica, "libtt_metal.so"))
	big, errB := symbolCounts(filepath.Join(c.big, "libtt_metal.so"))
	desc := func(li libInfo, err error) string {
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.1f MB, %d .dynsym + %d .symtab symbols", li.SizeMB, li.Dynsym, li.Symtab)
	}
	type key struct {
		lib, mode string
		cold      bool
	}
	var order []key
	ready := map[key][]float64{}
	rss := map[key][]float64{}
	anon := map[key][]float64{}
	file := map[key][]float64{}
	heap := map[key][]float64{}
	errs := map[key][]string{}
	for _, a := range r.Attach {
		k := key{a.Lib, a.Mode, a.Cold}
		if _, ok := ready[k]; !ok {
			order = append(order, k)
			ready[k] = nil
		}
		if a.Err != "" {
			errs[k] = append(errs[k], a.Err)
			continue
		}
		ready[k] = append(ready[k], a.ReadySecs)
		if a.MaxRSSKiB > 0 {
			rss[k] = append(rss[k], float64(a.MaxRSSKiB)/1024)
			anon[k] = append(anon[k], float64(a.AnonKiB)/1024)
			file[k] = append(file[k], float64(a.FileKiB)/1024)
		}
		heap[k] = append(heap[k], float64(a.HeapMB))
	}
	rows := []row{{"4", "libraries", "small: replica, " + desc(small, errS) + "; big: generated, " + desc(big, errB), "big ≥ 200 MB, ≥ 500k symbols",
		yesNo(errB == nil && big.SizeMB >= 200 && big.Dynsym+big.Symtab >= 500000)}}
	for _, k := range order {
		cache := "warm"
		if k.cold {
			cache = "cold (library evicted from the page cache)"
		}
		v := ready[k]
		lo, hi := minMax(v)
		meas := fmt.Sprintf("**%.3f s** (%.3f-%.3f, %d runs)", median(v), lo, hi, len(v))
		if len(errs[k]) > 0 {
			meas += fmt.Sprintf("; %d failed: %s", len(errs[k]), errs[k][0])
		}
		goal, met := "", ""
		if k.lib == "big" {
			goal = "≤ 0.5 s"
			met = yesNo(len(v) > 0 && median(v) <= 0.5)
		}
		rows = append(rows, row{"4", fmt.Sprintf("attach time, %s library, `%s`, %s: tttrace start to --ready-file", k.lib, k.mode, cache), meas, goal, met})
	}
	for _, which := range []string{"small", "big"} {
		var is, res, lay, plan, mb, n []float64
		for _, x := range r.Resolve {
			if x.Lib == which && x.Err == "" {
				is, res, mb, n = append(is, x.IsTTMetalMs), append(res, x.ResolveMs), append(mb, x.AllocMB), append(n, float64(x.Mallocs))
				lay, plan = append(lay, x.LayoutMs), append(plan, x.PlanMs)
			}
		}
		if len(is) > 0 {
			rows = append(rows, row{"4", fmt.Sprintf("where it goes, %s library: ttmetal.IsTTMetal (the symbol scan), ResolveSymbols, ResolveLayout, ChoosePlan (the code sweep) in one process", which),
				fmt.Sprintf("IsTTMetal %.1f ms, ResolveSymbols %.1f ms, ResolveLayout %.1f ms, ChoosePlan %.1f ms, allocating %.1f MB in %.0f allocations (medians of %d)",
					median(is), median(res), median(lay), median(plan), median(mb), median(n), len(is)), "", ""})
		}
	}
	ks := key{"small", "-p PID", false}
	kb := key{"big", "-p PID", false}
	if len(rss[ks]) > 0 && len(rss[kb]) > 0 {
		s, b := median(rss[ks]), median(rss[kb])
		hs, hb := median(heap[ks]), median(heap[kb])
		heapDesc := func(h float64) string {
			if h < 0 {
				return "no GC ran"
			}
			return fmt.Sprintf("%.0f MB", h)
		}
		extra := 0.0
		if errB == nil && errS == nil {
			extra = float64(big.Dynsym + big.Symtab - small.Dynsym - small.Symtab)
		}
		rows = append(rows, row{"4", "tracer peak RSS (VmHWM), `-p PID`, small vs big library",
			fmt.Sprintf("%.0f MB vs **%.0f MB** (+%.0f MB, %.0f bytes per extra symbol); sampled peaks: RssAnon %.0f vs %.0f MB, RssFile %.0f vs %.0f MB; Go heap peak %s vs %s",
				s, b, b-s, (b-s)*(1<<20)/extra, median(anon[ks]), median(anon[kb]), median(file[ks]), median(file[kb]), heapDesc(hs), heapDesc(hb)),
			"not proportional to the symbol count (< 4 MB more)", yesNo(b-s < 4)})
	}
	return rows
}

func (r *results) memoryRows(c *config) []row {
	var rows []row
	byMode := map[string][]memoryRun{}
	var order []string
	for _, m := range r.Memory {
		if byMode[m.Mode] == nil {
			order = append(order, m.Mode)
		}
		byMode[m.Mode] = append(byMode[m.Mode], m)
	}
	for _, mode := range order {
		ms := byMode[mode]
		var rss []float64
		for _, m := range ms {
			rss = append(rss, float64(m.MaxRSSKiB))
		}
		// The run with the median peak RSS stands for the mode.
		sort.Slice(ms, func(i, j int) bool { return ms[i].MaxRSSKiB < ms[j].MaxRSSKiB })
		m := ms[len(ms)/2]
		lo, hi := minMax(rss)
		meas := fmt.Sprintf("**%.0f MB** VmHWM (%.0f-%.0f, %d runs); sampled peaks RssAnon %.0f MB, RssFile %.0f MB; Go heap peak %d MB; peak live buffers %d",
			float64(m.MaxRSSKiB)/1024, lo/1024, hi/1024, len(ms), float64(m.AnonKiB)/1024, float64(m.FileKiB)/1024, m.HeapMB, m.Live)
		if m.Err != "" || m.Exit != 0 {
			meas += fmt.Sprintf(" (exit %d %s)", m.Exit, m.Err)
		}
		goal, met := "≤ 200 MB", yesNo(m.MaxRSSKiB > 0 && m.MaxRSSKiB <= 200*1024 && m.Live >= int64(c.hold))
		rows = append(rows, row{"5", fmt.Sprintf("tracer memory, %d live buffers, `-p PID` %s", c.hold, mode), meas, goal, met})
	}
	return rows
}
