package sinks

import (
	"regexp"
	"testing"

	"github.com/tttrace/tttrace/devices"
	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// The report's allocator block and its failed allocations: per chip and
// type the state, and per failure the request, the state, the cause in
// words that say what to do, and the holders with their sites; numbers
// worked out by hand.
func TestReportAllocator(t *testing.T) {
	const mib = 1 << 20
	l := devices.NewLedger(devices.Options{})
	l.SetProcessInfo(1000, devices.ProcessInfo{Command: "python oom.py"})
	l.SetSites(1000, pySites{})
	withSite := func(e events.Event, site uint32) events.Event { e.Site = site; return e }
	ledgerOf(l,
		dt.Capacity(0, events.DRAM, 0xd0, 12, 64*mib, 32, 0x40),
		dt.Capacity(0, events.L1, 0xd2, 64, 0xe8000, 16, 0x18000),
		// Three buffers of 16 MiB per bank (site 4 twice, site 5), the
		// middle one freed: 32 MiB free per bank in two holes of 16 MiB.
		dt.Request(7, 0xd0, 12*16*mib, 16*mib, true), withSite(dt.AllocPage(7, 0xa0, 0, events.DRAM, 0x40, 12*16*mib, 16*mib), 4),
		dt.Request(7, 0xd0, 12*16*mib, 16*mib, true), withSite(dt.AllocPage(7, 0xa1, 0, events.DRAM, 0x40+16*mib, 12*16*mib, 16*mib), 4),
		dt.Request(7, 0xd0, 12*16*mib, 16*mib, true), withSite(dt.AllocPage(7, 0xa2, 0, events.DRAM, 0x40+32*mib, 12*16*mib, 16*mib), 5),
		dt.Free(7, 0xa1, 0),
		// 24 MiB per bank: fragmented.
		withSite(dt.Request(7, 0xd0, 12*24*mib, 24*mib, true), 6),
		dt.Free(7, 0xa2, 0),
		// 64 MiB per bank when 48 MiB are free: exhausted.
		dt.Request(7, 0xd0, 12*64*mib, 64*mib, true),
		dt.Exit(0, 0),
	)
	s := l.Summary()
	text := report(t, &s)
	golden(t, "report_alloc.golden", []byte(text))
	for _, re := range []string{
		`chip 0 +DRAM +16\.0 MiB of 64\.0 MiB used \(25\.0%\) x 12 bank\(s\); free 48\.0 MiB, largest free block 48\.0 MiB; 2 failed allocation\(s\)`,
		`L1 +0 B of 928\.0 KiB used \(0\.0%\) x 64 bank\(s\)`,
		`failed allocations: 2 `,
		`chip 0 DRAM, tid 7 seq 10: 288\.0 MiB across 12 bank\(s\) needs 24\.0 MiB per bank; a bank holds 64\.0 MiB \(32\.0 MiB allocated, 32\.0 MiB free, largest free block 16\.0 MiB\)`,
		`fragmented: 32\.0 MiB per bank is free in all, but no free block holds 24\.0 MiB \(the largest is 16\.0 MiB\)`,
		`asked at site 6: oom\.py:60 in f`,
		`what held DRAM on chip 0 then: 2 buffer\(s\), 384\.0 MiB; the largest:`,
		`0x40  192\.0 MiB \(16\.0 MiB per bank\)  buffer 0xa0  tid 7 seq 4  site 4: oom\.py:40 in f`,
		`site 5 holds 1 buffer\(s\), 192\.0 MiB \(16\.0 MiB per bank\): oom\.py:50 in f`,
		`exhausted: not enough free memory; free at least 16\.0 MiB per bank \(192\.0 MiB over the chip's 12 banks\)`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("report lacks %s:\n%s", re, text)
		}
	}
}

// pySites describes site N as line 10N of oom.py.
type pySites struct{}

func (pySites) Site(id uint32) (devices.Site, bool) {
	return devices.Site{Site: id, Native: []devices.NativeFrame{}, Python: []devices.PyFrame{{Function: "f", File: "oom.py", Line: int(id) * 10}}}, true
}

func (pySites) Python() *devices.PythonInfo { return nil }

// A mesh's own allocator gets its own lines (its buffers are not in its
// chips'), and its failed allocation names the mesh and its buffers.
func TestReportMeshAllocator(t *testing.T) {
	const mib = 1 << 20
	l := devices.NewLedger(devices.Options{})
	ledgerOf(l,
		dt.Capacity(0, events.DRAM, 0xd0, 12, 64*mib, 32, 0x40),
		// The mesh's managers: made outside a chip's allocator.
		dt.Capacity(-1, events.DRAM, 0xe0, 12, 64*mib, 32, 0x40),
		dt.Request(7, 0xe0, 12*16*mib, 16*mib, true), dt.MeshAlloc(7, 0xa0, dt.MeshA, events.DRAM, 0x40, 12*16*mib),
		dt.View(7, 0, 0x40), dt.View(7, 1, 0x40),
		dt.Request(7, 0xe0, 12*64*mib, 64*mib, true),
		dt.Exit(0, 0),
	)
	s := l.Summary()
	text := report(t, &s)
	for _, re := range []string{
		`chip 0 +DRAM +0 B of 64\.0 MiB used \(0\.0%\) x 12 bank\(s\)`,
		`mesh allocators \(a MeshDevice's own; its buffers are not in its chips' lines above\):\n +mesh 0x[0-9a-f]+ \(chips 0,1\)\n +DRAM +16\.0 MiB of 64\.0 MiB used \(25\.0%\) x 12 bank\(s\); free 48\.0 MiB, largest free block 48\.0 MiB; 1 failed allocation\(s\)`,
		`mesh 0x[0-9a-f]+ DRAM, tid 7 seq \d+: 768\.0 MiB across 12 bank\(s\) needs 64\.0 MiB per bank`,
		`free at least 16\.0 MiB per bank \(192\.0 MiB over the mesh's 12 banks\)`,
		`what held DRAM on mesh 0x[0-9a-f]+ then: 1 buffer\(s\), 192\.0 MiB`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("report lacks %s:\n%s", re, text)
		}
	}
}
