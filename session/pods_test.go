package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/kube"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
)

// fakePods names containers after a number of lookups.
type fakePods struct {
	mu     sync.Mutex
	calls  map[string]int
	names  map[string][]kube.Names // by container ID: what the 1st, 2nd, ... lookup gives ("" pod: not yet)
	forgot []int
}

func (f *fakePods) Lookup(pid int, c kube.Container) (kube.Names, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.names[c.ID]
	n := f.calls[c.ID]
	f.calls[c.ID]++
	if n >= len(seq) {
		n = len(seq) - 1
	}
	if n < 0 || seq[n].Pod == "" {
		return kube.Names{}, "not looked at yet", false
	}
	return seq[n], "", true
}

func (f *fakePods) Forget(pid int) {
	f.mu.Lock()
	f.forgot = append(f.forgot, pid)
	f.mu.Unlock()
}

// tickRecorder keeps the placements the sinks see at each tick.
type tickRecorder struct {
	sinks.Base
	seen map[uint32][]devices.Placement
}

func (r *tickRecorder) Tick(v *sinks.View) {
	for _, p := range v.Procs {
		r.seen[p.Pid] = append(r.seen[p.Pid], p.Placement)
	}
}

// Each traced process gets its pod UID and container ID from its cgroup
// when it enters the ledger, and the names its PodNames learns, then or
// at a later tick: the sinks' views, the summary and its NDJSON line have
// them; a process in no pod has none; every end is told to the PodNames.
func TestPods(t *testing.T) {
	const (
		uid = "8d1e2f3a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
		c1  = "1111111111111111111111111111111111111111111111111111111111111111"
		c2  = "2222222222222222222222222222222222222222222222222222222222222222"
	)
	slice := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/"
	cg := map[int]string{
		100: "0::" + slice + "cri-containerd-" + c1 + ".scope\n",
		101: "9:memory:/kubepods/burstable/pod" + uid + "/" + c2 + "\n0::/\n",
		102: "0::/user.slice/user-1000.slice/session-3.scope\n",
	}
	old := readCgroup
	readCgroup = func(pid int) ([]procfs.CgroupEntry, error) {
		if s, ok := cg[pid]; ok {
			return procfs.ParseCgroups([]byte(s))
		}
		return nil, errors.New("no such process")
	}
	defer func() { readCgroup = old }()
	pods := &fakePods{calls: map[string]int{}, names: map[string][]kube.Names{
		c1: {{Namespace: "ml", Pod: "trainer-0", Container: "worker"}},
		c2: {{}, {Namespace: "ml", Pod: "trainer-0"}, {Namespace: "ml", Pod: "trainer-0", Container: "log"}},
	}}
	h := newFakeHost()
	h.child = 100
	be := newFakeBackend(
		alloc(100, 0xb1, 0, events.DRAM, 0x20000, 4096),
		fork(100, 101),
		fork(100, 102),
		alloc(101, 0xc1, 0, events.DRAM, 0x40000, 2048),
		alloc(102, 0xd1, 0, events.DRAM, 0x40000, 2048),
		idle, idle, idle,
		do(h.end(102, 0, 0)), groupExit(102),
		do(h.end(101, 0, 0)), groupExit(101),
		do(h.end(100, 0, 0)), groupExit(100),
	)
	be.attach["/lib/libtt_metal.so"] = nil
	r := &recorder{}
	tr := &tickRecorder{seen: map[uint32][]devices.Placement{}}
	var nd bytes.Buffer
	cfg := Config{Command: []string{"sh"}, Follow: true, Lib: "/lib/libtt_metal.so", Pods: pods}
	if _, err := run(context.Background(), cfg, be, h, []sinks.Sink{r, tr, sinks.NewNDJSON(&nd, false)}); err != nil {
		t.Fatal(err)
	}
	want := map[uint32]devices.Placement{
		100: {PodUID: uid, ContainerID: c1, Namespace: "ml", Pod: "trainer-0", Container: "worker"},
		101: {PodUID: uid, ContainerID: c2, Namespace: "ml", Pod: "trainer-0", Container: "log"},
		102: {},
	}
	for _, p := range r.summary.Processes {
		got := p.Placement
		got.Host = ""
		if got != want[p.Pid] {
			t.Errorf("pid %d: %+v, want %+v", p.Pid, got, want[p.Pid])
		}
	}
	// 101 was named in steps: not yet at its entry, its pod at the next
	// tick (before the sinks', which saw it so), then its container.
	var steps []string
	for _, pl := range tr.seen[101] {
		if s := pl.Pod + "/" + pl.Container; len(steps) == 0 || steps[len(steps)-1] != s {
			steps = append(steps, s)
		}
	}
	if strings.Join(steps, " ") != "trainer-0/ trainer-0/log" {
		t.Errorf("pid 101 as the ticks saw it: %q", steps)
	}
	if len(tr.seen[101]) > 0 && !strings.Contains(tr.seen[101][0].PodWhy, "which of the pod's containers") {
		t.Errorf("pid 101 first seen with pod_why %q", tr.seen[101][0].PodWhy)
	}
	lines := strings.Split(strings.TrimSpace(nd.String()), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	for _, p := range sum["processes"].([]any) {
		m := p.(map[string]any)
		if m["pid"].(float64) == 100 && (m["pod"] != "trainer-0" || m["namespace"] != "ml" || m["container"] != "worker" || m["pod_uid"] != uid || m["container_id"] != c1) {
			t.Errorf("NDJSON summary of 100: %v", m)
		}
		if m["pid"].(float64) == 102 && (m["pod"] != nil || m["pod_uid"] != nil) {
			t.Errorf("NDJSON summary of 102 (no pod): %v", m)
		}
	}
	pods.mu.Lock()
	defer pods.mu.Unlock()
	if len(pods.forgot) != 3 {
		t.Errorf("ends told: %v", pods.forgot)
	}
}
