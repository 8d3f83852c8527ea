package main

// Pods end to end (docs/kubernetes.md): replica workloads moved into real
// kubepods cgroups made in the host's cgroup v2 hierarchy, in the
// kubelet's systemd layout and in its cgroupfs layout, hold simulated
// Tenstorrent devices (--dev-root) while traced with -p and --listen; a
// stand-in kubelet (kube/kubelettest: the real pod-resources gRPC API on a
// unix socket) gives their devices to pods through a device plugin
// resource and a DRA claim. The pod, namespace and container labels of
// their series and the summary's fields must be the stand-in's; a process
// of a pod holding no device gets its pod from its pod's other process,
// and one in no pod has none.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/kube/kubelettest"
)

// cgroup2Root is where the host's cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host).
func cgroup2Root(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if ok && strings.HasPrefix(post, "cgroup2 ") && len(fields) >= 5 && fields[3] == "/" {
			return fields[4]
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

// podCgroup makes the cgroup path under root (each level, as the kubelet
// would) and moves pid into it; the cleanup moves what is left back to
// root and removes the levels it made.
func podCgroup(t *testing.T, root, path string, pid int) {
	t.Helper()
	var made []string
	dir := root
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		dir = filepath.Join(dir, c)
		if err := os.Mkdir(dir, 0o755); err == nil {
			made = append(made, dir)
		} else if !os.IsExist(err) {
			t.Skipf("cannot make cgroups: %v", err)
		}
	}
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if b, err := os.ReadFile(filepath.Join(made[i], "cgroup.procs")); err == nil {
				for _, p := range strings.Fields(string(b)) {
					_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0o644)
				}
			}
			for j := 0; j < 50 && os.Remove(made[i]) != nil; j++ {
				time.Sleep(20 * time.Millisecond) // a process ending leaves its cgroup a moment later
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(b), "0::"+path+"\n") {
		t.Fatalf("pid %d's cgroup: %q, %v (want 0::%s)", pid, b, err, path)
	}
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// randomUID is a pod UID as the API server makes them.
func randomUID(t *testing.T) string {
	h := randomHex(t, 32)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func TestE2EPodLabels(t *testing.T) {
	bin, replica := setup(t)
	cg := cgroup2Root(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	// Two devices: /dev/tenstorrent/0 at 0000:05:00.0, 1 at 0000:02:00.0
	// (chip id 0 of a process seeing both is 02:00.0); the kernel names
	// them tenstorrent/N (their uevent's DEVNAME), as the driver does.
	root := devRoot(t, map[int]string{0: "0000:05:00.0", 1: "0000:02:00.0"})
	for n := range 2 {
		var st unix.Stat_t
		if err := unix.Stat(devRootHost[n], &st); err != nil {
			t.Fatal(err)
		}
		rdev := uint64(st.Rdev)
		ue := filepath.Join(root, "sys", "dev", "char", fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)), "uevent")
		if err := os.WriteFile(ue, []byte(fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=tenstorrent/%d\n", unix.Major(rdev), unix.Minor(rdev), n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	uidA, uidB := randomUID(t), randomUID(t)
	type work struct {
		name, visible string
		hold          int    // the /dev/tenstorrent/N it holds open (-1: none)
		cgroup        string // "" : in no pod
		pod, ns, ctr  string // what the labels must say
		uid, cid      string
		cmd           *exec.Cmd
		out           *syncBuffer
		pid           string
	}
	cidA, cidA2, cidB := randomHex(t, 64), randomHex(t, 64), randomHex(t, 64)
	sliceA := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uidA, "-", "_") + ".slice"
	works := []*work{
		// The systemd layout, a device plugin resource naming the device
		// by its number.
		{name: "a", visible: "1", hold: 0, cgroup: sliceA + "/cri-containerd-" + cidA + ".scope",
			pod: "trainer-0", ns: "ml", ctr: "worker", uid: uidA, cid: cidA},
		// The same pod's other container: it holds no device; its pod is
		// learnt from a's, its container (the pod has two) is not known.
		{name: "a2", visible: "-", hold: -1, cgroup: sliceA + "/cri-containerd-" + cidA2 + ".scope",
			pod: "trainer-0", ns: "ml", uid: uidA, cid: cidA2},
		// The cgroupfs layout, a DRA claim naming the device by its PCI
		// address as a DNS label.
		{name: "b", visible: "0", hold: 1, cgroup: "/kubepods/besteffort/pod" + uidB + "/" + cidB,
			pod: "infer-1", ns: "serving", ctr: "server", uid: uidB, cid: cidB},
		// In no pod, though it holds a device the kubelet gave a pod.
		{name: "c", visible: "1", hold: 0},
	}
	sock := f("kubelet.sock")
	k, err := kubelettest.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.Set(
		kubelettest.Pod("ml", "trainer-0",
			kubelettest.Container("worker", "tenstorrent.com/n150", "0"),
			kubelettest.Container("log", "")),
		kubelettest.Pod("serving", "infer-1", kubelettest.Claimed("server", "tenstorrent.com", "tenstorrent.com/chip", "0000-02-00-0")),
		// Not Tenstorrent devices, though named like ours: never matched.
		kubelettest.Pod("fpga", "other", kubelettest.Container("f", "example.com/fpga", "1", "0000:05:00.0")),
		// A device nobody holds.
		kubelettest.Pod("ml", "idle", kubelettest.Container("c", "tenstorrent.com/n150", "7")),
	)

	for _, w := range works {
		w.cmd = exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150",
			"--truth", f(w.name+".truth"), "--go-file", f(w.name+".go"), "--hold-file", f(w.name+".hold"))
		w.cmd.Env = os.Environ()
		if w.visible != "-" {
			w.cmd.Env = append(w.cmd.Env, "TT_VISIBLE_DEVICES="+w.visible)
		}
		if w.hold >= 0 {
			holdChip(t, w.cmd, w.hold)
		}
		w.out = &syncBuffer{}
		w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.pid = strconv.Itoa(w.cmd.Process.Pid)
		t.Cleanup(func() {
			if w.cmd.ProcessState == nil {
				w.cmd.Process.Kill()
				w.cmd.Wait()
			}
		})
		if w.cgroup != "" {
			podCgroup(t, cg, w.cgroup, w.cmd.Process.Pid)
		}
	}
	for _, w := range works {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "ready") }, "workload ready")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"--lib", filepath.Join(dir, "libtt_metal.so"), "--dev-root", root, "--listen", addr,
		"--pod-resources", sock, "--json", "--no-events", "-o", f("out"), "--ready-file", f("ready")}
	for _, w := range works {
		args = append(args, "-p", w.pid)
	}
	tt, tout := start(t, bin, args...)
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready\n"+tout.String())
	for _, w := range works {
		touch(t, f(w.name+".go"))
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "holding") }, "workload holding\n"+w.out.String())
	}

	// Every series of each process carries its pod's labels, the
	// stand-in's names exactly (none for c).
	want := func(w *work) map[string]string {
		return map[string]string{"pod": w.pod, "namespace": w.ns, "container": w.ctr}
	}
	poll(t, "pod labels", func() string {
		fams, err := scrapeFamilies(addr, "tttrace_device_memory_bytes", "tttrace_live_buffers")
		if err != nil {
			return err.Error()
		}
		var diffs []string
		for _, w := range works {
			n := 0
			for _, fam := range []string{"tttrace_device_memory_bytes", "tttrace_live_buffers"} {
				for _, s := range fams[fam] {
					if s.labels["pid"] != w.pid {
						continue
					}
					n++
					for l, v := range want(w) {
						if s.labels[l] != v {
							diffs = append(diffs, fmt.Sprintf("%s (pid %s) %s: %s=%q, want %q", w.name, w.pid, fam, l, s.labels[l], v))
						}
					}
				}
			}
			if n == 0 {
				diffs = append(diffs, w.name+": no series")
			}
		}
		return strings.Join(diffs, "\n")
	})
	lists := k.Lists()

	for _, w := range works {
		touch(t, f(w.name+".hold"))
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s", w.name, err, w.out)
		}
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	sum := lastSummary(t, f("out"))
	for _, w := range works {
		found := false
		for _, p := range sum.Processes {
			if strconv.Itoa(int(p.Pid)) != w.pid {
				continue
			}
			found = true
			pl := p.Placement
			got := [5]string{pl.PodUID, pl.ContainerID, pl.Pod, pl.Namespace, pl.Container}
			if exp := [5]string{w.uid, w.cid, w.pod, w.ns, w.ctr}; got != exp {
				t.Errorf("%s: summary pod_uid, container_id, pod, namespace, container %q, want %q (pod_why %q)", w.name, got, exp, pl.PodWhy)
			}
			if w.cgroup != "" && w.ctr == "" && pl.PodWhy == "" {
				t.Errorf("%s: no container and no pod_why", w.name)
			}
		}
		if !found {
			t.Errorf("%s: not in the summary", w.name)
		}
	}
	// The kubelet was asked for a few processes, not at every tick.
	if lists == 0 || lists > 10 {
		t.Errorf("%d List calls", lists)
	}
}
