package sinks

import (
	"encoding/json"

	"github.com/tttrace/tttrace/devices"
)

// MarkSink is implemented by sinks that hear when a window starts (tttrace
// mark): the runtime calls Mark where the mark falls in the stream, after
// the ledger started its window (devices.Ledger.Mark). m is valid only
// during the call.
type MarkSink interface {
	Mark(m *devices.Mark)
}

// Mark writes the "window" line (not with NoEvents: the summary has the
// windows). tttrace report starts the window again where it reads it.
func (n *NDJSON) Mark(m *devices.Mark) {
	if n.noEvents {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
}
