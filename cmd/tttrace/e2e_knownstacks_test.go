package main

// Known stacks end to end (bpf/stack.h, docs/stacks.md): by default
// (--known-stacks) a stack the kernel was told of comes as a token instead
// of a copy. With --check-known-stacks every such stack also comes with its copy, which
// tttrace unwinds and compares with the stack its token names: no
// workload may have two different stacks behind one key. And the sites of
// a run with known stacks equal those of a run that copies every stack.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// knownScript calls the replica from Python on different paths: at several
// recursion depths and from two functions, each allocating on the basic
// scenario's lines (and leaking, so every site is in the summary).
const knownScript = pyLibScript + `def work():
    enc = [b"ttwork", b"--scenario", b"basic", b"--leak"]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    assert lib.ttwork_main(len(enc), argv) == 0
def deep(n):
    if n == 0:
        work()
    else:
        deep(n - 1)
def path_a():
    work()
def path_b():
    work()
for d in (0, 3, 40, 3):
    deep(d)
path_a(); path_b(); path_a()
time.sleep(1)  # tttrace reads the maps of a process it sees load a library
`

var knownCounts = regexp.MustCompile(`known stacks checked: (\d+) copied, (\d+) known, (\d+) checked, (\d+) wrong`)

// knownCountsOf reads the known-stack counts of a --check-known-stacks
// run's log: stacks copied, known, checked and wrong.
func knownCountsOf(t *testing.T, log string) (copied, known, checked, wrong uint64) {
	t.Helper()
	n := logCounts(t, knownCounts, "known-stack", log)
	return n[0], n[1], n[2], n[3]
}

// logCounts reads the numbers re's groups match in log, what counts
// (what re matches) names them, failing the test without them.
func logCounts(t *testing.T, re *regexp.Regexp, what, log string) []uint64 {
	t.Helper()
	m := re.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no %s counts in the log:\n%s", what, log)
	}
	n := make([]uint64, len(m)-1)
	for i := range n {
		n[i], _ = strconv.ParseUint(m[i+1], 10, 64)
	}
	return n
}

// traceKnown runs tttrace with flags on target and returns its summary and
// log.
func traceKnown(t *testing.T, lib string, flags []string, target []string) (*devices.Summary, string) {
	t.Helper()
	bin, _ := setup(t)
	out := filepath.Join(t.TempDir(), "out.ndjson")
	args := append(append([]string{"--json", "--no-events", "-o", out, "--lib", lib}, flags...), append([]string{"--"}, target...)...)
	var log bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, log.String())
	}
	return lastSummary(t, out), log.String()
}

func TestE2EKnownStacks(t *testing.T) {
	_, replica := setup(t)
	script := filepath.Join(t.TempDir(), "known.py")
	if err := os.WriteFile(script, []byte(knownScript), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, variant string
		target        []string
	}{
		{"threads", "gcc-O2", []string{"ttwork", "--scenario", "threads", "--events", "20000"}},
		{"all", "gcc-O2", []string{"ttwork", "--scenario", "all"}},
		{"threads-clang", "clang-O3", []string{"ttwork", "--scenario", "threads", "--events", "20000"}},
		// Tracker calls inlined: the stack is taken at the lifecycle
		// plan's probes (lc_alloc_exit, lc_create_exit), not track_allocate.
		{"threads-inline", "inline-gcc-O2", []string{"ttwork", "--scenario", "threads", "--events", "20000"}},
		// Bursts long enough that the first stacks are learnt while they
		// run, also when tttrace starts slowly (a loaded CI machine: with
		// 4000 events, a run once learnt none).
		{"cet", "cet-gcc-O2", []string{"ttwork", "--scenario", "burst", "--events", "20000"}},
		{"python", "gcc-O2", []string{"python3", script}},
		{"hold", "gcc-O2", []string{"ttwork", "--scenario", "hold", "--events", "20000", "--leak"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(replica, c.variant)
			target := slices.Clone(c.target)
			if target[0] == "ttwork" {
				target[0] = filepath.Join(dir, "ttwork")
			} else {
				target = append(target, dir)
			}
			lib := filepath.Join(dir, "libtt_metal.so")
			_, log := traceKnown(t, lib, []string{"--check-known-stacks"}, target)
			copied, known, checked, wrong := knownCountsOf(t, log)
			t.Logf("%d stacks copied, %d known (%.1f%% known), %d checked", copied, known, 100*float64(known)/float64(max(copied+known, 1)), checked)
			if wrong != 0 {
				t.Errorf("%d known stacks unwind to another stack than their token's:\n%s", wrong, log)
			}
			if c.name == "python" && checked != known || c.name != "python" && (known == 0 || checked != known) {
				t.Errorf("%d known stacks, %d checked: the check did not run", known, checked)
			}
			if c.name != "hold" {
				return
			}
			// The same sites with known stacks as with every stack copied.
			sameLeakSites(t, lib, target)
		})
	}
}

// sameLeakSites traces target with every stack copied
// (--known-stacks=false) and with known stacks (the default): the leak
// sites must be the same. It returns them, and the summary of the run
// with known stacks.
func sameLeakSites(t *testing.T, lib string, target []string) ([]string, *devices.Summary) {
	t.Helper()
	ref, _ := traceKnown(t, lib, []string{"--known-stacks=false"}, target)
	got, _ := traceKnown(t, lib, nil, target)
	a, b := leakSites(t, ref), leakSites(t, got)
	if !slices.Equal(a, b) {
		t.Errorf("leak sites differ:\nevery stack copied:\n%s\nknown stacks:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	return a, got
}

// leakSites lists each leak of the traced process with its site, as
// names (no addresses: they change between runs), sorted.
func leakSites(t *testing.T, sum *devices.Summary) []string {
	t.Helper()
	var out []string
	for i := range sum.Processes {
		p := &sum.Processes[i]
		if len(p.Leaks) == 0 {
			continue
		}
		sites := map[uint32]*devices.Site{}
		for j := range p.Sites {
			sites[p.Sites[j].Site] = &p.Sites[j]
		}
		for _, lk := range p.Leaks {
			var b strings.Builder
			fmt.Fprintf(&b, "%s %d:", lk.Type, lk.Size)
			s := sites[lk.Site]
			if s == nil {
				t.Errorf("leak %+v has no site", lk)
				continue
			}
			for _, f := range s.Native {
				fmt.Fprintf(&b, " %s:%s+%#x", filepath.Base(f.Module), f.Function, f.Offset)
			}
			for _, f := range s.Python {
				fmt.Fprintf(&b, " py:%s:%s:%d", f.Function, filepath.Base(f.File), f.Line)
			}
			if s.Truncated {
				b.WriteString(" (truncated)")
			}
			out = append(out, b.String())
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Error("no leaks with sites")
	}
	return out
}
