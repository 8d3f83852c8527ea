package kube

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves its pod-resources API (the
// socket device plugins' monitoring agents and dcgm-exporter read).
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultDomain is the resource domain of Tenstorrent devices: device
// plugin resources "tenstorrent.com/<card>", DRA drivers and CDI vendors
// "tenstorrent.com" (or a subdomain).
const DefaultDomain = "tenstorrent.com"

// Bounds of one answer of the kubelet: a node runs at most a few hundred
// pods (110 by default).
const (
	maxMessage    = 16 << 20 // bytes of one List answer
	maxPods       = 4096
	maxContainers = 64 // per pod
	maxDevices    = 4096
	maxName       = 253 // a pod's, namespace's or container's name (DNS names)
	maxDeviceName = 256
	listTimeout   = 5 * time.Second
)

// Names are a pod's namespace and name and a container's name, as the
// kubelet has them. Container is "" when not known.
type Names struct {
	Namespace, Pod, Container string
}

// holder is a container of a pod of an Index.
type holder struct{ pod, container int }

// Index is one List answer of the kubelet: its pods and, for each name of
// a Tenstorrent device, the containers holding it.
type Index struct {
	At       time.Time // when it was asked for
	pods     []indexPod
	byDevice map[string][]holder
}

type indexPod struct {
	namespace, name string
	containers      []string
}

// Client asks one kubelet's pod-resources socket.
type Client struct {
	socket  string
	domains []string
	conn    *grpc.ClientConn
	api     podresv1.PodResourcesListerClient
}

// NewClient makes a client of the pod-resources API at socket (a unix
// socket path) counting the devices of resources in domains (nil:
// DefaultDomain). No connection is made until List.
func NewClient(socket string, domains []string) (*Client, error) {
	if len(domains) == 0 {
		domains = []string{DefaultDomain}
	}
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, err
	}
	return &Client{socket: socket, domains: domains, conn: conn, api: podresv1.NewPodResourcesListerClient(conn)}, nil
}

// Close closes the client's connection.
func (c *Client) Close() error { return c.conn.Close() }

// List asks the kubelet for every pod of the node and the devices of each
// container, within listTimeout.
func (c *Client) List(ctx context.Context) (*Index, error) {
	at := time.Now()
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("the kubelet's pod-resources API at %s: %w", c.socket, err)
	}
	return NewIndex(resp, c.domains, at)
}

// NewIndex indexes a List answer: for each device of a resource in
// domains, the names it may go by (the device plugin's device ID, the DRA
// driver's device name, the name of a CDI device). An answer past the
// bounds (pods, containers per pod, devices, the length of a name) is
// refused whole. domains nil: DefaultDomain.
func NewIndex(resp *podresv1.ListPodResourcesResponse, domains []string, at time.Time) (*Index, error) {
	if len(domains) == 0 {
		domains = []string{DefaultDomain}
	}
	prs := resp.GetPodResources()
	if len(prs) > maxPods {
		return nil, fmt.Errorf("the kubelet lists %d pods, more than %d", len(prs), maxPods)
	}
	x := &Index{At: at, byDevice: map[string][]holder{}}
	devs := 0
	add := func(name string, h holder) error {
		if name == "" || len(name) > maxDeviceName {
			return nil // a name no device of ours has
		}
		if devs++; devs > maxDevices {
			return fmt.Errorf("the kubelet lists more than %d devices", maxDevices)
		}
		for _, o := range x.byDevice[name] {
			if o == h {
				return nil
			}
		}
		x.byDevice[name] = append(x.byDevice[name], h)
		return nil
	}
	for _, pr := range prs {
		p := indexPod{namespace: pr.GetNamespace(), name: pr.GetName()}
		if !validName(p.namespace) || !validName(p.name) {
			return nil, fmt.Errorf("the kubelet lists a pod named %q in namespace %q", cut(p.name), cut(p.namespace))
		}
		cs := pr.GetContainers()
		if len(cs) > maxContainers {
			return nil, fmt.Errorf("the kubelet lists %d containers in pod %s/%s, more than %d", len(cs), p.namespace, p.name, maxContainers)
		}
		pi := len(x.pods)
		for ci, c := range cs {
			if !validName(c.GetName()) {
				return nil, fmt.Errorf("the kubelet lists a container named %q in pod %s/%s", cut(c.GetName()), p.namespace, p.name)
			}
			p.containers = append(p.containers, c.GetName())
			h := holder{pi, ci}
			for _, d := range c.GetDevices() {
				if !inDomain(resourceDomain(d.GetResourceName()), domains) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					if err := add(id, h); err != nil {
						return nil, err
					}
				}
			}
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					if inDomain(cr.GetDriverName(), domains) {
						if err := add(cr.GetDeviceName(), h); err != nil {
							return nil, err
						}
					}
					for _, cdi := range cr.GetCdiDevices() {
						// A CDI device is "vendor/class=name".
						kind, name, ok := strings.Cut(cdi.GetName(), "=")
						vendor, _, _ := strings.Cut(kind, "/")
						if ok && inDomain(vendor, domains) {
							if err := add(name, h); err != nil {
								return nil, err
							}
						}
					}
				}
			}
		}
		x.pods = append(x.pods, p)
	}
	return x, nil
}

// validName: a Kubernetes object name as the kubelet can have it: a DNS
// subdomain (lower-case letters, digits, '-', '.'), at most 253 bytes.
func validName(s string) bool {
	if s == "" || len(s) > maxName {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// resourceDomain is the domain of an extended resource's name
// ("tenstorrent.com/n150" -> "tenstorrent.com").
func resourceDomain(r string) string {
	d, _, ok := strings.Cut(r, "/")
	if !ok {
		return ""
	}
	return d
}

// inDomain says whether d is one of domains or a subdomain of one.
func inDomain(d string, domains []string) bool {
	for _, w := range domains {
		if d != "" && (d == w || strings.HasSuffix(d, "."+w)) {
			return true
		}
	}
	return false
}

// Chip is a Tenstorrent device a process holds open: its PCI address and
// its number N in the host's /dev/tenstorrent/N (-1: not known).
type Chip struct {
	PCI string
	Num int
}

// names are the names a device of c may go by in the kubelet's answer:
// its host number ("3"), its PCI address ("0000:02:00.0") and that
// address as a DNS label ("0000-02-00-0", as a DRA device name must be).
func (c Chip) names() []string {
	var out []string
	if c.Num >= 0 {
		out = append(out, strconv.Itoa(c.Num))
	}
	if c.PCI != "" {
		out = append(out, c.PCI, strings.NewReplacer(":", "-", ".", "-").Replace(c.PCI))
	}
	return out
}

// Match names the pod and container holding chips: the containers the
// kubelet gave any of them must all be of one pod; the container is named
// when one of that pod's containers holds them, or the pod has only one.
// why says why not, when not.
func (x *Index) Match(chips []Chip) (n Names, why string, ok bool) {
	seen := map[holder]bool{}
	var hs []holder
	for _, c := range chips {
		for _, name := range c.names() {
			for _, h := range x.byDevice[name] {
				if !seen[h] {
					seen[h] = true
					hs = append(hs, h)
				}
			}
		}
	}
	if len(hs) == 0 {
		return Names{}, "no container in the kubelet's pod resources holds " + describe(chips), false
	}
	pod := hs[0].pod
	for _, h := range hs[1:] {
		if h.pod != pod {
			p, q := x.pods[pod], x.pods[h.pod]
			return Names{}, fmt.Sprintf("the kubelet gave %s to two pods (%s/%s, %s/%s)", describe(chips), p.namespace, p.name, q.namespace, q.name), false
		}
	}
	p := x.pods[pod]
	n = Names{Namespace: p.namespace, Pod: p.name}
	switch {
	case len(hs) == 1:
		n.Container = p.containers[hs[0].container]
	case len(p.containers) == 1:
		n.Container = p.containers[0]
	}
	return n, "", true
}

// describe names chips for a message.
func describe(chips []Chip) string {
	var ss []string
	for _, c := range chips {
		s := c.PCI
		if c.Num >= 0 {
			s += fmt.Sprintf(" (/dev/tenstorrent/%d)", c.Num)
		}
		ss = append(ss, s)
	}
	if len(ss) == 1 {
		return "its device " + ss[0]
	}
	return "its devices " + strings.Join(ss, ", ")
}

// cut shortens a value from outside for a message.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
