package session

import (
	"fmt"
	"math"

	"github.com/tttrace/tttrace/sinks"
)

// Windows (tttrace mark): a mark asked for at time T starts its window in
// the stream where T falls: before the first record read after it whose
// time is T or later, or, when the ring runs dry first, at once (every
// record made before T has been read). The ledger starts the window
// (devices.Ledger.Mark), the sinks that keep windows hear of it
// (sinks.MarkSink: NDJSON writes its "window" line, which tttrace report
// replays at the same place), the log says so.

// MarkRequest asks for a window to start: its name and when it was asked
// (CLOCK_MONOTONIC ns, the records' clock).
type MarkRequest struct {
	Name string
	TsNs uint64
}

// maxPendingMarks bounds the marks waiting for their place in the stream.
const maxPendingMarks = 1024

// takeMarks queues the marks asked for since the last tick; idle: the ring
// ran dry, so every pending mark has its place now.
func (s *session) takeMarks(idle bool) {
	for s.cfg.Marks != nil {
		select {
		case m := <-s.cfg.Marks:
			if len(s.marks) >= maxPendingMarks {
				fmt.Fprintf(s.log, "tttrace: mark %q not taken: %d marks already wait for their place in the stream\n", m.Name, len(s.marks))
				continue
			}
			s.marks = append(s.marks, m)
			continue
		default:
		}
		break
	}
	if idle {
		s.marksBefore(math.MaxUint64)
	}
}

// marksBefore starts the windows of the pending marks asked for at ts or
// before.
func (s *session) marksBefore(ts uint64) {
	for len(s.marks) > 0 && s.marks[0].TsNs <= ts {
		m := s.marks[0]
		s.marks = s.marks[1:]
		s.mark(m.Name, m.TsNs)
	}
	if len(s.marks) == 0 {
		s.marks = nil
	}
}

// mark starts a window named name at ts: in the ledger, the sinks, the log.
func (s *session) mark(name string, ts uint64) {
	m := s.ledger.Mark(name, ts)
	for _, k := range s.sinks {
		if ms, ok := k.(sinks.MarkSink); ok {
			ms.Mark(&m)
		}
	}
	if m.Name != "" {
		fmt.Fprintf(s.log, "tttrace: window %d (%s) started\n", m.Index, m.Name)
	} else {
		fmt.Fprintf(s.log, "tttrace: window %d started\n", m.Index)
	}
}
