package sinks

import (
	"fmt"
	"strconv"

	"github.com/tttrace/tttrace/devices"
)

// traces writes what the process did with Metal traces and every trace
// hazard found (docs/ndjson.md, "trace_hazard").
func (r *reporter) traces(p *devices.ProcessSummary) {
	t := p.Traces
	if t == nil {
		return
	}
	r.Printf("  Metal traces: %d capture(s), %d replay(s), %d release(s); %d buffer(s) allocated after a capture checked clear at its replays",
		t.Captures, t.Replays, t.Releases, t.Checked)
	if t.UnknownReplays > 0 {
		r.Printf("; %d replay(s) of traces captured before tttrace attached (not checked)", t.UnknownReplays)
	}
	r.Printf("\n")
	if t.TracesDropped > 0 || t.CapturedLost > 0 {
		r.Printf("  not checked, past tttrace's bounds: %d trace(s) or active capture(s) forgotten (%d traces, %d active captures per process; their replays count as unknown), %d buffer(s) allocated during captures not remembered (%d per capture, %d per process)\n",
			t.TracesDropped, devices.TraceMaxTraces, devices.TraceMaxOpenCaptures, t.CapturedLost, devices.TraceMaxCaptured, devices.TraceMaxCapturedTotal)
	}
	if t.HazardCount > 0 {
		r.Printf("  TRACE HAZARDS: %d (a replay writes where these live buffers are: they were allocated after the capture, where buffers it used were)\n", t.HazardCount+t.HazardsSuppressed)
		if t.HazardsSuppressed > 0 {
			r.Printf("    %d of them past the bounds, counted but not written (%d trace_hazard records per trace, %d per process)\n",
				t.HazardsSuppressed, devices.TraceMaxHazards, devices.TraceMaxRecords)
		}
		r.first(len(t.Hazards), t.HazardCount, "    ", summaryLists, func(i int) {
			n := &t.Hazards[i]
			r.Printf("    %s replay %d (tid %d seq %d), chip %d:\n", traceName(n), n.Replay, n.Tid, n.Seq, n.Device)
			r.traceBuf(p, "      overwrites", n.Buffer)
			r.traceBuf(p, "      captured  ", n.Captured)
		})
	}
	if t.InvalidReplayCount > 0 {
		r.Printf("  invalid trace replays: %d (TT-Metal refuses them)%s\n", t.InvalidReplayCount+t.InvalidReplaysSuppressed, pastBound(t.InvalidReplaysSuppressed))
		r.first(len(t.InvalidReplays), t.InvalidReplayCount, "    ", "", func(i int) {
			n := &t.InvalidReplays[i]
			why := "after release_trace"
			switch n.Reason {
			case "device_closed":
				why = "after its device closed"
			case "capturing":
				why = "while it is still being captured"
			}
			r.Printf("    %s replayed %s (tid %d seq %d)\n", traceName(n), why, n.Tid, n.Seq)
		})
	}
	if t.RegionHazardCount > 0 {
		r.Printf("  trace buffers under another live trace's high-water mark: %d (that trace's replay overwrites them; TT-Metal checks only the newest trace, tt-metal#48869)%s\n", t.RegionHazardCount+t.RegionHazardsSuppressed, pastBound(t.RegionHazardsSuppressed))
		r.first(len(t.RegionHazards), t.RegionHazardCount, "    ", "", func(i int) {
			n := &t.RegionHazards[i]
			other := "?"
			if n.OtherTrace != nil {
				other = strconv.FormatUint(uint64(*n.OtherTrace), 10)
			}
			r.Printf("    %s, chip %d: its buffer at %#x is under trace %s's mark %#x\n", traceName(n), n.Device, n.Buffer.Address, other, n.HighWaterMark)
		})
	}
	if t.CaptureAllocCount > 0 {
		r.Printf("  allocations during a trace capture: %d (the trace's replays write there)%s\n", t.CaptureAllocCount+t.CaptureAllocsSuppressed, pastBound(t.CaptureAllocsSuppressed))
		r.first(len(t.CaptureAllocs), t.CaptureAllocCount, "    ", summaryLists, func(i int) {
			r.traceBuf(p, "    "+traceName(&t.CaptureAllocs[i])+":", t.CaptureAllocs[i].Buffer)
		})
	}
}

// pastBound says how many records of a kind were counted but not written
// (a process's first TraceMaxRecords of each kind are).
func pastBound(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of them past the bound of %d records, counted but not written", n, devices.TraceMaxRecords)
}

func traceName(n *devices.TraceNote) string {
	id := "(id unknown)"
	if n.Trace != nil {
		id = strconv.FormatUint(uint64(*n.Trace), 10)
	}
	if n.MeshDevice != "" {
		return "mesh trace " + id + " of mesh " + n.MeshDevice
	}
	return "trace " + id + " of chip " + strconv.Itoa(int(n.Device))
}

func (r *reporter) traceBuf(p *devices.ProcessSummary, what string, b *devices.TraceBuffer) {
	if b == nil {
		return
	}
	r.Printf("%s %s %#x  %s (%s per bank)  ", what, b.BufferType, b.Address, human(b.Size), human(b.Span))
	if b.Mesh {
		r.Printf("mesh ")
	}
	r.whose(p, false, b.Buffer, "", b.Tid, b.Seq, b.Site)
}
