package sinks

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// The live view names the pod and container of a process in one, or the
// pod's UID while its name is not known.
func TestLivePod(t *testing.T) {
	l := devices.NewLedger(devices.Options{})
	ev := chipEv(events.KindAlloc, 10, 0xa, 0, events.DRAM, 8192)
	ev.Seq = 1
	l.Apply(ev)
	var out bytes.Buffer
	v := NewLive(&out, time.Millisecond, func() (int, int) { return 200, 0 })
	v.Tick(&View{Now: time.Unix(1700000000, 0), Ledger: l, Libraries: 1, Procs: []Proc{
		{Pid: 10, Command: "w", Placement: devices.Placement{Host: "h", PodUID: "u-1", Pod: "trainer-0", Namespace: "ml", Container: "worker"}},
		{Pid: 11, Command: "x", Placement: devices.Placement{Host: "h", PodUID: "u-2", PodWhy: "not looked at yet"}},
		{Pid: 12, Command: "y", Placement: devices.Placement{Host: "h"}},
	}})
	frame := out.String()
	for _, want := range []string{"pid 10  [host h, pod ml/trainer-0, container worker]  w", "pid 11  [host h, pod uid u-2]  x", "pid 12  [host h]  y"} {
		if !strings.Contains(frame, want) {
			t.Errorf("no %q in the frame:\n%s", want, frame)
		}
	}
}
