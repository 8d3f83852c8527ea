package events

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/appendjson.golden")

// goldenEvents is a fixed pseudo-random set of events of every kind,
// device kind and buffer type (valid or not), with the optional fields on
// and off, and numbers of every length.
func goldenEvents() []Event {
	rng := rand.New(rand.NewPCG(11, 12))
	num := func() uint64 { return rng.Uint64() >> rng.IntN(64) }
	kinds := []Kind{KindAlloc, KindFree, KindView, KindCBAlloc, KindCBFree, KindCBLayout, KindCBTeardown,
		KindProgramDestroy, KindDeviceClose, KindMeshClose, KindMarkDeallocated, KindLinkMap, KindFork,
		KindMainExit, KindLost, KindExit}
	var evs []Event
	for i := 0; i < 1200; i++ {
		e := Event{Seq: num(), TsNs: num(), Pid: uint32(num()), Tid: uint32(num()), Kind: kinds[i%len(kinds)],
			Object: num(), Device: num(), DeviceVptr: num(), DeviceKind: DeviceKind(rng.IntN(5)),
			Chip: int32(num()), BufferType: BufferType(rng.IntN(7) - 1), Address: num(), Size: num(), PageSize: num(),
			Hooked: rng.IntN(2) == 0, OwnsData: rng.IntN(2) == 0, Status: uint8(num()), Global: rng.IntN(2) == 0,
			ReadError: rng.IntN(4) == 0, ExitCode: int(int32(num())), ExitSignal: rng.IntN(65)}
		if rng.IntN(3) == 0 {
			e.LostBefore = num()
		}
		if e.Kind == KindFork {
			e.ParentPid = uint32(e.Object)
		}
		evs = append(evs, e)
	}
	// Program dispatches, and CBs with their core ranges: unknown, none,
	// up to CoreRangeMax, or more than a record carries.
	for i := 0; i < 240; i++ {
		e := Event{Seq: num(), TsNs: num(), Pid: uint32(num()), Tid: uint32(num()), Kind: KindProgramDispatch,
			Object: num(), Device: num(), DeviceVptr: num(), DeviceKind: DeviceKind(rng.IntN(5)), Chip: int32(num()),
			BufferType: -1, ReadError: rng.IntN(4) == 0}
		if i%2 == 1 {
			e.Kind, e.Object, e.Address, e.Size, e.Global = KindCBAlloc, 0, num(), num(), rng.IntN(2) == 0
			if n := rng.IntN(CoreRangeMax + 3); i%6 != 1 {
				e.RangesKnown, e.NumRanges = true, uint32(min(n, CoreRangeMax))
				if n > CoreRangeMax {
					e.NumRanges, e.RangesTruncated = uint32(CoreRangeMax)+1+uint32(num()>>34), true
				}
				for j := range e.Ranges() {
					e.CoreRanges[j] = CoreRange{X0: uint16(num()), Y0: uint16(num()), X1: uint16(num()), Y1: uint16(num())}
				}
			}
		}
		evs = append(evs, e)
	}
	return evs
}

// The NDJSON encoding byte for byte: a change of format shows here (and
// needs -update), a faster encoder must reproduce it exactly.
func TestAppendJSONGolden(t *testing.T) {
	var out []byte
	for _, e := range goldenEvents() {
		out = AppendJSON(out, &e)
	}
	const path = "testdata/appendjson.golden"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		got := bytes.Split(out, []byte("\n"))
		exp := bytes.Split(want, []byte("\n"))
		for i := range min(len(got), len(exp)) {
			if !bytes.Equal(got[i], exp[i]) {
				t.Fatalf("line %d:\n got %s\nwant %s", i+1, got[i], exp[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(got), len(exp))
	}
}

// The in-place number formatting of AppendJSON must match strconv exactly.
func TestAppendNumbers(t *testing.T) {
	vals := []uint64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, math.MaxUint32, math.MaxUint64, math.MaxUint64 - 1, 1 << 63}
	for p := uint64(1); p <= 1e19 && p != 0; p *= 10 {
		vals = append(vals, p-1, p, p+1)
		if p > math.MaxUint64/10 {
			break
		}
	}
	for b := 0; b < 64; b++ {
		vals = append(vals, 1<<b, 1<<b-1, 1<<b+1)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		vals = append(vals, rng.Uint64()>>rng.IntN(64))
	}
	prefix := []byte("x")
	for _, v := range vals {
		if got, want := string(appendUint(prefix, v)), "x"+strconv.FormatUint(v, 10); got != want {
			t.Fatalf("appendUint(%d) = %q, want %q", v, got, want)
		}
		if got, want := string(appendHex(prefix, `,"k":"0x`, v)), `x,"k":"0x`+strconv.FormatUint(v, 16)+`"`; got != want {
			t.Fatalf("appendHex(%d) = %q, want %q", v, got, want)
		}
		for _, s := range []int64{int64(v), -int64(v)} {
			if got, want := string(appendInt(prefix, s)), "x"+strconv.FormatInt(s, 10); got != want {
				t.Fatalf("appendInt(%d) = %q, want %q", s, got, want)
			}
		}
	}
	for _, s := range []int64{math.MinInt64, math.MaxInt64, -1, math.MinInt32} {
		if got, want := string(appendInt(nil, s)), strconv.FormatInt(s, 10); got != want {
			t.Fatalf("appendInt(%d) = %q, want %q", s, got, want)
		}
	}
}

func FuzzAppendUint(f *testing.F) {
	f.Add(uint64(0))
	f.Add(uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, v uint64) {
		if got, want := string(appendUint(nil, v)), strconv.FormatUint(v, 10); got != want {
			t.Fatalf("appendUint(%d) = %q, want %q", v, got, want)
		}
	})
}

// A kind without a name still encodes as an event from BPF.
func TestAppendJSONUnknownKind(t *testing.T) {
	e := Event{Kind: Kind(99), Seq: 5, TsNs: 6, Pid: 7, Tid: 8, DeviceKind: DeviceKind(9)}
	want := `{"type":"kind(99)","seq":5,"ts_ns":6,"pid":7,"tid":8}` + "\n"
	if got := string(AppendJSON(nil, &e)); got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}
