package main

// The probes a run leaves behind. A uprobe stays in the library, trapping
// in every process that calls there, until its last link is closed, and a
// tracer's links may outlive it: tttrace hands them to a holder that closes
// them after tttrace exits (session/closer.go), and any process's links
// close as it exits, one after the other. A run started before they are
// gone pays their traps (measured: an untraced 100,000-event burst took
// 0.130 s just after `tttrace -- /bin/true` where it takes 0.026 s), so
// every measured run waits first until the machine has no more uprobe_multi
// links than when the bench started (settle), and row 6 measures how long
// tttrace's probes stay after it exits (probesLeft).

import (
	"time"

	"github.com/cilium/ebpf/link"
)

// settleLimit bounds a wait for links to go: past it the run starts anyway
// and the log says so (another tracer on the machine, not ours).
const settleLimit = 10 * time.Second

// uprobeMultiLinks counts the machine's uprobe_multi links; -1 when they
// cannot be listed.
func uprobeMultiLinks() int {
	var it link.Iterator
	n := 0
	for it.Next() {
		if info, err := it.Link.Info(); err == nil && info.Type == link.UprobeMultiType {
			n++
		}
	}
	if it.Err() != nil {
		return -1
	}
	return n
}

// linkBase is the machine's uprobe_multi links when the bench started.
var linkBase = -1

func initSettle() { linkBase = uprobeMultiLinks() }

// settle waits until the machine has no more uprobe_multi links than at
// the start (settleLimit at most) and returns how long it waited, and
// whether they went.
func settle() (time.Duration, bool) {
	t0 := time.Now()
	if linkBase < 0 {
		return 0, true
	}
	for {
		if n := uprobeMultiLinks(); n >= 0 && n <= linkBase {
			return time.Since(t0), true
		}
		if time.Since(t0) > settleLimit {
			return time.Since(t0), false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settleBefore is settle before a measured run, logged when it waited.
func settleBefore(what string) {
	d, ok := settle()
	switch {
	case !ok:
		logf("%s: %d uprobe_multi links still on the machine after %v (another tracer?): running anyway", what, uprobeMultiLinks()-linkBase, settleLimit)
	case d > 50*time.Millisecond:
		logf("%s: waited %.2f s for the last run's probes to go", what, d.Seconds())
	}
}
