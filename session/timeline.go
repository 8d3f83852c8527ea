package session

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Timeline tells, for the hidden --timing flag, how long each step of a
// run's start-up and teardown took (docs/bench.md, "Fixed costs": where
// the time of `tttrace -- /bin/true` goes). A nil *Timeline says nothing.
type Timeline struct {
	mu          sync.Mutex
	w           io.Writer
	start, last time.Time
}

// NewTimeline writes marks to w, timed from start (the process's start,
// as near as main can take it).
func NewTimeline(w io.Writer, start time.Time) *Timeline {
	return &Timeline{w: w, start: start, last: start}
}

// Mark writes that step ended now: the time since the start and since the
// previous mark.
func (t *Timeline) Mark(step string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	fmt.Fprintf(t.w, "tttrace: timing: %7.1f ms (+%6.1f ms) %s\n",
		float64(now.Sub(t.start).Microseconds())/1000, float64(now.Sub(t.last).Microseconds())/1000, step)
	t.last = now
}
