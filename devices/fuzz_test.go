package devices

import (
	"encoding/json"
	"io"
	"math"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// fuzzEvents turns bytes into an event stream: mostly well-formed kinds
// over small pools of pids, threads, buffers, chips (sparse, negative,
// huge), meshes and programs, so that the ledger's rules interact, plus
// garbage kinds, device kinds, buffer types and sizes.
func fuzzEvents(data []byte) []events.Event {
	const per = 9
	kinds := []events.Kind{
		events.KindAlloc, events.KindAlloc, events.KindAlloc, events.KindFree, events.KindFree, events.KindView,
		events.KindView, events.KindCBAlloc, events.KindCBFree, events.KindCBLayout, events.KindCBTeardown,
		events.KindProgramDestroy, events.KindDeviceClose, events.KindMeshClose, events.KindMarkDeallocated,
		events.KindLost, events.KindExit,
	}
	chips := []int32{0, 1, 7, 64, 100, -1, -5, 1 << 30, math.MaxInt32, math.MinInt32, 2, 3}
	meshes := []uint64{0x5500a0000000, 0x5500b0000000, 0, chipPtr(0)}
	var out []events.Event
	var seq, ts uint64
	for len(data) >= per && len(out) < 400 {
		b := data[:per]
		data = data[per:]
		var e events.Event
		if b[0] >= 250 {
			e.Kind = events.Kind(b[0] - 250) // 0..5, with garbage 0
			if b[0] == 255 {
				e.Kind = 200
			}
		} else {
			e.Kind = kinds[int(b[0])%len(kinds)]
		}
		e.Pid = 1 + uint32(b[1]%3)
		e.Tid = uint32(b[1]>>2) % 4
		e.Object = 0x1000 + uint64(b[2]%16)*0x40
		if b[2] >= 240 {
			e.Object = 0x560000000000 + uint64(b[2]%4) // programs
		}
		switch dk := b[3] % 6; dk {
		case 0, 1, 2:
			e.DeviceKind = events.DeviceChip
			e.Chip = chips[int(b[3]>>3)%len(chips)]
			e.Device = chipPtr(e.Chip)
		case 3:
			e.DeviceKind = events.DeviceMesh
			e.Chip = -1
			e.Device = meshes[int(b[3]>>3)%len(meshes)]
		case 4:
			e.DeviceKind = events.DeviceUnknown
			e.Chip = -1
		default:
			e.DeviceKind = events.DeviceKind(b[3] >> 4) // none, or garbage
			e.Chip = int32(b[3])
		}
		e.BufferType = events.BufferType(int(b[4]%8) - 1)
		e.Size = uint64(b[5]) << (b[6] % 48) // up to about 2^55: past the plausible cap too
		e.Address = uint64(b[7]%8) * 0x1000
		f := b[8]
		e.Hooked = f&1 != 0 && f&2 != 0
		e.OwnsData = f&4 == 0 || f&8 == 0
		e.Global = f&0x10 != 0
		e.ReadError = f&0xe0 == 0xe0
		if f&0x60 == 0x40 {
			e.LostBefore = uint64(f >> 6)
		}
		e.ExitCode, e.ExitSignal = int(b[5]), int(b[6]%32)
		if f&0x80 == 0 || seq == 0 { // else a duplicate seq
			seq++
		}
		ts += uint64(b[6])
		e.Seq, e.TsNs = seq, ts
		out = append(out, e)
	}
	return out
}

func FuzzLedger(f *testing.F) {
	// Seeds: an alloc/free pair, a mesh alloc with views, a CB layout, a close.
	f.Add([]byte{0, 0, 1, 0, 1, 16, 2, 1, 0, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 2, 3, 1, 200, 10, 2, 0, 5, 0, 0, 0, 0, 0, 0, 2, 0, 6, 0, 0, 8, 0, 0, 0, 2, 0, 4, 4, 2, 3, 1, 1, 1, 1, 0})
	f.Add([]byte{9, 4, 240, 0, 0, 0, 0, 0, 0, 7, 4, 0, 0, 0, 64, 4, 0, 0, 8, 4, 240, 0, 0, 0, 0, 0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 3, 8, 2, 1, 40, 3, 0, 0, 1, 3, 8, 2, 1, 40, 3, 0, 14, 1, 3, 8, 0, 0, 0, 0, 0, 16, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		l := NewLedger()
		l.SetL1Warn(0x3000)
		l.SetNotify(func(n *Notice) {
			if _, err := json.Marshal(n); err != nil {
				t.Fatal(err)
			}
			if n.Type == NoticeL1Clash && (n.LowestL1Address >= n.CBRegionEnd || n.InTheWayCount == 0) {
				t.Fatalf("l1_clash without a clash: %+v", n)
			}
		})
		for i, e := range fuzzEvents(data) {
			l.Apply(&e)
			if err := l.Check(); err != nil {
				t.Fatalf("after event %d (%s seq %d pid %d): %v", i, e.Kind, e.Seq, e.Pid, err)
			}
		}
		l.Apply(nil)
		l.Flush()
		if err := l.Check(); err != nil {
			t.Fatalf("after Flush: %v", err)
		}
		checkStreamed(t, l)
		s := l.Summary()
		if _, err := json.Marshal(&s); err != nil {
			t.Fatal(err)
		}
		if err := WriteReport(io.Discard, &s); err != nil {
			t.Fatal(err)
		}
		for _, p := range s.Processes {
			for _, d := range p.Devices {
				for _, v := range []uint64{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBBytes, d.LiveBuffers} {
					if v >= checkLimit {
						t.Fatalf("pid %d chip %d: total %d", p.Pid, d.Device, v)
					}
				}
			}
		}
	})
}
