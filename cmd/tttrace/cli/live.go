package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
)

// liveView redraws the per-chip totals of the traced processes in place on
// a terminal, every --interval, until the final report replaces it.
type liveView struct {
	w     io.Writer
	every time.Duration
	last  time.Time
	lines int // lines drawn last time, erased before the next draw
	buf   bytes.Buffer
}

// newLiveView returns a view on stderr when it is a terminal tttrace has to
// itself (-p, --all: with -- CMD the command writes there too, and redrawing
// in place would overwrite its output) and the human report is wanted; nil
// otherwise.
func newLiveView(f *Flags, stderr io.Writer) *liveView {
	file, ok := stderr.(*os.File)
	if !ok || f.JSON || f.Interval <= 0 || len(f.Command) > 0 {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(file.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return &liveView{w: stderr, every: f.Interval}
}

// draw redraws the view if its interval has passed. Safe on nil.
func (v *liveView) draw(l *devices.Ledger, procs map[uint32]*procState) {
	if v == nil || time.Since(v.last) < v.every {
		return
	}
	v.last = time.Now()
	pids := make([]uint32, 0, len(procs))
	for pid, st := range procs {
		if st.inLedger {
			pids = append(pids, pid)
		}
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	v.buf.Reset()
	fmt.Fprintf(&v.buf, "tttrace live  %s  (%d events", v.last.Format("15:04:05"), l.Events())
	if n := l.LostEvents(); n > 0 {
		fmt.Fprintf(&v.buf, ", %d LOST", n)
	}
	v.buf.WriteString(")\n")
	for _, pid := range pids {
		cmd := procs[pid].info.Command
		if len(cmd) > 60 {
			cmd = cmd[:57] + "..."
		}
		fmt.Fprintf(&v.buf, "pid %d  %s\n", pid, cmd)
		if devs := l.Devices(pid); len(devs) > 0 {
			_ = devices.WriteDeviceTable(&v.buf, devs)
		} else {
			v.buf.WriteString("  no device memory yet\n")
		}
	}
	v.erase()
	v.lines = strings.Count(v.buf.String(), "\n")
	_, _ = v.w.Write(v.buf.Bytes())
}

// erase removes the last drawing. Safe on nil.
func (v *liveView) erase() {
	if v == nil || v.lines == 0 {
		return
	}
	fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.lines)
	v.lines = 0
}
