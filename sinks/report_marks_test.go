package sinks

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

func TestReportWindows(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	end := uint64(2_500_000_000)
	s := &devices.Summary{Type: "summary", Complete: true, Processes: []devices.ProcessSummary{{
		Pid: 7, Command: "serve", Exited: true, WindowsDropped: 2,
		Windows: []devices.Window{
			{Index: 3, Name: "load\x1b[2J", StartTsNs: 1_000_000_000, EndTsNs: &end, Devices: []devices.WindowDevice{{Device: 4,
				Peaks: map[string]devices.Peak{"dram_bytes": {Value: 3 << 20}, "cb_bytes": {Value: 4096}},
				MemoryStats: map[string]devices.MemoryStats{
					"dram":     {BytesInUse: 1 << 20, PeakBytesInUse: 3 << 20, BytesLimit: u(12 << 30), LargestFreeBlockBytes: u(11 << 30)},
					"l1_small": {BytesLimit: u(1 << 20)},
				}}}},
			{Index: 4, StartTsNs: end, Devices: []devices.WindowDevice{{Device: 4, MemoryStats: map[string]devices.MemoryStats{}}}},
		},
	}}}
	var out bytes.Buffer
	if err := writeReport(&out, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  windows (tttrace mark): per chip, each type's peak in the window; in use at its end, of the limit, largest free block\n" +
			"    2 earlier window(s) not kept\n" +
			"    window 3 (load\\x1b[2J, 1.500 s)\n" +
			"      chip 4: DRAM peak 3.0 MiB, in use 1.0 MiB of 12.0 GiB, largest free 11.0 GiB; CB peak 4.0 KiB\n" +
			"    window 4 (current)\n" +
			"      chip 4: nothing held\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks\n%s\nin\n%s", want, out.String())
		}
	}
}
