package devices

import (
	"fmt"
	"testing"

	"github.com/tttrace/tttrace/events"
)

type chipKey struct {
	pid  uint32
	chip int32
}

// The observer's view, rebuilt from its calls alone, equals the reference
// model's totals after every step of random programs (mesh buffers, CBs,
// closes, exits): no change is missed, none is invented.
func TestObserverFollowsModel(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		seen := map[chipKey]Totals{}
		var lastTs uint64
		g := newGenWith(t, seed, Options{Observer: func(pid uint32, chip int32, ts uint64, tot *Totals) {
			seen[chipKey{pid, chip}] = *tot
			lastTs = ts
		}})
		check := func(when string) {
			for _, p := range g.procs {
				for chip, w := range p.m.totals() {
					// model order: DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY, CB (registered: the model dispatches nothing), live
					want := Totals{CounterDRAM: w[0], CounterL1: w[1], CounterL1Small: w[2], CounterTrace: w[3],
						CounterSystemMemory: w[4], CounterCBRegistered: w[5], CounterLiveBuffers: w[6]}
					if got := seen[chipKey{p.pid, chip}]; got != want {
						t.Fatalf("seed %d %s: pid %d chip %d: observer saw %v, model %v", seed, when, p.pid, chip, got, want)
					}
				}
			}
			if lastTs > g.ts {
				t.Fatalf("seed %d %s: observer time %d after the last event's %d", seed, when, lastTs, g.ts)
			}
		}
		for i := 0; i < 600; i++ {
			g.step(false)
			check(fmt.Sprintf("step %d", i))
		}
		for g.step(true) {
		}
		check("end")
	}
}

// An observed ledger allocates nothing per event in a steady state.
func TestObserverAllocatesNothing(t *testing.T) {
	var calls int
	l := NewLedger(Options{Observer: func(uint32, int32, uint64, *Totals) { calls++ }})
	l.SetProcessInfo(1, ProcessInfo{})
	mesh := uint64(0x5500a0000000)
	warm := func() {
		for i := uint64(0); i < 64; i++ {
			a := evAlloc(10, 0x1000+i, int32(i%4), events.DRAM, 0x20000, 4096)
			a.Pid = 1
			l.Apply(&a)
			m := evMeshAlloc(10, 0x9000+i, mesh, events.L1, 0x40000, 512)
			m.Pid = 1
			l.Apply(&m)
			for c := int32(0); c < 4; c++ {
				v := evView(10, c, 0x40000)
				v.Pid = 1
				l.Apply(&v)
			}
			f := evFree(10, 0x1000+i, int32(i%4))
			f.Pid = 1
			l.Apply(&f)
			mf := evMeshFree(10, 0x9000+i, mesh)
			mf.Pid = 1
			l.Apply(&mf)
		}
	}
	warm()
	calls = 0
	if n := testing.AllocsPerRun(20, warm); n != 0 {
		t.Fatalf("%v allocations per run of 448 events", n)
	}
	if calls == 0 {
		t.Fatal("the observer was never called")
	}
}
