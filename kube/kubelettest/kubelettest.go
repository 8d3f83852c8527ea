// Package kubelettest is a stand-in kubelet for tests: a real gRPC server
// of the pod-resources API (k8s.io/kubelet podresources v1) on a unix
// socket, answering List with the pods a test gives it.
package kubelettest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Kubelet serves the pod-resources API.
type Kubelet struct {
	podresv1.UnimplementedPodResourcesListerServer

	mu    sync.Mutex
	pods  []*podresv1.PodResources
	lists atomic.Int64
	srv   *grpc.Server
	done  chan struct{}
}

// Serve listens on the unix socket path and serves until Close.
func Serve(path string) (*Kubelet, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	k := &Kubelet{srv: grpc.NewServer(), done: make(chan struct{})}
	podresv1.RegisterPodResourcesListerServer(k.srv, k)
	go func() {
		defer close(k.done)
		_ = k.srv.Serve(ln)
	}()
	return k, nil
}

// Set makes List answer pods from now on.
func (k *Kubelet) Set(pods ...*podresv1.PodResources) {
	k.mu.Lock()
	k.pods = pods
	k.mu.Unlock()
}

// Lists is how many List calls were answered.
func (k *Kubelet) Lists() int { return int(k.lists.Load()) }

// List answers the pods set.
func (k *Kubelet) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	k.lists.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// Close stops serving.
func (k *Kubelet) Close() {
	k.srv.Stop()
	<-k.done
}

// Pod is a pod of containers, each given the devices of one resource.
func Pod(namespace, name string, containers ...*podresv1.ContainerResources) *podresv1.PodResources {
	return &podresv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

// Container is a container holding device IDs of a device plugin's
// resource (none: no devices).
func Container(name, resource string, ids ...string) *podresv1.ContainerResources {
	c := &podresv1.ContainerResources{Name: name}
	if len(ids) > 0 {
		c.Devices = []*podresv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}
	}
	return c
}

// Claimed is a container holding devices through a DRA claim of driver,
// each device by its name in the driver's pool and as a CDI device
// (cdiKind "vendor/class", "" for none).
func Claimed(name, driver, cdiKind string, devices ...string) *podresv1.ContainerResources {
	cr := &podresv1.ClaimResource{DriverName: driver, PoolName: "node"}
	dr := &podresv1.DynamicResource{ClaimName: name + "-claim", ClaimNamespace: "default"}
	for _, d := range devices {
		c := &podresv1.ClaimResource{DriverName: cr.DriverName, PoolName: cr.PoolName, DeviceName: d}
		if cdiKind != "" {
			c.CdiDevices = []*podresv1.CDIDevice{{Name: cdiKind + "=" + d}}
		}
		dr.ClaimResources = append(dr.ClaimResources, c)
	}
	return &podresv1.ContainerResources{Name: name, DynamicResources: []*podresv1.DynamicResource{dr}}
}
