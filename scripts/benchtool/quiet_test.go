package main

import (
	"math"
	"strings"
	"testing"
)

// TestSpread: the rounds' spread against values worked by hand, and the
// flag only past 20%.
func TestSpread(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
		flag bool
	}{
		{nil, 0, false},
		{[]float64{1.7}, 0, false},
		{[]float64{1.0, 1.1, 1.2}, 0.2 / 1.1, false},        // 18%
		{[]float64{1.0, 1.25, 1.1}, 0.25 / 1.1, true},       // 23%
		{[]float64{2.0, 3.0}, 1.0 / 2.5, true},              // even count: the median is the mean of the middle two
		{[]float64{-0.1, -0.12, -0.11}, 0.02 / 0.11, false}, // a negative added cost: over |median|
		{[]float64{0, 0, 0}, 0, false},
	} {
		got := spread(c.v)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("spread(%v) = %v, want %v", c.v, got, c.want)
		}
		f := spreadFlag(c.v)
		if (f != "") != c.flag || (c.flag && !strings.Contains(f, spreadMark)) {
			t.Errorf("spreadFlag(%v) = %q, want flagged: %v", c.v, f, c.flag)
		}
	}
	// Any of the values of a row.
	if spreadFlag([]float64{1, 1}, []float64{1, 2}) == "" {
		t.Error("a row's second value spread 67% and was not flagged")
	}
}

// TestOtherShare: /proc/stat's cpu line read as the kernel writes it
// (proc(5): user nice system idle iowait irq softirq steal guest
// guest_nice, in USER_HZ), and the others' share of two samples.
func TestOtherShare(t *testing.T) {
	a, err := parseProcStat("cpu  1000 0 500 8000 100 10 20 70 300 0\ncpu0 500 0 250 4000 50 5 10 35 150 0\nintr 1\n", 100)
	if err != nil {
		t.Fatal(err)
	}
	// busy = 1000+0+500+10+20+70 = 1600 ticks, all = busy + 8000 + 100.
	if a.busy != 16 || a.all != 97 {
		t.Fatalf("first sample: busy %v s, all %v s; want 16, 97", a.busy, a.all)
	}
	// 10 s on 2 CPUs later: 6 s more busy, of which 4.5 s ours.
	b, err := parseProcStat("cpu  1400 0 700 9400 100 10 20 70 300 0\n", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := otherShare(a, b, 4.5); math.Abs(got-0.075) > 1e-9 {
		t.Errorf("other share %v, want 0.075 (1.5 s of 20)", got)
	}
	if got := otherShare(a, b, 7); got != 0 {
		t.Errorf("more of ours than was busy (rounding): %v, want 0", got)
	}
	if _, err := parseProcStat("intr 1\n", 100); err == nil {
		t.Error("no cpu line: no error")
	}
	if _, err := parseProcStat("cpu  1 x 3 4 5 6 7 8\n", 100); err == nil {
		t.Error("a field that is no number: no error")
	}
}

// TestQuietVerdict: quiet only when both shares are known and at most
// quietLimit.
func TestQuietVerdict(t *testing.T) {
	for _, c := range []struct {
		before, during float64
		want           string
	}{
		{0.02, 0.05, "**quiet**"},
		{0.02, 0.30, "**not quiet**"},
		{0.40, 0.01, "**not quiet**"},
		{-1, 0.01, "not known"},
	} {
		if got := quietVerdict(c.before, c.during); !strings.Contains(got, c.want) {
			t.Errorf("quietVerdict(%v, %v) = %q, want it to say %s", c.before, c.during, got, c.want)
		}
	}
}
