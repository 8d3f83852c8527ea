package kube

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tttrace/tttrace/procfs"
)

// Options configure a Resolver.
type Options struct {
	// Socket: the kubelet's pod-resources socket (DefaultSocket when "").
	Socket string
	// Domains: the resource domains of Tenstorrent devices (nil:
	// DefaultDomain).
	Domains []string
	// DevRoot (tests): the directory whose dev/tenstorrent and sys stand
	// for each process's /dev/tenstorrent and the host's /sys ("": the
	// real ones), as session.Config.DevRoot.
	DevRoot string
	// MinInterval: the least time between two List calls (0: one second).
	MinInterval time.Duration
	// MaxRetry: the longest wait before a process not named is looked at
	// again (0: a minute); the waits double from MinInterval.
	MaxRetry time.Duration
}

// Bounds of what a Resolver holds.
const (
	maxWants  = 1024 // processes waiting to be named
	maxLearnt = 4096 // pods and containers named, kept
)

// Resolver names the pods and containers of processes: Lookup is cheap
// and never waits (the records' goroutine calls it); the kubelet is asked
// and the processes' open files looked at on the Resolver's goroutine
// only, each process at most once per retry interval (doubling up to
// MaxRetry) and the kubelet at most once per MinInterval.
//
// The join: the pod-resources API names pods and containers but not their
// UIDs or container IDs, which a process's cgroup gives; it says which
// devices the kubelet gave each container. A process holding a
// Tenstorrent device open (the open file itself, procfs.HeldDevices) is
// named after the one pod whose container holds that device; what is
// learnt goes by the cgroup's pod UID and container ID, which are never
// reused, so the other processes of that pod and container are named too.
type Resolver struct {
	opt    Options
	client *Client
	// look is held, or what a test puts in its place.
	look func(pid int, c Container) ([]Chip, string)

	mu    sync.Mutex
	wants map[int]*want        // by pid
	pods  *lru[string, Names]  // pod UID -> namespace and pod name
	ctrs  *lru[string, string] // container ID -> container name
	why   string               // the last failure of the kubelet, for every process waiting
	index *Index
	wake  chan struct{}

	stop context.CancelFunc
	done chan struct{}
}

type want struct {
	c     Container
	next  time.Time // its next look
	wait  time.Duration
	why   string // why it is not named yet
	tried bool   // looked at once
}

// NewResolver starts a Resolver's goroutine; Close stops it.
func NewResolver(o Options) (*Resolver, error) {
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.MinInterval <= 0 {
		o.MinInterval = time.Second
	}
	if o.MaxRetry <= 0 {
		o.MaxRetry = time.Minute
	}
	c, err := NewClient(o.Socket, o.Domains)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Resolver{opt: o, client: c, wants: map[int]*want{},
		pods: newLRU[string, Names](maxLearnt), ctrs: newLRU[string, string](maxLearnt),
		wake: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	r.look = r.held
	go r.run(ctx)
	return r, nil
}

// Close stops the goroutine and closes the connection.
func (r *Resolver) Close() error {
	r.stop()
	<-r.done
	return r.client.Close()
}

// Lookup names the pod and container of process pid, in pod container c
// (from its cgroup). ok: the pod is named (the container may not be yet:
// learnt from another process of the pod, or the kubelet's answer cannot
// tell which of the pod's containers it is). Until both are, pid is
// queued to be looked at, and why says why not. It never waits.
func (r *Resolver) Lookup(pid int, c Container) (n Names, why string, ok bool) {
	if !c.InPod() {
		return Names{}, "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok = r.named(c)
	if ok && n.Container != "" {
		delete(r.wants, pid)
		return n, "", true
	}
	w := r.wants[pid]
	if w != nil && !w.c.same(c) {
		w = nil // the pid names another process now
	}
	if w == nil {
		if len(r.wants) >= maxWants {
			return n, fmt.Sprintf("more than %d processes wait to be named", maxWants), ok
		}
		w = &want{c: c, why: "not looked at yet"}
		r.wants[pid] = w
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return n, w.why, ok
}

// Forget drops pid's wait (its process ended).
func (r *Resolver) Forget(pid int) {
	r.mu.Lock()
	delete(r.wants, pid)
	r.mu.Unlock()
}

// named is what is learnt of c (r.mu held).
func (r *Resolver) named(c Container) (Names, bool) {
	n, ok := r.pods.get(c.PodUID)
	if !ok {
		return Names{}, false
	}
	n.Container, _ = r.ctrs.get(c.ID)
	return n, true
}

func (r *Resolver) run(ctx context.Context) {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastList time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
		now := time.Now()
		// The processes due, and their devices, looked at without the lock.
		r.mu.Lock()
		look := r.look
		due := map[int]Container{}
		for pid, w := range r.wants {
			if !w.next.After(now) {
				due[pid] = w.c
			}
		}
		r.mu.Unlock()
		chips := map[int][]Chip{}
		whys := map[int]string{}
		for pid, c := range due {
			cs, why := look(pid, c)
			if why != "" {
				whys[pid] = why
				continue
			}
			chips[pid] = cs
		}
		var index *Index
		listWhy := ""
		if len(chips) > 0 {
			if wait := r.opt.MinInterval - now.Sub(lastList); wait > 0 {
				// Too soon after the last List: look again then.
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			lastList = time.Now()
			x, err := r.client.List(ctx)
			if err != nil {
				listWhy = err.Error()
			} else {
				index = x
			}
		}
		r.mu.Lock()
		if index != nil {
			r.index, r.why = index, ""
		} else if listWhy != "" {
			r.why = listWhy
		}
		for pid, c := range due {
			w := r.wants[pid]
			if w == nil || !w.c.same(c) {
				continue // ended, or another process now, while looked at
			}
			switch {
			case whys[pid] != "":
				w.why = whys[pid]
			case index == nil:
				w.why = r.why
			default:
				n, why, ok := index.Match(chips[pid])
				if ok {
					r.pods.put(c.PodUID, Names{Namespace: n.Namespace, Pod: n.Pod})
					if n.Container != "" {
						r.ctrs.put(c.ID, n.Container)
						delete(r.wants, pid)
						continue
					}
					why = "the kubelet's pod resources do not tell which of the pod's containers holds " + describe(chips[pid])
				}
				w.why = why
			}
			if !w.tried {
				w.tried, w.wait = true, r.opt.MinInterval
			} else {
				w.wait = min(2*w.wait, r.opt.MaxRetry)
			}
			w.next = time.Now().Add(w.wait)
		}
		// The next process due.
		next := time.Hour
		now = time.Now()
		for pid, w := range r.wants {
			if n, ok := r.named(w.c); ok && n.Container != "" {
				delete(r.wants, pid) // named through another process of its container: Lookup has it
				continue
			}
			next = min(next, max(w.next.Sub(now), 0))
		}
		r.mu.Unlock()
		timer.Reset(max(next, 10*time.Millisecond))
	}
}

// held is the Tenstorrent devices pid holds open, if pid is still in
// container c; why says why none can be used.
func (r *Resolver) held(pid int, c Container) ([]Chip, string) {
	es, err := procfs.Cgroups(pid)
	if err != nil {
		return nil, "its cgroup: " + err.Error()
	}
	if now, err := ContainerOf(es); err != nil || !now.same(c) {
		return nil, "it left its container"
	}
	root, sys := procfs.Root(pid), "/sys"
	if r.opt.DevRoot != "" {
		root, sys = r.opt.DevRoot, filepath.Join(r.opt.DevRoot, "sys")
	}
	tt, err := procfs.TTDevices(root, sys)
	if err != nil || len(tt) == 0 {
		return nil, "it has no /dev/tenstorrent device with a PCI address"
	}
	rdevs := make([]uint64, len(tt))
	for i, d := range tt {
		rdevs[i] = d.Rdev
	}
	found, err := procfs.HeldDevices(pid, rdevs)
	var out []Chip
	for _, d := range tt {
		if !found[d.Rdev] {
			continue
		}
		ch := Chip{PCI: d.PCI, Num: -1}
		if name, err := procfs.CharDevName(sys, d.Rdev); err == nil {
			if n, ok := strings.CutPrefix(name, "tenstorrent/"); ok {
				if v, err := strconv.Atoi(n); err == nil && v >= 0 && n == strconv.Itoa(v) {
					ch.Num = v
				}
			}
		}
		out = append(out, ch)
	}
	if len(out) == 0 {
		if err != nil && !errors.Is(err, procfs.ErrTooManyFDs) {
			return nil, "its open files: " + err.Error()
		}
		return nil, "it holds no Tenstorrent device open yet"
	}
	return out, ""
}

// lru is a map of at most n entries, the least recently put or got
// dropped first.
type lru[K comparable, V any] struct {
	n    int
	tick uint64
	m    map[K]lruEntry[V]
}

type lruEntry[V any] struct {
	v    V
	used uint64
}

func newLRU[K comparable, V any](n int) *lru[K, V] { return &lru[K, V]{n: n, m: map[K]lruEntry[V]{}} }

func (l *lru[K, V]) get(k K) (V, bool) {
	e, ok := l.m[k]
	if ok {
		l.tick++
		e.used = l.tick
		l.m[k] = e
	}
	return e.v, ok
}

func (l *lru[K, V]) put(k K, v V) {
	l.tick++
	if _, ok := l.m[k]; !ok && len(l.m) >= l.n {
		// Drop the least recently used: O(n), once per new entry past the
		// bound (pods come and go far slower than that costs).
		var old K
		oldest := ^uint64(0)
		for k, e := range l.m {
			if e.used < oldest {
				old, oldest = k, e.used
			}
		}
		delete(l.m, old)
	}
	l.m[k] = lruEntry[V]{v, l.tick}
}
