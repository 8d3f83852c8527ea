// Package ledgertest checks a devices.Ledger from the outside, for the
// tests of packages that feed or read one (the sinks, the decoder's
// benchmarks). It sees only the summary: every chip's buffer totals must
// be the sums of the buffers still counted there (its leaks), no peak may
// be below its current value, no total near wrap-around, and the ledger
// must have found no fault in its own bookkeeping. The ledger's own tests
// check far more, from its internals (devices/check_test.go).
package ledgertest

import (
	"errors"
	"fmt"

	"github.com/tttrace/tttrace/devices"
)

// limit: no total may reach it (a wrapped subtraction would).
const limit = 1 << 62

// Check reports every disagreement it finds in l's summary.
func Check(l *devices.Ledger) error {
	s := l.SummaryStreamed()
	return CheckSummary(&s)
}

// CheckSummary is Check on a summary.
func CheckSummary(s *devices.Summary) error {
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	for i := range s.Processes {
		p := &s.Processes[i]
		if n := p.AnomalyCounts["internal_accounting_error"]; n != 0 {
			bad("pid %d: %d internal accounting errors", p.Pid, n)
		}
		type sums struct {
			bytes map[string]uint64
			n     uint64
		}
		want := map[int32]*sums{}
		for lk := range p.AllLeaks() {
			w := want[lk.Device]
			if w == nil {
				w = &sums{bytes: map[string]uint64{}}
				want[lk.Device] = w
			}
			w.bytes[lk.Type] += lk.Size
			w.n++
		}
		for _, d := range p.Devices {
			w := want[d.Device]
			if w == nil {
				w = &sums{bytes: map[string]uint64{}}
			}
			delete(want, d.Device)
			for _, c := range []struct {
				name      string
				got, want uint64
				peak      uint64
			}{
				{"DRAM", d.DRAMBytes, w.bytes["DRAM"], d.Peaks.DRAMBytes.Value},
				{"L1", d.L1Bytes, w.bytes["L1"], d.Peaks.L1Bytes.Value},
				{"L1_SMALL", d.L1SmallBytes, w.bytes["L1_SMALL"], d.Peaks.L1SmallBytes.Value},
				{"TRACE", d.TraceBytes, w.bytes["TRACE"], d.Peaks.TraceBytes.Value},
				{"SYSTEM_MEMORY", d.SystemMemoryBytes, w.bytes["SYSTEM_MEMORY"], d.Peaks.SystemMemoryBytes.Value},
				{"live buffers", d.LiveBuffers, w.n, d.Peaks.LiveBuffers.Value},
				{"CB", d.CBBytes, d.CBBytes, d.Peaks.CBBytes.Value}, // CBs are not listed: bounds only
			} {
				if c.got != c.want {
					bad("pid %d chip %d: %s %d, its buffers sum to %d", p.Pid, d.Device, c.name, c.got, c.want)
				}
				if c.peak < c.got || c.got >= limit {
					bad("pid %d chip %d: %s %d, peak %d", p.Pid, d.Device, c.name, c.got, c.peak)
				}
			}
		}
		for chip := range want {
			bad("pid %d: leaks on chip %d, which is not in its devices", p.Pid, chip)
		}
	}
	return errors.Join(errs...)
}
