package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
// is wider than the terminal.
func TestE2ELiveView(t *testing.T) {
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
	w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "mesh", "--leak", "--truth", truthPath,
		"--go-file", goFile, "--hold-file", holdFile)
	defer touch(t, holdFile)
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	const width = 96
	session := fmt.Sprintf("tttrace-live-%d", os.Getpid())
	cmd := fmt.Sprintf("%s -p %d -o %s --interval 100ms --ready-file %s", bin, w.Process.Pid, report, ready)
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", strconv.Itoa(width), "-y", "80", cmd).CombinedOutput(); err != nil {
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("tmux", "capture-pane", "-p", "-J", "-t", session).Output()
		if err != nil {
			t.Fatal(err)
		}
		screen = string(out)
		if strings.Count(screen, "  chip ") >= want && strings.Contains(screen, "1 library probed") || time.Now().After(deadline) {
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
	// Parse "  chip N ..." and its bars "    TYPE  ###|  CUR  peak  PEAK".
	chipRe := regexp.MustCompile(`^  chip (\d+)  (\d+) buffer\(s\)`)
	barRe := regexp.MustCompile(`^    (\S+)\s+#*-*\|\s+(.+?)\s+peak\s+(.+)$`)
	got := map[string]string{}
	chip := ""
	for _, line := range strings.Split(screen, "\n") {
		if m := chipRe.FindStringSubmatch(line); m != nil {
			chip = m[1]
			got[chip+"/buffers"] = m[2]
		} else if m := barRe.FindStringSubmatch(line); m != nil && chip != "" {
			got[chip+"/"+m[1]] = m[2]
		}
	}
	checked := 0
	for _, d := range tr.Devices {
		id := strconv.Itoa(int(d.Device))
		for name, v := range map[string]uint64{"DRAM": d.DRAMBytes, "L1": d.L1Bytes, "L1_SMALL": d.L1SmallBytes,
			"TRACE": d.TraceBytes, "SYSMEM": d.SystemMemoryBytes, "CB": d.CBBytes} {
			g, drawn := got[id+"/"+name]
			switch {
			case v > 0 && g != liveBytes(v):
				t.Errorf("chip %s %s: the live view shows %q, the truth is %s", id, name, g, liveBytes(v))
			case v == 0 && drawn && g != "0 B":
				t.Errorf("chip %s %s: the live view shows %q, the truth is 0", id, name, g)
			}
			if v > 0 {
				checked++
			}
		}
		if g := got[id+"/buffers"]; d.LiveBuffers > 0 && g != strconv.FormatUint(d.LiveBuffers, 10) {
			t.Errorf("chip %s: %s buffer(s) shown, the truth has %d", id, g, d.LiveBuffers)
		}
	}
	if checked == 0 {
		t.Fatalf("nothing compared: the screen was\n%s", screen)
	}
	if t.Failed() {
		t.Logf("the screen:\n%s", screen)
	}
}
