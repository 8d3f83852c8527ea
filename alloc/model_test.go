package alloc

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// ref is an independent model of a lockstep bank: one owner per unit of
// BlockAlign bytes, placement by scanning for maximal free runs. It knows
// nothing of blocks, splitting or merging.
type ref struct {
	cfg   Config
	units []int // 0: free, else the owner
	next  int
	start map[int]int // owner -> first unit
}

func newRef(cfg Config) *ref {
	return &ref{cfg: cfg, units: make([]int, cfg.BankSize/cfg.BlockAlign), next: 1, start: map[int]int{}}
}

// runs returns the maximal free runs as [start, end) unit pairs, by address.
func (r *ref) runs() [][2]int {
	var out [][2]int
	for i := 0; i < len(r.units); {
		if r.units[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(r.units) && r.units[j] == 0 {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

func (r *ref) stats() Statistics {
	free, big := 0, 0
	for _, run := range r.runs() {
		free += run[1] - run[0]
		big = max(big, run[1]-run[0])
	}
	u := r.cfg.BlockAlign
	s := Statistics{TotalAllocatable: r.cfg.BankSize, TotalFree: uint64(free) * u, LargestFreeBlock: uint64(big) * u}
	s.TotalAllocated = r.cfg.BankSize - s.TotalFree
	return s
}

func (r *ref) take(at, n int) int {
	id := r.next
	r.next++
	for i := at; i < at+n; i++ {
		r.units[i] = id
	}
	r.start[id] = at
	return id
}

// allocate: the lowest run that fits (at its start) or the highest (at its
// end). Cause as the contract defines it.
func (r *ref) allocate(span uint64, bottomUp bool) (addr uint64, cause Cause) {
	n := int(span / r.cfg.BlockAlign)
	runs := r.runs()
	pick := -1
	for i := range runs {
		k := i
		if !bottomUp {
			k = len(runs) - 1 - i
		}
		if runs[k][1]-runs[k][0] >= n {
			pick = k
			break
		}
	}
	if pick < 0 {
		st := r.stats()
		switch {
		case span > r.cfg.BankSize:
			return 0, LargerThanBank
		case span > st.TotalFree:
			return 0, Exhausted
		}
		return 0, Fragmented
	}
	at := runs[pick][0]
	if !bottomUp {
		at = runs[pick][1] - n
	}
	r.take(at, n)
	return uint64(at)*r.cfg.BlockAlign + r.cfg.Offset, CauseNone
}

func (r *ref) free(addr uint64) bool {
	if addr < r.cfg.Offset || (addr-r.cfg.Offset)%r.cfg.BlockAlign != 0 {
		return false
	}
	at := int((addr - r.cfg.Offset) / r.cfg.BlockAlign)
	if at >= len(r.units) {
		return false
	}
	id := r.units[at]
	if id == 0 || r.start[id] != at {
		return false
	}
	for i := at; i < len(r.units) && r.units[i] == id; i++ {
		r.units[i] = 0
	}
	delete(r.start, id)
	return true
}

// checkInvariants: blocks tile the bank in address order, no two free
// blocks touch, the allocated sum and count agree with the blocks.
func checkInvariants(t *testing.T, m *Manager) {
	t.Helper()
	var pos, alloc uint64
	used, prevFree, n := 0, false, 0
	for _, b := range m.fl.blocks {
		if b.addr != pos || b.size == 0 {
			t.Fatalf("block %d at %d size %d, want at %d", n, b.addr, b.size, pos)
		}
		if !b.used && prevFree {
			t.Fatalf("free blocks touch at %d", b.addr)
		}
		prevFree = !b.used
		if b.used {
			alloc += b.size
			used++
		}
		pos += b.size
		n++
	}
	if pos != m.cfg.BankSize || alloc != m.fl.allocated || used != m.Live() {
		t.Fatalf("blocks end at %d (bank %d), allocated %d (kept %d), %d used (kept %d)", pos, m.cfg.BankSize, alloc, m.fl.allocated, used, m.Live())
	}
}

// run drives a Manager and the reference with the same stream taken from
// next, comparing every address, cause and statistics.
func run(t *testing.T, cfg Config, steps int, next func() uint64) {
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRef(cfg)
	var live []uint64
	for step := range steps {
		switch op := next() % 16; {
		case op < 8: // allocate
			req := Request{
				PageSize: 1 + next()%(cfg.BankSize/2+1),
				BottomUp: next()%2 == 0,
			}
			if next()%4 == 0 {
				req.Shards = 1 + uint32(next()%uint64(cfg.Banks))
			}
			req.Size = req.PageSize * (next() % (4 * uint64(cfg.Banks)))
			need := m.Need(req)
			if need.Span%cfg.BlockAlign != 0 || need.Span < need.SizePerBank || need.Span == 0 {
				t.Fatalf("step %d: %+v gives %+v", step, req, need)
			}
			got, f := m.Allocate(req)
			want, wantCause := r.allocate(need.Span, req.BottomUp)
			switch {
			case f == nil && wantCause != CauseNone:
				t.Fatalf("step %d: %+v placed at %#x, reference fails with %s", step, req, got, wantCause)
			case f != nil && f.Cause != wantCause:
				t.Fatalf("step %d: %+v fails with %s, reference %s (at %#x)", step, req, f.Cause, wantCause, want)
			case f == nil && got != want:
				t.Fatalf("step %d: %+v at %#x, reference at %#x", step, req, got, want)
			case f == nil:
				live = append(live, got)
			}
		case op < 13 && len(live) > 0: // free a live one
			i := int(next() % uint64(len(live)))
			addr := live[i]
			live = append(live[:i], live[i+1:]...)
			if _, ok := m.Free(addr); !ok || !r.free(addr) {
				t.Fatalf("step %d: free %#x: manager %v", step, addr, ok)
			}
		case op < 15: // free anything: both must agree
			addr := cfg.Offset + next()%(cfg.BankSize+cfg.BlockAlign)
			_, ok := m.Free(addr)
			if rok := r.free(addr); ok != rok {
				t.Fatalf("step %d: free %#x: manager %v, reference %v", step, addr, ok, rok)
			}
			if ok {
				for i, a := range live {
					if a == addr {
						live = append(live[:i], live[i+1:]...)
						break
					}
				}
			}
		default:
			if next()%8 == 0 {
				m.Clear()
				r = newRef(cfg)
				live = live[:0]
			}
		}
		if got, want := m.Stats(), r.stats(); got != want {
			t.Fatalf("step %d: stats %+v, reference %+v", step, got, want)
		}
		checkInvariants(t, m)
	}
}

var modelConfigs = []Config{
	{Banks: 12, BankSize: 64 * 32, Offset: 0x20, Alignment: 32, BlockAlign: 32},
	{Banks: 64, BankSize: 100 * 32, Offset: 0x18000, Alignment: 16, BlockAlign: 32},
	{Banks: 8, BankSize: 7 * 64, Offset: 0, Alignment: 64, BlockAlign: 64},
	{Banks: 1, BankSize: 256, Offset: 1 << 30, Alignment: 1, BlockAlign: 1},
}

// TestModel: random alloc / free / clear streams, the Manager against the
// reference after every step.
func TestModel(t *testing.T) {
	for i, cfg := range modelConfigs {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			run(t, cfg, 400, rng.Uint64)
		}
	}
}

func FuzzModel(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(uint8(1), []byte("allocate, free, fragment, exhaust"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		cfg := modelConfigs[int(which)%len(modelConfigs)]
		next := func() uint64 {
			if len(data) < 2 {
				return 0
			}
			v := binary.LittleEndian.Uint16(data)
			data = data[2:]
			return uint64(v)
		}
		run(t, cfg, len(data)/4, next)
	})
}
