package sinks

import (
	"fmt"
	"strings"

	"github.com/tttrace/tttrace/devices"
)

// windows reports a process's windows (tttrace mark): per window and chip,
// each buffer type's peak in the window and, as memory_stats gives them,
// its bytes in use at the window's end (or now), the allocator's limit and
// largest free block then; the CB peak.
func (r *reporter) windows(p *devices.ProcessSummary) {
	if len(p.Windows) == 0 {
		return
	}
	r.Printf("  windows (tttrace mark): per chip, each type's peak in the window; in use at its end, of the limit, largest free block\n")
	if p.WindowsDropped > 0 {
		r.Printf("    %d earlier window(s) not kept\n", p.WindowsDropped)
	}
	for i := range p.Windows {
		w := &p.Windows[i]
		r.Printf("    window %d", w.Index)
		var what []string
		if w.Name != "" {
			what = append(what, w.Name)
		}
		switch {
		case w.Index == 0 && w.EndTsNs != nil:
			what = append(what, "from the start to the first mark")
		case w.EndTsNs != nil:
			what = append(what, fmt.Sprintf("%.3f s", float64(*w.EndTsNs-w.StartTsNs)/1e9))
		default:
			what = append(what, "current")
		}
		r.Printf(" (%s)", strings.Join(what, ", "))
		if len(w.Devices) == 0 {
			r.Printf(": no device activity\n")
			continue
		}
		r.Printf("\n")
		for _, d := range w.Devices {
			var parts []string
			for _, t := range devices.AllocatorTypes() {
				ms, ok := d.MemoryStats[devices.AllocatorKey(t)]
				if !ok || ms.PeakBytesInUse == 0 && ms.BytesInUse == 0 {
					continue
				}
				s := fmt.Sprintf("%s peak %s, in use %s", t, human(ms.PeakBytesInUse), human(ms.BytesInUse))
				if ms.BytesLimit != nil {
					s += " of " + human(*ms.BytesLimit)
				}
				if ms.LargestFreeBlockBytes != nil {
					s += ", largest free " + human(*ms.LargestFreeBlockBytes)
				}
				parts = append(parts, s)
			}
			if pk := d.Peaks[devices.CounterCB.String()]; pk.Value > 0 {
				parts = append(parts, "CB peak "+human(pk.Value))
			}
			if len(parts) == 0 {
				parts = append(parts, "nothing held")
			}
			r.Printf("      chip %d: %s\n", d.Device, strings.Join(parts, "; "))
		}
	}
}
