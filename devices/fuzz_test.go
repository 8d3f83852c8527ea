package devices

import (
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
)

func FuzzLedger(f *testing.F) {
	// Seeds: an alloc/free pair, a mesh alloc with views, a CB layout, a close.
	f.Add([]byte{0, 0, 1, 0, 1, 16, 2, 1, 0, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 2, 3, 1, 200, 10, 2, 0, 5, 0, 0, 0, 0, 0, 0, 2, 0, 6, 0, 0, 8, 0, 0, 0, 2, 0, 4, 4, 2, 3, 1, 1, 1, 1, 0})
	f.Add([]byte{9, 4, 240, 0, 0, 0, 0, 0, 0, 7, 4, 0, 0, 0, 64, 4, 0, 0, 8, 4, 240, 0, 0, 0, 0, 0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 3, 8, 2, 1, 40, 3, 0, 0, 1, 3, 8, 2, 1, 40, 3, 0, 14, 1, 3, 8, 0, 0, 0, 0, 0, 16, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		l := NewLedger(Options{L1Warn: 0x3000, SiteUsage: true, Notices: NoticeFunc(func(n *Notice) {
			if _, err := json.Marshal(n); err != nil {
				t.Fatal(err)
			}
			if n.Type == NoticeL1Clash && (n.LowestL1Address >= n.CBRegionEnd || n.L1BuffersCount == 0) {
				t.Fatalf("l1_clash without a clash: %+v", n)
			}
			if f := n.AllocFailed; n.Type == NoticeAllocFailed && f.Cause != "" &&
				(f.Span == nil || f.LargestFree == nil || *f.Span <= *f.LargestFree && *f.Span <= f.BankSize) {
				t.Fatalf("alloc_failed with a cause but a block large enough: %+v", f)
			}
		})})
		for i, e := range devicestest.FuzzEvents(data) {
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
		for _, p := range s.Processes {
			for _, d := range p.Devices {
				for _, v := range []uint64{d.DRAMBytes, d.L1Bytes, d.L1SmallBytes, d.TraceBytes, d.SystemMemoryBytes, d.CBRegisteredBytes, d.LiveBuffers} {
					if v >= checkLimit {
						t.Fatalf("pid %d chip %d: total %d", p.Pid, d.Device, v)
					}
				}
			}
		}
	})
}
