package session

// Host-wide sums go by physical chip (devices/chipid.go), but a process's
// environment is its own to write: TT_VISIBLE_DEVICES naming a chip the
// process never opened must not add its memory to that chip's sums, nor
// hide another's. TT-Metal opens every PCIe chip it uses (UMD holds its
// /dev/tenstorrent/N open), so a process is counted on a physical chip only
// once it is seen holding that device open (procfs.HeldDevices: the open
// files themselves, by device number). Its open files are looked at when
// it enters the ledger, then again whenever it has more chips in the
// ledger than at the last look (it opens its devices before it allocates
// on them), at most once every heldEvery, until every device its chip ids
// name was seen held. A device seen held stays counted for the process's
// life.

import (
	"errors"
	"fmt"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/procfs"
)

// heldDevices says which of rdevs pid holds open (a variable for the
// tests, whose processes are made up).
var heldDevices = procfs.HeldDevices

// heldEvery is the least time between two looks at one process's open
// files (each reads at most procfs.MaxFDs entries).
var heldEvery = time.Second

// chipsHeld is what the session knows of the devices a process holds.
type chipsHeld struct {
	// rdev: the device number of each /dev/tenstorrent/N its chip ids
	// name (nil: none, or not known which).
	rdev  map[int]uint64
	held  map[int]bool // seen held
	why   string       // why its open files could not all be looked at
	chips int          // its chips in the ledger at the last look
	last  time.Time    // the last look
}

// procFacts learns, off the records' path, what a traced process's
// events do not say: the chips it holds open (chipheld.go) and its pod
// (pods.go), for the ledger's process info.
type procFacts struct {
	ledger *devices.Ledger
	procs  map[uint32]*procState // the session's (never replaced)
	pods   PodNames              // Config.Pods
}

// holding is m, pid's chip map just read (tt: the devices of its
// /dev/tenstorrent), naming only the chips whose device pid holds open,
// after a look at its open files.
func (f *procFacts) holding(pid uint32, st *procState, m devices.ChipMap, tt []procfs.TTDevice) devices.ChipMap {
	h := &st.held
	h.rdev = nil
	for _, n := range m.Devices() {
		for _, d := range tt {
			if d.Num == n {
				if h.rdev == nil {
					h.rdev = map[int]uint64{}
				}
				h.rdev[n] = d.Rdev
			}
		}
	}
	if h.rdev == nil {
		return m
	}
	f.lookHeld(pid, h)
	return h.apply(m)
}

// apply is m naming the chips of the devices seen held.
func (h *chipsHeld) apply(m devices.ChipMap) devices.ChipMap {
	held := make([]int, 0, len(h.held))
	for n := range h.held {
		held = append(held, n)
	}
	return m.Holding(held, h.why)
}

// lookHeld looks at pid's open files for the devices not seen held yet.
func (f *procFacts) lookHeld(pid uint32, h *chipsHeld) {
	h.last, h.chips = time.Now(), f.ledger.ChipCount(pid)
	var want []uint64
	for n, r := range h.rdev {
		if !h.held[n] {
			want = append(want, r)
		}
	}
	if len(want) == 0 {
		return
	}
	found, err := heldDevices(int(pid), want)
	for n, r := range h.rdev {
		if found[r] {
			if h.held == nil {
				h.held = map[int]bool{}
			}
			h.held[n] = true
		}
	}
	h.why = ""
	if errors.Is(err, procfs.ErrTooManyFDs) {
		h.why = fmt.Sprintf("it holds more than %d open files; those past them were not looked at", procfs.MaxFDs)
	} else if err != nil {
		h.why = "its open files could not be read: " + err.Error()
	}
}

// checkHeld looks again at the open files of the processes that have new
// chips in the ledger and devices not seen held yet.
func (f *procFacts) checkHeld() {
	now := time.Now()
	for pid, st := range f.procs {
		h := &st.held
		if !st.inLedger || len(h.rdev) == len(h.held) || now.Sub(h.last) < heldEvery || f.ledger.ChipCount(pid) == h.chips {
			continue
		}
		f.lookHeld(pid, h)
		st.info.Chips = h.apply(st.info.Chips)
		f.ledger.SetChips(pid, st.info.Chips)
	}
}
