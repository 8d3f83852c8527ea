package devices

import (
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// The stream constructors of devicestest, under the names the tests use.
var (
	chipPtr          = devicestest.ChipPtr
	evAlloc          = devicestest.Alloc
	evMeshAlloc      = devicestest.MeshAlloc
	evView           = devicestest.View
	evFree           = devicestest.Free
	evMeshFree       = devicestest.MeshFree
	evMark           = devicestest.Mark
	evCBLayout       = devicestest.CBLayout
	evCBLayoutMesh   = devicestest.CBLayoutMesh
	evCB             = devicestest.CB
	evCBMesh         = devicestest.CBMesh
	evCBTeardown     = devicestest.CBTeardown
	evCBFree         = devicestest.CBFree
	evCBFreeMesh     = devicestest.CBFreeMesh
	evProgramDestroy = devicestest.ProgramDestroy
	evDeviceClose    = devicestest.DeviceClose
	evMeshClose      = devicestest.MeshClose
	evExit           = devicestest.Exit
	evLost           = devicestest.Lost
)

// rec applies events to a ledger, numbering them, and checks the ledger's
// internal consistency after each one.
type rec struct {
	t   testing.TB
	l   *Ledger
	pid uint32
	seq uint64
	ts  uint64
}

func newRec(t testing.TB) *rec { return newRecWith(t, Options{}) }

// newRecWith is newRec with a ledger configured by o.
func newRecWith(t testing.TB, o Options) *rec {
	return &rec{t: t, l: NewLedger(o), pid: 1000}
}

// apply applies events in order; it returns the ts of the last.
func (r *rec) apply(evs ...events.Event) uint64 {
	r.t.Helper()
	for _, e := range evs {
		r.seq++
		r.ts += 100
		if e.Seq == 0 {
			e.Seq = r.seq
		}
		if e.TsNs == 0 {
			e.TsNs = r.ts
		}
		if e.Pid == 0 && e.Kind != events.KindLost {
			e.Pid = r.pid
		}
		r.l.Apply(&e)
		if err := r.l.Check(); err != nil {
			r.t.Fatalf("after %s seq %d: %v", e.Kind, e.Seq, err)
		}
	}
	return r.ts
}

func (r *rec) summary() Summary {
	r.t.Helper()
	s := r.l.Summary()
	if _, err := json.Marshal(&s); err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rec) proc() ProcessSummary {
	r.t.Helper()
	s := r.summary()
	for _, p := range s.Processes {
		if p.Pid == r.pid {
			return p
		}
	}
	r.t.Fatalf("pid %d not in summary", r.pid)
	return ProcessSummary{}
}

// dev returns chip's summary in the rec's process; it fails if absent.
func (r *rec) dev(chip int32) DeviceSummary {
	r.t.Helper()
	for _, d := range r.proc().Devices {
		if d.Device == chip {
			return d
		}
	}
	r.t.Fatalf("chip %d not in devices", chip)
	return DeviceSummary{}
}

// totals is a compact view of a chip's current totals for comparisons.
type totals struct {
	DRAM, L1, L1Small, Trace, SysMem, CB, Live uint64
}

func totOf(d DeviceSummary) totals {
	return totals{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBRegisteredBytes, d.LiveBuffers}
}

func (r *rec) tot(chip int32) totals {
	r.t.Helper()
	return totOf(r.dev(chip))
}

func (r *rec) chips() []int32 {
	var ids []int32
	for _, d := range r.proc().Devices {
		ids = append(ids, d.Device)
	}
	return ids
}
