package html

import (
	"math/rand/v2"
	"testing"
)

// extremes of the samples in [from, to): the lowest and highest values and
// the first sample reaching each.
func extremes(ps []Point, from, to uint64) (lo, hi Point, ok bool) {
	for _, p := range ps {
		if p.TsNs < from || p.TsNs >= to {
			continue
		}
		if !ok || p.Value < lo.Value {
			lo = p
		}
		if !ok || p.Value > hi.Value {
			hi = p
		}
		ok = true
	}
	return lo, hi, ok
}

// checkSeries compares what s kept with every sample it was given.
func checkSeries(t *testing.T, name string, s *Series, all []Point) {
	t.Helper()
	kept := s.Points()
	if len(kept) > 4*s.Max {
		t.Fatalf("%s: %d points kept, bound %d", name, len(kept), 4*s.Max)
	}
	given := make(map[Point]bool, len(all))
	for _, p := range all {
		given[p] = true
	}
	for i, p := range kept {
		if !given[p] {
			t.Fatalf("%s: point %d %+v was never given", name, i, p)
		}
		if i > 0 && p.TsNs < kept[i-1].TsNs {
			t.Fatalf("%s: points out of order at %d", name, i)
		}
	}
	if kept[0] != all[0] || kept[len(kept)-1] != all[len(all)-1] {
		t.Fatalf("%s: first/last %+v %+v, want %+v %+v", name, kept[0], kept[len(kept)-1], all[0], all[len(all)-1])
	}
	// The whole series: the peak exactly, with the first time it was reached.
	wantLo, wantHi, _ := extremes(all, 0, ^uint64(0))
	gotLo, gotHi, _ := extremes(kept, 0, ^uint64(0))
	if gotHi != wantHi || gotLo != wantLo {
		t.Fatalf("%s: peak %+v trough %+v, want %+v %+v", name, gotHi, gotLo, wantHi, wantLo)
	}
	if p, _ := s.Peak(); p != wantHi {
		t.Fatalf("%s: Peak %+v, want %+v", name, p, wantHi)
	}
	// Every interval of the final width: its extremes exactly.
	w, o := s.Width(), s.Origin()
	intervals := 0
	for from := o; from <= all[len(all)-1].TsNs; from += w {
		lo, hi, ok := extremes(all, from, from+w)
		klo, khi, kok := extremes(kept, from, from+w)
		if ok != kok || lo != klo || hi != khi {
			t.Fatalf("%s: interval [%d,+%d): kept lo %+v hi %+v, want %+v %+v", name, from-o, w, klo, khi, lo, hi)
		}
		if ok {
			intervals++
		}
		if w == 1 && intervals > 10000 {
			break // dense: the whole series was compared above
		}
	}
}

func TestSeriesKeepsExtremes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 35))
	for _, c := range []struct {
		name    string
		n, max  int
		step    func() uint64 // time between samples
		spike   float64       // chance of a one-sample spike
		reduceN int           // then Reduce to this many buckets (0: not)
	}{
		{"few", 10, 256, func() uint64 { return 1 + r.Uint64N(1000) }, 0.1, 0},
		{"million", 1_000_000, 256, func() uint64 { return 1 + r.Uint64N(3000) }, 0.0005, 0},
		{"bursts", 200_000, 64, func() uint64 {
			if r.IntN(100) == 0 {
				return 1 + r.Uint64N(1e9)
			}
			return r.Uint64N(3) // equal times too
		}, 0.001, 0},
		{"reduced", 300_000, 256, func() uint64 { return 1 + r.Uint64N(5000) }, 0.001, 16},
		{"one bucket", 50_000, 1, func() uint64 { return 1 + r.Uint64N(100) }, 0.01, 0},
		{"ties", 100_000, 32, func() uint64 { return 1 + r.Uint64N(100) }, -1, 0},
	} {
		s := NewSeries(c.max)
		all := make([]Point, 0, c.n)
		var ts, v uint64 = 1 << 40, 1 << 30
		for range c.n {
			ts += c.step()
			switch {
			case c.spike < 0: // a few values, reached again and again
				v = r.Uint64N(4)
			case r.Float64() < c.spike:
				v += r.Uint64N(1 << 28)
			case v > 1<<20 && r.IntN(2) == 0:
				v -= r.Uint64N(1 << 20)
			default:
				v += r.Uint64N(1 << 20)
			}
			s.Add(ts, v)
			all = append(all, Point{ts, v})
		}
		if c.reduceN > 0 {
			s.Reduce(c.reduceN)
			if s.Buckets() > c.reduceN {
				t.Fatalf("%s: %d buckets after Reduce(%d)", c.name, s.Buckets(), c.reduceN)
			}
		}
		if s.Len() != uint64(c.n) {
			t.Fatalf("%s: Len %d", c.name, s.Len())
		}
		checkSeries(t, c.name, s, all)
	}
}

// A sample older than the last is taken at the last's time, and the
// series stays in order.
func TestSeriesOlderSample(t *testing.T) {
	s := NewSeries(4)
	s.Add(100, 1)
	s.Add(90, 7)
	s.Add(120, 3)
	want := []Point{{100, 1}, {100, 7}, {120, 3}}
	got := s.Points()
	if len(got) != len(want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%+v, want %+v", got, want)
		}
	}
}
