package sinks

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// The report lists the ops most bytes first, the first reportOpRows of
// them, with names from the library made printable; leaks and failures
// say their op.
func TestReportOps(t *testing.T) {
	rid := uint64(9)
	p := devices.ProcessSummary{Pid: 7, Command: "pytest", Exited: true, OpsDropped: 3,
		Ops: []devices.OpRow{
			{Name: "ttnn.add", Calls: 4, Allocs: 4, Bytes: 4096, PeakDRAM: 8192},
			{Name: "ttnn.conv2d\x1b[2J", DeviceOp: "MatmulDeviceOperation", Calls: 2, Allocs: 3, Bytes: 3 << 20, PeakDRAM: 5 << 20, PeakL1: 1 << 20,
				CBBytes: 64 << 10, AllocFailures: 1, LeakedBuffers: 1, LeakedBytes: 1 << 20},
		},
		AllocFailures: []devices.AllocFailure{{Type: "alloc_failed", BufferType: "L1", Banks: 1, Holders: []devices.Holder{},
			Op: &devices.OpRef{Name: "ttnn.conv2d", DeviceOp: "MatmulDeviceOperation", RuntimeID: &rid, Depth: 1}}},
		Leaks: []devices.Leak{{Device: 0, Type: "DRAM", Address: 0x1000, Size: 1 << 20, Buffer: "0x55",
			Op: &devices.OpRef{Name: "ttnn.conv2d", DeviceOp: "MatmulDeviceOperation"}}},
		LeakGroups: []devices.LeakGroup{{Device: 0, Type: "DRAM", Count: 1, Bytes: 1 << 20}},
	}
	p.Stats.AllocFailures = 1
	for i := range 11 {
		p.Ops = append(p.Ops, devices.OpRow{Name: fmt.Sprintf("ttnn.small%d", i), Calls: 1, Allocs: 1, Bytes: 10})
	}
	s := &devices.Summary{Type: "summary", Complete: true, Processes: []devices.ProcessSummary{p}}
	var out bytes.Buffer
	if err := writeReport(&out, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  by TT-NN op (most bytes allocated first; peaks: the process's DRAM / L1 right after one of its allocations):\n" +
			"    ttnn.conv2d\\x1b[2J > MatmulDeviceOperation: 2 call(s), 3 alloc(s) 3.0 MiB, peak DRAM 5.0 MiB L1 1.0 MiB, CBs 64.0 KiB, 1 failed allocation(s), 1 leaked (1.0 MiB)\n" +
			"    ttnn.add: 4 call(s), 4 alloc(s) 4.0 KiB, peak DRAM 8.0 KiB L1 0 B\n" +
			"    ttnn.small0: 1 call(s), 1 alloc(s) 10 B, peak DRAM 0 B L1 0 B\n",
		"    ttnn.small7: 1 call(s), 1 alloc(s) 10 B, peak DRAM 0 B L1 0 B\n" +
			"    … 3 more op(s)\n" +
			"    3 record(s) in ops past the 4096 kept not counted\n",
		"      in ttnn.conv2d > MatmulDeviceOperation (runtime id 9)\n",
		"  buffer 0x55  tid 0 seq 0  in ttnn.conv2d > MatmulDeviceOperation\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks\n%s\nin\n%s", want, out.String())
		}
	}
}
