package session

import "github.com/tttrace/tttrace/events"

// Joining a launch's runtime id to what it made before it had one. A
// device operation's launch allocates its outputs (and may lay out its
// CBs) before Program::set_runtime_id gives it its id (docs/ttmetal.md
// §13), so those records would reach the ledger and the outputs without
// the id the launch is known by. opJoin holds such a record, and every
// record after it (the stream and the ledger keep stream order), until
// the launch gets its id (the records of the launch take it) or its last
// frame is gone without one (a validation that threw: they keep none),
// then hands them on. A launch's id comes within the launch, so a handful
// of records wait; bounds keep a thread stopped inside a launch from
// holding the stream: past maxJoinHeld records, or when the oldest has
// waited joinWait ticks, everything held goes on as it is (counted).
//
// The stage sits after the stacks' (held.go): a record reaches it with its
// site. A launch's id and its end are learnt when their records are
// decoded (opFrames), before the records of the launch still waiting for
// their stacks come here: the ids and ends of recent launches are kept
// for them.

const (
	// maxJoinHeld bounds the records held behind launches waiting for
	// their ids.
	maxJoinHeld = 1 << 16
	// joinWait: ticks (~100 ms) a record may wait for its launch's id.
	joinWait = 5
	// maxJoinLaunches: launches whose id or end is remembered.
	maxJoinLaunches = 1 << 15
)

// opJoin is the records held behind launches waiting for their ids.
type opJoin struct {
	emit    func(*events.Event) // hands a released record on
	held    []events.Event      // in stream order
	waiting map[uint64]int      // launch -> its records in held still waiting
	// oldest: ticks the first waiting record of held has waited.
	oldest int
	// ids: the runtime id of each recent launch that got one; over: the
	// recent launches that ended without one. Launches are numbered in
	// order: those maxJoinLaunches older than the newest are forgotten.
	ids    map[uint64]uint64
	over   map[uint64]bool
	newest uint64
	// given: records that waited and got their id; gaveUp: records
	// handed on without it (bounds), not counting launches that had none.
	given, gaveUp uint64
}

// waits says ev waits for its launch's runtime id.
func waitsForID(ev *events.Event) bool {
	return ev.Launch != 0 && !ev.HasRuntimeID
}

// hold keeps ev when it waits for its launch's id or a record before it
// does; it reports false when ev can be handed on now.
func (j *opJoin) hold(ev *events.Event) bool {
	if waitsForID(ev) {
		if id, ok := j.ids[ev.Launch]; ok {
			ev.RuntimeID, ev.HasRuntimeID = id, true
			j.given++
		} else if j.over[ev.Launch] {
			ev.Launch = 0
		}
	}
	waits := waitsForID(ev)
	if !waits && len(j.held) == 0 {
		return false
	}
	if waits {
		if j.waiting == nil {
			j.waiting = map[uint64]int{}
		}
		if len(j.held) == 0 {
			j.oldest = 0
		}
		j.waiting[ev.Launch]++
	}
	j.held = append(j.held, *ev)
	if len(j.held) > maxJoinHeld {
		j.giveUp()
	}
	return true
}

// runtimeID gives launch its id: its held records take it, and what no
// longer waits goes on.
func (j *opJoin) runtimeID(launch, id uint64) {
	if launch == 0 {
		return
	}
	j.remember(launch)
	if j.ids == nil {
		j.ids = map[uint64]uint64{}
	}
	j.ids[launch] = id
	if j.waiting[launch] == 0 {
		return
	}
	for i := range j.held {
		if h := &j.held[i]; h.Launch == launch && !h.HasRuntimeID {
			h.RuntimeID, h.HasRuntimeID = id, true
			j.given++
		}
	}
	delete(j.waiting, launch)
	j.release()
}

// launchEnded: launch's last frame is gone; its records that still wait
// will have no id.
func (j *opJoin) launchEnded(launch uint64) {
	if _, ok := j.ids[launch]; !ok {
		j.remember(launch)
		if j.over == nil {
			j.over = map[uint64]bool{}
		}
		j.over[launch] = true
	}
	if j.waiting[launch] == 0 {
		return
	}
	for i := range j.held {
		if h := &j.held[i]; h.Launch == launch && !h.HasRuntimeID {
			h.Launch = 0
		}
	}
	delete(j.waiting, launch)
	j.release()
}

// processEnded: pid's launches will give no more ids.
func (j *opJoin) processEnded(pid uint32) {
	for i := range j.held {
		if h := &j.held[i]; h.Pid == pid && waitsForID(h) {
			if j.waiting[h.Launch]--; j.waiting[h.Launch] <= 0 {
				delete(j.waiting, h.Launch)
			}
			h.Launch = 0
		}
	}
	j.release()
}

// tick gives up on records that waited joinWait ticks.
func (j *opJoin) tick() {
	if len(j.held) == 0 {
		return
	}
	if j.oldest++; j.oldest >= joinWait {
		j.giveUp()
	}
}

// release hands on the held records up to the first still waiting.
func (j *opJoin) release() {
	n := 0
	for ; n < len(j.held); n++ {
		h := &j.held[n]
		if waitsForID(h) {
			break
		}
		h.Launch = 0
		j.emit(h)
	}
	if n > 0 {
		j.oldest = 0
	}
	rest := copy(j.held, j.held[n:])
	clear(j.held[rest:])
	j.held = j.held[:rest]
}

// giveUp hands on every held record as it is.
func (j *opJoin) giveUp() {
	for i := range j.held {
		if h := &j.held[i]; waitsForID(h) {
			h.Launch = 0
			j.gaveUp++
		}
	}
	clear(j.waiting)
	j.release()
}

// remember makes room for launch in ids and over, forgetting launches
// maxJoinLaunches older than the newest.
func (j *opJoin) remember(launch uint64) {
	j.newest = max(j.newest, launch)
	if len(j.ids)+len(j.over) < 2*maxJoinLaunches || j.newest < maxJoinLaunches {
		return
	}
	floor := j.newest - maxJoinLaunches
	for l := range j.ids {
		if l < floor {
			delete(j.ids, l)
		}
	}
	for l := range j.over {
		if l < floor {
			delete(j.over, l)
		}
	}
}
