package kube_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tttrace/tttrace/kube"
	"github.com/tttrace/tttrace/kube/kubelettest"
)

func serve(t *testing.T) (*kubelettest.Kubelet, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	k, err := kubelettest.Serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k, sock
}

// The answer of a real gRPC server, indexed: each kind of device name
// matches the chips it names, and only in the Tenstorrent domain.
func TestListAndMatch(t *testing.T) {
	k, sock := serve(t)
	k.Set(
		kubelettest.Pod("ml", "trainer-0", kubelettest.Container("worker", "tenstorrent.com/n150", "0", "1")),
		kubelettest.Pod("serving", "infer-1",
			kubelettest.Container("sidecar", ""),
			kubelettest.Claimed("server", "tenstorrent.com", "", "0000-05-00-0")),
		kubelettest.Pod("batch", "job-x", kubelettest.Claimed("main", "dra.other.io", "cdi.tenstorrent.com/chip", "0000:07:00.0")),
		kubelettest.Pod("fpga", "other", kubelettest.Container("f", "example.com/fpga", "2", "0000:08:00.0")),
		kubelettest.Pod("shared", "a", kubelettest.Container("c", "tenstorrent.com/n300", "3")),
		kubelettest.Pod("shared", "b", kubelettest.Container("c", "tenstorrent.com/n300", "3")),
		kubelettest.Pod("two", "p", kubelettest.Container("x", "tenstorrent.com/n150", "4"), kubelettest.Container("y", "tenstorrent.com/n150", "4")),
		kubelettest.Pod("two", "q", kubelettest.Container("x", "tenstorrent.com/n150", "5"), kubelettest.Container("y", "tenstorrent.com/n150", "6")),
	)
	c, err := kube.NewClient(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		chips []kube.Chip
		want  kube.Names
		why   string
	}{
		{[]kube.Chip{{PCI: "0000:02:00.0", Num: 0}}, kube.Names{"ml", "trainer-0", "worker"}, ""},
		{[]kube.Chip{{PCI: "0000:02:00.0", Num: 1}}, kube.Names{"ml", "trainer-0", "worker"}, ""},
		{[]kube.Chip{{PCI: "0000:05:00.0", Num: -1}}, kube.Names{"serving", "infer-1", "server"}, ""},
		{[]kube.Chip{{PCI: "0000:07:00.0", Num: 9}}, kube.Names{"batch", "job-x", "main"}, ""},
		{[]kube.Chip{{PCI: "0000:08:00.0", Num: 2}}, kube.Names{}, "no container"},
		{[]kube.Chip{{PCI: "0000:09:00.0", Num: 3}}, kube.Names{}, "two pods"},
		{[]kube.Chip{{PCI: "0000:09:00.0", Num: 0}, {PCI: "0000:05:00.0", Num: -1}}, kube.Names{}, "two pods"},
		{[]kube.Chip{{PCI: "0000:0a:00.0", Num: 4}}, kube.Names{"two", "p", ""}, ""},
		{[]kube.Chip{{PCI: "0000:0a:00.0", Num: 5}}, kube.Names{"two", "q", "x"}, ""},
		{[]kube.Chip{{PCI: "0000:0a:00.0", Num: 5}, {PCI: "0000:0b:00.0", Num: 6}}, kube.Names{"two", "q", ""}, ""},
	}
	for i, cs := range cases {
		n, why, ok := x.Match(cs.chips)
		if n != cs.want || ok != (cs.why == "") || !strings.Contains(why, cs.why) {
			t.Errorf("%d %+v: %+v %q %v, want %+v %q", i, cs.chips, n, why, ok, cs.want, cs.why)
		}
	}
}

// Answers past the bounds, or with names no kubelet has, are refused.
func TestIndexBounds(t *testing.T) {
	many := &podresv1.ListPodResourcesResponse{}
	for i := 0; i < 5000; i++ {
		many.PodResources = append(many.PodResources, kubelettest.Pod("ns", fmt.Sprint("p", i)))
	}
	devs := &podresv1.ListPodResourcesResponse{PodResources: []*podresv1.PodResources{kubelettest.Pod("ns", "p",
		kubelettest.Container("c", "tenstorrent.com/n150", strings.Split(strings.Repeat("x,", 5000), ",")...))}}
	for i, r := range []*podresv1.ListPodResourcesResponse{
		many, devs,
		{PodResources: []*podresv1.PodResources{kubelettest.Pod("NS", "p")}},
		{PodResources: []*podresv1.PodResources{kubelettest.Pod("ns", "p\n")}},
		{PodResources: []*podresv1.PodResources{kubelettest.Pod("ns", "p", kubelettest.Container("", ""))}},
		{PodResources: []*podresv1.PodResources{kubelettest.Pod("ns", strings.Repeat("a", 254))}},
	} {
		if _, err := kube.NewIndex(r, nil, time.Now()); err == nil {
			t.Errorf("%d: no error", i)
		}
	}
	// A device name too long for any device is left out, not an error.
	long := &podresv1.ListPodResourcesResponse{PodResources: []*podresv1.PodResources{kubelettest.Pod("ns", "p",
		kubelettest.Container("c", "tenstorrent.com/n150", strings.Repeat("1", 300), "7"))}}
	x, err := kube.NewIndex(long, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n, _, ok := x.Match([]kube.Chip{{Num: 7}}); !ok || n.Pod != "p" {
		t.Errorf("%+v %v", n, ok)
	}
}

const (
	uid = "8d1e2f3a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
	cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// The Resolver never waits in Lookup, names a process once the kubelet's
// answer names its devices, names the other processes of its pod from
// what it learnt, asks the kubelet within its interval, and says why a
// process is not named.
func TestResolver(t *testing.T) {
	k, sock := serve(t)
	r, err := kube.NewResolver(kube.Options{Socket: sock, MinInterval: 20 * time.Millisecond, MaxRetry: 80 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	held := map[int][]kube.Chip{}
	kube.SetLook(r, func(pid int, c kube.Container) ([]kube.Chip, string) {
		mu.Lock()
		defer mu.Unlock()
		if cs := held[pid]; cs != nil {
			return cs, ""
		}
		return nil, "it holds no Tenstorrent device open yet"
	})
	a := kube.Container{PodUID: uid, ID: cid}
	b := kube.Container{PodUID: uid, ID: strings.Repeat("e", 64)} // another container of the pod
	other := kube.Container{PodUID: strings.Replace(uid, "8", "9", 1), ID: strings.Repeat("d", 64)}

	start := time.Now()
	if _, why, ok := r.Lookup(10, a); ok || why == "" {
		t.Fatalf("first lookup: %q %v", why, ok)
	}
	if time.Since(start) > 50*time.Millisecond {
		t.Error("Lookup waited")
	}
	if _, _, ok := r.Lookup(1, kube.Container{}); ok {
		t.Error("a process in no pod named")
	}
	eventually := func(pid int, c kube.Container, want kube.Names, whyPart string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, why, ok := r.Lookup(pid, c)
			if whyPart == "" && ok && n == want || whyPart != "" && !ok && strings.Contains(why, whyPart) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d: %+v %q %v, want %+v %q", pid, n, why, ok, want, whyPart)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Holding nothing: not named, and the kubelet is not asked.
	eventually(10, a, kube.Names{}, "holds no Tenstorrent device")
	if n := k.Lists(); n != 0 {
		t.Errorf("%d List calls for a process holding no device", n)
	}
	// Holding a device the kubelet gave no one yet, then one it gave.
	mu.Lock()
	held[10] = []kube.Chip{{PCI: "0000:02:00.0", Num: 0}}
	mu.Unlock()
	eventually(10, a, kube.Names{}, "no container in the kubelet's pod resources holds its device 0000:02:00.0")
	k.Set(kubelettest.Pod("ml", "trainer-0", kubelettest.Container("worker", "tenstorrent.com/n150", "0"), kubelettest.Container("log", "")))
	eventually(10, a, kube.Names{"ml", "trainer-0", "worker"}, "")
	// The pod's other container: the pod is named at once, its container
	// (two in the pod) not.
	if n, _, ok := r.Lookup(11, b); !ok || n != (kube.Names{"ml", "trainer-0", ""}) {
		t.Errorf("another container of the pod: %+v %v", n, ok)
	}
	// Its container is named once it holds a device the kubelet gave it.
	k.Set(kubelettest.Pod("ml", "trainer-0", kubelettest.Container("worker", "tenstorrent.com/n150", "0"), kubelettest.Container("log", "tenstorrent.com/n150", "2")))
	mu.Lock()
	held[11] = []kube.Chip{{PCI: "0000:04:00.0", Num: 2}}
	mu.Unlock()
	eventually(11, b, kube.Names{"ml", "trainer-0", "log"}, "")
	// Asked at most once per interval while a process keeps waiting.
	before := k.Lists()
	mu.Lock()
	held[12] = []kube.Chip{{PCI: "0000:03:00.0", Num: 1}}
	mu.Unlock()
	r.Lookup(12, other)
	time.Sleep(400 * time.Millisecond)
	if n := k.Lists() - before; n < 2 || n > 400/20+1 {
		t.Errorf("%d List calls in 400 ms at an interval of 20 ms", n)
	}
	r.Forget(12)
	time.Sleep(100 * time.Millisecond)
	quiet := k.Lists()
	time.Sleep(200 * time.Millisecond)
	if k.Lists() != quiet {
		t.Error("the kubelet asked again after the only waiting process was forgotten")
	}
	// A kubelet that is not there: why says so.
	k.Close()
	mu.Lock()
	held[13] = []kube.Chip{{PCI: "0000:03:00.0", Num: 1}}
	mu.Unlock()
	eventually(13, other, kube.Names{}, "pod-resources API at "+sock)
}
