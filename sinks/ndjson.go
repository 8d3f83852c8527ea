package sinks

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// NDJSON writes the documented NDJSON stream (docs/ndjson.md): one line per
// event and per ledger notice (unless NoEvents), a process_summary line per process that ends
// while others are traced, and the summary line last.
type NDJSON struct {
	Base
	w        *bufio.Writer
	noEvents bool
	buf      []byte
}

// NewNDJSON writes to w. noEvents leaves out the event lines.
func NewNDJSON(w io.Writer, noEvents bool) *NDJSON {
	return &NDJSON{w: bufio.NewWriterSize(w, 1<<20), noEvents: noEvents}
}

// Event writes the event's line.
func (n *NDJSON) Event(ev *events.Event) {
	if n.noEvents {
		return
	}
	n.buf = events.AppendJSON(n.buf[:0], ev)
	_, _ = n.w.Write(n.buf)
}

// Notice writes an l1_clash or l1_headroom line (not with NoEvents: the
// summary lists the clashes).
func (n *NDJSON) Notice(no *devices.Notice) {
	if n.noEvents {
		return
	}
	b, err := json.Marshal(no)
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
}

// WantSites: site records go with the event lines.
func (n *NDJSON) WantSites() bool { return !n.noEvents }

// Site writes a site record: where the buffers of the alloc lines naming it
// (pid, site) were allocated.
func (n *NDJSON) Site(pid uint32, s *devices.Site) {
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		Pid  uint32 `json:"pid"`
		*devices.Site
	}{"site", pid, s})
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
}

// ProcessEnded writes a process_summary line when other processes go on
// (the summary line covers the last one).
func (n *NDJSON) ProcessEnded(one *devices.Summary, more bool) {
	if !more || len(one.Processes) != 1 {
		return
	}
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		*devices.ProcessSummary
	}{"process_summary", &one.Processes[0]})
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
	_ = n.w.Flush()
}

// Summary writes the summary line.
func (n *NDJSON) Summary(s *devices.Summary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return n.w.Flush()
}

// Close flushes what is buffered.
func (n *NDJSON) Close() error { return n.w.Flush() }
