package session

// The Kubernetes pod and container of each traced process
// (docs/kubernetes.md): its pod's UID and its container's ID from its
// cgroup when it enters the ledger (a small /proc file, read as its
// environment is), their names from a PodNames (kube.Resolver), which
// asks the kubelet on a goroutine of its own: the records' loop only
// looks up what it learnt, at every tick, for the processes whose pod or
// container is not named yet.

import (
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/kube"
	"github.com/tttrace/tttrace/procfs"
)

// PodNames names the pods and containers of processes (kube.Resolver).
// Lookup never waits: what it does not know yet it learns in the
// background, and says why not meanwhile.
type PodNames interface {
	Lookup(pid int, c kube.Container) (n kube.Names, why string, ok bool)
	// Forget: pid's process ended.
	Forget(pid int)
}

// readCgroup is procfs.Cgroups (a variable for the tests, whose
// processes are made up).
var readCgroup = procfs.Cgroups

// podOf fills pl with pid's pod and container from its cgroup, and their
// names when already known. A process whose cgroups cannot be read, or in
// no pod, has none.
func (f *procFacts) podOf(pid uint32, pl *devices.Placement) {
	pl.PodUID, pl.ContainerID, pl.Pod, pl.Namespace, pl.Container, pl.PodWhy = "", "", "", "", "", ""
	es, err := readCgroup(int(pid))
	if err != nil {
		return
	}
	c, err := kube.ContainerOf(es)
	if err != nil {
		pl.PodWhy = err.Error()
		return
	}
	if !c.InPod() {
		return
	}
	pl.PodUID, pl.ContainerID = c.PodUID, c.ID
	f.namePod(pid, pl)
}

// namePod names pl's pod and container as far as known now; it says
// whether pl changed.
func (f *procFacts) namePod(pid uint32, pl *devices.Placement) bool {
	was := *pl
	if f.pods == nil {
		pl.PodWhy = "tttrace does not ask the kubelet (--pod-resources \"\")"
		return *pl != was
	}
	n, why, ok := f.pods.Lookup(int(pid), kube.Container{PodUID: pl.PodUID, ID: pl.ContainerID})
	switch {
	case !ok:
		pl.PodWhy = why
	case n.Container == "":
		pl.Pod, pl.Namespace, pl.PodWhy = n.Pod, n.Namespace, why
		if why == "" {
			pl.PodWhy = "which of the pod's containers it is, the kubelet's pod resources do not tell"
		}
	default:
		pl.Pod, pl.Namespace, pl.Container, pl.PodWhy = n.Pod, n.Namespace, n.Container, ""
	}
	return *pl != was
}

// checkPods names the pods and containers learnt since the last tick.
func (f *procFacts) checkPods() {
	if f.pods == nil {
		return
	}
	for pid, st := range f.procs {
		pl := &st.info.Placement
		if !st.inLedger || pl.PodUID == "" || pl.Container != "" {
			continue
		}
		if f.namePod(pid, pl) {
			f.ledger.SetProcessInfo(pid, st.info)
		}
	}
}

// podEnded tells the PodNames that pid's process ended.
func (f *procFacts) podEnded(pid uint32) {
	if f.pods != nil {
		f.pods.Forget(int(pid))
	}
}
