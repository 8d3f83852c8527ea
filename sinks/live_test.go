package sinks

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

func chipEv(kind events.Kind, pid uint32, buf uint64, chip int32, t events.BufferType, size uint64) *events.Event {
	return &events.Event{Kind: kind, Pid: pid, Tid: pid, Object: buf, Device: 0x7f00 + uint64(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: t, Size: size, Address: 0x1000, OwnsData: true, Status: 1}
}

// A frame from a synthetic ledger: the header's counts, one bar per type
// in use whose fill is the current size against the peak, the numbers,
// the all-processes block, and no line wider than the terminal.
func TestLiveFrame(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	apply := func(e *events.Event) {
		e.Seq++
		l.Apply(e)
	}
	apply(chipEv(events.KindAlloc, 10, 0xa, 0, events.DRAM, 8192))
	apply(chipEv(events.KindAlloc, 10, 0xb, 0, events.DRAM, 8192))
	apply(chipEv(events.KindFree, 10, 0xb, 0, -1, 0)) // DRAM: 8 KiB now, 16 KiB peak
	apply(chipEv(events.KindAlloc, 10, 0xc, 3, events.L1, 512))
	apply(chipEv(events.KindAlloc, 11, 0xd, 0, events.DRAM, 4096))
	// A program on chip 3 lays out a CB ending at 0x800, under pid 10's L1
	// buffer at 0x1000: 2 KiB of headroom.
	apply(&events.Event{Kind: events.KindCBLayout, Pid: 10, Tid: 10, Object: 0x9000, Device: 0x7f03, DeviceKind: events.DeviceChip, Chip: 3})
	cb := events.Event{Kind: events.KindCBAlloc, Pid: 10, Tid: 10, Device: 0x7f03, DeviceKind: events.DeviceChip, Chip: 3, Address: 0x400, Size: 0x400}
	cb.RangesKnown, cb.NumRanges, cb.CoreRanges[0] = true, 1, events.CoreRange{X0: 0, Y0: 0, X1: 1, Y1: 1}
	apply(&cb)
	// Dispatched: its CB is resident on four cores, 1 KiB on each.
	apply(&events.Event{Kind: events.KindProgramDispatch, Pid: 10, Tid: 10, Object: 0x9000, Device: 0x7f03, DeviceKind: events.DeviceChip, Chip: 3})
	apply(chipEv(events.KindAlloc, 10, 0xe, 3, events.DRAM, 64)) // the layout is complete
	// 10 and 11 see the host's chips (chip N at 0000:0N:00.0); 12's
	// chips are not known: its chip 0 is not added to theirs.
	var host []devices.PCIChip
	for n := range 4 {
		host = append(host, devices.PCIChip{Num: n, PCI: "0000:0" + string(rune('0'+n)) + ":00.0", DeviceID: "0x401e"})
	}
	none := func(string) (string, bool) { return "", false }
	l.SetProcessInfo(10, devices.ProcessInfo{Chips: devices.NewChipMap(none, host, nil)})
	l.SetProcessInfo(11, devices.ProcessInfo{Chips: devices.NewChipMap(none, host, nil)})
	l.SetProcessInfo(12, devices.ProcessInfo{Chips: devices.NewChipMap(none, nil, errors.New("no /dev/tenstorrent"))})
	apply(chipEv(events.KindAlloc, 12, 0xf, 0, events.DRAM, 2048))
	rank := int64(3)
	for _, width := range []int{72, 100, 200} {
		var out bytes.Buffer
		v := NewLive(&out, time.Millisecond, func() (int, int) { return width, 0 })
		view := &View{Now: time.Unix(1700000000, 0), Ledger: l, Libraries: 1, Waiting: 1,
			Procs: []Proc{{Pid: 10, Command: "python -m pytest " + strings.Repeat("tests/x ", 40)}, {Pid: 11, Command: "w"},
				{Pid: 12, Command: "u", Placement: devices.Placement{Host: "n1", Rank: &rank}}}}
		lines := v.frame(view, width)
		text := strings.Join(lines, "\n")
		for _, want := range []string{"10 events", "1 library probed", "3 process(es) (1 waiting for libtt_metal.so)",
			"pid 10", "chip 0 (pci 0000:00:00.0)  1 buffer(s), peak 2", "chip 3 (pci 0000:03:00.0)  2 buffer(s), peak 2",
			"pid 12  [host n1, rank 3]  u", "chip 0 (physical chip unknown)  1 buffer(s)",
			"all processes, per physical chip (current)",
			"pci 0000:00:00.0  DRAM 12.0 KiB", "pci 0000:03:00.0  DRAM 64 B  L1 512 B  CB 1.0 KiB",
			"pid 12 chip 0 (physical chip unknown)  DRAM 2.0 KiB",
			"L1 headroom 2.0 KiB (CBs end at 0x800, lowest L1 buffer at 0x1000)"} {
			if !strings.Contains(text, want) {
				t.Errorf("width %d: frame lacks %q:\n%s", width, want, text)
			}
		}
		for _, line := range lines {
			if n := utf8.RuneCountInString(line); n > width {
				t.Errorf("width %d: a line of %d columns: %q", width, n, line)
			}
		}
		// pid 10's DRAM on chip 0: half its peak.
		re := regexp.MustCompile(`DRAM\s+(#*)(-*)\|\s+8\.0 KiB\s+peak\s+16\.0 KiB`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("width %d: no DRAM bar at 8 of 16 KiB:\n%s", width, text)
		}
		if full, empty := len(m[1]), len(m[2]); full != empty && full != empty+1 && full+1 != empty {
			t.Errorf("width %d: 8 of 16 KiB drawn as %d filled, %d empty", width, full, empty)
		}
		if strings.Contains(text, "LOST") {
			t.Error("LOST without a loss")
		}
		// pid 10's CB on chip 3: 1 KiB on each of its four cores, the
		// busiest the lowest (x, y); registered as much: no sum beside it.
		if !regexp.MustCompile(`    CB\s+#+\|\s+1\.0 KiB\s+peak\s+1\.0 KiB\n {13}resident on the busiest core \(0,0\)\n`).MatchString(text + "\n") {
			t.Errorf("width %d: no CB row of 1 KiB on core (0,0) alone:\n%s", width, text)
		}
		// Drawing: one write per frame, rewriting in place the second time.
		v.Tick(view)
		first := out.String()
		view.Now = view.Now.Add(time.Second)
		v.Tick(view)
		second := out.String()[len(first):]
		if strings.Count(first, "\x1b[K\n") != len(lines) || !strings.HasPrefix(second, "\x1b[") ||
			!strings.Contains(second, "A\r") || !strings.HasSuffix(second, "\x1b[J") {
			t.Errorf("frames are not drawn in place: %q then %q", first, second)
		}
	}
}

// The CB row: the bytes resident on the busiest core, named, with the sum
// over the programs holding CBs beside them when it differs; a chip whose
// programs registered CBs none dispatched yet has the row, empty.
func TestLiveCB(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	seq := uint64(0)
	apply := func(e events.Event) {
		seq++
		e.Seq, e.TsNs, e.Pid, e.Tid = seq, seq*100, 10, 10
		l.Apply(&e)
	}
	// program lays out one CB of size bytes at 0x400 on chip's cores r.
	program := func(prog uint64, chip int32, size uint64, r events.CoreRange) {
		apply(events.Event{Kind: events.KindCBLayout, Object: prog, Device: 0x7f00 + uint64(chip), DeviceKind: events.DeviceChip, Chip: chip})
		cb := events.Event{Kind: events.KindCBAlloc, Device: 0x7f00 + uint64(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: 0x400, Size: size}
		cb.RangesKnown, cb.NumRanges, cb.CoreRanges[0] = true, 1, r
		apply(cb)
	}
	dispatch := func(prog uint64, chip int32) {
		apply(events.Event{Kind: events.KindProgramDispatch, Object: prog, Device: 0x7f00 + uint64(chip), DeviceKind: events.DeviceChip, Chip: chip})
	}
	// Chip 1: A (2 KiB on core (1,1)) dispatched, B (1 KiB on (0,0)-(1,0))
	// dispatched, C (4 KiB on (0,0)) laid out only: the busiest core is
	// (1,1) with 2 KiB; the programs registered 7 KiB.
	program(0xa, 1, 2048, events.CoreRange{X0: 1, Y0: 1, X1: 1, Y1: 1})
	dispatch(0xa, 1)
	program(0xb, 1, 1024, events.CoreRange{X0: 0, Y0: 0, X1: 1, Y1: 0})
	dispatch(0xb, 1)
	program(0xc, 1, 4096, events.CoreRange{X0: 0, Y0: 0, X1: 0, Y1: 0})
	// Chip 2: a program laid out, never dispatched.
	program(0xd, 2, 1024, events.CoreRange{X0: 0, Y0: 0, X1: 0, Y1: 0})
	apply(*chipEv(events.KindAlloc, 10, 0xe, 2, events.DRAM, 64)) // the layouts are complete
	view := &View{Now: time.Unix(1700000000, 0), Ledger: l, Procs: []Proc{{Pid: 10, Command: "w"}}}
	for _, width := range []int{80, 120} {
		lines := NewLive(&bytes.Buffer{}, time.Millisecond, func() (int, int) { return width, 0 }).frame(view, width)
		text := strings.Join(lines, "\n")
		for _, re := range []string{
			`chip 1 .*\n    CB\s+#+\|\s+2\.0 KiB\s+peak\s+2\.0 KiB\n {13}resident on the busiest core \(1,1\); programs registered 7\.0 KiB\n`,
			`chip 2 .*\n(.*\n)?    CB\s+-+\|\s+0 B\s+peak\s+0 B\n {13}none resident; programs registered 1\.0 KiB\n`,
		} {
			if !regexp.MustCompile(re).MatchString(text + "\n") {
				t.Errorf("width %d: frame lacks %s:\n%s", width, re, text)
			}
		}
		for _, line := range lines {
			if n := utf8.RuneCountInString(line); n > width {
				t.Errorf("width %d: a line of %d columns: %q", width, n, line)
			}
		}
	}
}

// The allocator's lines: used / capacity with its percentage and the
// largest free block per type, from a chip whose bank managers were made
// while traced; a chip without them says why.
func TestLiveAllocator(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	seq := uint64(0)
	apply := func(e events.Event) {
		seq++
		e.Seq, e.TsNs, e.Pid, e.Tid = seq, seq*100, 10, 10
		l.Apply(&e)
	}
	capacity := func(typ events.BufferType, mgr uint64, banks uint32, bank uint64) events.Event {
		e := events.Event{Kind: events.KindAllocCapacity, Object: mgr, BufferType: typ, DeviceKind: events.DeviceChip, Chip: 1, Device: 0x7f01}
		e.Banks, e.BankSize, e.Alignment = banks, bank, 32
		return e
	}
	apply(capacity(events.DRAM, 0xd0, 12, 1<<30))
	apply(capacity(events.L1, 0xd2, 64, 1<<20))
	// 3 GiB of DRAM over 12 banks: 256 MiB per bank, a quarter of each.
	req := events.Event{Kind: events.KindAllocRequest, Object: 0xd0, Size: 3 << 30, PageSize: 1 << 20, Chip: -1}
	req.BottomUp = true
	apply(req)
	apply(*chipEv(events.KindAlloc, 10, 0xa, 1, events.DRAM, 3<<30))
	apply(*chipEv(events.KindAlloc, 10, 0xb, 2, events.DRAM, 4096)) // chip 2: no allocator seen
	// A mesh's own allocator (its manager made outside a chip's): 1 GiB
	// over its 12 banks, not in chip 1's lines.
	mcap := capacity(events.DRAM, 0xe0, 12, 1<<30)
	mcap.DeviceKind, mcap.Chip, mcap.Device = events.DeviceNone, -1, 0
	apply(mcap)
	mreq := events.Event{Kind: events.KindAllocRequest, Object: 0xe0, Size: 1 << 30, PageSize: 1 << 20, Chip: -1}
	mreq.BottomUp = true
	apply(mreq)
	apply(events.Event{Kind: events.KindAlloc, Object: 0xc, DeviceKind: events.DeviceMesh, Device: 0x5500, Chip: -1,
		BufferType: events.DRAM, Size: 1 << 30, PageSize: 1 << 20, OwnsData: true, Status: 1})
	apply(events.Event{Kind: events.KindView, Object: 0xc0, DeviceKind: events.DeviceChip, Device: 0x7f01, Chip: 1, BufferType: events.DRAM})
	view := &View{Now: time.Unix(1700000000, 0), Ledger: l, Procs: []Proc{{Pid: 10, Command: "w"}}}
	text := strings.Join(NewLive(&bytes.Buffer{}, time.Millisecond, nil).frame(view, 200), "\n")
	for _, re := range []string{
		`DRAM alloc\s+3\.0 GiB / 12\.0 GiB\s+25\.0%  largest free block 768\.0 MiB x 12 bank\(s\)`,
		`L1 alloc\s+0 B / 64\.0 MiB\s+0\.0%  largest free block 1\.0 MiB x 64 bank\(s\)`,
		`chip 2 .*\n(.*\n)*    allocator unknown: tttrace saw no bank manager`,
		`  mesh 0x5500 \(chips 1\)\n    DRAM alloc\s+1\.0 GiB / 12\.0 GiB\s+8\.4%  largest free block 938\.0 MiB x 12 bank\(s\)`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("frame lacks %s:\n%s", re, text)
		}
	}
}

// The live view names the op of each process's last allocation, and
// nothing once an allocation is made outside any op.
func TestLiveLastOp(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	e := chipEv(events.KindAlloc, 10, 0xa, 0, events.DRAM, 8192)
	e.Seq, e.Op, e.DeviceOp, e.OpDepth = 1, events.OpNames.Intern("ttnn.matmul"), events.OpNames.Intern("Matmul\x1bDeviceOperation"), 1
	l.Apply(e)
	frame := func() string {
		var out bytes.Buffer
		NewLive(&out, time.Millisecond, nil).Tick(&View{Now: time.Unix(1700000000, 0), Ledger: l, Procs: []Proc{{Pid: 10, Command: "w"}}})
		return out.String()
	}
	if f := frame(); !strings.Contains(f, "pid 10  w\x1b[K\n  last allocation in ttnn.matmul > Matmul\\x1bDeviceOperation\x1b[K\n") {
		t.Fatalf("frame %q", f)
	}
	l.Apply(chipEv(events.KindAlloc, 10, 0xb, 0, events.DRAM, 64))
	if f := frame(); strings.Contains(f, "last allocation") {
		t.Fatalf("frame %q", f)
	}
}

// tttrace's own lines written while the view is up go above the frame:
// the frame is erased first, and the next tick draws it again below the
// line instead of moving up over it.
func TestLiveLog(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	var out bytes.Buffer
	v := NewLive(&out, time.Millisecond, nil)
	view := &View{Now: time.Unix(1700000000, 0), Ledger: l}
	v.Tick(view)
	n := v.lines
	if n == 0 {
		t.Fatal("no frame drawn")
	}
	out.Reset()
	if _, err := v.Log(&out).Write([]byte("tttrace: a note\n")); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\x1b[%dA\r\x1b[J", n) + "tttrace: a note\n"; out.String() != want {
		t.Fatalf("log line written as %q, want %q", out.String(), want)
	}
	out.Reset()
	view.Now = view.Now.Add(time.Second)
	v.Tick(view)
	if strings.HasPrefix(out.String(), "\x1b[") && strings.Contains(out.String()[:8], "A\r") {
		t.Fatalf("the frame after a log line moved up over it: %q", out.String())
	}
}

// liveFleet is a ledger of two processes on eight chips, each nearer to a
// limit than the next in a known order: pid 10's chip 3 had a failed
// allocation and pid 11's chip 7 CBs over an L1 buffer (flagged: first,
// chip 3 with some use before chip 7 with none known); then by use over
// capacity pid 11's chip 0 (DRAM 3.5 of 4 MiB, 87.5%), pid 10's chip 1
// (L1 720 KiB of 960 KiB, 75%; its busiest core 720 KiB of a 1 MiB L1,
// 70.3%), chip 2 (DRAM 2 of 4 MiB, 50%), chip 0 (DRAM 1 of 4 MiB, 25%);
// then chips whose capacity is not known, by bytes: chip 4 (3 MiB), chip
// 5 (1 KiB).
func liveFleet(t *testing.T) (*devices.Ledger, *View) {
	t.Helper()
	l := devices.NewLedger(devices.Options{})
	seq := uint64(0)
	apply := func(e *events.Event) {
		seq++
		e.Seq, e.TsNs = seq, seq*100
		l.Apply(e)
	}
	const kib, mib = 1 << 10, 1 << 20
	capacity := func(pid uint32, chip int32, typ events.BufferType, mgr uint64, banks uint32, bank, base uint64) {
		e := events.Event{Kind: events.KindAllocCapacity, Pid: pid, Tid: pid, Object: mgr, BufferType: typ,
			DeviceKind: events.DeviceChip, Chip: chip, Device: 0x7f00 + uint64(chip)}
		e.Banks, e.BankSize, e.Alignment, e.Base = banks, bank, 32, base
		apply(&e)
	}
	for chip := range int32(4) {
		capacity(10, chip, events.DRAM, 0xd00+uint64(chip), 4, mib, 0x40)
		capacity(10, chip, events.L1, 0xe00+uint64(chip), 1, 960*kib, 64*kib)
	}
	capacity(11, 0, events.DRAM, 0xd00, 4, mib, 0x40)
	apply(chipEv(events.KindAlloc, 10, 0xa0, 0, events.DRAM, mib))
	// Chip 1's L1 buffer through its allocator: its span on every core is
	// known.
	req := events.Event{Kind: events.KindAllocRequest, Pid: 10, Tid: 10, Object: 0xe01, Size: 720 * kib, PageSize: 720 * kib, Chip: -1}
	apply(&req)
	l1 := chipEv(events.KindAlloc, 10, 0xa1, 1, events.L1, 720*kib)
	l1.Address, l1.PageSize = 64*kib+960*kib-720*kib, 720*kib
	apply(l1)
	apply(chipEv(events.KindAlloc, 10, 0xa2, 2, events.DRAM, 2*mib))
	// Chip 3: 2 MiB per bank asked of 1 MiB banks, no alloc after it:
	// failed.
	fail := events.Event{Kind: events.KindAllocRequest, Pid: 10, Tid: 10, Object: 0xd03, Size: 8 * mib, PageSize: 2 * mib, Chip: -1}
	fail.BottomUp = true
	apply(&fail)
	l.Flush()
	apply(chipEv(events.KindAlloc, 10, 0xa3, 3, events.DRAM, 64))
	apply(chipEv(events.KindAlloc, 10, 0xa4, 4, events.DRAM, 3*mib))
	apply(chipEv(events.KindAlloc, 10, 0xa5, 5, events.DRAM, kib))
	apply(chipEv(events.KindAlloc, 11, 0xb0, 0, events.DRAM, 3*mib+512*kib))
	// Chip 7: an L1 buffer at 0x1000, then a program's 4 KiB CB from
	// 0x400 on one core, dispatched: the CBs end 3 KiB above the buffer.
	apply(chipEv(events.KindAlloc, 11, 0xb1, 7, events.L1, 512))
	apply(&events.Event{Kind: events.KindCBLayout, Pid: 11, Tid: 11, Object: 0x9000, Device: 0x7f07, DeviceKind: events.DeviceChip, Chip: 7})
	cb := events.Event{Kind: events.KindCBAlloc, Pid: 11, Tid: 11, Device: 0x7f07, DeviceKind: events.DeviceChip, Chip: 7, Address: 0x400, Size: 4 * kib}
	cb.RangesKnown, cb.NumRanges, cb.CoreRanges[0] = true, 1, events.CoreRange{X0: 2, Y0: 3, X1: 2, Y1: 3}
	apply(&cb)
	apply(&events.Event{Kind: events.KindProgramDispatch, Pid: 11, Tid: 11, Object: 0x9000, Device: 0x7f07, DeviceKind: events.DeviceChip, Chip: 7})
	apply(chipEv(events.KindAlloc, 11, 0xb2, 0, events.DRAM, 0)) // the layout is complete
	return l, &View{Now: time.Unix(1700000000, 0), Ledger: l, Libraries: 1,
		Procs: []Proc{{Pid: 10, Command: "python train.py"}, {Pid: 11, Command: "python serve.py"}}}
}

// The live frame fits the terminal's rows: the full frame while it fits
// above the cursor's line, else one line per chip, the most pressed first,
// as many as fit, and a count of those left out; never a partial chip.
func TestLiveFitsRows(t *testing.T) {
	_, view := liveFleet(t)
	// Each chip's line as worked out from the events above: pid, chip,
	// DRAM, its use, L1, its use, the busiest core's L1 and its use of a
	// core's L1, the resident CBs, the flags.
	want := [][]string{
		{"10", "3", "64 B", "0.0%", "0 B", "0.0%", "-", "-", "0 B", "1 FAILED"},
		{"11", "7", "0 B", "-", "512 B", "-", "4.0 KiB", "-", "4.0 KiB", "CLASH"},
		{"11", "0", "3.5 MiB", "87.5%", "0 B", "-", "-", "-", "0 B", ""},
		{"10", "1", "0 B", "0.0%", "720.0 KiB", "75.0%", "720.0 KiB", "70.3%", "0 B", ""},
		{"10", "2", "2.0 MiB", "50.0%", "0 B", "0.0%", "-", "-", "0 B", ""},
		{"10", "0", "1.0 MiB", "25.0%", "0 B", "0.0%", "-", "-", "0 B", ""},
		{"10", "4", "3.0 MiB", "-", "0 B", "-", "-", "-", "0 B", ""},
		{"10", "5", "1.0 KiB", "-", "0 B", "-", "-", "-", "0 B", ""},
	}
	// The columns as the names line lays them out: the flags' column,
	// present when a chip has flags, after the chip.
	bytesRe := `(\d+ B|[\d.]+ [KMG]iB)`
	rowRe := regexp.MustCompile(`^ *(\d+) +(\d+) +(?:(\S.*?) +)?` + bytesRe + ` +(\S+) +` + bytesRe + ` +(\S+) +(-|≤?` + bytesRe + `) +(\S+) +` + bytesRe + `$`)
	const width = 100
	v := NewLive(&bytes.Buffer{}, time.Millisecond, nil)
	full := v.frame(view, width)
	if len(full) < 20 {
		t.Fatalf("the full frame has %d lines: too few to test", len(full))
	}
	for _, tc := range []struct {
		rows  int
		shown int    // chips shown in the compact frame; -1: the full frame
		more  string // the last line
	}{
		{0, -1, ""},             // rows not known: no limit
		{len(full) + 1, -1, ""}, // fits above the cursor's line
		{len(full), 8, ""},      // one row short: compact, all eight fit
		{13, 8, ""},             // 12 lines: header, note, names, 8 chips
		{12, 6, "… 2 more chips (1 process)"},
		{8, 2, "… 6 more chips (2 processes)"},
		{7, 1, "… 7 more chips (2 processes)"},
		{6, 0, "… 8 chips (2 processes): too few rows to show one"},
		{2, 0, ""},
	} {
		lines := v.layout(view, width, tc.rows)
		name := fmt.Sprintf("%d rows", tc.rows)
		if tc.rows > 0 && len(lines) > tc.rows-1 {
			t.Errorf("%s: %d lines", name, len(lines))
		}
		for _, line := range lines {
			if n := utf8.RuneCountInString(line); n > width {
				t.Errorf("%s: a line of %d columns: %q", name, n, line)
			}
		}
		if tc.shown < 0 {
			if strings.Join(lines, "\n") != strings.Join(full, "\n") {
				t.Errorf("%s: not the full frame:\n%s", name, strings.Join(lines, "\n"))
			}
			continue
		}
		if !strings.HasPrefix(lines[0], "tttrace live ") {
			t.Errorf("%s: first line %q", name, lines[0])
		}
		var rows [][]string
		for _, line := range lines {
			if m := rowRe.FindStringSubmatch(line); m != nil {
				rows = append(rows, []string{m[1], m[2], m[4], m[5], m[6], m[7], m[8], m[10], m[11], m[3]})
			}
		}
		if len(rows) != tc.shown {
			t.Errorf("%s: %d chips shown, want %d:\n%s", name, len(rows), tc.shown, strings.Join(lines, "\n"))
		}
		for i := range min(len(rows), len(want)) {
			if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
				t.Errorf("%s: line %d is %q, want %q", name, i, rows[i], want[i])
			}
		}
		if tc.more != "" && lines[len(lines)-1] != tc.more {
			t.Errorf("%s: last line %q, want %q", name, lines[len(lines)-1], tc.more)
		}
		if tc.more == "" && tc.shown > 0 && strings.HasPrefix(lines[len(lines)-1], "…") {
			t.Errorf("%s: chips left out: %q", name, lines[len(lines)-1])
		}
		if tc.shown > 0 && (lines[1] != "1 library probed  2 process(es)" || !strings.HasPrefix(lines[2], "8 chips of 2 processes, the most pressed first")) {
			t.Errorf("%s: head %q", name, lines[:3])
		}
	}
}

// A frame drawn in a terminal of known rows is no taller than it allows,
// and the next one moves back up exactly over it.
func TestLiveTickRows(t *testing.T) {
	_, view := liveFleet(t)
	var out bytes.Buffer
	v := NewLive(&out, time.Millisecond, func() (int, int) { return 90, 10 })
	v.Tick(view)
	first := out.String()
	if n := strings.Count(first, "\n"); n != 9 {
		t.Fatalf("a frame of %d lines in 10 rows:\n%s", n, first)
	}
	view.Now = view.Now.Add(time.Second)
	v.Tick(view)
	if second := out.String()[len(first):]; !strings.HasPrefix(second, "\x1b[9A\r") || strings.Count(second, "\n") != 9 {
		t.Fatalf("second frame %q", second)
	}
}
