package session

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// uidBackend is a Backend whose processes' Devices and mapped counters
// files are made up; it counts its reads.
type uidBackend struct {
	Backend
	devs  []ttmetal.MemDevice
	shm   map[uint64]bool
	descs []map[int32]*ttmetal.DescChip
	err   error
	reads int
}

func (b *uidBackend) ChipUIDs(pid uint32, m *procfs.MemBudget) (ChipRead, error) {
	b.reads++
	return ChipRead{Devices: b.devs, SHM: b.shm, Descs: b.descs}, b.err
}

// A process's chips are named by the unique ids its Devices hold only
// where it maps those ids' counters files; the others say why; the reads
// keep to their pace.
func TestCheckUIDs(t *testing.T) {
	const pid = 42
	l := devices.NewLedger(devices.Options{})
	st := &procState{inLedger: true, hasLib: true}
	l.SetProcessInfo(pid, st.info)
	for chip := range int32(4) {
		e := devicestest.Alloc(1, 0x1000+uint64(chip), chip, events.DRAM, 0x100, 64)
		e.Pid = pid
		l.Apply(&e)
	}
	be := &uidBackend{
		devs: []ttmetal.MemDevice{
			{Chip: 0, UID: ttmetal.ChipUID{ID: 111, Known: true}},
			{Chip: 1, UID: ttmetal.ChipUID{ID: 222, Known: true}},
			{Chip: 2, UID: ttmetal.ChipUID{ID: 333, Known: true}}, // its file is not mapped
		},
		shm: map[uint64]bool{111: true, 222: true, 999: true},
		// Chip 0 on a Wormhole UBB tray (bus 0x83: tray 2, place 3); the
		// descriptor's chip 1 is another chip than its Device's.
		descs: []map[int32]*ttmetal.DescChip{{
			0: {UniqueID: 111, HasUniqueID: true, BoardNames: []string{"UBB", "UBB_WORMHOLE"}, HasBoard: true, Bus: 0x83, HasBus: true},
			1: {UniqueID: 223, HasUniqueID: true, BoardNames: []string{"P150"}, HasBoard: true, AsicLocation: 1, HasAsicLocation: true},
		}},
	}
	mr := &memReads{ledger: l, log: io.Discard, be: be, procs: map[uint32]*procState{pid: st}}
	now := time.Unix(1000, 0)
	mr.checkUIDs(now)
	ids := map[int32]devices.ChipIdentity{}
	for _, p := range l.Summary().Processes {
		for _, d := range p.Devices {
			ids[d.Device] = d.ChipIdentity
		}
	}
	if u := ids[0].UID; u == nil || *u != "111" || ids[0].UniqueID != "111" {
		t.Errorf("chip 0: %+v", ids[0])
	}
	if p := ids[0]; p.Tray == nil || *p.Tray != 2 || p.AsicLocation == nil || *p.AsicLocation != 3 || p.PlaceWhy != "" {
		t.Errorf("chip 0's place: %+v", p)
	}
	if u := ids[1].UID; u == nil || *u != "222" || ids[1].Tray != nil || ids[1].AsicLocation != nil ||
		!strings.Contains(ids[1].PlaceWhy, "names unique id 222 for chip 1") {
		t.Errorf("chip 1: %+v", ids[1])
	}
	if ids[2].UID != nil || !strings.Contains(ids[2].Why, "maps no /dev/shm/tt_device_333_memory") {
		t.Errorf("chip 2 (file not mapped): %+v", ids[2])
	}
	if ids[3].UID != nil || !strings.Contains(ids[3].Why, "not an open Device") {
		t.Errorf("chip 3 (no Device): %+v", ids[3])
	}
	// Pace: not again within uidEvery; again after it, up to uidTries.
	mr.checkUIDs(now.Add(uidMinGap))
	if be.reads != 1 {
		t.Errorf("%d reads within uidEvery, want 1", be.reads)
	}
	for i := range 10 {
		mr.checkUIDs(now.Add(time.Duration(i+1) * uidEvery))
	}
	if be.reads != uidTries {
		t.Errorf("%d reads, want %d", be.reads, uidTries)
	}
	// A new chip: read again (after uidMinGap), and a later fact names chip 2.
	e := devicestest.Alloc(1, 0x2000, 7, events.DRAM, 0x100, 64)
	e.Pid = pid
	l.Apply(&e)
	be.shm[333] = true
	mr.checkUIDs(now.Add(20 * uidEvery))
	if be.reads != uidTries+1 || !st.info.Chips.UIDKnown(2) || !st.info.Chips.UIDKnown(0) {
		t.Errorf("new chip: %d reads, chip 2 named %v", be.reads, st.info.Chips.UIDKnown(2))
	}
	// Layouts not read yet: no try is spent; over budget: nothing more.
	be.err = ErrLayoutsPending
	e = devicestest.Alloc(1, 0x3000, 8, events.DRAM, 0x100, 64)
	e.Pid = pid
	l.Apply(&e)
	mr.checkUIDs(now.Add(30 * uidEvery))
	if st.uids.tries != 0 {
		t.Errorf("a pending read counted: %d tries", st.uids.tries)
	}
	be.err = errors.Join(errors.New("read"), procfs.ErrMemBudget)
	mr.checkUIDs(now.Add(31 * uidEvery))
	n := be.reads
	mr.checkUIDs(now.Add(40 * uidEvery))
	if !st.uids.done || be.reads != n {
		t.Errorf("over budget: done %v, reads %d then %d", st.uids.done, n, be.reads)
	}
	if id := st.info.Chips.Identity(8); id.UID != nil || !strings.Contains(id.Why, "more than tttrace allows") {
		t.Errorf("chip 8 over budget: %+v", id)
	}
}
