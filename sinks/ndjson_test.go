package sinks

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// summaries covers what the streamed encoding splices: nil, empty and full
// leak lists, strings that look like the keys it looks for (escaped), and
// characters encoding/json escapes.
func summaries() []*devices.Summary {
	h := int64(-4096)
	leak := func(i int) devices.Leak {
		return devices.Leak{Device: int32(i % 3), Type: "DRAM", Address: uint64(i) << 12, Size: 4096, PageSize: 2048,
			Buffer: "0x7f00" + string(rune('a'+i%6)), Mesh: i%2 == 0, MeshDevice: map[bool]string{true: "0x55aa", false: ""}[i%4 == 0],
			Tid: 42, Seq: uint64(i), TsNs: uint64(i) * 1000, MarkedDeallocated: i%5 == 0}
	}
	var many []devices.Leak
	for i := 0; i < 1000; i++ {
		many = append(many, leak(i))
	}
	p1 := devices.ProcessSummary{Pid: 10, Command: `python3 -c 'print("\"leaks\":null", "<&>")' "unplaced_leaks":null`, Parent: 1,
		Devices:       []devices.DeviceSummary{{Device: 0, DRAMBytes: 8192, LiveBuffers: uint64(h & 0xff)}},
		Leaks:         many,
		LeakGroups:    []devices.LeakGroup{{Device: 0, Type: "DRAM", Count: 2, Bytes: 8192}},
		UnplacedLeaks: []devices.Leak{leak(7)},
		AnomalyCounts: map[string]uint64{"unknown_device": 1, "double_free": 0},
		Anomalies:     []devices.Anomaly{{Kind: "unknown_device", Detail: `"leaks":null <b>`}},
	}
	p2 := devices.ProcessSummary{Pid: 11, Command: "ttwork", Leaks: []devices.Leak{}, Exited: true}
	p3 := devices.ProcessSummary{Pid: 12}
	return []*devices.Summary{
		{Type: "summary", Complete: true, Events: 5, Processes: []devices.ProcessSummary{p1, p2, p3}},
		{Type: "summary", LostEvents: 3, Processes: []devices.ProcessSummary{}},
		{Type: "summary"},
	}
}

// The summary line is, byte for byte, what encoding/json makes of the
// whole summary.
func TestSummaryStreamedIsEncodingJSON(t *testing.T) {
	for i, s := range summaries() {
		var got bytes.Buffer
		n := NewNDJSON(&got, true)
		if err := n.Summary(s); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("summary %d:\ngot  %.600s\nwant %.600s", i, got.Bytes(), want)
		}
	}
}

// So is the process_summary line.
func TestProcessSummaryStreamedIsEncodingJSON(t *testing.T) {
	for _, p := range summaries()[0].Processes {
		var got bytes.Buffer
		n := NewNDJSON(&got, true)
		n.ProcessEnded(&devices.Summary{Processes: []devices.ProcessSummary{p}}, true)
		want, err := json.Marshal(struct {
			Type string `json:"type"`
			*devices.ProcessSummary
		}{"process_summary", &p})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("pid %d:\ngot  %.600s\nwant %.600s", p.Pid, got.Bytes(), want)
		}
	}
}
