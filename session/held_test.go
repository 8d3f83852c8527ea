package session

import (
	"reflect"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// heldEvent is a record of pid with sequence number seq; an alloc waits
// for its stack when stack is StackFollows.
func heldEvent(kind events.Kind, seq uint64, pid uint32, stack events.StackState) *events.Event {
	return &events.Event{Kind: kind, Seq: seq, Pid: pid, Stack: stack}
}

// heldRun is a heldRecords whose released records are kept, in order.
type heldRun struct {
	heldRecords
	out []uint64 // the seqs released
}

func newHeldRun() *heldRun {
	r := &heldRun{}
	r.heldRecords = newHeldRecords(func(e *events.Event) {
		if waitsForStack(e) {
			panic("a record still waiting for its stack was released")
		}
		r.out = append(r.out, e.Seq)
	})
	return r
}

// Records behind an alloc waiting for its stack are held in stream order;
// its stack releases it with them, up to the next alloc still waiting;
// records that wait for nothing pass when nothing is held.
func TestHeldRecordsOrder(t *testing.T) {
	r := newHeldRun()
	if r.hold(heldEvent(events.KindFree, 1, 10, events.StackNone)) {
		t.Fatal("a record held with nothing waiting")
	}
	if !r.hold(heldEvent(events.KindAlloc, 2, 10, events.StackFollows)) {
		t.Fatal("an alloc whose stack follows not held")
	}
	for _, e := range []*events.Event{
		heldEvent(events.KindAlloc, 3, 11, events.StackNone), // another CPU's
		heldEvent(events.KindAllocRequest, 4, 11, events.StackFollows),
		heldEvent(events.KindFree, 5, 10, events.StackNone),
	} {
		if !r.hold(e) {
			t.Fatalf("seq %d passed a held alloc", e.Seq)
		}
	}
	if r.waiting != 2 || len(r.out) != 0 {
		t.Fatalf("%d waiting, released %v", r.waiting, r.out)
	}
	// A stack names its alloc by seq and pid, and only one still waiting.
	if r.alloc(2, 11) != nil || r.alloc(3, 11) != nil || r.alloc(9, 10) != nil {
		t.Fatal("a stack paired with a record that is not its alloc")
	}
	a := r.alloc(2, 10)
	if a == nil {
		t.Fatal("the waiting alloc not found")
	}
	a.Site = 7
	r.resolved(a)
	if want := []uint64{2, 3}; !reflect.DeepEqual(r.out, want) {
		t.Fatalf("released %v, want %v (up to the request still waiting)", r.out, want)
	}
	r.resolved(r.alloc(4, 11))
	if want := []uint64{2, 3, 4, 5}; !reflect.DeepEqual(r.out, want) || r.waiting != 0 || len(r.held) != 0 {
		t.Fatalf("released %v, want %v; %d waiting, %d held", r.out, want, r.waiting, len(r.held))
	}
	if r.hold(heldEvent(events.KindFree, 6, 10, events.StackNone)) {
		t.Fatal("a record held once nothing waits")
	}
}

// A Python stack read for a held alloc waits with it for the native stack;
// releasing everything gives up the stacks still awaited and forgets the
// Python stacks paired with them.
func TestHeldRecordsPythonAndReleaseAll(t *testing.T) {
	r := newHeldRun()
	r.hold(heldEvent(events.KindAlloc, 1, 10, events.StackFollows))
	r.hold(heldEvent(events.KindAllocOom, 2, 10, events.StackFollows))
	r.setPython(1, 3)
	r.setPython(2, 4)
	if py := r.takePython(1); py != 3 {
		t.Fatalf("python stack %d, want 3", py)
	}
	if py := r.takePython(1); py != 0 {
		t.Fatalf("python stack %d taken twice", py)
	}
	r.releaseAll()
	if want := []uint64{1, 2}; !reflect.DeepEqual(r.out, want) || r.waiting != 0 || len(r.pyOf) != 0 {
		t.Fatalf("released %v, want %v; %d waiting, python %v", r.out, want, r.waiting, r.pyOf)
	}
}

// A stack that never comes does not stall the stream: past maxHeld
// records, everything held is released, in order.
func TestHeldRecordsBound(t *testing.T) {
	r := newHeldRun()
	r.hold(heldEvent(events.KindAlloc, 1, 10, events.StackFollows))
	for i := uint64(2); i <= maxHeld+1; i++ {
		r.hold(heldEvent(events.KindFree, i, 10, events.StackNone))
	}
	if len(r.out) != maxHeld+1 || r.out[0] != 1 || r.out[maxHeld] != maxHeld+1 || len(r.held) != 0 || r.waiting != 0 {
		t.Fatalf("released %d (first %v), %d held, %d waiting", len(r.out), r.out[:min(len(r.out), 2)], len(r.held), r.waiting)
	}
}

// A held alloc whose stack never comes is given up when tracing ends, and
// says so (site_missing).
func TestHeldGivenUp(t *testing.T) {
	var out []events.Event
	q := newHeldRecords(func(e *events.Event) { out = append(out, *e) })
	a := events.Event{Kind: events.KindAlloc, Seq: 1, Pid: 7, Stack: events.StackFollows}
	f := events.Event{Kind: events.KindFree, Seq: 2, Pid: 7}
	if !q.hold(&a) || !q.hold(&f) {
		t.Fatal("not held")
	}
	q.releaseAll()
	if len(out) != 2 || out[0].SiteMissing != events.MissingStackNotDelivered || out[1].SiteMissing != events.SiteComplete {
		t.Errorf("released %+v", out)
	}
}
