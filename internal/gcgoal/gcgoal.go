// Package gcgoal sets the Go garbage collector's target (GOGC) for
// tttrace: how far the heap may grow past its live part before the next
// collection. Most of a large heap is the ledger's long-lived, pointer-free
// records (one per live buffer, docs/bench.md rows 5), which a collection
// does not scan; what grows between collections is mostly garbage. So the
// growth allowed shrinks as the live heap grows: Base percent up to
// ladderStart of live heap, then a fixed headroom (at least MinPercent):
// a million live buffers (~165 MB live) grow to ~181 MB instead of ~206.
// A small live heap may still grow by MinHeadroom (at most maxPercent):
// Base percent of a few MB would collect every MB or two of garbage,
// each collection waking the other CPU; the runtime's own minimum heap
// goal (4 MB at GOGC=100) is scaled by GOGC, 1 MB at 25.
// While BPF objects load (Relax), the target is raised instead: those
// loads make short-lived garbage fast, and collecting it is most of their
// time in Go.
package gcgoal

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const (
	// Base is the target from 16 MB of live heap (where it grows by
	// MinHeadroom) up to ladderStart, and before the live heap is known.
	Base = 25
	// MinPercent bounds the target below: collections of a very large
	// heap stay some way apart.
	MinPercent = 5
	// MinHeadroom is the least growth allowed past a live heap, unless
	// that is more than maxPercent of it: more than Base percent below
	// 16 MB of live heap.
	MinHeadroom = 4 << 20
	// maxPercent bounds the target of a tiny live heap.
	maxPercent = 400
	// headroom is the growth allowed past ladderStart of live heap.
	headroom = 16 << 20
	// ladderStart: Base percent of it is headroom.
	ladderStart = headroom * 100 / Base
	// relaxedPercent: the target while BPF objects load.
	relaxedPercent = 400
	// every is how often the live heap is looked at.
	every = 100 * time.Millisecond
)

var (
	mu      sync.Mutex
	managed bool   // Start ran: this package owns the target
	relaxed int    // Relax calls not yet restored
	live    uint64 // the live heap last seen
	// userPercent: the target Relax found when this package does not own
	// it (GOGC set), put back when the last Relax is restored.
	userPercent int
	started     sync.Once
)

// Percent is the target for a live heap of live bytes (0: not measured
// yet, before the first collection: Base).
func Percent(live uint64) int {
	switch {
	case live == 0:
		return Base
	case live <= ladderStart:
		return min(maxPercent, max(Base, int((MinHeadroom*100+live-1)/live)))
	}
	return max(MinPercent, int(headroom*100/live))
}

// Start takes over the collector's target, unless the user set GOGC (then
// only Relax changes it, and puts back the user's value). It looks at the
// live heap every 100 ms, for the life of the process.
func Start() {
	if os.Getenv("GOGC") != "" {
		return
	}
	started.Do(func() {
		mu.Lock()
		managed = true
		apply()
		mu.Unlock()
		go watch()
	})
}

func watch() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	for {
		time.Sleep(every)
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		mu.Lock()
		v := sample[0].Value.Uint64()
		changed := Percent(v) != Percent(live)
		live = v
		if changed {
			apply()
		}
		mu.Unlock()
	}
}

// apply sets the target for the state, when this package owns it; mu
// held.
func apply() {
	switch {
	case !managed:
	case relaxed > 0:
		debug.SetGCPercent(relaxedPercent)
	default:
		debug.SetGCPercent(Percent(live))
	}
}

// Relax raises the target while BPF objects load or TT-NN op tables are
// read (never lowers it, never turns a disabled collector on) until the
// function it returns is called; loads at the same time share one raise.
func Relax() (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	if relaxed == 0 && !managed {
		userPercent = debug.SetGCPercent(relaxedPercent)
		if userPercent < 0 || userPercent > relaxedPercent {
			debug.SetGCPercent(userPercent)
		}
	}
	relaxed++
	apply()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if relaxed--; relaxed == 0 {
			if managed {
				apply()
			} else {
				debug.SetGCPercent(userPercent)
			}
		}
	}
}
