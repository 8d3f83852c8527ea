package html

// A counter over time in bounded memory, its extremes kept exactly.

// Point is one sample of a counter: its value from TsNs on.
type Point struct {
	TsNs  uint64
	Value uint64
}

// bucket is what a series keeps of the samples that fell in one interval
// of time: the first and the last, the lowest and the highest (each the
// first sample to reach it).
type bucket struct {
	idx                 uint64 // (ts - origin) >> shift
	first, lo, hi, last Point
}

// merge folds b, the bucket after a in time, into a.
func (a *bucket) merge(b *bucket) {
	if b.lo.Value < a.lo.Value {
		a.lo = b.lo
	}
	if b.hi.Value > a.hi.Value {
		a.hi = b.hi
	}
	a.last = b.last
}

// Series is a counter's samples downsampled as they come: time is cut in
// intervals of 2^shift ns from the first sample, and each interval holding
// samples keeps four of them (bucket). When more than Max intervals hold
// samples, the intervals double in width and neighbours merge, so a
// series holds at most Max buckets (4*Max points) however many samples it
// is given. Every sample kept is one that was given, and within every
// interval of the final width (Width, from Origin) the lowest and highest
// values and the first time each was reached are those of all the samples
// given: the series' peak is kept exactly, with its time, and so is its
// trough.
type Series struct {
	// Max is the most buckets kept (at least 1).
	Max     int
	origin  uint64
	shift   uint
	buckets []bucket
	lastTs  uint64
	n       uint64
}

// NewSeries returns a series keeping at most buckets buckets.
func NewSeries(buckets int) *Series { return &Series{Max: max(buckets, 1)} }

// Add appends a sample. Samples come in time order; one older than the
// last is taken as at the last's time (CPUs' clocks may disagree by a few
// ns), so the order of the stream is kept.
func (s *Series) Add(ts, v uint64) {
	if s.n == 0 {
		s.origin = ts
	} else if ts < s.lastTs {
		ts = s.lastTs
	}
	s.lastTs = ts
	s.n++
	p := Point{TsNs: ts, Value: v}
	idx := (ts - s.origin) >> s.shift
	if n := len(s.buckets); n > 0 && s.buckets[n-1].idx == idx {
		b := &s.buckets[n-1]
		if v < b.lo.Value {
			b.lo = p
		}
		if v > b.hi.Value {
			b.hi = p
		}
		b.last = p
		return
	}
	s.buckets = append(s.buckets, bucket{idx: idx, first: p, lo: p, hi: p, last: p})
	for len(s.buckets) > s.Max {
		s.widen()
	}
}

// widen doubles the intervals' width, merging the buckets that now share
// one.
func (s *Series) widen() {
	s.shift++
	out := s.buckets[:0]
	for i := range s.buckets {
		b := s.buckets[i]
		b.idx >>= 1
		if n := len(out); n > 0 && out[n-1].idx == b.idx {
			out[n-1].merge(&b)
			continue
		}
		out = append(out, b)
	}
	s.buckets = out
}

// Reduce widens the intervals until at most buckets buckets are kept.
func (s *Series) Reduce(buckets int) {
	for len(s.buckets) > max(buckets, 1) {
		s.widen()
	}
}

// Len is the number of samples given.
func (s *Series) Len() uint64 { return s.n }

// Buckets is the number of buckets kept.
func (s *Series) Buckets() int { return len(s.buckets) }

// Origin and Width are the intervals' start and width (ns).
func (s *Series) Origin() uint64 { return s.origin }
func (s *Series) Width() uint64  { return 1 << s.shift }

// Points are the samples kept, in time order, each once.
func (s *Series) Points() []Point {
	out := make([]Point, 0, 4*len(s.buckets))
	for i := range s.buckets {
		b := &s.buckets[i]
		ps := [4]Point{b.first, b.lo, b.hi, b.last}
		// Four points: sorted by time in place (first and last are at
		// the ends already).
		if ps[2].TsNs < ps[1].TsNs {
			ps[1], ps[2] = ps[2], ps[1]
		}
		for _, p := range ps {
			if n := len(out); n > 0 && out[n-1] == p {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

// Peak is the highest value and the first time it was reached (ok false:
// no sample).
func (s *Series) Peak() (p Point, ok bool) {
	for i := range s.buckets {
		if h := s.buckets[i].hi; i == 0 || h.Value > p.Value {
			p = h
		}
	}
	return p, len(s.buckets) > 0
}

// Last is the last sample.
func (s *Series) Last() (Point, bool) {
	if len(s.buckets) == 0 {
		return Point{}, false
	}
	return s.buckets[len(s.buckets)-1].last, true
}
