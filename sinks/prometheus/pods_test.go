package prometheus

import (
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// A process's pod, namespace and container are labels of its series (none
// for a process in no pod), unless --metrics-labels leaves them out.
func TestPodLabels(t *testing.T) {
	for _, labels := range [][]string{nil, {"pid", "pod"}, {"pid"}} {
		e := New(Options{Labels: labels})
		l := devices.NewLedger(devices.Options{})
		inPod := devices.Placement{PodUID: "u", ContainerID: "c", Pod: "trainer-0", Namespace: "ml", Container: "worker"}
		for pid, pl := range map[uint32]devices.Placement{10: inPod, 11: {}} {
			l.SetProcessInfo(pid, devices.ProcessInfo{Command: "w", Placement: pl})
			ev := events.Event{Kind: events.KindAlloc, Pid: pid, Tid: pid, Chip: 0, DeviceKind: events.DeviceChip, Device: 0x1000,
				Object: 0xb0, BufferType: events.DRAM, Address: 0x2000, Size: 4096, Seq: uint64(pid)}
			l.Apply(&ev)
		}
		e.Tick(&sinks.View{Ledger: l, Procs: []sinks.Proc{{Pid: 10, Command: "w", Placement: inPod}, {Pid: 11, Command: "w"}}})
		reg := prom.NewRegistry()
		reg.MustRegister(e)
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]string{
			"10": {"pod": "trainer-0", "namespace": "ml", "container": "worker"},
			"11": {"pod": "", "namespace": "", "container": ""},
		}
		n := 0
		for _, f := range fams {
			if f.GetName() != "tttrace_device_memory_bytes" {
				continue
			}
			for _, m := range f.Metric {
				got := map[string]string{}
				for _, lp := range m.Label {
					got[lp.GetName()] = lp.GetValue()
				}
				for _, k := range []string{"pod", "namespace", "container"} {
					v, has := got[k]
					chosen := labels == nil || strings.Contains(strings.Join(labels, ","), k)
					if has != chosen || has && v != want[got["pid"]][k] {
						t.Errorf("labels %v, pid %s: %s=%q (present %v)", labels, got["pid"], k, v, has)
					}
				}
				n++
			}
		}
		if n != 12 {
			t.Errorf("labels %v: %d series, want 12", labels, n)
		}
	}
}
