package kube

import (
	"strings"
	"testing"

	"github.com/tttrace/tttrace/procfs"
)

const (
	uid  = "8d1e2f3a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
	uidU = "8d1e2f3a_1b2c_4d5e_8f90_a1b2c3d4e5f6"
	cid  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParsePath(t *testing.T) {
	static := "0123456789abcdef0123456789abcdef"
	good := []struct {
		path string
		want Container
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Container{uid, cid, "containerd"}},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope", Container{uid, cid, "cri-o"}},
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/docker-" + cid + ".scope", Container{uid, cid, "docker"}},
		{"/kubepods.slice/kubepods-pod" + static + ".slice/cri-containerd-" + cid + ".scope", Container{static, cid, "containerd"}},
		// kind: the kubelet's own slice as a prefix.
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Container{uid, cid, "containerd"}},
		// The container's own cgroups below it.
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope/init.scope", Container{uid, cid, "containerd"}},
		{"/kubepods/burstable/pod" + uid + "/" + cid, Container{PodUID: uid, ID: cid}},
		{"/kubepods/besteffort/pod" + uid + "/" + cid, Container{PodUID: uid, ID: cid}},
		{"/kubepods/pod" + uid + "/" + cid, Container{PodUID: uid, ID: cid}},
		{"/kubepods/pod" + uid + "/" + cid + "/sub", Container{PodUID: uid, ID: cid}},
		// Seen from a cgroup namespace (tttrace in a pod of its own).
		{"/../../kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Container{uid, cid, "containerd"}},
		{"/../kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Container{uid, cid, "containerd"}},
		{"/../../pod" + uid + "/" + cid, Container{PodUID: uid, ID: cid}},
		{"/../burstable/pod" + uid + "/" + cid, Container{PodUID: uid, ID: cid}},
	}
	for _, g := range good {
		if c, ok := ParsePath(g.path); !ok || c != g.want {
			t.Errorf("%s: %+v %v, want %+v", g.path, c, ok, g.want)
		}
	}
	bad := []string{
		"/",
		"/user.slice/user-1000.slice/session-1.scope",
		"/system.slice/containerd.service",
		// A tree delegated to a user, named like the kubelet's.
		"/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/user.slice/user-1000.slice/user@1000.service/kubepods/pod" + uid + "/" + cid,
		"/../../system.slice/evil.service/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		// Levels missing or not the pod slice's prefixes.
		"/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/x.slice/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-guaranteed.slice/kubepods-guaranteed-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice",
		// Not a container's scope.
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid[:63] + ".scope",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + strings.ToUpper(cid) + ".scope",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/other-" + cid + ".scope",
		"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid,
		// UIDs not of their form.
		"/kubepods.slice/kubepods-pod" + uid + ".slice/cri-containerd-" + cid + ".scope", // dashes split words
		"/kubepods.slice/kubepods-pod" + strings.ToUpper(uidU) + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-podabc.slice/cri-containerd-" + cid + ".scope",
		"/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uidU, "_", "x") + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods/burstable/pod" + uidU + "/" + cid,
		"/kubepods/burstable/pod" + uid + "x/" + cid,
		"/kubepods/burstable/" + uid + "/" + cid,
		"/kubepods/guaranteed/pod" + uid + "/" + cid,
		"/kubepods/pod" + uid,
		"/other/kubepods/pod" + uid + "/" + cid,
		"/kubepods\\x2dx.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"kubepods/pod" + uid + "/" + cid,
		"/kubepods/pod" + uid + "/" + cid + strings.Repeat("/a", maxComps),
		"/kubepods/pod" + uid + "/" + cid + "/" + strings.Repeat("a", maxPath),
	}
	for _, b := range bad {
		if c, ok := ParsePath(b); ok {
			t.Errorf("%.200s: %+v, want no pod", b, c)
		}
	}
}

func TestContainerOf(t *testing.T) {
	sys := "/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"
	fs := "/kubepods/pod" + uid + "/" + cid
	other := "/kubepods/pod" + uid + "/" + strings.Repeat("f", 64)
	cases := []struct {
		es   []procfs.CgroupEntry
		want Container
		err  bool
	}{
		{[]procfs.CgroupEntry{{ID: 0, Path: sys}}, Container{uid, cid, "containerd"}, false},
		{[]procfs.CgroupEntry{{ID: 4, Controllers: "memory", Path: fs}, {ID: 3, Controllers: "cpu", Path: fs}, {ID: 0, Path: "/"}}, Container{PodUID: uid, ID: cid}, false},
		{[]procfs.CgroupEntry{{ID: 4, Controllers: "memory", Path: fs}, {ID: 3, Controllers: "cpu", Path: other}}, Container{}, true},
		{[]procfs.CgroupEntry{{ID: 0, Path: sys}, {ID: 3, Controllers: "cpu", Path: other}}, Container{uid, cid, "containerd"}, false},
		{[]procfs.CgroupEntry{{ID: 0, Path: "/user.slice"}}, Container{}, false},
	}
	for i, c := range cases {
		got, err := ContainerOf(c.es)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%d: %+v %v, want %+v (error %v)", i, got, err, c.want, c.err)
		}
	}
}

func FuzzParsePath(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope")
	f.Add("/../kubepods/burstable/pod" + uid + "/" + cid)
	f.Fuzz(func(t *testing.T, p string) {
		c, ok := ParsePath(p)
		if ok && (!podUID(c.PodUID) || !containerID(c.ID)) {
			t.Fatalf("%q: %+v", p, c)
		}
	})
}
