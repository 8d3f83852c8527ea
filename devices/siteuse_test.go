package devices

import (
	"fmt"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// TestSiteUsage replays the model's random streams (meshes that learn and
// lose chips, closes, marks, reallocations), each alloc given a site, into
// a ledger that tracks sites, and checks SiteUsage against a brute force
// over the summary after every event: what each site holds per chip and
// type (its leaks), what it ever put there (a buffer newly charged on a
// chip), and what it held when the chip's peak of the type was reached.
func TestSiteUsage(t *testing.T) {
	for seed := uint64(1); seed <= 25; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := newGen(t, seed)
			for i := 0; i < 300+int(seed%5)*100; i++ {
				g.step(false)
			}
			checkSiteUsage(t, g.trace)
		})
	}
}

type suKey struct {
	pid  uint32
	site uint32
	chip int32
	typ  string
}

type suVal struct{ inuse, inuseObjs, alloc, allocObjs, peak uint64 }

func checkSiteUsage(t *testing.T, trace []events.Event) {
	t.Helper()
	l := NewLedger(Options{SiteUsage: true})
	want := map[suKey]*suVal{}
	at := func(k suKey) *suVal {
		v := want[k]
		if v == nil {
			v = &suVal{}
			want[k] = v
		}
		return v
	}
	type charge struct {
		pid  uint32
		buf  string
		seq  uint64
		chip int32
	}
	prev := map[charge]bool{}
	type ct struct {
		pid  uint32
		chip int32
		typ  string
	}
	peaks := map[ct]uint64{}
	sites := 0
	for i := range trace {
		e := trace[i]
		if e.Kind == events.KindAlloc {
			e.Site = uint32(e.Object>>6) % 5 // 0: unknown, as a lost stack
			sites++
		}
		l.Apply(&e)
		s := l.Summary()
		now := map[charge]bool{}
		held := map[suKey]*suVal{}
		for _, p := range s.Processes {
			for _, lk := range p.Leaks {
				c := charge{p.Pid, lk.Buffer, lk.Seq, lk.Device}
				now[c] = true
				k := suKey{p.Pid, lk.Site, lk.Device, lk.Type}
				if !prev[c] {
					at(k).alloc += lk.Size
					at(k).allocObjs++
				}
				h := held[k]
				if h == nil {
					h = &suVal{}
					held[k] = h
				}
				h.inuse += lk.Size
				h.inuseObjs++
			}
			for _, d := range p.Devices {
				for typ, pk := range map[string]Peak{"DRAM": d.Peaks.DRAMBytes, "L1": d.Peaks.L1Bytes, "L1_SMALL": d.Peaks.L1SmallBytes,
					"TRACE": d.Peaks.TraceBytes, "SYSTEM_MEMORY": d.Peaks.SystemMemoryBytes} {
					c := ct{p.Pid, d.Device, typ}
					if pk.Value == peaks[c] {
						continue
					}
					peaks[c] = pk.Value
					for k, v := range want {
						if k.pid == p.Pid && k.chip == d.Device && k.typ == typ {
							v.peak = 0
						}
					}
					for k, h := range held {
						if k.pid == p.Pid && k.chip == d.Device && k.typ == typ {
							at(k).peak = h.inuse
						}
					}
				}
			}
		}
		for k, v := range want {
			v.inuse, v.inuseObjs = 0, 0
			if h := held[k]; h != nil {
				v.inuse, v.inuseObjs = h.inuse, h.inuseObjs
			}
		}
		prev = now
	}
	got := map[suKey]suVal{}
	for _, p := range l.Summary().Processes {
		for _, u := range p.SiteUsage {
			k := suKey{p.Pid, u.Site, u.Device, u.Type}
			if _, dup := got[k]; dup {
				t.Errorf("site usage %+v twice", k)
			}
			got[k] = suVal{u.InuseBytes, u.InuseObjects, u.AllocBytes, u.AllocObjects, u.PeakBytes}
		}
	}
	for k, w := range want {
		if *w == (suVal{}) {
			continue
		}
		if g := got[k]; g != *w {
			t.Errorf("%+v: got %+v, brute force %+v", k, g, *w)
		}
	}
	for k, g := range got {
		if w := want[k]; w == nil || *w != g {
			if w == nil {
				t.Errorf("%+v: got %+v, brute force nothing", k, g)
			}
		}
	}
	if len(got) == 0 || sites == 0 {
		t.Errorf("nothing compared (%d allocs)", sites)
	}
}
