package main

// Windows end to end: the replica's windows scenario runs three phases with
// their own high-water marks and pauses between them; meanwhile the test
// reads --listen's /v1/memory_stats for the workload (its current window,
// whose peaks are final then), runs `tttrace mark` and lets the workload
// mark its truth's window at the same point. Each window's peaks and levels
// in the summary, and what the endpoint served, equal the truth's; tttrace
// report replays the windows byte for byte and prints them.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
)

type windowTruth struct {
	Name    string `json:"name"`
	Devices []struct {
		Device int32             `json:"device"`
		Peaks  map[string]uint64 `json:"peaks"`
		Levels map[string]uint64 `json:"levels"`
	} `json:"devices"`
}

// memStatsTypes are memory_stats' types and the counters they follow.
var memStatsTypes = map[string]string{"dram": "dram_bytes", "l1": "l1_bytes", "l1_small": "l1_small_bytes", "trace": "trace_bytes"}

func TestE2EWindow(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, truthPath, winFile := filepath.Join(tmp, "out.ndjson"), filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "win")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	log := &syncBuffer{}
	cmd := exec.Command(bin, "--json", "-o", out, "--listen", addr, "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "windows", "--truth", truthPath, "--window-file", winFile)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	names := []string{"warmup", "steady"}
	// Whatever happens, the workload does not wait forever (tttrace killed
	// leaves it running, untraced).
	defer func() {
		for n := range names {
			_ = os.WriteFile(fmt.Sprintf("%s.%d", winFile, n+1), nil, 0o644)
		}
	}()

	type served struct {
		Pid    uint32         `json:"pid"`
		Window devices.Window `json:"window"`
	}
	var live []served
	for i, name := range names {
		n := i + 1
		re := regexp.MustCompile(fmt.Sprintf(`window %d pid (\d+)`, n))
		waitFor(t, func() bool { return re.MatchString(log.String()) }, fmt.Sprintf("the workload at window %d", n))
		pid := re.FindStringSubmatch(log.String())[1]
		// The workload waits: its current window's peaks are final; the
		// endpoint serves them from its next tick (~100 ms).
		time.Sleep(400 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/v1/memory_stats?pid=" + pid)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var s served
		if err := json.Unmarshal(b, &s); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/v1/memory_stats: %d %v: %s", resp.StatusCode, err, b)
		}
		live = append(live, s)
		mark := exec.Command(bin, "mark", fmt.Sprint(cmd.Process.Pid), name)
		if o, err := mark.CombinedOutput(); err != nil {
			t.Fatalf("tttrace mark: %v\n%s", err, o)
		}
		waitFor(t, func() bool {
			return strings.Contains(log.String(), fmt.Sprintf("tttrace: window %d (%s) started", n, name))
		},
			fmt.Sprintf("tttrace to start window %d", n))
		if err := os.WriteFile(fmt.Sprintf("%s.%d", winFile, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, log.String())
	}

	var tr struct {
		Windows []windowTruth `json:"windows"`
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tr); err != nil || len(tr.Windows) != len(names)+1 {
		t.Fatalf("truth windows: %v %s", err, b)
	}
	sum := lastSummary(t, out)
	if len(sum.Processes) != 1 {
		t.Fatalf("%d processes", len(sum.Processes))
	}
	ws := sum.Processes[0].Windows
	if len(ws) != len(tr.Windows) {
		t.Fatalf("%d windows, the truth has %d: %+v", len(ws), len(tr.Windows), ws)
	}
	check := func(what string, w *devices.Window, truth *windowTruth, levels bool) {
		t.Helper()
		if len(w.Devices) != len(truth.Devices) {
			t.Errorf("%s: chips %+v, the truth's %+v", what, w.Devices, truth.Devices)
			return
		}
		for i, td := range truth.Devices {
			d := &w.Devices[i]
			if d.Device != td.Device {
				t.Errorf("%s: chip %d, the truth's %d", what, d.Device, td.Device)
				continue
			}
			for name, v := range td.Peaks {
				if pk, ok := d.Peaks[name]; !ok || pk.Value != v {
					t.Errorf("%s chip %d: %s peak %+v, the truth's %d", what, d.Device, name, pk, v)
				}
			}
			for typ, counter := range memStatsTypes {
				ms := d.MemoryStats[typ]
				if ms.PeakBytesInUse != td.Peaks[counter] || (levels && ms.BytesInUse != td.Levels[counter]) {
					t.Errorf("%s chip %d: memory_stats %s %+v, the truth's peak %d, level %d", what, d.Device, typ, ms, td.Peaks[counter], td.Levels[counter])
				}
			}
		}
	}
	for i := range ws {
		w, truth := &ws[i], &tr.Windows[i]
		if w.Index != i || w.Name != truth.Name || (i > 0 && w.StartTsNs != *ws[i-1].EndTsNs) || (i == len(ws)-1) != (w.EndTsNs == nil) {
			t.Errorf("window %d: %+v", i, w)
		}
		check(fmt.Sprintf("window %d", i), w, truth, true)
	}
	// What the endpoint served at each pause: the window then current.
	for i, s := range live {
		if s.Window.Index != i || s.Window.Name != tr.Windows[i].Name {
			t.Errorf("served at pause %d: window %d %q", i+1, s.Window.Index, s.Window.Name)
		}
		check(fmt.Sprintf("served at pause %d", i+1), &s.Window, &tr.Windows[i], true)
	}
	// The report replays the windows where they were, and prints them.
	again := filepath.Join(tmp, "again.ndjson")
	if code := runTool(t, bin, "report", out, "--json", "-o", again); code != 0 {
		t.Fatalf("tttrace report --json: exit %d", code)
	}
	sameBytes(t, "NDJSON", out, again)
	text, err := exec.Command(bin, "report", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"    window 0 (from the start to the first mark)\n", "    window 1 (warmup, ", "    window 2 (steady, current)\n",
		"      chip 92: DRAM peak 192.0 KiB, in use 64.0 KiB of 1.0 GiB"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
}
