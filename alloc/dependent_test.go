package alloc

import "testing"

func TestPlaceAvoiding(t *testing.T) {
	cfg := Config{Banks: 64, BankSize: 1024, Offset: 0x1000, Alignment: 16, BlockAlign: 32}
	lock, _ := New(cfg)
	core, _ := New(cfg)
	if at, ok := core.PlaceAvoiding(64, false, lock); !ok || at != 0x1000+960 {
		t.Fatalf("empty lists: top-down at %#x %v, want %#x", at, ok, 0x1000+960)
	}
	if err := lock.Place(0x1000+896, 128); err != nil {
		t.Fatal(err)
	}
	if err := core.Place(0x1000+768, 64); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		span     uint64
		bottomUp bool
		at       uint64
		ok       bool
	}{
		{64, false, 832, true},  // the room between the two lists' blocks
		{96, false, 672, true},  // too big for it: the room below
		{64, true, 0, true},     // bottom-up: the lowest room
		{800, false, 0, false},  // no room of 800
		{768, false, 0, true},   // the whole low room
		{32, true, 0, true},     // bottom-up again
		{1024, false, 0, false}, // the bank
	} {
		at, ok := core.PlaceAvoiding(c.span, c.bottomUp, lock)
		if ok != c.ok || ok && at != 0x1000+c.at {
			t.Errorf("span %d bottom-up %v: at %#x %v, want %#x %v", c.span, c.bottomUp, at, ok, 0x1000+c.at, c.ok)
		}
	}
	r, ok := core.RoomFor(lock)
	if !ok || r.Stats != (Statistics{TotalAllocatable: 1024, TotalAllocated: 192, TotalFree: 832, LargestFreeBlock: 768}) {
		t.Errorf("room %+v %v", r.Stats, ok)
	}
	if got := r.Stats.Classify(800); got != Fragmented {
		t.Errorf("800 B: %v, want fragmented", got)
	}
	if got := r.Stats.Classify(900); got != Exhausted {
		t.Errorf("900 B: %v, want exhausted", got)
	}
	// The lockstep list seen through the per-core one, as lockstep
	// allocations see it.
	if at, ok := lock.PlaceAvoiding(64, false, core); !ok || at != 0x1000+832 {
		t.Errorf("lockstep through per-core: %#x %v", at, ok)
	}
	other, _ := New(Config{Banks: 1, BankSize: 1024, Offset: 0x2000, Alignment: 16, BlockAlign: 32})
	if _, ok := core.PlaceAvoiding(32, false, other); ok {
		t.Error("lists of different offsets: placed")
	}
	if _, ok := core.RoomFor(other); ok {
		t.Error("lists of different offsets: a room")
	}
}
