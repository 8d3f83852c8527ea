package sinks

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// The live view and the report say what a chip's busiest core holds, now
// and at its peak: one lockstep L1 buffer (4 KiB a bank) and a program's
// CBs (8 KiB on cores (0,0)-(3,3), 4 KiB more on (2,2)), then the buffer
// freed (a DRAM bank manager gives the free lists their alignment); a
// core's L1 is 0x18000 reserved + 64 banks' 0xe8000 + 0x8000 of
// L1_SMALL = 1056 KiB.
func TestL1CoreOutputs(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	var seq uint64
	apply := func(es ...events.Event) {
		for _, e := range es {
			seq++
			e.Pid, e.Seq, e.TsNs = 10, seq, seq*1000
			l.Apply(&e)
		}
	}
	const base, bank = 0x18000, 0xe8000
	apply(devicestest.Capacity(0, events.DRAM, 0xd0, 12, 1<<20, 32, 0x40),
		devicestest.Capacity(0, events.L1, 0xd2, 64, bank, 16, base),
		devicestest.Capacity(0, events.L1Small, 0xd3, 64, 0x8000, 16, base+bank),
		devicestest.Request(1, 0xd2, 64*4096, 4096, false),
		devicestest.AllocPage(1, 0xa1, 0, events.L1, base+bank-4096, 64*4096, 4096),
		devicestest.CBLayout(1, 0x100, 0),
		devicestest.CBOn(1, 0, 0x1000, 8192, [4]uint16{0, 0, 3, 3}),
		devicestest.CBOn(1, 0, 0x3000, 4096, [4]uint16{2, 2, 2, 2}),
		devicestest.Dispatch(1, 0x100, 0))
	peakTs := seq * 1000
	apply(devicestest.Free(1, 0xa1, 0))

	view := &View{Now: time.Unix(1700000000, 0), Ledger: l, Procs: []Proc{{Pid: 10, Command: "w"}}}
	frame := strings.Join(NewLive(&bytes.Buffer{}, time.Millisecond, nil).frame(view, 200), "\n")
	if want := "\n    L1/core  core (2,2): 0 B L1 buffers + 12.0 KiB CBs = 12.0 KiB of 1.0 MiB (1.1%); peak 16.0 KiB\n"; !strings.Contains(frame, want) {
		t.Errorf("live frame lacks %q:\n%s", want, frame)
	}
	sum := l.Summary()
	var rep bytes.Buffer
	if err := writeReport(&rep, &sum); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  L1 per core (the busiest core: L1 buffers and resident circular buffers):\n" +
			"    chip 0 now: core (2,2): 0 B L1 buffers + 12.0 KiB CBs = 12.0 KiB of 1.0 MiB (1.1%)\n" +
			"    chip 0 peak: core (2,2): 4.0 KiB L1 buffers + 12.0 KiB CBs = 16.0 KiB of 1.0 MiB (1.5%) (ts " + strconv.FormatUint(peakTs, 10) + ")\n",
	} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, rep.String())
		}
	}
}

// L1CoreText's forms: a busiest bank whose core is not known beside the
// busiest CB core (an upper bound), a bank alone, every core alike, and
// buffers whose span is not known.
func TestL1CoreText(t *testing.T) {
	size, bank := uint64(1<<20), uint32(7)
	for _, c := range []struct {
		in   devices.L1Core
		want string
	}{
		{devices.L1Core{Core: &[2]uint16{1, 2}, Bank: &bank, L1BufferBytes: 3072, CBBytes: 1024, TotalBytes: 4096, L1Size: &size, UpperBound: true},
			"core (1,2) and the core of bank 7: 3.0 KiB L1 buffers + 1.0 KiB CBs = at most 4.0 KiB of 1.0 MiB (0.4%)"},
		{devices.L1Core{Bank: &bank, L1BufferBytes: 2048, TotalBytes: 2048},
			"the core of bank 7: 2.0 KiB L1 buffers + 0 B CBs = 2.0 KiB"},
		{devices.L1Core{L1BufferBytes: 512 << 10, TotalBytes: 512 << 10, L1Size: &size, SpansUnknown: 2},
			"every core: 512.0 KiB L1 buffers + 0 B CBs = 512.0 KiB of 1.0 MiB (50.0%); 2 L1 buffer(s) whose span per bank is unknown left out"},
		{devices.L1Core{SpansUnknown: 3},
			"unknown: 3 L1 buffer(s) whose span per bank is unknown (their allocator requests were not seen)"},
	} {
		if got := L1CoreText(&c.in); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
