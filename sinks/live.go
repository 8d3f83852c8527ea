package sinks

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tttrace/tttrace/devices"
)

// Live redraws the per-chip totals of the traced processes in place on a
// terminal, every interval, until a report replaces it. Register it before
// the sink that writes reports to the same terminal: it erases itself when
// a process ends and at the summary.
type Live struct {
	Base
	w     io.Writer
	every time.Duration
	last  time.Time
	lines int // lines drawn last time, erased before the next draw
	buf   bytes.Buffer
}

// NewLive draws on w (a terminal) every interval.
func NewLive(w io.Writer, every time.Duration) *Live {
	return &Live{w: w, every: every}
}

// Tick redraws the view if its interval has passed.
func (v *Live) Tick(view *View) {
	if view.Now.Sub(v.last) < v.every {
		return
	}
	v.last = view.Now
	l := view.Ledger
	v.buf.Reset()
	fmt.Fprintf(&v.buf, "tttrace live  %s  (%d events", v.last.Format("15:04:05"), l.Events())
	if n := l.LostEvents(); n > 0 {
		fmt.Fprintf(&v.buf, ", %d LOST", n)
	}
	v.buf.WriteString(")\n")
	for _, p := range view.Procs {
		cmd := p.Command
		if len(cmd) > 60 {
			cmd = cmd[:57] + "..."
		}
		fmt.Fprintf(&v.buf, "pid %d  %s\n", p.Pid, cmd)
		if devs := l.Devices(p.Pid); len(devs) > 0 {
			_ = devices.WriteDeviceTable(&v.buf, devs)
		} else {
			v.buf.WriteString("  no device memory yet\n")
		}
	}
	v.erase()
	v.lines = strings.Count(v.buf.String(), "\n")
	_, _ = v.w.Write(v.buf.Bytes())
}

// ProcessEnded erases the view: a report follows.
func (v *Live) ProcessEnded(*devices.Summary, bool) { v.erase() }

// Summary erases the view before the final report.
func (v *Live) Summary(*devices.Summary) error {
	v.erase()
	return nil
}

// Close erases the view.
func (v *Live) Close() error {
	v.erase()
	return nil
}

// erase removes the last drawing.
func (v *Live) erase() {
	if v.lines == 0 {
		return
	}
	fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.lines)
	v.lines = 0
}
