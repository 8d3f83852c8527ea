package main

// tttrace report end to end: a live run of a replica scenario writes its
// report, --save NDJSON, --pprof, --folded and --perfetto; `tttrace report`
// on the saved NDJSON writes them again, and they are the same: the report
// and the NDJSON (events and summary line) byte for byte, the profile but
// for its time stamp, the folded stacks byte for byte, the timeline's
// counters and instants (its track ids are random, its thread names read
// from /proc while tracing).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// outs are the files of one run or replay.
type outs struct{ report, ndjson, pprof, folded, perfetto string }

func outsIn(dir, tag string) outs {
	p := func(n string) string { return filepath.Join(dir, tag+"."+n) }
	return outs{p("report.txt"), p("run.ndjson"), p("mem.pb.gz"), p("mem.folded"), p("mem.pftrace")}
}

func runTool(t *testing.T, bin string, args ...string) int {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		t.Logf("%s %s: exit %d\n%s", filepath.Base(bin), strings.Join(args, " "), ee.ExitCode(), log.String())
		return ee.ExitCode()
	}
	t.Fatalf("%v: %v\n%s", args, err, log.String())
	return -1
}

func TestE2EReport(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	for _, c := range []struct {
		name string
		work []string
	}{
		{"basic", []string{filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak"}},
		{"oom", []string{filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150", "--leak"}},
		{"mesh", []string{filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n300", "--mesh", "--leak"}},
		{"l1-clash", []string{filepath.Join(dir, "ttwork"), "--scenario", "l1", "--leak"}},
		{"trace-hazards", []string{filepath.Join(dir, "ttwork"), "--scenario", "traces"}},
		{"python", []string{"python3", filepath.Join(dir, "ttwork.py"), "--scenario", "mesh", "--leak"}},
		// TT-NN ops (the report's ops section, op_enter and runtime_id
		// lines, each record's op), an OOM inside a device op.
		{"ops", []string{filepath.Join(dir, "ttwork"), "--scenario", "ops", "--leak"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			live, again := outsIn(tmp, "live"), outsIn(tmp, "replay")
			args := []string{"-o", live.report, "--save", live.ndjson, "--pprof", live.pprof, "--folded", live.folded,
				"--perfetto", live.perfetto, "--lib", lib, "--"}
			liveCode := runTool(t, bin, append(args, c.work...)...)
			if liveCode != 0 && liveCode != 134 {
				t.Fatalf("live run: exit %d", liveCode)
			}
			if code := runTool(t, bin, "report", live.ndjson, "-o", again.report, "--pprof", again.pprof, "--folded", again.folded,
				"--perfetto", again.perfetto); code != 0 {
				t.Fatalf("tttrace report: exit %d", code)
			}
			if code := runTool(t, bin, "report", live.ndjson, "--json", "-o", again.ndjson); code != 0 {
				t.Fatalf("tttrace report --json: exit %d", code)
			}
			sameBytes(t, "report", live.report, again.report)
			sameBytes(t, "NDJSON", live.ndjson, again.ndjson)
			sameBytes(t, "folded stacks", live.folded, again.folded) // empty when nothing leaked
			if a, b := profileText(t, live.pprof), profileText(t, again.pprof); a != b {
				t.Errorf("profiles differ:\n%s\n---\n%s", a, b)
			}
			if a, b := timelineText(t, live.perfetto), timelineText(t, again.perfetto); a != b {
				t.Errorf("timelines differ: %s", lineDiff(a, b))
			}
			if !strings.Contains(c.name, "basic") {
				return
			}
			// Summary only (--no-events): the same report from the summary line.
			sumOnly := filepath.Join(tmp, "summary.ndjson")
			if code := runTool(t, bin, "report", live.ndjson, "--json", "--no-events", "-o", sumOnly); code != 0 {
				t.Fatalf("report --no-events: exit %d", code)
			}
			fromSum := filepath.Join(tmp, "fromsummary.txt")
			if code := runTool(t, bin, "report", sumOnly, "-o", fromSum); code != 0 {
				t.Fatalf("report of a summary: exit %d", code)
			}
			sameBytes(t, "report of the summary alone", live.report, fromSum)
			if code := runTool(t, bin, "report", sumOnly, "--pprof", filepath.Join(tmp, "x.pb.gz")); code != 2 {
				t.Errorf("--pprof of a summary alone: exit %d, want 2", code)
			}
		})
	}
}

// A cut, mixed or hostile file: one error naming the line it stopped at.
func TestE2EReportBadFiles(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	saved := filepath.Join(tmp, "run.ndjson")
	if code := runTool(t, bin, "--json", "-o", saved, "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak"); code != 0 {
		t.Fatalf("live run: exit %d", code)
	}
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty piece after the last newline
	n := len(lines)
	for _, c := range []struct {
		name, text, want string
	}{
		{"cut", string(bytes.Join(lines[:n-1], nil)), fmt.Sprintf("line %d: the file ends without its summary line", n-1)},
		{"cut mid-line", string(bytes.Join(lines[:n-1], nil)) + `{"type":"free","seq"`, fmt.Sprintf("line %d: the last line has no end", n)},
		{"two runs", string(b) + string(b), fmt.Sprintf("line %d: a line after the summary line", n+1)},
		{"garbage", string(bytes.Join(lines[:3], nil)) + "\x1b[2J not json\n", "line 4: not a JSON object"},
		{"unknown type", `{"type":"teleport","pid":1}` + "\n", `line 1: a record of unknown type "teleport"`},
		{"long line", `{"type":"site","pid":1,"site":1,"native":[` + strings.Repeat(`{"pc":1},`, 2<<20) + "\n", "line 1: a line longer than 16 MiB"},
	} {
		path := filepath.Join(tmp, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "report", path, "-o", filepath.Join(tmp, "out.txt"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s: %v; stderr %q, want one line with %q", c.name, err, stderr.String(), c.want)
		}
		if strings.Contains(stderr.String(), "\x1b") {
			t.Errorf("%s: a raw escape on stderr", c.name)
		}
	}
}

func sameBytes(t *testing.T, what, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(x, y) {
		return
	}
	xl, yl := strings.Split(string(x), "\n"), strings.Split(string(y), "\n")
	for i := 0; i < max(len(xl), len(yl)); i++ {
		var l, r string
		if i < len(xl) {
			l = xl[i]
		}
		if i < len(yl) {
			r = yl[i]
		}
		if l != r {
			t.Errorf("%s differs from line %d:\nlive:   %.2000s\nreplay: %.2000s", what, i+1, l, r)
			return
		}
	}
}

// profileText is the profile as go's pprof package prints it, without its
// time stamp.
func profileText(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	p.TimeNanos, p.DurationNanos = 0, 0
	if len(p.Sample) == 0 {
		t.Errorf("%s: no samples", path)
	}
	return p.String()
}

// timelineText names every counter sample and instant by its track's path
// (process pid, track names up to it), sorted.
func timelineText(t *testing.T, path string) string {
	t.Helper()
	tl, err := perfettotest.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := func(uuid uint64) string {
		var parts []string
		for tr := tl.Tracks[uuid]; tr != nil; tr = tl.Tracks[tr.Parent] {
			switch {
			case tr.IsProcess:
				parts = append(parts, fmt.Sprintf("pid %d", tr.Pid))
			case tr.IsThread:
				parts = append(parts, fmt.Sprintf("tid %d", tr.Tid))
			default:
				parts = append(parts, tr.Name)
			}
			if tr.Parent == 0 {
				break
			}
		}
		return strings.Join(parts, " < ")
	}
	var out []string
	for uuid, tr := range tl.Tracks {
		for _, s := range tr.Samples {
			out = append(out, fmt.Sprintf("%d %s = %d", s.Ts, name(uuid), s.Value))
		}
	}
	for _, in := range tl.Instants {
		if strings.HasPrefix(in.Name, "lost") {
			continue
		}
		keys := make([]string, 0, len(in.Args))
		for k, v := range in.Args {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("%d %s: %s %v", in.Ts, name(in.Track), in.Name, keys))
	}
	if len(out) == 0 {
		t.Errorf("%s: an empty timeline", path)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// lineDiff lists the lines only one of a and b has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l, n := range ma {
		if mb[l] < n {
			out = append(out, "live only:   "+l)
		}
	}
	for l, n := range mb {
		if ma[l] < n {
			out = append(out, "replay only: "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
