package sinks

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

type closeBuf struct{ bytes.Buffer }

func (*closeBuf) Close() error { return nil }

func TestSnapshots(t *testing.T) {
	s := &devices.Summary{Type: "summary", Events: 3, Processes: []devices.ProcessSummary{{Pid: 7, Devices: []devices.DeviceSummary{{Device: 2, DRAMBytes: 64}}}}}
	// In the stream: a "snapshot" line with the summary's fields.
	var stream bytes.Buffer
	n := NewNDJSON(&stream, false)
	if _, err := n.Snapshot(s, "STAMP"); err != nil {
		t.Fatal(err)
	}
	var got devices.Summary
	if err := json.Unmarshal(stream.Bytes(), &got); err != nil || got.Type != "snapshot" || got.Events != 3 || got.Processes[0].Devices[0].DRAMBytes != 64 {
		t.Errorf("stream snapshot %q: %v", stream.String(), err)
	}
	// In a file of its own: the summary line, under the stamped name.
	var file closeBuf
	var asked string
	n.SnapshotTo(func(stamp string) (io.WriteCloser, string, error) { asked = stamp; return &file, "out." + stamp, nil })
	names, err := n.Snapshot(s, "STAMP")
	if err != nil || asked != "STAMP" || len(names) != 1 || names[0] != "out.STAMP" {
		t.Fatalf("file snapshot: %v %v %q", names, err, asked)
	}
	if err := json.Unmarshal(file.Bytes(), &got); err != nil || got.Type != "summary" {
		t.Errorf("file snapshot %q: %v", file.String(), err)
	}
	// The report: in its stream, said to be a snapshot.
	var rep bytes.Buffer
	r := NewReport(&rep)
	if _, err := r.Snapshot(s, "STAMP"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.String(), "tttrace: snapshot at STAMP (tracing goes on)\n") || !strings.Contains(rep.String(), "7") {
		t.Errorf("report snapshot:\n%s", rep.String())
	}
}
