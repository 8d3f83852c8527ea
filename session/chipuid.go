package session

// A chip's physical identity from the process that uses it
// (docs/ttmetal.md §11, "Physical chips"): 2026 TT-Metal gives each Device
// an SHM provider holding the chip's UMD unique id, for PCIe-local and
// Ethernet-remote chips alike, and the provider maps
// /dev/shm/tt_device_<unique id>_memory. tttrace reads the ids from the
// Devices in the process's memory (ttmetal.ReadDevices, DWARF layouts) and
// names a chip by one only when the process also maps that id's file: two
// sources that must agree, never a guess. The read happens off the records'
// path at a tick, when the process has more chips in the ledger than are
// named (at most every uidMinGap), then again every uidEvery up to uidTries
// times while some stay unnamed, within a budget of its own per process
// (uidBudget*), apart from the allocators' (a process's chips opened late
// must not cost it its allocators' read). A process that ends before the
// tick after its first allocation on a chip keeps that chip unnamed.

import (
	"errors"
	"fmt"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// ChipUIDReader is a Backend that can read the unique ids of a traced
// process's chips from its memory.
type ChipUIDReader interface {
	// ChipUIDs reads pid's open Devices (with their unique ids) and the
	// chip counters files it maps, within b. ErrLayoutsPending: the
	// library's DWARF is still being read; ask again later.
	ChipUIDs(pid uint32, b *procfs.MemBudget) ([]ttmetal.MemDevice, map[uint64]bool, error)
}

// ErrLayoutsPending says a library's layouts are not read yet.
var ErrLayoutsPending = errors.New("the library's DWARF is still being read")

// The reads' pace and bounds.
var (
	uidMinGap = 250 * time.Millisecond
	uidEvery  = time.Second
)

const (
	uidTries       = 5
	uidBudgetBytes = 4 << 20
	uidBudgetReads = 16384
)

// chipUIDs is what the session knows of reading a process's chip ids.
type chipUIDs struct {
	budget procfs.MemBudget
	set    bool
	chips  int       // its chips in the ledger at the last read
	tries  int       // reads since its chip count last changed
	last   time.Time // the last read
	done   bool      // nothing more will be read (why: in its chip map)
}

// checkUIDs reads the unique ids of the chips of the processes that have
// chips not named yet.
func (mr *memReads) checkUIDs(now time.Time) {
	r, ok := mr.be.(ChipUIDReader)
	if !ok {
		return
	}
	for pid, st := range mr.procs {
		u := &st.uids
		if !st.inLedger || !st.hasLib || u.done {
			continue
		}
		n := mr.ledger.ChipCount(pid)
		if n == 0 || st.info.Chips.UIDsKnown() >= n || now.Sub(u.last) < uidMinGap {
			continue
		}
		if n != u.chips {
			u.chips, u.tries = n, 0
		} else if u.tries >= uidTries || now.Sub(u.last) < uidEvery {
			continue
		}
		if !u.set {
			u.budget, u.set = procfs.MemBudget{Bytes: uidBudgetBytes, Reads: uidBudgetReads}, true
		}
		devs, shm, err := r.ChipUIDs(pid, &u.budget)
		if errors.Is(err, ErrLayoutsPending) {
			continue
		}
		u.last = now
		u.tries++
		facts, rest := uidFacts(devs, shm, err)
		if errors.Is(err, procfs.ErrMemBudget) {
			// The summary says why for each chip; the log once.
			rest = fmt.Sprintf("reading them would take more than tttrace allows one process (%d MiB in %d reads of its memory): not read", uidBudgetBytes>>20, uidBudgetReads)
			u.done = true
			fmt.Fprintf(mr.log, "tttrace: pid %d: its chips' unique ids not read: %s\n", pid, rest)
		}
		st.info.Chips = st.info.Chips.WithUIDs(facts, rest)
		mr.ledger.SetChips(pid, st.info.Chips)
	}
}

// uidFacts are what a read says of each chip (devs: the open Devices;
// shm: the counters files mapped; err: why nothing was read), and why the
// chips it leaves out have no unique id.
func uidFacts(devs []ttmetal.MemDevice, shm map[uint64]bool, err error) (map[int32]devices.ChipUID, string) {
	if err != nil {
		return nil, err.Error()
	}
	facts := make(map[int32]devices.ChipUID, len(devs))
	for _, d := range devs {
		switch {
		case !d.UID.Known:
			facts[d.Chip] = devices.ChipUID{Why: d.UID.Why}
		case !shm[d.UID.ID]:
			facts[d.Chip] = devices.ChipUID{Why: fmt.Sprintf("its Device names unique id %d, but the process maps no %s%d%s: the two do not agree",
				d.UID.ID, procfs.SHMChipPrefix, d.UID.ID, procfs.SHMChipSuffix)}
		default:
			facts[d.Chip] = devices.ChipUID{ID: d.UID.ID, Known: true}
		}
	}
	return facts, "not an open Device in the process's memory when it was read"
}

// ChipUIDs makes the backend a ChipUIDReader: its memReader's.
func (b *bpfBackend) ChipUIDs(pid uint32, budget *procfs.MemBudget) ([]ttmetal.MemDevice, map[uint64]bool, error) {
	return b.mem.ChipUIDs(pid, budget)
}
