package session

import "github.com/tttrace/tttrace/events"

// Pairing records with their stacks. BPF writes an alloc's stack records
// right after the alloc, with the alloc's seq, and says in the alloc
// whether one follows (waitsForStack); records of other CPUs may come
// between. heldRecords holds such an alloc, and every record after it,
// until its native stack is read: the stream and the ledger keep stream
// order, and the alloc carries its site. A Python stack read for a held
// alloc waits here with it (by seq) for the native stack that completes
// the site. What a stack is, and the site it makes, is allocSites'.

// maxHeld bounds the records held behind allocs waiting for their stacks;
// the stack is in the ring right after its alloc, so a handful is normal.
const maxHeld = 1 << 16

// heldRecords is the records held behind allocs waiting for their stacks.
type heldRecords struct {
	dispatch func(*events.Event) // handles a released record
	held     []events.Event      // in stream order
	waiting  int                 // records in held still waiting for their stacks
	pyOf     map[uint64]uint32   // seq of a held alloc -> its interned Python stack
}

func newHeldRecords(dispatch func(*events.Event)) heldRecords {
	return heldRecords{dispatch: dispatch, pyOf: map[uint64]uint32{}}
}

// waitsForStack: e carries a stack that follows in its own record: an
// alloc, an allocator request, or an allocator's out-of-memory path (the
// site of a failed allocation).
func waitsForStack(e *events.Event) bool {
	return (e.Kind == events.KindAlloc || e.Kind == events.KindAllocRequest || e.Kind == events.KindAllocOom) &&
		e.Stack == events.StackFollows
}

// hold keeps ev when it waits for its stack or a record before it does;
// it reports false when ev can be handled now. Past maxHeld records, a
// stack that does not come (cannot happen: BPF commits it before its
// alloc) must not stall the stream: everything held is released.
func (q *heldRecords) hold(ev *events.Event) bool {
	waits := waitsForStack(ev)
	if !waits && len(q.held) == 0 {
		return false
	}
	q.held = append(q.held, *ev)
	if waits {
		q.waiting++
	}
	if len(q.held) > maxHeld {
		q.releaseAll()
	}
	return true
}

// alloc is the held record seq of pid that waits for its stack, or nil.
func (q *heldRecords) alloc(seq uint64, pid uint32) *events.Event {
	for i := range q.held {
		h := &q.held[i]
		if h.Seq == seq && waitsForStack(h) && h.Pid == pid {
			return h
		}
	}
	return nil
}

// setPython pairs the held alloc seq with its Python stack py.
func (q *heldRecords) setPython(seq uint64, py uint32) { q.pyOf[seq] = py }

// takePython is the Python stack paired with the held alloc seq (0: none),
// forgotten there.
func (q *heldRecords) takePython(seq uint64) uint32 {
	py := q.pyOf[seq]
	delete(q.pyOf, seq)
	return py
}

// resolved says that ev, a held record that waited (alloc), no longer
// does (its Stack set), and releases what no longer waits.
func (q *heldRecords) resolved(ev *events.Event) {
	ev.Stack = events.StackNone
	q.waiting--
	q.release()
}

// release handles the held records up to the first still waiting.
func (q *heldRecords) release() {
	n := 0
	for ; n < len(q.held); n++ {
		h := &q.held[n]
		if waitsForStack(h) {
			break
		}
		q.dispatch(h)
	}
	rest := copy(q.held, q.held[n:])
	q.held = q.held[:rest]
}

// releaseAll handles every held record, waiting or not: a stack that did
// not come (it always does: BPF commits it before its alloc) is given up.
func (q *heldRecords) releaseAll() {
	for i := range q.held {
		if h := &q.held[i]; waitsForStack(h) {
			h.Stack = events.StackNone
			h.SiteMissing = events.MissingStackNotDelivered
		}
	}
	q.waiting = 0
	clear(q.pyOf)
	q.release()
}
