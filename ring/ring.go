// Package ring reads a BPF ring buffer map without holding it: the
// tracer's one reader of records.
package ring

// The ring buffer's reader. The kernel maps a BPF ring's data pages twice,
// one copy after the other, so that a record that wraps is contiguous;
// cilium/ebpf's ringbuf.Reader maps all of it (twice the ring) into the
// process, and the kernel inserts every page at mmap time: a 64 MiB ring
// was 128 MiB of the tracer's RSS before the first record (docs/bench.md,
// rows 5). This reader reserves the address space of the doubled data
// and maps into it, at their own places, only the chunks (windowBytes
// each) that hold the consumer's position and the record there, two at a
// time: a chunk behind the consumer is unmapped. Each page of the ring is
// mapped once per pass of the consumer over it (the kernel inserts it at
// mmap time, ~1 µs a page on a loaded VM: ~0.25 ns a byte of records,
// docs/bench.md rows 5), and what the process holds is two chunks,
// whatever the ring's size. The kernel's own allocation of the ring (all
// of it, at map creation) is not the process's and does not change.
//
// The protocol is the kernel's (kernel/bpf/ringbuf.c): each record starts
// with an 8-byte header whose first word is the length with a busy bit
// (reserved, not yet committed) and a discard bit; data is padded to 8
// bytes; positions only grow and are taken modulo the ring's size.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ringHeaderBytes = 8
	ringBusyBit     = 1 << 31
	ringDiscardBit  = 1 << 30
	// windowBytes: the chunk. The consumer's chunk and the next are
	// mapped, so a record of up to windowBytes (the largest, a stack, is
	// ~16 KiB) needs no more; a longer one maps the chunks it spans.
	windowBytes = 1 << 20
)

// ErrFlushed is returned by Ring.Read once the ring was drained after a
// Flush.
var ErrFlushed = errors.New("ring flushed")

// Ring reads a BPF ring buffer map through a moving window of its data.
// One goroutine reads; Flush may be called from any.
type Ring struct {
	mu   sync.Mutex
	fd   int // the map's: not owned
	size uint64
	page uint64
	cons []byte // the consumer position's page (read-write)
	prod []byte // the producer position's page
	// va is the address space of the doubled data (2*size bytes,
	// reserved PROT_NONE); chunks [lo, hi) of it are mapped.
	va     []byte
	lo, hi uint64
	// winBytes is the chunk (windowBytes, or the whole ring when it is
	// smaller).
	winBytes uint64
	epfd     int
	// evfd is Flush's eventfd, in epfd; fdMu guards it against Close (a
	// Flush after Close must not write to a number the fd was reused as).
	fdMu     sync.Mutex
	evfd     int
	events   [2]unix.EpollEvent
	deadline time.Time
	// haveData: the ring is read until empty before the next wait.
	haveData bool
	// pending: the wait's outcome (deadline, flush), returned once the
	// ring is empty.
	pending error
	closed  atomic.Bool
	// awake: the BPF side's reader_awake flag (SetAwakeFlag), or nil;
	// awakeMem: the mapping it is in, when the ring owns it.
	awake    *uint32
	awakeMem []byte
	// moves counts the chunks mapped (tests).
	moves int
}

// New maps the ring buffer map fd of size bytes (a power of two, a
// multiple of the page size) for reading. The fd stays the caller's.
func New(fd int, size int) (*Ring, error) {
	return newRing(fd, size, windowBytes)
}

// newRing is New with a window unit of win bytes (a power of two, a
// multiple of the page size).
func newRing(fd, size, win int) (*Ring, error) {
	page := os.Getpagesize()
	if size < page || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring size %d: not a power of two of at least a page", size)
	}
	r := &Ring{fd: fd, size: uint64(size), page: uint64(page), epfd: -1, evfd: -1}
	r.winBytes = min(uint64(win), r.size)
	ok := false
	defer func() {
		if !ok {
			r.release()
		}
	}()
	var err error
	if r.cons, err = unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("map the ring's consumer page: %w", err)
	}
	if r.prod, err = unix.Mmap(fd, int64(page), page, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("map the ring's producer page: %w", err)
	}
	// The reservation: anonymous, no access, never touched.
	if r.va, err = unix.Mmap(-1, 0, int(2*r.size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err != nil {
		return nil, fmt.Errorf("reserve address space for the ring: %w", err)
	}
	if err := r.mapWindow(r.consPos()&(r.size-1), 0); err != nil {
		return nil, err
	}
	if r.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	for _, f := range []int{fd, r.evfd} {
		if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, f, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f)}); err != nil {
			return nil, fmt.Errorf("epoll add: %w", err)
		}
	}
	ok = true
	return r, nil
}

func (r *Ring) consPos() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.cons[0])))
}

func (r *Ring) prodPos() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.prod[0])))
}

// mapWindow maps the chunks from the one holding off through the one
// holding off+n-1, and at least the next chunk, and unmaps the others.
func (r *Ring) mapWindow(off, n uint64) error {
	lo := off / r.winBytes
	hi := max(lo+2, (off+max(n, 1)-1)/r.winBytes+1)
	hi = min(hi, 2*r.size/r.winBytes)
	for c := r.lo; c < r.hi; c++ {
		if c < lo || c >= hi {
			if err := r.chunk(c, false); err != nil {
				return err
			}
		}
	}
	for c := lo; c < hi; c++ {
		if c < r.lo || c >= r.hi {
			if err := r.chunk(c, true); err != nil {
				r.lo, r.hi = 0, 0 // the state of the others is unknown: remap all next time
				return err
			}
		}
	}
	r.lo, r.hi = lo, hi
	return nil
}

// chunk maps chunk c of the doubled data at its place in va, or puts the
// reservation back there.
func (r *Ring) chunk(c uint64, mapped bool) error {
	addr := unsafe.Pointer(&r.va[c*r.winBytes])
	var err error
	if mapped {
		_, err = unix.MmapPtr(r.fd, int64(2*r.page+c*r.winBytes), addr, uintptr(r.winBytes), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
		r.moves++
	} else {
		_, err = unix.MmapPtr(-1, 0, addr, uintptr(r.winBytes), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	}
	if err != nil {
		return fmt.Errorf("map chunk %d of the ring's data: %w", c, err)
	}
	return nil
}

// at returns the n bytes of data at offset off (below size; off+n at most
// 2*size), mapping the chunks they span when they are not.
func (r *Ring) at(off, n uint64) ([]byte, error) {
	if off < r.lo*r.winBytes || off+n > r.hi*r.winBytes {
		if err := r.mapWindow(off, n); err != nil {
			return nil, err
		}
	}
	return r.va[off : off+n], nil
}

// AwakeFlag is the flag the reader stores in when it sleeps and wakes
// (SetAwakeFlag, SetAwakeMem), nil without one.
func (r *Ring) AwakeFlag() *uint32 { return r.awake }

// SetAwakeFlag gives the ring the BPF programs' reader_awake flag (a
// global in memory shared with the kernel, valid while the ring is open):
// Read clears it just before it sleeps and sets it when it wakes, so the
// programs wake the reader once per sleep instead of once per record
// while it catches up (bpf/tttrace.bpf.c, finish).
func (r *Ring) SetAwakeFlag(p *uint32) {
	r.mu.Lock()
	r.awake = p
	if p != nil {
		atomic.StoreUint32(p, 1)
	}
	r.mu.Unlock()
}

// SetAwakeMem gives the ring the flag at off in mem, a mapping of the
// programs' .bss it unmaps when it closes.
func (r *Ring) SetAwakeMem(mem []byte, off uint64) {
	r.SetAwakeFlag((*uint32)(unsafe.Pointer(&mem[off])))
	r.mu.Lock()
	r.awakeMem = mem
	r.mu.Unlock()
}

// SetDeadline sets when a Read waiting for data returns
// os.ErrDeadlineExceeded; the zero time waits for ever.
func (r *Ring) SetDeadline(t time.Time) {
	r.mu.Lock()
	r.deadline = t
	r.mu.Unlock()
}

// Read copies the next record's data into buf (grown as needed) and
// returns it. It waits until a record is committed or the deadline passes
// (os.ErrDeadlineExceeded), or Flush is called (ErrFlushed); records
// already in the ring are returned before either.
func (r *Ring) Read(buf []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return buf[:0], os.ErrClosed
	}
	for {
		if !r.haveData {
			if err := r.pending; err != nil {
				r.pending = nil
				return buf[:0], err
			}
			if err := r.wait(); errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrFlushed) {
				r.pending = err
			} else if err != nil {
				return buf[:0], err
			}
			r.haveData = true
		}
		rec, ok, err := r.next(buf)
		if err != nil || ok {
			return rec, err
		}
		r.haveData = false
	}
}

// next takes the next committed record, or reports the ring empty (up to
// a record not yet committed: the producer finishes it in a moment, and
// the next read takes it).
func (r *Ring) next(buf []byte) ([]byte, bool, error) {
	for {
		cons, prod := r.consPos(), r.prodPos()
		if cons == prod {
			return buf[:0], false, nil
		}
		if prod-cons < ringHeaderBytes || prod-cons > r.size {
			return buf[:0], false, fmt.Errorf("ring positions inconsistent: consumer %d, producer %d", cons, prod)
		}
		off := cons & (r.size - 1)
		hdr, err := r.at(off, ringHeaderBytes)
		if err != nil {
			return buf[:0], false, err
		}
		// Atomic: the kernel commits with an xchg of this word; the data
		// is visible once the busy bit is seen clear.
		word := atomic.LoadUint32((*uint32)(unsafe.Pointer(&hdr[0])))
		if word&ringBusyBit != 0 {
			return buf[:0], false, nil
		}
		n := uint64(word &^ (ringBusyBit | ringDiscardBit))
		padded := (n + 7) &^ 7
		if ringHeaderBytes+padded > prod-cons {
			return buf[:0], false, fmt.Errorf("ring record of %d bytes past the producer (%d available)", n, prod-cons)
		}
		next := cons + ringHeaderBytes + padded
		if word&ringDiscardBit == 0 {
			data, err := r.at(off+ringHeaderBytes, n)
			if err != nil {
				return buf[:0], false, err
			}
			buf = append(buf[:0], data...)
		}
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.cons[0])), next)
		if word&ringDiscardBit == 0 {
			return buf, true, nil
		}
	}
}

// wait blocks until the ring has data, the deadline passes or Flush is
// called.
func (r *Ring) wait() error {
	if r.awake != nil {
		// Asleep from here: a record committed after the store wakes the
		// reader. One committed between the last read and the store did
		// not; it is seen by the check below (the store is a full barrier,
		// and the kernel's reservation of a record is one too).
		atomic.StoreUint32(r.awake, 0)
		defer atomic.StoreUint32(r.awake, 1)
		if r.consPos() != r.prodPos() {
			return nil
		}
	}
	for {
		timeout := -1
		if !r.deadline.IsZero() {
			d := time.Until(r.deadline)
			if d <= 0 {
				timeout = 0
			} else {
				timeout = int((d + time.Millisecond - 1) / time.Millisecond)
			}
		}
		n, err := unix.EpollWait(r.epfd, r.events[:], timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the ring: %w", err)
		}
		if n == 0 {
			if timeout == 0 || !time.Now().Before(r.deadline) {
				return os.ErrDeadlineExceeded
			}
			continue
		}
		for _, ev := range r.events[:n] {
			if int(ev.Fd) == r.evfd {
				var b [8]byte
				_, _ = unix.Read(r.evfd, b[:])
				if r.closed.Load() {
					return os.ErrClosed
				}
				return ErrFlushed
			}
		}
		return nil
	}
}

// Flush makes a waiting Read (or the next one) return what the ring holds
// and then ErrFlushed.
func (r *Ring) Flush() error {
	r.fdMu.Lock()
	defer r.fdMu.Unlock()
	if r.evfd < 0 {
		return os.ErrClosed
	}
	var one = [8]byte{1}
	_, err := unix.Write(r.evfd, one[:])
	return err
}

// Resident is how many bytes of the ring the process maps now.
func (r *Ring) Resident() int {
	return len(r.cons) + len(r.prod) + int((r.hi-r.lo)*r.winBytes)
}

// Close unmaps the ring; a waiting Read returns.
func (r *Ring) Close() error {
	if r == nil || r.closed.Swap(true) {
		return nil
	}
	_ = r.Flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.release()
}

func (r *Ring) release() error {
	r.awake = nil
	var errs []error
	if r.awakeMem != nil {
		errs = append(errs, unix.Munmap(r.awakeMem))
		r.awakeMem = nil
	}
	for _, m := range [][]byte{r.cons, r.prod, r.va} {
		if m != nil {
			errs = append(errs, unix.Munmap(m))
		}
	}
	r.cons, r.prod, r.va = nil, nil, nil
	r.fdMu.Lock()
	for _, f := range []int{r.epfd, r.evfd} {
		if f >= 0 {
			errs = append(errs, unix.Close(f))
		}
	}
	r.epfd, r.evfd = -1, -1
	r.fdMu.Unlock()
	return errors.Join(errs...)
}
