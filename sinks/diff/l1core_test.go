package diff

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// An n150 core's L1 as the ledger's tests lay it out: the L1 bank manager
// (64 banks) at l1Base, L1_SMALL above it.
const (
	l1Base, l1Bank           = 0x18000, 0xe8000
	mgrL1, mgrL1Small        = 0xd2, 0xd3
	l1CorePid                = 4242
	l1CoreStart       uint64 = 1_000_000
)

// l1CoreRun replays, through a ledger, one chip whose busiest core holds a
// lockstep L1 buffer of 4096 B per bank and a program's CBs of cb bytes on
// cores (0,0)-(3,3); a mark starts window 1 ("spike"), where a lockstep
// buffer of spike bytes per bank comes and goes (none when 0); then the
// first buffer is freed (the CBs stay resident). Each buffer is one page
// per bank. It returns the run as
// tttrace diff collects it, the ledger's chip, and when the L1 per core
// peak came (ns after the first event).
func l1CoreRun(t *testing.T, cb, spike uint64) (*Run, *devices.DeviceSummary, uint64) {
	t.Helper()
	l := devices.NewLedger(devices.Options{})
	c := NewCollector()
	ts := l1CoreStart
	var peakAt uint64
	apply := func(evs ...events.Event) {
		for i := range evs {
			e := evs[i]
			ts += 1000
			e.Pid, e.TsNs, e.Seq = l1CorePid, ts, ts/1000
			if e.Tid == 0 {
				e.Tid = l1CorePid
			}
			l.Apply(&e)
			c.Event(&e)
		}
	}
	// The chip's allocator, made as TT-Metal makes it: DRAM, TRACE, L1,
	// L1_SMALL.
	apply(dt.Capacity(0, events.DRAM, 0xd0, 12, 1<<20, 32, 0x40), dt.Capacity(0, events.Trace, 0xd1, 12, 1<<16, 32, 0x40+1<<20),
		dt.Capacity(0, events.L1, mgrL1, 64, l1Bank, 16, l1Base), dt.Capacity(0, events.L1Small, mgrL1Small, 64, 0x8000, 16, l1Base+l1Bank))
	apply(dt.Request(1, mgrL1, 64*4096, 4096, false), dt.AllocPage(1, 0xa1, 0, events.L1, l1Base+l1Bank-4096, 64*4096, 4096))
	apply(dt.CBLayout(1, 0x100, 0), dt.CBOn(1, 0, 0x1000, cb, [4]uint16{0, 0, 3, 3}), dt.Dispatch(1, 0x100, 0))
	peakAt = ts - (l1CoreStart + 1000)
	l.Mark("spike", ts+500)
	if spike > 0 {
		apply(dt.Request(1, mgrL1, 64*spike, spike, false), dt.AllocPage(1, 0xa2, 0, events.L1, l1Base+l1Bank-4096-spike, 64*spike, spike))
		peakAt = ts - (l1CoreStart + 1000)
		apply(dt.Free(1, 0xa2, 0))
	}
	apply(dt.Free(1, 0xa1, 0), dt.Exit(0, 0))
	l.Flush()
	s := l.Summary()
	if err := c.Summary(&s); err != nil {
		t.Fatal(err)
	}
	r, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	return r, &s.Processes[0].Devices[0], peakAt
}

// L1 per core (l1_busiest_core_bytes) is compared at the end, at its peak
// (with when) and at its peak in each window, from two ledgers whose
// numbers are worked out by hand; its growth is what --fail-on-growth
// judges, as a type's bytes are; the table names it.
func TestL1CoreFigures(t *testing.T) {
	const cbA, cbB, spikeB = 8192, 12288, 2048
	ra, da, atA := l1CoreRun(t, cbA, 0)
	rb, db, atB := l1CoreRun(t, cbB, spikeB)
	// The ledger's own numbers, before the diff: what the runs hold.
	for _, x := range []struct {
		d         *devices.DeviceSummary
		end, peak uint64
	}{{da, cbA, 4096 + cbA}, {db, cbB, 4096 + cbB + spikeB}} {
		if now, pk := x.d.L1BusiestCore, x.d.PeakL1BusiestCore; now == nil || pk == nil || now.TotalBytes != x.end || pk.TotalBytes != x.peak {
			t.Fatalf("the ledger's L1 per core: now %+v, peak %+v; want %d, %d", now, pk, x.end, x.peak)
		}
	}
	same := Compare(ra, ra, "a", "a")
	if !same.Same {
		t.Fatalf("a run differs from itself: %+v", same.Processes)
	}

	r := Compare(ra, rb, "a", "b")
	if len(r.Processes) != 1 || len(r.Processes[0].Chips) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	p := &r.Processes[0]
	var cd *CounterDiff
	for i := range p.Chips[0].Counters {
		if x := &p.Chips[0].Counters[i]; x.Counter == "l1_busiest_core_bytes" {
			cd = x
		}
	}
	if cd == nil {
		t.Fatalf("no l1_busiest_core_bytes among %+v", p.Chips[0].Counters)
	}
	if cd.End != num(cbA, cbB) || cd.Peak != num(4096+cbA, 4096+cbB+spikeB) || cd.PeakAtA == nil || *cd.PeakAtA != atA ||
		cd.PeakAtB == nil || *cd.PeakAtB != atB {
		t.Errorf("l1_busiest_core_bytes: %+v (peak at %v / %v), want end %d -> %d, peak %d -> %d at %d / %d", cd, cd.PeakAtA, cd.PeakAtB,
			cbA, cbB, 4096+cbA, 4096+cbB+spikeB, atA, atB)
	}
	// Windows: 0 holds the buffer and the CBs; 1 starts at that level, B's
	// spike on top.
	wantWin := map[string]Num{"0": num(4096+cbA, 4096+cbB), "1": num(4096+cbA, 4096+cbB+spikeB)}
	gotWin := map[string]Num{}
	for _, w := range p.Windows {
		for _, c := range w.Chips {
			for _, pk := range c.Peaks {
				if pk.Counter == "l1_busiest_core_bytes" {
					gotWin[fmt.Sprint(*w.IndexA)] = pk.Peak
				}
			}
		}
	}
	if fmt.Sprint(gotWin) != fmt.Sprint(wantWin) {
		t.Errorf("windows' L1 per core peaks %v, want %v", gotWin, wantWin)
	}
	// Growth: at the end, the peak and each window's peak.
	var got []string
	for _, g := range r.Growth {
		if g.Counter == "l1_busiest_core_bytes" {
			k := g.At
			if g.Window != nil {
				k += fmt.Sprint(g.Window.Index)
			}
			got = append(got, fmt.Sprintf("%s %d", k, g.Bytes))
		}
	}
	sort.Strings(got)
	if want := []string{"end 4096", "peak 6144", "window_peak0 4096", "window_peak1 6144"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("L1 per core growth %v, want %v", got, want)
	}
	// The gate: B's L1 per core alone grew by 6144 at its peak; the CBs
	// (cb_bytes) by 4096 and L1 buffers (l1_bytes) by 64 x 2048.
	over := r.Exceeding(Limit{Pct: 40, IsPct: true})
	var names []string
	for _, g := range over {
		names = append(names, g.Counter+" "+GrowthAt(&g))
	}
	if want := "l1_busiest_core_bytes the peak"; !strings.Contains(strings.Join(names, ","), want) {
		t.Errorf("--fail-on-growth 40%%: %v, want %s among them", names, want)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  0      L1/CORE     8.0 KiB   12.0 KiB    +4.0 KiB   12.0 KiB   18.0 KiB    +6.0 KiB",
		"      chip 0 L1/CORE peak 12.0 KiB -> 18.0 KiB (+6.0 KiB)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}
