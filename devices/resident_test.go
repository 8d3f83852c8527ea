package devices

import (
	"math/rand/v2"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// residencyTruth is an independent model of what each core holds: per
// chip and core, a byte map of the L1 the resident CBs cover.
type residencyTruth struct {
	progs map[uint64][]cbSpec                     // the program's CBs
	cores map[int32]map[[2]uint16]map[uint64]bool // chip -> core -> addresses covered
	peak  map[int32]uint64                        // chip -> highest busiest-core bytes seen
}

type cbSpec struct {
	addr, size uint64
	ranges     [][4]uint16
}

func (m *residencyTruth) dispatch(chip int32, prog uint64) {
	per := map[[2]uint16]map[uint64]bool{}
	for _, cb := range m.progs[prog] {
		for _, r := range cb.ranges {
			for x := r[0]; x <= r[2]; x++ {
				for y := r[1]; y <= r[3]; y++ {
					k := [2]uint16{x, y}
					if per[k] == nil {
						per[k] = map[uint64]bool{}
					}
					for a := cb.addr; a < cb.addr+cb.size; a++ {
						per[k][a] = true
					}
				}
			}
		}
	}
	if m.cores[chip] == nil {
		m.cores[chip] = map[[2]uint16]map[uint64]bool{}
	}
	for k, v := range per {
		m.cores[chip][k] = v
	}
	most, _, _ := m.figures(chip)
	m.peak[chip] = max(m.peak[chip], most)
}

func (m *residencyTruth) figures(chip int32) (most, total uint64, busiest [2]uint16) {
	for k, v := range m.cores[chip] {
		n := uint64(len(v))
		total += n
		if n > most || n == most && n != 0 && (k[0] < busiest[0] || k[0] == busiest[0] && k[1] < busiest[1]) {
			most, busiest = n, k
		}
	}
	return most, total, busiest
}

// TestCBResidency: random programs with CBs on disjoint and overlapping
// core ranges (the same index at different sizes on disjoint core groups,
// overlapping CBs, many cached programs from the same L1 base) dispatched
// in random order: every core holds the union of the CBs of the program
// last dispatched there, cb_bytes is the busiest core's, its peak the
// highest seen, cb_resident_total_bytes the sum over cores, while
// cb_registered_bytes sums every program holding CBs; a close empties the
// chip.
func TestCBResidency(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 7))
		r := newRec(t)
		m := &residencyTruth{progs: map[uint64][]cbSpec{}, cores: map[int32]map[[2]uint16]map[uint64]bool{}, peak: map[int32]uint64{}}
		chip := int32(3)
		var registered uint64
		nprogs := 2 + rnd.IntN(30)
		for i := range nprogs {
			prog := uint64(0x1000 + i)
			evs := []events.Event{devicestest.CBLayout(1, prog, chip)}
			addr := uint64(0x100)
			for range 1 + rnd.IntN(4) {
				size := uint64(16 * (1 + rnd.IntN(8)))
				var ranges [][4]uint16
				for range 1 + rnd.IntN(3) {
					x, y := uint16(rnd.IntN(6)), uint16(rnd.IntN(6))
					ranges = append(ranges, [4]uint16{x, y, x + uint16(rnd.IntN(3)), y + uint16(rnd.IntN(2))})
				}
				m.progs[prog] = append(m.progs[prog], cbSpec{addr, size, ranges})
				evs = append(evs, devicestest.CBOn(1, chip, addr, size, ranges...))
				registered += size
				// The next CB overlaps this one half the time.
				if rnd.IntN(2) == 0 {
					addr += size / 2
				} else {
					addr += size
				}
			}
			r.apply(evs...)
		}
		for range 60 {
			prog := uint64(0x1000 + rnd.IntN(nprogs))
			r.apply(devicestest.Dispatch(1, prog, chip))
			m.dispatch(chip, prog)
			d := r.dev(chip)
			most, total, busiest := m.figures(chip)
			if d.CBBytes != most || d.CBResidentTotalBytes != total || d.CBRegisteredBytes != registered {
				t.Fatalf("seed %d: cb_bytes %d resident_total %d registered %d, truth %d %d %d",
					seed, d.CBBytes, d.CBResidentTotalBytes, d.CBRegisteredBytes, most, total, registered)
			}
			if d.CBBusiestCore == nil || *d.CBBusiestCore != busiest {
				t.Fatalf("seed %d: busiest core %v, truth %v", seed, d.CBBusiestCore, busiest)
			}
			if d.Peaks.CBBytes.Value != m.peak[chip] {
				t.Fatalf("seed %d: peak cb_bytes %d, truth %d", seed, d.Peaks.CBBytes.Value, m.peak[chip])
			}
		}
		r.apply(devicestest.Dispatch(1, 0xdead, chip)) // laid out before attach: nothing known
		if most, total, _ := m.figures(chip); r.dev(chip).CBBytes != most || r.dev(chip).CBResidentTotalBytes != total {
			t.Fatalf("seed %d: an unknown program's dispatch changed what is resident", seed)
		}
		if got := r.proc().Stats.DispatchesUnknown; got != 1 {
			t.Fatalf("seed %d: dispatches_unknown %d, want 1", seed, got)
		}
		r.apply(devicestest.DeviceClose(1, chip))
		if d := r.dev(chip); d.CBBytes != 0 || d.CBResidentTotalBytes != 0 || d.CBRegisteredBytes != 0 || d.CBBusiestCore != nil {
			t.Fatalf("seed %d: after the close %+v", seed, d)
		}
	}
}

// TestCBResidencyTrace: a dispatch while a trace is captured on the chip
// makes nothing resident; the capture keeps each core's peak, and each
// replay makes it resident (what TT-Metal's trace re-applies); a
// registered program's size never counts until it is dispatched.
func TestCBResidencyTrace(t *testing.T) {
	r := newRec(t)
	const chip = 0
	big, small := uint64(0xb1), uint64(0x51)
	r.apply(
		devicestest.CBLayout(1, big, chip),
		devicestest.CBOn(1, chip, 0x100, 4096, [4]uint16{0, 0, 1, 0}),
		devicestest.CBLayout(1, small, chip),
		devicestest.CBOn(1, chip, 0x100, 1024, [4]uint16{0, 0, 3, 3}),
	)
	if d := r.dev(chip); d.CBBytes != 0 || d.CBRegisteredBytes != 4096+1024 {
		t.Fatalf("laid out, not dispatched: cb_bytes %d registered %d", d.CBBytes, d.CBRegisteredBytes)
	}
	r.apply(
		devicestest.Trace(1, events.TraceBegin, chip, 0, 1),
		devicestest.Dispatch(1, big, chip),
		devicestest.Dispatch(1, small, chip),
		devicestest.Trace(1, events.TraceEnd, chip, 0, 1),
	)
	if d := r.dev(chip); d.CBBytes != 0 || d.CBResidentTotalBytes != 0 {
		t.Fatalf("dispatched while captured: cb_bytes %d total %d", d.CBBytes, d.CBResidentTotalBytes)
	}
	r.apply(devicestest.Dispatch(1, small, chip))
	if d := r.dev(chip); d.CBBytes != 1024 || d.CBResidentTotalBytes != 16*1024 {
		t.Fatalf("small dispatched: cb_bytes %d total %d", d.CBBytes, d.CBResidentTotalBytes)
	}
	r.apply(devicestest.Trace(1, events.TraceReplay, chip, 0, 1))
	// The peak: cores (0,0) and (1,0) held the big program's 4096, the
	// other 14 the small one's 1024.
	if d := r.dev(chip); d.CBBytes != 4096 || d.CBResidentTotalBytes != 2*4096+14*1024 || *d.CBBusiestCore != [2]uint16{0, 0} {
		t.Fatalf("replayed: cb_bytes %d total %d busiest %v", d.CBBytes, d.CBResidentTotalBytes, d.CBBusiestCore)
	}
}
