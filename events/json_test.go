package events

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

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
		if got, want := string(appendHex(prefix, "k", v)), `x,"k":"0x`+strconv.FormatUint(v, 16)+`"`; got != want {
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
