package devices

import (
	"math/rand/v2"
	"testing"
)

// TestLiveIndex runs random inserts and removals through a bufTable's
// index against a Go map, with keys drawn from sets that collide in
// different ways (dense, aligned like heap pointers, differing only in
// high bits), through growth, and checks every key after each step batch.
func TestLiveIndex(t *testing.T) {
	keySets := map[string]func(r *rand.Rand) uint64{
		"dense":      func(r *rand.Rand) uint64 { return uint64(r.IntN(3000)) + 1 },
		"pointers":   func(r *rand.Rand) uint64 { return 0x5555_0000_0000 + uint64(r.IntN(3000))*48 },
		"high bits":  func(r *rand.Rand) uint64 { return uint64(r.IntN(3000)+1) << 40 },
		"full range": func(r *rand.Rand) uint64 { return r.Uint64() | 1 },
	}
	for name, key := range keySets {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			tab := newBufTable()
			want := map[uint64]uint32{}
			for step := range 60000 {
				k := key(r)
				if idx, ok := want[k]; ok {
					tab.remove(idx, slotFreed)
					delete(want, k)
				} else {
					idx, ok := tab.insert(k)
					if !ok {
						t.Fatal("insert refused")
					}
					tab.slots.at(idx).live = true
					want[k] = idx
				}
				if step%1000 != 999 {
					continue
				}
				if tab.index.n != len(want) {
					t.Fatalf("step %d: index holds %d keys, want %d", step, tab.index.n, len(want))
				}
				for k, idx := range want {
					if got, ok := tab.lookup(k); !ok || got != idx {
						t.Fatalf("step %d: key %#x -> %d %v, want %d", step, k, got, ok, idx)
					}
				}
				for range 200 {
					k := key(r)
					if _, live := want[k]; live {
						continue
					}
					if got, ok := tab.lookup(k); ok {
						t.Fatalf("step %d: key %#x not live found at %d", step, k, got)
					}
					if st, ok := tab.state(k); ok && st != slotFreed {
						t.Fatalf("step %d: ended key %#x in state %#x", step, k, st)
					}
				}
			}
			if len(tab.index.buckets) > 4*max(len(want), 1)*4/3 && len(tab.index.buckets) > 2*4096 {
				t.Errorf("%d buckets for at most ~3000 keys", len(tab.index.buckets))
			}
		})
	}
}
