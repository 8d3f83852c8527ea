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
// tick after its first allocation on a chip keeps that chip unnamed. The
// same read takes UMD's cluster descriptor from the process
// (ttmetal.ReadClusterDescriptors): a named chip's place (tray, ASIC
// location) is that of the descriptor's entry for its chip id that names
// the same unique id (ttmetal.PlaceOf), with the host's motherboard name
// (boardName, read once).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// ChipUIDReader is a Backend that can read the unique ids of a traced
// process's chips from its memory.
type ChipUIDReader interface {
	// ChipUIDs reads pid's open Devices (with their unique ids), the
	// chip counters files it maps and its cluster descriptors, within b.
	// ErrLayoutsPending: the library's DWARF is still being read; ask
	// again later.
	ChipUIDs(pid uint32, b *procfs.MemBudget) (ChipRead, error)
}

// ChipRead is what one read of a process says of its chips.
type ChipRead struct {
	Devices []ttmetal.MemDevice
	SHM     map[uint64]bool // the unique ids of the counters files it maps
	// Descs: its cluster descriptors (one per MetalContext with its own),
	// or DescErr why none was read.
	Descs   []map[int32]*ttmetal.DescChip
	DescErr error
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
		cr, err := r.ChipUIDs(pid, &u.budget)
		if errors.Is(err, ErrLayoutsPending) {
			continue
		}
		u.last = now
		u.tries++
		facts, rest := uidFacts(cr, err, mr.boardName())
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

// uidFacts are what a read says of each chip (cr: its Devices, the
// counters files mapped, its cluster descriptors; err: why nothing was
// read; board: the host's motherboard), and why the chips it leaves out
// have no unique id.
func uidFacts(cr ChipRead, err error, board string) (map[int32]devices.ChipUID, string) {
	if err != nil {
		return nil, err.Error()
	}
	facts := make(map[int32]devices.ChipUID, len(cr.Devices))
	for _, d := range cr.Devices {
		switch {
		case !d.UID.Known:
			facts[d.Chip] = devices.ChipUID{Why: d.UID.Why}
		case !cr.SHM[d.UID.ID]:
			facts[d.Chip] = devices.ChipUID{Why: fmt.Sprintf("its Device names unique id %d, but the process maps no %s%d%s: the two do not agree",
				d.UID.ID, procfs.SHMChipPrefix, d.UID.ID, procfs.SHMChipSuffix)}
		default:
			facts[d.Chip] = devices.ChipUID{ID: d.UID.ID, Known: true, Place: placeOf(cr, d, board)}
		}
	}
	return facts, "not an open Device in the process's memory when it was read"
}

// placeOf is the place of chip d (its unique id known) in the descriptor
// whose entry for its chip id names the same unique id.
func placeOf(cr ChipRead, d ttmetal.MemDevice, board string) devices.ChipPlace {
	if cr.DescErr != nil {
		return devices.ChipPlace{Why: "its cluster descriptor was not read: " + cr.DescErr.Error()}
	}
	for _, desc := range cr.Descs {
		if c := desc[d.Chip]; c != nil && c.HasUniqueID && c.UniqueID == d.UID.ID {
			p := ttmetal.PlaceOf(c, board)
			return devices.ChipPlace{Tray: p.Tray, AsicLocation: p.AsicLocation, Known: p.Known, Why: p.Why}
		}
	}
	if len(cr.Descs) == 0 {
		return devices.ChipPlace{Why: "the process holds no cluster descriptor (no MetalContext's MetalEnv has a tt::Cluster with one)"}
	}
	return devices.ChipPlace{Why: fmt.Sprintf("no cluster descriptor of the process names unique id %d for chip %d", d.UID.ID, d.Chip)}
}

// boardName is the host's motherboard name (upstream's get_mobo_name: the
// first line of /sys/class/dmi/id/board_name, "" when it cannot be read),
// read once, bounded.
func (mr *memReads) boardName() string {
	mr.board.once.Do(func() {
		sys := mr.sys
		if sys == "" {
			sys = "/sys"
		}
		f, err := os.Open(filepath.Join(sys, "class", "dmi", "id", "board_name"))
		if err != nil {
			return
		}
		defer f.Close()
		b := make([]byte, 256)
		n, _ := f.Read(b)
		line, _, _ := strings.Cut(string(b[:n]), "\n")
		mr.board.name = line
	})
	return mr.board.name
}

// hostBoard is the host's motherboard name, read once.
type hostBoard struct {
	once sync.Once
	name string
}

// ChipUIDs makes the backend a ChipUIDReader: its memReader's.
func (b *bpfBackend) ChipUIDs(pid uint32, budget *procfs.MemBudget) (ChipRead, error) {
	return b.mem.ChipUIDs(pid, budget)
}
