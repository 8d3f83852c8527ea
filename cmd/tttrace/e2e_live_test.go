package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// liveBytes formats a byte count as people read it, written here
// independently of tttrace's own formatter.
func liveBytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v := float64(n) / 1024
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// TestE2ELiveView: tttrace -p in a real terminal (a tmux pane of a known
// width) while the workload holds its memory: the live view's bars carry,
// chip by chip and type by type, exactly the replica's truth, and no line
// is wider than the terminal. Scenarios mesh and cb_cache (programs whose
// CBs are resident per core): under each CB row, the note names the bytes
// as the busiest core's and, where they differ, shows what the programs
// registered, the truth's cb_registered_bytes; galaxy's 32 chips in a pane
// tall enough for their full blocks (TestE2ELiveViewGalaxy: in one that is
// not).
func TestE2ELiveView(t *testing.T) {
	for _, tc := range []struct {
		scenario      string
		width, height int
	}{{"mesh", 96, 120}, {"cb_cache", 96, 120}, {"galaxy", 120, 400}} {
		t.Run(tc.scenario, func(t *testing.T) { liveView(t, tc.scenario, tc.width, tc.height) })
	}
}

func liveView(t *testing.T, scenario string, width, height int) {
	bin, replica := setup(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tmux is not installed (scripts/deps.sh test installs it)")
		}
		t.Skip("no tmux")
	}
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	goFile, holdFile, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "hold"), filepath.Join(tmp, "truth")
	ready, report := filepath.Join(tmp, "ready"), filepath.Join(tmp, "report")
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", scenario, "--leak", "--truth", truthPath,
		"--go-file", goFile, "--hold-file", holdFile)
	defer touch(t, holdFile)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	session := fmt.Sprintf("tttrace-live-%d", os.Getpid())
	cmd := fmt.Sprintf("%s -p %d -o %s --interval 100ms --ready-file %s", bin, w.Process.Pid, report, ready)
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), cmd).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
	touch(t, goFile)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding")
	tr := readTruth(t, truthPath)
	var screen string
	want := 0
	for _, d := range tr.Devices {
		if d.LiveBuffers > 0 {
			want++
		}
	}
	// Parse "  chip N (...) ..." and its bars "    TYPE  ###|  CUR  peak  PEAK".
	chipRe := regexp.MustCompile(`^  chip (\d+) \([^)]*\)  (\d+) buffer\(s\)`)
	barRe := regexp.MustCompile(`^    (\S+)\s+#*-*\|\s+(.+?)\s+peak\s+(.+)$`)
	// Under a CB row: "resident on the busiest core (X,Y)", or "none
	// resident", then "; programs registered BYTES" where they differ.
	noteRe := regexp.MustCompile(`^ {13}(?:none resident|resident on the busiest core \(\d+,\d+\))(?:; programs registered (.+))?$`)
	// compare lists how screen differs from the truth.
	compare := func(screen string) (problems []string, checked, registered int) {
		got := map[string]string{}
		chip, prev := "", ""
		for _, line := range strings.Split(screen, "\n") {
			line = strings.TrimRight(line, " ") // tmux pads what a longer line drew before
			if m := chipRe.FindStringSubmatch(line); m != nil {
				chip = m[1]
				got[chip+"/buffers"] = m[2]
			} else if m := barRe.FindStringSubmatch(line); m != nil && chip != "" {
				got[chip+"/"+m[1]] = m[2]
			} else if m := noteRe.FindStringSubmatch(line); m != nil && chip != "" && prev == "CB" {
				got[chip+"/CB note"] = "yes"
				got[chip+"/CB registered"] = m[1]
			}
			prev = ""
			if m := barRe.FindStringSubmatch(line); m != nil {
				prev = m[1]
			}
		}
		for _, d := range tr.Devices {
			id := strconv.Itoa(int(d.Device))
			for name, v := range map[string]uint64{"DRAM": d.DRAMBytes, "L1": d.L1Bytes, "L1_SMALL": d.L1SmallBytes,
				"TRACE": d.TraceBytes, "SYSMEM": d.SystemMemoryBytes, "CB": d.CBBytes} {
				g, drawn := got[id+"/"+name]
				switch {
				case v > 0 && g != liveBytes(v):
					problems = append(problems, fmt.Sprintf("chip %s %s: the live view shows %q, the truth is %s", id, name, g, liveBytes(v)))
				case v == 0 && drawn && g != "0 B":
					problems = append(problems, fmt.Sprintf("chip %s %s: the live view shows %q, the truth is 0", id, name, g))
				}
				if v > 0 {
					checked++
				}
			}
			if d.Peaks["cb_bytes"] > 0 || d.Peaks["cb_registered_bytes"] > 0 {
				reg, want := got[id+"/CB registered"], ""
				if d.CBRegisteredBytes != d.CBBytes {
					want = liveBytes(d.CBRegisteredBytes)
					registered++
				}
				if got[id+"/CB note"] == "" || reg != want {
					problems = append(problems, fmt.Sprintf("chip %s: under the CB row, registered %q (note: %q); the truth: %d B resident on the busiest core, %d B registered",
						id, reg, got[id+"/CB note"], d.CBBytes, d.CBRegisteredBytes))
				}
			}
			if g := got[id+"/buffers"]; d.LiveBuffers > 0 && g != strconv.FormatUint(d.LiveBuffers, 10) {
				problems = append(problems, fmt.Sprintf("chip %s: %s buffer(s) shown, the truth has %d", id, g, d.LiveBuffers))
			}
		}
		return problems, checked, registered
	}
	// Frames drawn before tttrace took the workload's last events differ:
	// the last frame within 10 s must not.
	var problems []string
	var checked, registered int
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("tmux", "capture-pane", "-p", "-J", "-t", session).Output()
		if err != nil {
			t.Fatal(err)
		}
		screen = string(out)
		problems, checked, registered = compare(screen)
		if len(problems) == 0 && strings.Count(screen, "  chip ") >= want && strings.Contains(screen, "1 library probed") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The frame (tttrace's start-up notes above it are ordinary lines the
	// terminal wraps) never exceeds the terminal's width.
	frame := screen[max(0, strings.Index(screen, "tttrace live ")):]
	for _, line := range strings.Split(frame, "\n") {
		if n := utf8.RuneCountInString(line); n > width {
			t.Errorf("a line of %d columns in a %d-column terminal: %q", n, width, line)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if checked == 0 {
		t.Fatalf("nothing compared: the screen was\n%s", screen)
	}
	if scenario == "cb_cache" && registered == 0 {
		t.Errorf("cb_cache: no chip whose programs registered other than its busiest core holds: the CB note not compared")
	}
	if t.Failed() {
		t.Logf("the screen:\n%s", screen)
	}
}

// TestE2ELiveViewAllocator: the live view in a tmux pane, tttrace -p on an
// n300-shaped workload started by a faked tt-run (ranks) with
// TT_VISIBLE_DEVICES=1 on a host of two PCIe devices: the process line
// carries its host and ranks, chip 0 its PCI address and chip 1 (reached
// over Ethernet) says its identity is unknown, and each allocator line
// (used / capacity, percentage, largest free block, banks) equals the
// replica's own get_statistics.
func TestE2ELiveViewAllocator(t *testing.T) {
	bin, replica := setup(t)
	requireTool(t, "tmux", "tmux")
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	root := devRoot(t, map[int]string{0: "0000:05:00.0", 1: "0000:02:00.0"})
	w := exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n300", "--leak", "--truth", f("truth"),
		"--go-file", f("go"), "--hold-file", f("hold"))
	w.Env = append(os.Environ(), "TT_VISIBLE_DEVICES=1", "OMPI_COMM_WORLD_RANK=3", "TT_MESH_ID=1", "TT_MESH_HOST_RANK=0")
	holdChip(t, w, 0) // TT_VISIBLE_DEVICES=1: /dev/tenstorrent/0
	wout := &syncBuffer{}
	w.Stdout, w.Stderr = wout, wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		touch(t, f("hold"))
		w.Wait()
	}()
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	const width = 120
	session := fmt.Sprintf("tttrace-alloc-%d", os.Getpid())
	cmd := fmt.Sprintf("%s -p %d -o %s --interval 100ms --host node-a --dev-root %s --ready-file %s", bin, w.Process.Pid, f("report"), root, f("ready"))
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", strconv.Itoa(width), "-y", "100", cmd).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready")
	touch(t, f("go"))
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding\n"+wout.String())
	atr := readAllocTruth(t, f("truth"))

	// What the screen must say, from the truth and the faked layout alone.
	fmtPct := func(allocated, bank uint64) string {
		return fmt.Sprintf("%.1f%%", 100*float64(allocated)/float64(bank))
	}
	var want []string
	want = append(want, fmt.Sprintf("pid %d  [host node-a, rank 3, mesh 1, mesh host rank 0]  ", w.Process.Pid))
	for _, d := range atr.Devices {
		phys := "physical chip unknown"
		if d.Device == 0 {
			phys = "pci 0000:05:00.0" // TT_VISIBLE_DEVICES=1: the second by address
		}
		want = append(want, fmt.Sprintf("  chip %d (%s)  ", d.Device, phys))
		for _, typ := range []string{"dram", "l1", "l1_small", "trace"} {
			a, ok := d.Allocator[typ]
			if !ok || a.Banks == 0 || a.BankSize == 0 {
				continue
			}
			used := uint64(a.Banks) * a.Allocated
			want = append(want, fmt.Sprintf("chip %d: %s alloc %s / %s %s largest free block %s x %d bank(s)", d.Device,
				strings.ToUpper(typ), liveBytes(used), liveBytes(uint64(a.Banks)*a.BankSize), fmtPct(a.Allocated, a.BankSize),
				liveBytes(a.LargestBlock), a.Banks))
		}
	}
	if len(atr.Devices) < 2 {
		t.Fatalf("the n300 truth has %d chip(s)", len(atr.Devices))
	}
	// The screen, its allocator lines prefixed with their chip and spaces
	// squeezed, as "want" is written.
	allocRe := regexp.MustCompile(`^    (\S+) alloc\s+(.+?)\s+/\s+(.+?)\s+(\S+%)\s+largest free block (.+)$`)
	chipRe := regexp.MustCompile(`^  chip (\d+) \(`)
	var screen, text string
	var missing []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command("tmux", "capture-pane", "-p", "-J", "-t", session).Output()
		if err != nil {
			t.Fatal(err)
		}
		screen = string(out)
		var b strings.Builder
		chip := ""
		for _, line := range strings.Split(screen, "\n") {
			if m := chipRe.FindStringSubmatch(line); m != nil {
				chip = m[1]
			}
			if m := allocRe.FindStringSubmatch(line); m != nil {
				fmt.Fprintf(&b, "chip %s: %s alloc %s / %s %s largest free block %s\n", chip, m[1], m[2], m[3], m[4], m[5])
			} else {
				b.WriteString(line + "\n")
			}
		}
		text = b.String()
		missing = missing[:0]
		for _, s := range want {
			if !strings.Contains(text, s) {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range missing {
		t.Errorf("the live view lacks %q", s)
	}
	frame := screen[max(0, strings.Index(screen, "tttrace live ")):]
	for _, line := range strings.Split(frame, "\n") {
		if n := utf8.RuneCountInString(line); n > width {
			t.Errorf("a line of %d columns in a %d-column terminal: %q", n, width, line)
		}
	}
	if t.Failed() {
		t.Logf("the screen:\n%s", screen)
	}
}

// TestE2ELiveViewGalaxy: tttrace -p on the replica's 32-chip galaxy in a
// tmux pane of 120x30, whose full frame (a block of lines per chip) is
// many times taller: after several redraws the pane and its history hold
// one frame (its header once, each chip once: a frame taller than the
// terminal scrolls at every redraw and leaves copies of itself behind),
// no line is wider than the pane, and it is the compact frame: one line
// per chip, as many as fit, in the order of their pressure worked out from
// the truth, each with the truth's numbers, then the count of the chips
// left out.
func TestE2ELiveViewGalaxy(t *testing.T) {
	bin, replica := setup(t)
	requireTool(t, "tmux", "tmux")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	w, wout := start(t, filepath.Join(replica, "gcc-O2", "ttwork"), "--scenario", "galaxy", "--leak", "--truth", f("truth"),
		"--go-file", f("go"), "--hold-file", f("hold"))
	defer touch(t, f("hold"))
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	const width, height = 120, 30
	session := fmt.Sprintf("tttrace-galaxy-%d", os.Getpid())
	cmd := fmt.Sprintf("%s -p %d -o %s --interval 100ms --ready-file %s", bin, w.Process.Pid, f("report"), f("ready"))
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), cmd).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	defer exec.Command("tmux", "kill-session", "-t", session).Run()
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready")
	touch(t, f("go"))
	waitFor(t, func() bool { return strings.Contains(wout.String(), "holding") }, "workload holding")

	b, err := os.ReadFile(f("truth"))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Devices []struct {
			truthDevice
			Core      *l1CoreTruth `json:"l1_busiest_core"`
			Allocator map[string]struct {
				Banks    uint64 `json:"banks"`
				BankSize uint64 `json:"bank_size"`
			} `json:"allocator"`
		} `json:"devices"`
		Failures []json.RawMessage `json:"alloc_failures"`
		Clashes  []json.RawMessage `json:"l1_clashes"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Devices) != 32 || len(tr.Failures) != 0 || len(tr.Clashes) != 0 {
		t.Fatalf("the galaxy truth has %d chips, %d failures, %d clashes", len(tr.Devices), len(tr.Failures), len(tr.Clashes))
	}
	// What each chip's line must say, from the truth: pid, chip, DRAM in
	// use and its share of the chip's DRAM (banks x bank size), the same
	// for L1, the busiest core's L1 total (- when none), the resident CBs.
	share := func(n uint64, typ string, d int) (float64, string) {
		a := tr.Devices[d].Allocator[typ]
		if a.Banks*a.BankSize == 0 {
			return 0, "-"
		}
		f := float64(n) / float64(a.Banks*a.BankSize)
		if f >= 0.9995 {
			return f, fmt.Sprintf("%.0f%%", 100*f)
		}
		return f, fmt.Sprintf("%.1f%%", 100*f)
	}
	type chipWant struct {
		line     string
		pressure float64
		used     uint64
		chip     int32
	}
	var order []chipWant
	for i, d := range tr.Devices {
		_, dram := share(d.DRAMBytes, "DRAM", i)
		_, l1 := share(d.L1Bytes, "L1", i)
		core := "-"
		if d.Core != nil {
			core = liveBytes(d.Core.TotalBytes)
		}
		line := fmt.Sprintf("%d %d %s %s %s %s %s %s", w.Process.Pid, d.Device, liveBytes(d.DRAMBytes), dram, liveBytes(d.L1Bytes), l1, core, liveBytes(d.CBBytes))
		// The pressure: the highest share of a type's capacity. No chip
		// holds CBs here: a busiest core holds its chip's L1 buffers, of
		// a core's L1, larger than the L1 bank: its share never decides.
		c := chipWant{line: line, chip: d.Device, used: d.DRAMBytes + d.L1Bytes + d.L1SmallBytes + d.TraceBytes + d.SystemMemoryBytes + d.CBBytes}
		for _, x := range []struct {
			n   uint64
			typ string
		}{{d.DRAMBytes, "DRAM"}, {d.L1Bytes, "L1"}, {d.L1SmallBytes, "L1_SMALL"}, {d.TraceBytes, "TRACE"}} {
			p, _ := share(x.n, x.typ, i)
			c.pressure = max(c.pressure, p)
		}
		order = append(order, c)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.pressure != b.pressure {
			return a.pressure > b.pressure
		}
		if a.used != b.used {
			return a.used > b.used
		}
		return a.chip < b.chip
	})

	bytesRe := `(\d+ B|[\d.]+ [KMGT]iB)`
	rowRe := regexp.MustCompile(`^ *(\d+) +(\d+) +(?:(\S.*?) +)?` + bytesRe + ` +(\S+%|-) +` + bytesRe + ` +(\S+%|-) +(-|\?|≤?` + bytesRe + `) +(\S+%|-) +` + bytesRe + `$`)
	moreRe := regexp.MustCompile(`^… (\d+) more chips? \((\d+) process(?:es)?\)$`)
	// check lists how the pane differs from what it must show.
	check := func(pane string) (problems []string) {
		var shown []string
		more := ""
		for _, line := range strings.Split(strings.TrimRight(pane, "\n"), "\n") {
			line = strings.TrimRight(line, " ") // tmux pads what a longer line drew before
			if m := rowRe.FindStringSubmatch(line); m != nil {
				if m[3] != "" {
					problems = append(problems, fmt.Sprintf("flags %q on a chip without failures or clashes: %q", m[3], line))
				}
				shown = append(shown, strings.Join([]string{m[1], m[2], m[4], m[5], m[6], m[7], m[8], m[11]}, " "))
			} else if moreRe.MatchString(line) {
				more = line
			}
		}
		if len(shown) == 0 {
			return append(problems, "no chip line")
		}
		// 29 lines above the cursor's: the header's two, what follows,
		// the columns' names, the chips, the count of the others.
		if len(shown) != height-1-5 {
			problems = append(problems, fmt.Sprintf("%d chips shown in %d rows, want %d", len(shown), height, height-1-5))
		}
		for i, got := range shown {
			if i < len(order) && got != order[i].line {
				problems = append(problems, fmt.Sprintf("chip line %d is %q, want %q", i, got, order[i].line))
			}
		}
		if want := fmt.Sprintf("… %d more chip%s (1 process)", 32-len(shown), map[bool]string{true: "", false: "s"}[32-len(shown) == 1]); more != want {
			problems = append(problems, fmt.Sprintf("last line %q, want %q", more, want))
		}
		return problems
	}
	var pane string
	var problems []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("tmux", "capture-pane", "-p", "-J", "-t", session).Output()
		if err != nil {
			t.Fatal(err)
		}
		pane = string(out)
		if problems = check(pane); len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// Ten more redraws, then the pane and everything it scrolled off.
	time.Sleep(time.Second)
	out, err := exec.Command("tmux", "capture-pane", "-p", "-J", "-S", "-", "-t", session).Output()
	if err != nil {
		t.Fatal(err)
	}
	history := string(out)
	if n := strings.Count(history, "tttrace live "); n != 1 {
		t.Errorf("the pane and its history hold %d frame headers, want 1", n)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(history, "\n") {
		if m := rowRe.FindStringSubmatch(strings.TrimRight(line, " ")); m != nil {
			seen[m[2]]++
		}
	}
	for chip, n := range seen {
		if n > 1 {
			t.Errorf("chip %s: %d lines in the pane and its history", chip, n)
		}
	}
	frame := history[max(0, strings.Index(history, "tttrace live ")):]
	lines := strings.Split(strings.TrimRight(frame, "\n"), "\n")
	if len(lines) >= height {
		t.Errorf("a frame of %d lines in %d rows", len(lines), height)
	}
	for _, line := range lines {
		if n := utf8.RuneCountInString(line); n > width {
			t.Errorf("a line of %d columns in a %d-column terminal: %q", n, width, line)
		}
	}
	if t.Failed() {
		t.Logf("the pane:\n%s\nwith its history:\n%s", pane, history)
	}
}
