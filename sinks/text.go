package sinks

import (
	"bufio"
	"io"

	"github.com/tttrace/tttrace/devices"
)

// Report writes the human report: one per process that ends while others
// are traced, and the final report of everything when tracing ends.
type Report struct {
	Base
	w *bufio.Writer
}

// NewReport writes to w.
func NewReport(w io.Writer) *Report { return &Report{w: bufio.NewWriter(w)} }

// ProcessEnded writes the process's report at once when others go on.
func (r *Report) ProcessEnded(one *devices.Summary, more bool) {
	if !more {
		return
	}
	_ = devices.WriteReport(r.w, one)
	_ = r.w.Flush()
}

// Summary writes the final report.
func (r *Report) Summary(s *devices.Summary) error {
	if err := devices.WriteReport(r.w, s); err != nil {
		return err
	}
	return r.w.Flush()
}

// Close flushes what is buffered.
func (r *Report) Close() error { return r.w.Flush() }
