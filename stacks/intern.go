package stacks

import (
	"math/bits"
	"slices"
	"sync"
)

// StackID names an interned stack within a Table; 0 means no stack.
type StackID uint32

// Stack is one distinct stack: frames innermost first.
type Stack struct {
	Locs      []Loc
	Truncated bool
}

// Table interns stacks: identical frame lists (same pcs in the same files,
// same truncation) get one StackID, so memory grows with distinct stacks,
// not with events. A table serves one address space (one process): its
// pcs mean something only under that process's module maps. Safe for
// concurrent use.
type Table struct {
	// MaxFrames is the unwind depth kept by Add (0: DefaultMaxFrames).
	MaxFrames int

	mu      sync.Mutex
	stops   []Range // SetStops
	byHash  map[uint64][]StackID
	stacks  []Stack
	scratch []Loc
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{byHash: map[uint64][]StackID{}} }

// Add unwinds a captured stack (see Unwind) and interns it. A stack whose
// first pc is in no module is still a stack (of that one pc).
func (t *Table) Add(mods *Modules, regs Regs, stack []byte) (StackID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var trunc bool
	t.scratch, trunc, _ = unwind(mods, regs, stack, t.MaxFrames, t.scratch[:0], nil, t.stops)
	return t.internLocked(t.scratch, trunc), trunc
}

// Range is the pcs [Lo, Hi) of a function in a process.
type Range struct{ Lo, Hi uint64 }

// SetStops makes every later unwind of Add and AddSteps end at the first
// caller frame whose return address is in one of stops (a frame of
// CPython's evaluation loop, whose callers are the interpreter's own
// frames, which the Python stack names), as at an outermost frame: the
// frame is kept, its step says End. It reports whether the stops changed.
func (t *Table) SetStops(stops []Range) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if slices.Equal(t.stops, stops) {
		return false
	}
	t.stops = append([]Range(nil), stops...)
	return true
}

// AddSteps is Add that also returns the stack's steps and whether it is
// fixed by its pcs (UnwindSteps); steps is reused.
func (t *Table) AddSteps(mods *Modules, regs Regs, stack []byte, steps []Step) (_ StackID, truncated bool, _ []Step, fixed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	steps = steps[:0]
	t.scratch, truncated, fixed = unwind(mods, regs, stack, t.MaxFrames, t.scratch[:0], &steps, t.stops)
	fixed = fixed && !truncated
	return t.internLocked(t.scratch, truncated), truncated, steps, fixed
}

// Intern returns the id of the stack locs (copied when new).
func (t *Table) Intern(locs []Loc, truncated bool) StackID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.internLocked(locs, truncated)
}

func (t *Table) internLocked(locs []Loc, truncated bool) StackID {
	if t.byHash == nil {
		t.byHash = map[uint64][]StackID{}
	}
	h := hashLocs(locs, truncated)
	for _, id := range t.byHash[h] {
		if s := &t.stacks[id-1]; s.Truncated == truncated && sameLocs(s.Locs, locs) {
			return id
		}
	}
	t.stacks = append(t.stacks, Stack{Locs: append([]Loc(nil), locs...), Truncated: truncated})
	id := StackID(len(t.stacks))
	t.byHash[h] = append(t.byHash[h], id)
	return id
}

// Stack returns the stack of id.
func (t *Table) Stack(id StackID) (Stack, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == 0 || int(id) > len(t.stacks) {
		return Stack{}, false
	}
	return t.stacks[id-1], true
}

// Frames symbolizes the stack of id (nil for an unknown id).
func (t *Table) Frames(id StackID) []Frame {
	s, ok := t.Stack(id)
	if !ok {
		return nil
	}
	return Symbolize(s.Locs)
}

// Len is the number of distinct stacks.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.stacks)
}

func sameLocs(a, b []Loc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].PC != b[i].PC || a[i].File != b[i].File {
			return false
		}
	}
	return true
}

func hashLocs(locs []Loc, truncated bool) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := uint64(len(locs))
	if truncated {
		h ^= 1 << 63
	}
	for _, l := range locs {
		var id uint64
		if l.File != nil {
			id = uint64(l.File.ID)
		}
		h = bits.RotateLeft64((h^l.PC)*m, 31) ^ id
		h *= m
	}
	return h ^ h>>29
}
