package gcgoal

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// current reads the collector's target.
func current() int {
	p := debug.SetGCPercent(Base)
	debug.SetGCPercent(p)
	return p
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, Base},
		{1 << 20, maxPercent},
		{2 << 20, 200},
		{7 << 20, 58},
		{12 << 20, 34},
		{MinHeadroom * 100 / Base, Base},
		{ladderStart, Base},
		{ladderStart + 1, 24},
		{160 << 20, 10},
		{320 << 20, 5},
		{1 << 40, MinPercent},
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
		// What it stands for: the growth past the live heap is Base
		// percent of it up to ladderStart, ~16 MiB above (until
		// MinPercent).
		if grow := c.live * uint64(Percent(c.live)) / 100; c.live > ladderStart && Percent(c.live) > MinPercent && (grow > headroom || grow < headroom*9/10) {
			t.Errorf("live %d MiB: grows by %d MiB, want ~%d", c.live>>20, grow>>20, headroom>>20)
		}
		// And at least MinHeadroom below (but maxPercent).
		if grow := c.live * uint64(Percent(c.live)) / 100; c.live != 0 && c.live <= ladderStart && Percent(c.live) < maxPercent && grow < MinHeadroom {
			t.Errorf("live %d KiB: grows by %d KiB, want at least %d", c.live>>10, grow>>10, MinHeadroom>>10)
		}
	}
}

// TestStartRelax checks the target the process runs with: Base at start,
// raised while loads are under way (two at once share one raise), then
// the ladder's value for a live heap made large.
func TestStartRelax(t *testing.T) {
	t.Setenv("GOGC", "")
	Start()
	if got := current(); got != Base {
		t.Fatalf("after Start: %d, want %d", got, Base)
	}
	r1 := Relax()
	r2 := Relax()
	if got := current(); got != relaxedPercent {
		t.Fatalf("while loading: %d, want %d", got, relaxedPercent)
	}
	r1()
	if got := current(); got != relaxedPercent {
		t.Fatalf("one of two loads done: %d, want %d", got, relaxedPercent)
	}
	r2()
	if got := current(); got != Base {
		t.Fatalf("loads done: %d, want %d", got, Base)
	}
	// 160 MiB of pointer-free live heap: the watcher moves the target.
	big := make([]uint64, 160<<20/8)
	for i := range big {
		big[i] = uint64(i)
	}
	runtime.GC()
	want := Percent(160 << 20)
	deadline := time.Now().Add(5 * time.Second)
	for current() > want+1 {
		if time.Now().After(deadline) {
			t.Fatalf("live heap of 160 MiB: target %d, want ~%d", current(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.KeepAlive(big)
}
