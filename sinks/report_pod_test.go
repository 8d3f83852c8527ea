package sinks

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// The report names the pod and container of a process in one.
func TestReportPod(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	ev := chipEv(events.KindAlloc, 10, 0xa, 0, events.DRAM, 8192)
	ev.Seq = 1
	l.Apply(ev)
	l.SetProcessInfo(10, devices.ProcessInfo{Command: "w", Placement: devices.Placement{Host: "h", PodUID: "u-1", Pod: "trainer-0", Namespace: "ml", Container: "worker"}})
	var out bytes.Buffer
	rep := NewReport(&out)
	sum := l.Summary()
	if err := rep.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "host h, pod ml/trainer-0, container worker") {
		t.Errorf("no pod in the report:\n%s", out.String())
	}
}
