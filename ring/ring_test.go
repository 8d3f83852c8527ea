package ring

import (
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tttrace/tttrace/probes/probestest"
)

// ringWriter runs small BPF programs (BPF_PROG_TEST_RUN) that write records
// into a real ring buffer map: each record's first 8 bytes are a sequence
// number from a counter map, the rest a pattern of its length, so a reader
// can be checked against what was written.
type ringWriter struct {
	ring, counter *ebpf.Map
	progs         map[int]*ebpf.Program // by record length; -1: a discarded record
}

func newRingWriter(t *testing.T, size int) *ringWriter {
	t.Helper()
	probestest.RequireRoot(t)
	ring, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: uint32(size)})
	if err != nil {
		t.Fatalf("ring map: %v", err)
	}
	t.Cleanup(func() { ring.Close() })
	counter, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatalf("counter map: %v", err)
	}
	t.Cleanup(func() { counter.Close() })
	return &ringWriter{ring: ring, counter: counter, progs: map[int]*ebpf.Program{}}
}

// pattern is the 8 bytes at index i (i > 0) of a record of n bytes.
func pattern(n, i int) uint64 { return uint64(n)<<32 | uint64(i) }

// program writes records of n bytes: from the stack
// with bpf_ringbuf_output up to 512 bytes, reserved and submitted above;
// n == -1 reserves 16 bytes and discards them. Above 512, n is a
// multiple of 8.
func (w *ringWriter) program(t *testing.T, n int) *ebpf.Program {
	if p := w.progs[n]; p != nil {
		return p
	}
	// r7 = ++counter[0]
	in := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, w.counter.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.LoadMem(asm.R7, asm.R0, 0, asm.DWord),
	}
	switch {
	case n == -1:
		in = append(in,
			asm.LoadMapPtr(asm.R1, w.ring.FD()),
			asm.Mov.Imm(asm.R2, 16),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(asm.R1, asm.R0),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRingbufDiscard.Call(),
		)
	case n <= 512:
		base := int16(-512)
		in = append(in, asm.StoreMem(asm.RFP, base, asm.R7, asm.DWord))
		for i := 1; i < (n+7)/8; i++ {
			in = append(in,
				asm.LoadImm(asm.R1, int64(pattern(n, i)), asm.DWord),
				asm.StoreMem(asm.RFP, base+int16(8*i), asm.R1, asm.DWord))
		}
		in = append(in,
			asm.LoadMapPtr(asm.R1, w.ring.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, int32(base)),
			asm.Mov.Imm(asm.R3, int32(n)),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
		)
	default:
		// Reserved: the sequence number first, the pattern in the last 8
		// bytes (the rest is whatever the ring held).
		in = append(in,
			asm.LoadMapPtr(asm.R1, w.ring.FD()),
			asm.Mov.Imm(asm.R2, int32(n)),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.StoreMem(asm.R0, 0, asm.R7, asm.DWord),
			asm.LoadImm(asm.R1, int64(pattern(n, n/8-1)), asm.DWord),
			asm.StoreMem(asm.R0, int16(n-8), asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.R0),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRingbufSubmit.Call(),
		)
	}
	in = append(in, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: in})
	if err != nil {
		t.Fatalf("program for %d bytes: %v", n, err)
	}
	t.Cleanup(func() { p.Close() })
	w.progs[n] = p
	return p
}

// newTestRing makes a ring of size bytes, its writer and its reader,
// closed when the test ends (Close may also be called earlier).
func newTestRing(t *testing.T, size int) (*ringWriter, *Ring) {
	t.Helper()
	w := newRingWriter(t, size)
	r, err := New(w.ring.FD(), size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return w, r
}

// write writes one record of n bytes (-1: a discarded one).
func (w *ringWriter) write(t *testing.T, n int) {
	t.Helper()
	if _, err := w.program(t, n).Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// check checks a record read against what the writer wrote: its length,
// the sequence number expected, the pattern.
func checkRecord(t *testing.T, rec []byte, n int, seq uint64) {
	t.Helper()
	if len(rec) != n {
		t.Fatalf("record %d: %d bytes, wrote %d", seq, len(rec), n)
	}
	if got := binary.LittleEndian.Uint64(rec); got != seq {
		t.Fatalf("record of %d bytes: sequence %d, want %d", n, got, seq)
	}
	for i := 1; i < n/8; i++ {
		if n > 512 && i != n/8-1 {
			continue
		}
		if got := binary.LittleEndian.Uint64(rec[8*i:]); got != pattern(n, i) {
			t.Fatalf("record %d of %d bytes: word %d is %#x, want %#x", seq, n, i, got, pattern(n, i))
		}
	}
}

// TestRingWindow writes many times the ring's size in records of mixed
// lengths (some wrapping the ring's end, some longer than the window's
// unit, some discarded), reads them through a window of one page, and
// checks every record in order, that the window moved, and that the
// process never mapped more than the window.
func TestRingWindow(t *testing.T) {
	const size, win = 64 << 10, 4096
	w := newRingWriter(t, size)
	r, err := newRing(w.ring.FD(), size, win)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	page := os.Getpagesize()
	lengths := []int{8, 20, 72, 512, 136, -1, 8200, 52, 320, 13000, 44}
	var seq uint64
	var buf []byte
	maxRes := 0
	for batch := range 40 {
		var want []int
		for i := range 9 {
			n := lengths[(batch*7+i)%len(lengths)]
			w.write(t, n)
			seq++
			if n >= 0 {
				want = append(want, n)
			}
		}
		// the sequence number of this batch's first record
		s := seq - 9 + 1
		got := 0
		for got < len(want) {
			r.SetDeadline(time.Now().Add(time.Second))
			buf, err = r.Read(buf)
			if err != nil {
				t.Fatalf("batch %d: read %d of %d: %v", batch, got, len(want), err)
			}
			// skip the sequence numbers of discarded records
			for binary.LittleEndian.Uint64(buf) != s && s < seq {
				s++
			}
			checkRecord(t, buf, want[got], s)
			s++
			got++
			maxRes = max(maxRes, r.Resident())
		}
		r.SetDeadline(time.Now().Add(5 * time.Millisecond))
		if buf, err = r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("batch %d: read on an empty ring: %d bytes, %v; want the deadline", batch, len(buf), err)
		}
	}
	if r.moves < 10 {
		t.Errorf("the window moved %d times over %d records of %d-byte ring", r.moves, seq, size)
	}
	// Two pages of positions, and the window: 2 units, or as many as the
	// longest record needs beyond its start's unit.
	if limit := 2*page + 2*win + 13000 + win; maxRes > limit {
		t.Errorf("mapped up to %d bytes of a %d-byte ring, want at most %d", maxRes, size, limit)
	}
}

// TestRingFlush: a Read waiting on an empty ring returns ErrFlushed after
// Flush, records written before it first.
func TestRingFlush(t *testing.T) {
	const size = 16 << 10
	w, r := newTestRing(t, size)
	w.write(t, 24)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	r.SetDeadline(time.Time{})
	buf, err := r.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRecord(t, buf, 24, 1)
	if _, err := r.Read(buf); !errors.Is(err, ErrFlushed) {
		t.Fatalf("after the record: %v, want ErrFlushed", err)
	}
	done := make(chan error)
	go func() {
		_, err := r.Read(buf)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = r.Flush()
	select {
	case err := <-done:
		if !errors.Is(err, ErrFlushed) {
			t.Fatalf("waiting read: %v, want ErrFlushed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Flush did not end a waiting Read")
	}
	// A ring of the whole data once over (smaller than a window unit) is
	// mapped once: its two copies.
	if got, want := r.Resident(), 2*os.Getpagesize()+2*size; got != want {
		t.Errorf("resident %d, want %d", got, want)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := r.Flush(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Flush after Close: %v, want os.ErrClosed", err)
	}
	if _, err := r.Read(nil); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v, want os.ErrClosed", err)
	}
}

// TestRingAwakeFlag checks the reader's side of the wake-up flag: set
// while it reads, cleared while it sleeps on an empty ring, set again when
// a record wakes it, and no longer touched after Close.
func TestRingAwakeFlag(t *testing.T) {
	const size = 16 << 10
	w, r := newTestRing(t, size)
	var flag uint32
	r.SetAwakeFlag(&flag)
	if got := atomic.LoadUint32(&flag); got != 1 {
		t.Fatalf("flag %d after SetAwakeFlag, want 1 (the reader is awake)", got)
	}
	done := make(chan []byte)
	go func() {
		buf, err := r.Read(nil)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		done <- buf
	}()
	deadline := time.Now().Add(5 * time.Second)
	for atomic.LoadUint32(&flag) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flag was not cleared while the reader waits on an empty ring")
		}
		time.Sleep(time.Millisecond)
	}
	w.write(t, 24)
	select {
	case buf := <-done:
		checkRecord(t, buf, 24, 1)
	case <-time.After(5 * time.Second):
		t.Fatal("the record did not wake the reader")
	}
	if got := atomic.LoadUint32(&flag); got != 1 {
		t.Fatalf("flag %d after the reader woke, want 1", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint32(&flag, 7)
	if _, err := r.Read(nil); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if got := atomic.LoadUint32(&flag); got != 7 {
		t.Fatalf("Read after Close wrote the flag (%d)", got)
	}
}
