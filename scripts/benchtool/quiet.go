package main

// Whether the machine was quiet, and whether a row can be trusted (issue
// #33, part 4): the machine is shared and the same binary's runs move
// with what else runs, so the table says what else ran (the CPU time the
// bench did not use, from /proc/stat, and the load averages before and
// after) and flags each row whose rounds disagree by more than
// spreadLimit.

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// spreadLimit: a row whose rounds spread more than this, (max - min) over
// their median, is flagged: its median is not a figure to compare on its
// own.
const spreadLimit = 0.20

// spreadMark begins the flag of such a row.
const spreadMark = "⚠ **rounds spread"

// quietLimit: the machine was quiet if other work took at most this
// share of its CPUs, in the seconds before the bench and during it.
const quietLimit = 0.10

// spread is (max - min) / |median| of the rounds' values; 0 for fewer
// than two values or a median of 0.
func spread(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	m := math.Abs(median(v))
	if m == 0 {
		return 0
	}
	lo, hi := minMax(v)
	return (hi - lo) / m
}

// spreadFlag is what a row adds to its figure when the rounds of any of
// its values spread more than spreadLimit (nothing otherwise).
func spreadFlag(vs ...[]float64) string {
	worst := 0.0
	for _, v := range vs {
		worst = max(worst, spread(v))
	}
	if worst <= spreadLimit {
		return ""
	}
	return fmt.Sprintf("; %s %.0f%%** (> %.0f%%)", spreadMark, worst*100, spreadLimit*100)
}

// cpuTimes is the machine's CPU time from /proc/stat's "cpu" line, in
// seconds: busy (user, nice, system, irq, softirq, steal: guest time is
// in user) and all (busy, idle and iowait).
type cpuTimes struct{ busy, all float64 }

// parseProcStat reads the "cpu" line of /proc/stat's text (hz: its
// ticks per second).
func parseProcStat(text string, hz float64) (cpuTimes, error) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: %q: %w", f[i+1], err)
			}
			v[i] = n
		}
		// user nice system idle iowait irq softirq steal
		busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		return cpuTimes{busy: float64(busy) / hz, all: float64(busy+v[3]+v[4]) / hz}, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat has no cpu line")
}

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux
// architecture tttrace runs on (the kernel's ABI, whatever CONFIG_HZ).
const userHZ = 100

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseProcStat(string(b), userHZ)
}

// ownCPU is the CPU time of this process and of its children that were
// waited for (every run the bench makes), in seconds.
func ownCPU() float64 {
	var s float64
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if unix.Getrusage(who, &ru) == nil {
			s += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		}
	}
	return s
}

// otherShare is the share of the machine's CPU time that went to other
// work than ours between two samples (ours: the CPU time of this process
// and its children grew by own).
func otherShare(a, b cpuTimes, own float64) float64 {
	all := b.all - a.all
	if all <= 0 {
		return 0
	}
	return max(0, (b.busy-a.busy-own)/all)
}

// quietMeter measures what else ran: before (a pause before the bench),
// during (the whole bench).
type quietMeter struct {
	start    cpuTimes
	startOwn float64
	ok       bool
}

// sampleOther returns the share of the CPUs other work used during d, in
// which this process does nothing (-1 if /proc/stat cannot be read).
func sampleOther(d time.Duration) float64 {
	a, err := readCPUTimes()
	if err != nil {
		return -1
	}
	own := ownCPU()
	time.Sleep(d)
	b, err := readCPUTimes()
	if err != nil {
		return -1
	}
	return otherShare(a, b, ownCPU()-own)
}

func (q *quietMeter) begin() {
	var err error
	q.start, err = readCPUTimes()
	q.startOwn, q.ok = ownCPU(), err == nil
}

// end is the share of the CPUs other work used since begin (-1 if
// unknown).
func (q *quietMeter) end() float64 {
	b, err := readCPUTimes()
	if err != nil || !q.ok {
		return -1
	}
	return otherShare(q.start, b, ownCPU()-q.startOwn)
}

// quietVerdict says whether the machine was quiet, from the shares of
// the CPUs other work used before and during the bench.
func quietVerdict(before, during float64) string {
	pct := func(x float64) string {
		if x < 0 {
			return "?"
		}
		return fmt.Sprintf("%.0f%%", x*100)
	}
	s := fmt.Sprintf("other work used %s of the CPUs in the %.0f s before the bench and %s during it", pct(before), quietPause.Seconds(), pct(during))
	if before < 0 || during < 0 {
		return s + ": whether the machine was quiet is not known"
	}
	if before <= quietLimit && during <= quietLimit {
		return s + fmt.Sprintf(": **quiet** (≤ %.0f%%)", quietLimit*100)
	}
	return s + fmt.Sprintf(": **not quiet** (> %.0f%%): compare figures of this run with each other, not with other runs", quietLimit*100)
}

// quietPause is how long the bench looks at the machine before it starts.
const quietPause = 3 * time.Second
