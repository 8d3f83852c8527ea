package html_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/diff"
	tthtml "github.com/tttrace/tttrace/sinks/html"
)

// truth is what the workload knows it did, independently of the ledger:
// per chip and counter the bytes held and their peak.
type truth struct {
	cur, peak map[string]uint64 // "chip/dram_bytes"
}

func (t *truth) add(chip int32, field string, d int64) {
	k := fmt.Sprintf("%d/%s", chip, field)
	t.cur[k] = uint64(int64(t.cur[k]) + d)
	t.peak[k] = max(t.peak[k], t.cur[k])
}

type stream struct {
	t       *testing.T
	l       *devices.Ledger
	w       []sinks.Sink
	rng     *rand.Rand
	seq, ts uint64
}

func (s *stream) emit(pid uint32, e events.Event) {
	s.seq++
	s.ts += uint64(1 + s.rng.IntN(5000))
	e.Pid, e.Seq, e.TsNs = pid, s.seq, s.ts
	s.l.Apply(&e)
	for _, k := range s.w {
		k.Event(&e)
	}
}

// sites describes sites 1..9 as Python frames in test_model.py.
type sites struct{}

func (sites) Site(id uint32) (devices.Site, bool) {
	if id == 0 || id > 9 {
		return devices.Site{}, false
	}
	return devices.Site{Site: id, Native: []devices.NativeFrame{{PC: 0x1000 + uint64(id), Module: "/lib/libtt_metal.so", Function: "tt::tt_metal::Buffer::create"}},
		Python: []devices.PyFrame{{Function: fmt.Sprintf("layer%d", id), File: "model.py", Line: int(id) * 10}, {Function: "test_model", File: "tests/test_model.py", Line: 7}}}, true
}

func (sites) Python() *devices.PythonInfo {
	return &devices.PythonInfo{Version: "3.12.1", Supported: true}
}

// workload runs a random program: two processes; DRAM through modelled
// bank managers on chips 0 and 3 (random allocations and frees, some of
// which fail), L1 buffers and a program's CBs that clash with one on chip
// 0, L1 per core on chip 3 (lockstep L1 buffers through its modelled L1
// bank manager, programs whose CBs are dispatched on its cores), buffers
// left allocated. It returns the page and the ledger's summary.
func workload(t *testing.T, n int, seed uint64, more ...sinks.Sink) ([]byte, *devices.Summary, map[uint32]*truth) {
	var out bytes.Buffer
	w := tthtml.New(&out)
	l := devices.NewLedger(devices.Options{Observer: w.ChipTotals, AllocObserver: w.AllocState, SiteUsage: true})
	s := &stream{t: t, l: l, w: append([]sinks.Sink{w}, more...), rng: rand.New(rand.NewPCG(seed, 3))}
	truths := map[uint32]*truth{}
	for _, pid := range []uint32{4100, 4200} {
		l.SetSites(pid, sites{})
		tr := &truth{cur: map[string]uint64{}, peak: map[string]uint64{}}
		truths[pid] = tr
		type mgr struct {
			chip int32
			ptr  uint64
			m    *alloc.Manager
		}
		var mgrs []*mgr
		for i, chip := range []int32{0, 3} {
			g := &mgr{chip: chip, ptr: 0xd0 + uint64(i)}
			s.emit(pid, dt.Capacity(chip, events.DRAM, g.ptr, 12, 1<<24, 32, 0x40))
			var err error
			if g.m, err = alloc.New(alloc.Config{Banks: 12, BankSize: 1 << 24, Offset: 0x40, Alignment: 32, BlockAlign: 32}); err != nil {
				t.Fatal(err)
			}
			mgrs = append(mgrs, g)
		}
		type live struct {
			g    *mgr
			addr uint64
			size uint64
		}
		bufs := map[uint64]live{}
		var keys []uint64
		next := uint64(pid) << 20
		for range n {
			g := mgrs[s.rng.IntN(len(mgrs))]
			if s.rng.IntN(5) < 2 && len(keys) > 0 {
				i := s.rng.IntN(len(keys))
				k := keys[i]
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
				b := bufs[k]
				delete(bufs, k)
				b.g.m.Free(b.addr)
				tr.add(b.g.chip, "dram_bytes", -int64(b.size))
				s.emit(pid, dt.Free(pid, k, b.g.chip))
				continue
			}
			req := alloc.Request{PageSize: 2048, Size: 2048 * uint64(1+s.rng.IntN(4000)), BottomUp: true}
			addr, f := g.m.Allocate(req)
			s.emit(pid, dt.Request(pid, g.ptr, req.Size, req.PageSize, true))
			if f != nil {
				continue // the next record shows it threw
			}
			next++
			bufs[next] = live{g, addr, req.Size}
			keys = append(keys, next)
			tr.add(g.chip, "dram_bytes", int64(req.Size))
			e := dt.AllocPage(pid, next, g.chip, events.DRAM, addr, req.Size, req.PageSize)
			e.Site = uint32(1 + s.rng.IntN(9))
			s.emit(pid, e)
		}
		l1PerCore(t, s, pid, tr, max(n/10, 20))
		// L1: a program's CBs end at 0x13000, an L1 buffer at 0x12000;
		// the program runs again: a clash.
		l1 := func(buf uint64, addr, size uint64) {
			e := dt.Alloc(pid, buf, 0, events.L1, addr, size)
			e.Site = 2
			s.emit(pid, e)
			tr.add(0, "l1_bytes", int64(size))
		}
		s.emit(pid, dt.CBLayout(pid, 0x9000, 0))
		s.emit(pid, dt.CB(pid, 0, 0x10000, 0x3000))
		l1(0xa0, 0x20000, 0x1000)
		l1(0xa1, 0x12000, 0x1000)
		s.emit(pid, dt.CBLayout(pid, 0x9000, 0))
		l1(0xa2, 0x30000, 0x4000)
		s.emit(pid, dt.Free(pid, 0xa0, 0))
		tr.add(0, "l1_bytes", -0x1000)
	}
	sum := l.Summary()
	for _, k := range s.w {
		if err := k.Summary(&sum); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes(), &sum, truths
}

// An n150 core's L1 on chip 3 of the workload: 64 banks of l1Bank at
// l1Base, L1_SMALL above.
const (
	l1Chip         = 3
	l1Base, l1Bank = 0x18000, 0xe8000
)

// l1PerCore runs n random steps on chip 3's L1: lockstep L1 buffers of k
// pages of 1 KiB per bank (64 k pages) placed by a modelled bank manager,
// frees, and programs dispatched whose CBs are 1 KiB x a on cores
// (0,0)-(3,3) and b KiB more above on core (2,2) alone. It keeps the truth
// by its own arithmetic: L1 per core is the buffers' spans per bank (every
// core holds each) plus the resident CBs of core (2,2), the busiest: the
// last program dispatched's a + b KiB.
func l1PerCore(t *testing.T, s *stream, pid uint32, tr *truth, n int) {
	t.Helper()
	const mgr = 0xe2
	s.emit(pid, dt.Capacity(l1Chip, events.L1, mgr, 64, l1Bank, 16, l1Base))
	s.emit(pid, dt.Capacity(l1Chip, events.L1Small, mgr+1, 64, 0x8000, 16, l1Base+l1Bank))
	m, err := alloc.New(alloc.Config{Banks: 64, BankSize: l1Bank, Offset: l1Base, Alignment: 16, BlockAlign: 16})
	if err != nil {
		t.Fatal(err)
	}
	type buf struct{ addr, span uint64 }
	live := map[uint64]buf{}
	var keys []uint64
	var spans, cbs uint64
	set := func(v uint64) {
		tr.add(l1Chip, "l1_busiest_core_bytes", int64(v)-int64(tr.cur[fmt.Sprintf("%d/l1_busiest_core_bytes", l1Chip)]))
	}
	next, prog := uint64(pid)<<24, uint64(pid)<<8
	for range n {
		switch r := s.rng.IntN(10); {
		case r < 2:
			prog++
			a, b := uint64(1+s.rng.IntN(32)), uint64(1+s.rng.IntN(8))
			s.emit(pid, dt.CBLayout(pid, prog, l1Chip))
			s.emit(pid, dt.CBOn(pid, l1Chip, 0x1000, a<<10, [4]uint16{0, 0, 3, 3}))
			s.emit(pid, dt.CBOn(pid, l1Chip, 0x1000+a<<10, b<<10, [4]uint16{2, 2, 2, 2}))
			s.emit(pid, dt.Dispatch(pid, prog, l1Chip))
			tr.add(l1Chip, "cb_bytes", int64((a+b)<<10)-int64(cbs))
			cbs = (a + b) << 10
		case r < 5 && len(keys) > 0:
			i := s.rng.IntN(len(keys))
			k := keys[i]
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			b := live[k]
			delete(live, k)
			m.Free(b.addr)
			spans -= b.span
			tr.add(l1Chip, "l1_bytes", -64*int64(b.span))
			s.emit(pid, dt.Free(pid, k, l1Chip))
		default:
			req := alloc.Request{PageSize: 1024, Size: 64 * 1024 * uint64(1+s.rng.IntN(16))}
			addr, f := m.Allocate(req)
			s.emit(pid, dt.Request(pid, mgr, req.Size, req.PageSize, false))
			if f != nil {
				continue
			}
			next++
			live[next] = buf{addr, req.Size / 64}
			keys = append(keys, next)
			spans += req.Size / 64
			tr.add(l1Chip, "l1_bytes", int64(req.Size))
			e := dt.AllocPage(pid, next, l1Chip, events.L1, addr, req.Size, req.PageSize)
			e.Site = uint32(1 + s.rng.IntN(9))
			s.emit(pid, e)
		}
		set(spans + cbs)
	}
}

var (
	numRe  = regexp.MustCompile(`<span class="n"([^>]*)>`)
	attrRe = regexp.MustCompile(`\s(data-[a-z-]+)="([^"]*)"`)
	dataRe = regexp.MustCompile(`(?s)<script type="application/json" id="tt-data">(.*?)</script>`)
)

// attrs are the data attributes of each number element of a page.
func numbers(page []byte) []map[string]string {
	var out []map[string]string
	for _, m := range numRe.FindAllSubmatch(page, -1) {
		a := map[string]string{}
		for _, kv := range attrRe.FindAllSubmatch(m[1], -1) {
			a[string(kv[1])] = html.UnescapeString(string(kv[2]))
		}
		out = append(out, a)
	}
	return out
}

// lookup finds the value at a dotted path of a JSON value.
func lookup(v any, path string) (any, bool) {
	for _, seg := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// asJSON is v marshalled and read back with its numbers exact.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// CheckNumbers compares every number element of page with the summary
// (or diff result) sum, and returns how many there were per field.
func checkNumbers(t *testing.T, page []byte, sum any) map[string]int {
	t.Helper()
	js := asJSON(t, sum)
	seen := map[string]int{}
	for _, a := range numbers(page) {
		field, val := a["data-field"], a["data-value"]
		var base any = js
		switch {
		case a["data-scope"] == "run" || a["data-scope"] == "diff":
		case a["data-proc"] != "":
			var ok bool
			if base, ok = lookup(js, "processes."+a["data-proc"]); !ok {
				t.Fatalf("%v: no such process", a)
			}
			if c := a["data-chip"]; c != "" {
				devs, _ := lookup(base, "devices")
				base = nil
				for _, d := range devs.([]any) {
					if id, _ := lookup(d, "device"); id.(json.Number).String() == c {
						base = d
					}
				}
				if base == nil {
					t.Fatalf("%v: no such chip", a)
				}
			}
		default:
			t.Fatalf("a number without a scope: %v", a)
		}
		got, ok := lookup(base, field)
		if !ok {
			t.Fatalf("%v: no field %s in the summary", a, field)
		}
		if n, ok := got.(json.Number); !ok || n.String() != val {
			t.Errorf("%v: the summary has %v", a, got)
		}
		seen[field]++
	}
	return seen
}

type pageData struct {
	Procs []struct {
		Proc  int `json:"proc"`
		Chips []struct {
			Chip int32 `json:"chip"`
			Mem  []struct {
				Type  string   `json:"type"`
				Field string   `json:"field"`
				Peak  string   `json:"peak"`
				Cap   uint64   `json:"cap"`
				Pts   []uint64 `json:"pts"`
			} `json:"mem"`
			Alloc []struct {
				Type     string   `json:"type"`
				Banks    uint64   `json:"banks"`
				Capacity uint64   `json:"capacity"`
				Used     []uint64 `json:"used"`
				Big      []uint64 `json:"largest_free"`
			} `json:"alloc"`
		} `json:"chips"`
		Icicle *icNode `json:"icicle"`
	} `json:"procs"`
}

type icNode struct {
	N string    `json:"n"`
	V [3]uint64 `json:"v"`
	C []*icNode `json:"c"`
}

func readData(t *testing.T, page []byte) *pageData {
	t.Helper()
	m := dataRe.FindSubmatch(page)
	if m == nil {
		t.Fatal("no chart data in the page")
	}
	var d pageData
	if err := json.Unmarshal(m[1], &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func TestPageNumbersAreTheSummary(t *testing.T) {
	page, sum, truths := workload(t, 3000, 35)
	seen := checkNumbers(t, page, sum)
	// What the page must show of each process and chip.
	for i := range sum.Processes {
		ps := &sum.Processes[i]
		if len(ps.AllocFailures) == 0 || len(ps.L1Clashes) == 0 || ps.LeakCount() == 0 {
			t.Fatalf("pid %d: the workload made %d failures, %d clashes, %d leaks: not every list", ps.Pid, len(ps.AllocFailures), len(ps.L1Clashes), ps.LeakCount())
		}
	}
	for _, f := range []string{"dram_bytes", "peaks.dram_bytes.value", "peaks.dram_bytes.ts_ns", "l1_bytes", "peaks.l1_bytes.value", "live_buffers",
		"allocator.dram.total_allocated_bytes", "allocator.dram.largest_free_block_bytes", "allocator.dram.bank_size", "alloc_failures.0.size",
		"alloc_failures.0.holders_bytes", "alloc_failures.0.holders.0.size", "l1_clashes.0.headroom", "min_l1_headroom.value", "leak_groups.0.bytes",
		"leak_sites.0.bytes", "stats.l1_clashes", "l1_busiest_core.total_bytes", "l1_busiest_core.l1_buffer_bytes", "l1_busiest_core.cb_bytes",
		"l1_busiest_core.l1_size", "peak_l1_busiest_core.total_bytes", "peak_l1_busiest_core.core.0", "peak_l1_busiest_core.core.1",
		"peak_l1_busiest_core.cb_bytes", "peak_l1_busiest_core.ts_ns"} {
		if seen[f] == 0 {
			t.Errorf("the page has no %s", f)
		}
	}
	if seen["dram_bytes"] != 4 || seen["peaks.dram_bytes.value"] != 4 {
		t.Errorf("dram_bytes of %d chips, peaks of %d: want every chip of both processes", seen["dram_bytes"], seen["peaks.dram_bytes.value"])
	}
	// The charts: each series ends at the summary's total and peaks at
	// the workload's own peak, which is the summary's.
	d := readData(t, page)
	if len(d.Procs) != 2 {
		t.Fatalf("%d processes in the chart data", len(d.Procs))
	}
	capped := map[bool]bool{} // an L1 per core series drawn with its cap, one without
	for pi, p := range d.Procs {
		ps := &sum.Processes[pi]
		tr := truths[ps.Pid]
		drawn := 0
		for _, c := range p.Chips {
			var dev *devices.DeviceSummary
			for j := range ps.Devices {
				if ps.Devices[j].Device == c.Chip {
					dev = &ps.Devices[j]
				}
			}
			for _, s := range c.Mem {
				var top, last uint64
				for i := 1; i < len(s.Pts); i += 2 {
					top = max(top, s.Pts[i])
					last = s.Pts[i]
				}
				k := fmt.Sprintf("%d/%s", c.Chip, s.Field)
				if top != tr.peak[k] || last != tr.cur[k] {
					t.Errorf("pid %d chip %d %s: drawn peak %d end %d, the workload's %d %d", ps.Pid, c.Chip, s.Type, top, last, tr.peak[k], tr.cur[k])
				}
				if s.Field == "dram_bytes" && (top != dev.Peaks.DRAMBytes.Value || last != dev.DRAMBytes) {
					t.Errorf("pid %d chip %d DRAM: drawn peak %d end %d, summary %d %d", ps.Pid, c.Chip, top, last, dev.Peaks.DRAMBytes.Value, dev.DRAMBytes)
				}
				if s.Field == "l1_busiest_core_bytes" {
					// L1 per core: its peak's marker names the summary's
					// peak; a core's L1 is its cap when the peak came
					// within half of it.
					now, pk := dev.L1BusiestCore, dev.PeakL1BusiestCore
					const size = l1Base + l1Bank + 0x8000
					wantCap := uint64(0)
					if 2*top >= size {
						wantCap = size
					}
					capped[wantCap != 0] = true
					if now == nil || pk == nil || top != pk.TotalBytes || last != now.TotalBytes || s.Peak != "peak_l1_busiest_core.total_bytes" ||
						s.Cap != wantCap || s.Type != "L1_CORE" {
						t.Errorf("pid %d chip %d L1 per core: drawn peak %d end %d cap %d (%s %q); summary %+v %+v", ps.Pid, c.Chip, top, last, s.Cap, s.Type, s.Peak, now, pk)
					}
					// Each time the busiest core held the most, it was
					// (2,2), with a program's CBs: the summary says so.
					if pk.Core == nil || *pk.Core != [2]uint16{2, 2} || pk.Program == "" || pk.CBBytes == 0 || pk.L1BufferBytes+pk.CBBytes != top {
						t.Errorf("pid %d chip %d: peak_l1_busiest_core %+v", ps.Pid, c.Chip, pk)
					}
				} else if s.Peak != "peaks."+s.Field+".value" || s.Cap != 0 {
					t.Errorf("pid %d chip %d %s: peak field %q, cap %d", ps.Pid, c.Chip, s.Type, s.Peak, s.Cap)
				}
				drawn++
			}
			for _, a := range c.Alloc {
				var at *devices.AllocatorType
				for _, typ := range devices.AllocatorTypes() {
					if devices.AllocatorKey(typ) == a.Type {
						at = dev.Allocator.Type(typ)
					}
				}
				if at == nil || at.TotalAllocated == nil {
					t.Fatalf("pid %d chip %d: allocator series %s, summary %+v", ps.Pid, c.Chip, a.Type, at)
				}
				if n := len(a.Used); a.Used[n-1] != uint64(at.Banks)**at.TotalAllocated || a.Big[len(a.Big)-1] != uint64(at.Banks)**at.LargestFree ||
					a.Capacity != uint64(at.Banks)*at.BankSize {
					t.Errorf("pid %d chip %d allocator: ends used %d largest %d of %d; summary %d banks x %d, %d, of %d", ps.Pid, c.Chip,
						a.Used[n-1], a.Big[len(a.Big)-1], a.Capacity, at.Banks, *at.TotalAllocated, *at.LargestFree, at.BankSize)
				}
			}
		}
		if drawn != 6 { // DRAM on chips 0 and 3, L1 on chips 0 and 3, CB and L1 per core on chip 3
			t.Errorf("pid %d: %d memory series drawn, want 6", ps.Pid, drawn)
		}
		// The icicle: per type, what is in use and held at the peak are
		// the chips' totals and peaks summed (the per-site accounting's
		// contract).
		if p.Icicle == nil {
			t.Fatalf("pid %d: no icicle", ps.Pid)
		}
		for _, tn := range p.Icicle.C {
			var inuse, peak uint64
			for _, dv := range ps.Devices {
				switch tn.N {
				case "DRAM":
					inuse, peak = inuse+dv.DRAMBytes, peak+dv.Peaks.DRAMBytes.Value
				case "L1":
					inuse, peak = inuse+dv.L1Bytes, peak+dv.Peaks.L1Bytes.Value
				}
			}
			if tn.V[0] != inuse || tn.V[2] != peak || inuse == 0 {
				t.Errorf("pid %d icicle %s: in use %d at peak %d, the chips' %d %d", ps.Pid, tn.N, tn.V[0], tn.V[2], inuse, peak)
			}
			var kids uint64
			for _, c := range tn.C {
				kids += c.V[1]
			}
			if kids != tn.V[1] || len(tn.C) == 0 {
				t.Errorf("pid %d icicle %s: callers allocated %d, the type %d", ps.Pid, tn.N, kids, tn.V[1])
			}
		}
	}
	if !capped[true] || !capped[false] {
		t.Errorf("L1 per core drawn with a core's L1 as its cap %v, without %v: the workload's two processes make one of each", capped[true], capped[false])
	}
	for _, bad := range []string{"http://", "https://", "<link", " src=", "@import", "url("} {
		if i := bytes.Index(page, []byte(bad)); i >= 0 && !bytes.Contains(page[max(0, i-40):i+40], []byte("www.w3.org/2000/svg")) {
			t.Errorf("the page names something outside it: %q", page[max(0, i-40):min(len(page), i+40)])
		}
	}
}

// A million events: the page stays small, every series within its bound,
// and the peaks drawn are still the run's.
func TestPageBoundedOnAMillionEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("a million events")
	}
	page, sum, truths := workload(t, 500_000, 35)
	if sum.Events < 1_000_000 {
		t.Fatalf("%d events", sum.Events)
	}
	if len(page) > 4<<20 {
		t.Errorf("the page is %d bytes", len(page))
	}
	d := readData(t, page)
	for pi, p := range d.Procs {
		tr := truths[sum.Processes[pi].Pid]
		for _, c := range p.Chips {
			for _, s := range c.Mem {
				if len(s.Pts)/2 > 4*tthtml.SeriesBuckets {
					t.Errorf("chip %d %s: %d points", c.Chip, s.Type, len(s.Pts)/2)
				}
				var top uint64
				for i := 1; i < len(s.Pts); i += 2 {
					top = max(top, s.Pts[i])
				}
				if k := fmt.Sprintf("%d/%s", c.Chip, s.Field); top != tr.peak[k] {
					t.Errorf("chip %d %s: drawn peak %d, the run's %d", c.Chip, s.Type, top, tr.peak[k])
				}
			}
		}
	}
	checkNumbers(t, page, sum)
	t.Logf("%d events: a page of %d bytes", sum.Events, len(page))
}

// The comparison page: every number is the diff's --json object's.
func TestDiffPageNumbersAreTheResult(t *testing.T) {
	var runs [2]*diff.Run
	for i, n := range []int{2000, 2600} {
		c := diff.NewCollector()
		workload(t, n, uint64(40+i), c)
		r, err := c.Run()
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	res := diff.Compare(runs[0], runs[1], "a.ndjson", "b.ndjson")
	var out bytes.Buffer
	if err := tthtml.WriteDiff(&out, res); err != nil {
		t.Fatal(err)
	}
	seen := checkNumbers(t, out.Bytes(), res)
	for _, f := range []string{"a.events", "b.events", "processes.0.chips.0.counters.0.peak.b", "processes.0.chips.0.counters.0.end.delta",
		"processes.0.sites.0.b.alloc_bytes", "growth.0.bytes"} {
		if seen[f] == 0 {
			t.Errorf("the page has no %s", f)
		}
	}
	if len(res.Processes) == 0 || !bytes.Contains(out.Bytes(), []byte("model.py:")) {
		t.Errorf("the page names no changed process or site")
	}
}
