// Package kube names the Kubernetes pod and container a traced process
// runs in (docs/kubernetes.md): its pod's UID and its container's ID from
// its cgroup (this file), the pod's name and namespace and the container's
// name from the kubelet's pod-resources API (podresources.go), joined
// through the Tenstorrent devices the process holds open and the kubelet
// gave the container (resolver.go), on a goroutine of its own, bounded.
package kube

import (
	"fmt"
	"strings"

	"github.com/tttrace/tttrace/procfs"
)

// Container is the pod and container a process runs in, as its cgroup
// says.
type Container struct {
	PodUID string // the pod's metadata.uid, "" when not in a pod
	ID     string // the container's ID (64 hex digits)
	// Runtime: "containerd", "cri-o" or "docker" (systemd cgroup driver),
	// "" (cgroupfs driver: the path does not say).
	Runtime string
}

// InPod says whether c names a pod.
func (c Container) InPod() bool { return c.PodUID != "" }

// same says whether c and o are one container (the runtime aside).
func (c Container) same(o Container) bool { return c.PodUID == o.PodUID && c.ID == o.ID }

// Bounds of a cgroup path parsed (the kernel allows 4096-byte paths).
const (
	maxPath  = 4096
	maxComps = 64
	maxWords = 16 // dash-separated words of a systemd slice name
)

// ContainerOf is the pod and container of a process from its cgroups
// (procfs.Cgroups): the unified (v2) hierarchy's path when it is a pod's,
// else the v1 hierarchies' paths that are a pod's, which must all agree.
// A process in no pod gives the zero Container and no error.
func ContainerOf(es []procfs.CgroupEntry) (Container, error) {
	for _, e := range es {
		if e.ID == 0 && e.Controllers == "" {
			if c, ok := ParsePath(e.Path); ok {
				return c, nil
			}
		}
	}
	var found Container
	for _, e := range es {
		if e.ID == 0 {
			continue
		}
		c, ok := ParsePath(e.Path)
		if !ok {
			continue
		}
		if found.InPod() && found != c {
			return Container{}, fmt.Errorf("its cgroup hierarchies name two containers (%s, %s)", found.ID, c.ID)
		}
		found = c
	}
	return found, nil
}

// ParsePath parses a cgroup path of a container of a Kubernetes pod, in
// the two layouts the kubelet makes:
//
//	systemd driver:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope
//	cgroupfs driver: /kubepods/burstable/pod<UID>/<ID>
//
// (guaranteed pods have no QoS level; in a systemd slice name the UID's
// dashes are underscores; the kubelet's own slice may have a prefix,
// "kubelet-kubepods-..."). The path is taken from the root of the
// hierarchy: every level above the pod must be there, each slice the
// prefix of the next, so a cgroup tree delegated to a user or a container
// cannot make one (its path starts elsewhere). A path seen from a cgroup
// namespace starts with ".." levels; then it may start at any level below
// them. The container's own cgroups below its level are allowed and not
// looked at. Anything else, or a UID or ID not of their exact form, is
// not a pod's.
func ParsePath(p string) (Container, bool) {
	if len(p) > maxPath || !strings.HasPrefix(p, "/") {
		return Container{}, false
	}
	comps := strings.Split(p[1:], "/")
	if len(comps) > maxComps {
		return Container{}, false
	}
	rel := 0
	for rel < len(comps) && comps[rel] == ".." {
		rel++
	}
	rest := comps[rel:]
	if c, ok := parseSystemd(rest, rel > 0); ok {
		return c, true
	}
	return parseCgroupfs(rest, rel > 0)
}

// parseSystemd parses rest as .../<prefix>-pod<UID>.slice/<runtime>-<ID>.scope.
func parseSystemd(rest []string, relative bool) (Container, bool) {
	pod := -1
	for i, c := range rest {
		if strings.HasSuffix(c, ".slice") && strings.Contains(c, "-pod") {
			pod = i
			break
		}
	}
	if pod < 0 || pod+1 >= len(rest) {
		return Container{}, false
	}
	words := strings.Split(strings.TrimSuffix(rest[pod], ".slice"), "-")
	n := len(words)
	if n < 2 || n > maxWords {
		return Container{}, false
	}
	for _, w := range words {
		if !sliceWord(w) {
			return Container{}, false
		}
	}
	uid, ok := strings.CutPrefix(words[n-1], "pod")
	if !ok {
		return Container{}, false
	}
	uid = strings.ReplaceAll(uid, "_", "-")
	if !podUID(uid) {
		return Container{}, false
	}
	switch {
	case words[n-2] == "kubepods":
	case n >= 3 && words[n-3] == "kubepods" && qos(words[n-2]):
	default:
		return Container{}, false
	}
	// The levels above: the slices whose names are the pod slice's
	// prefixes, all of them from the root, or the last ones below "..".
	if pod > n-1 || !relative && pod != n-1 {
		return Container{}, false
	}
	for j := 0; j < pod; j++ {
		if rest[j] != strings.Join(words[:n-pod+j], "-")+".slice" {
			return Container{}, false
		}
	}
	scope, ok := strings.CutSuffix(rest[pod+1], ".scope")
	if !ok {
		return Container{}, false
	}
	for _, rt := range []struct{ prefix, name string }{{"cri-containerd-", "containerd"}, {"crio-", "cri-o"}, {"docker-", "docker"}} {
		if id, ok := strings.CutPrefix(scope, rt.prefix); ok && containerID(id) {
			return Container{PodUID: uid, ID: id, Runtime: rt.name}, true
		}
	}
	return Container{}, false
}

// parseCgroupfs parses rest as kubepods[/<qos>]/pod<UID>/<ID>[/...].
func parseCgroupfs(rest []string, relative bool) (Container, bool) {
	i := 0
	if len(rest) > 0 && rest[0] == "kubepods" {
		i++
	} else if !relative {
		return Container{}, false
	}
	if i < len(rest) && qos(rest[i]) {
		i++
	}
	if i+1 >= len(rest) {
		return Container{}, false
	}
	uid, ok := strings.CutPrefix(rest[i], "pod")
	if !ok || !podUID(uid) || !containerID(rest[i+1]) {
		return Container{}, false
	}
	return Container{PodUID: uid, ID: rest[i+1]}, true
}

func qos(w string) bool { return w == "burstable" || w == "besteffort" }

// sliceWord: a word of a slice name the kubelet makes (systemd escapes
// anything else as \xNN, which no kubelet name needs).
func sliceWord(w string) bool {
	if w == "" || len(w) > 64 {
		return false
	}
	for _, c := range w {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// podUID: a pod's UID as the API server makes it (a UUID, lower-case) or
// as the kubelet makes a static pod's (32 hex digits, a hash).
func podUID(s string) bool {
	switch len(s) {
	case 32:
		return hexDigits(s)
	case 36:
		for _, i := range []int{8, 13, 18, 23} {
			if s[i] != '-' {
				return false
			}
		}
		return hexDigits(s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
	}
	return false
}

// containerID: a CRI container ID (64 lower-case hex digits).
func containerID(s string) bool { return len(s) == 64 && hexDigits(s) }

func hexDigits(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}
