package sinks

import (
	"cmp"
	"slices"

	"github.com/tttrace/tttrace/devices"
)

// reportOpRows: the ops the report lists per process, most bytes first.
const reportOpRows = 10

// ops reports the TT-NN ops the process's records were made in (the
// summary's ops): per op and device op, what it allocated, the peaks
// right after, its CBs, failures and leaks.
func (r *reporter) ops(p *devices.ProcessSummary) {
	if len(p.Ops) == 0 {
		return
	}
	rows := slices.Clone(p.Ops)
	slices.SortStableFunc(rows, func(a, b devices.OpRow) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(b.CBBytes, a.CBBytes)
	})
	r.Printf("  by TT-NN op (most bytes allocated first; peaks: the process's DRAM / L1 right after one of its allocations):\n")
	for i := range rows {
		if i == reportOpRows {
			r.Printf("    … %d more op(s)\n", len(rows)-i)
			break
		}
		o := &rows[i]
		r.Printf("    %s", opName(o.Name, o.DeviceOp))
		r.Printf(": %d call(s), %d alloc(s) %s, peak DRAM %s L1 %s", o.Calls, o.Allocs, human(o.Bytes), human(o.PeakDRAM), human(o.PeakL1))
		if o.CBBytes > 0 {
			r.Printf(", CBs %s", human(o.CBBytes))
		}
		if o.AllocFailures > 0 {
			r.Printf(", %d failed allocation(s)", o.AllocFailures)
		}
		if o.LeakedBuffers > 0 {
			r.Printf(", %d leaked (%s)", o.LeakedBuffers, human(o.LeakedBytes))
		}
		r.Printf("\n")
	}
	if p.OpsDropped > 0 {
		r.Printf("    %d record(s) in ops past the %d kept not counted\n", p.OpsDropped, devices.MaxOpRows)
	}
}

// opName is how the report names an op and the device op in it:
// "ttnn.conv2d > MatmulDeviceOperation".
func opName(name, dev string) string {
	if dev == "" {
		return name
	}
	return name + " > " + dev
}
