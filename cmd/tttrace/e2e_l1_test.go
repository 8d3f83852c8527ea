package main

// End-to-end: circular buffers against L1 buffers. The replica throws
// upstream's "Statically allocated circular buffers in program N clash
// with L1 buffers ..." once a program's CBs are tracked and reach past the
// lowest L1 buffer, and records in its truth which buffers were in the
// way; tttrace must name the same buffers, with a record timed before the
// throw, and report no clash for the same program once the low buffers
// are freed.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// truthClash is one clash the replica threw for (truth.json "l1_clashes").
type truthClash struct {
	Program         string `json:"program"`
	Device          int32  `json:"device"`
	CBRegionEnd     uint64 `json:"cb_region_end"`
	LowestL1Address uint64 `json:"lowest_l1_address"`
	ThrowTsNs       uint64 `json:"throw_ts_ns"`
	L1Buffers       []struct {
		Buffer  string `json:"buffer"`
		Address uint64 `json:"address"`
		Size    uint64 `json:"size"`
	} `json:"l1_buffers"`
}

func (c *truthClash) key() string {
	var bs []string
	for _, b := range c.L1Buffers {
		bs = append(bs, fmt.Sprintf("%s@%d+%d", b.Buffer, b.Address, b.Size))
	}
	return fmt.Sprintf("chip %d program %s cb_end %d lowest %d in the way [%s]", c.Device, c.Program, c.CBRegionEnd, c.LowestL1Address, strings.Join(bs, " "))
}

func noticeKey(n *devices.Notice) string {
	var bs []string
	for _, b := range n.L1Buffers {
		bs = append(bs, fmt.Sprintf("%s@%d+%d", b.Buffer, b.Address, b.Size))
	}
	if n.L1BuffersCount != len(n.L1Buffers) {
		bs = append(bs, fmt.Sprintf("(%d in all)", n.L1BuffersCount))
	}
	return fmt.Sprintf("chip %d program %s cb_end %d lowest %d in the way [%s]", n.Chip, n.Program, n.CBRegionEnd, n.LowestL1Address, strings.Join(bs, " "))
}

const l1Warn = 8192

// traceL1 runs the l1 scenario under tttrace --l1-warn and returns the
// NDJSON's notices, the summary and the truth (with its clashes).
func traceL1(t *testing.T, r run) (notes []devices.Notice, sum *devices.Summary, tr *truth, clashes []truthClash) {
	t.Helper()
	bin, _ := setup(t)
	dir := variantDir(t, r.variant)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out.ndjson")
	truthPath := filepath.Join(tmp, "truth.json")
	work := append([]string{"--scenario", r.scenario, "--truth", truthPath}, r.args...)
	target := append([]string{filepath.Join(dir, "ttwork")}, work...)
	if r.mode == "python" {
		target = append([]string{"python3", filepath.Join(dir, "ttwork.py")}, work...)
	}
	args := append([]string{"--json", "-o", out, "--lib", filepath.Join(dir, "libtt_metal.so"), "--l1-warn", fmt.Sprint(l1Warn), "--"}, target...)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: tttrace %s: %v\n%s", r.name(), strings.Join(args, " "), err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "clash with L1 buffers") || !strings.Contains(stderr.String(), "tttrace: pid ") {
		t.Errorf("%s: expected the workload's caught exception and tttrace's note on the output:\n%s", r.name(), stderr.String())
	}
	sum = lastSummary(t, out)
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		if !bytes.HasPrefix(sc.Bytes(), []byte(`{"type":"l1_`)) {
			continue
		}
		var n devices.Notice
		if err := json.Unmarshal(sc.Bytes(), &n); err != nil {
			t.Fatalf("%s: %v: %s", r.name(), err, sc.Bytes())
		}
		notes = append(notes, n)
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	var full struct {
		truth
		L1Clashes []truthClash `json:"l1_clashes"`
	}
	if err := json.Unmarshal(b, &full); err != nil {
		t.Fatalf("%s: truth: %v", r.name(), err)
	}
	return notes, sum, &full.truth, full.L1Clashes
}

func TestE2EL1Clash(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "l1", args: []string{"--leak"}, peaks: true},
		{variant: "clang-O3", mode: "cmd", scenario: "l1", peaks: true},
		{variant: "gcc-O2", mode: "python", scenario: "l1", args: []string{"--leak"}, peaks: true},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			notes, sum, tr, want := traceL1(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			if len(want) == 0 {
				t.Fatal("the replica threw for no clash: the test proves nothing")
			}
			// The clash records name exactly the buffers the replica found in the way.
			var got []devices.Notice
			for _, n := range notes {
				if n.Type == devices.NoticeL1Clash {
					got = append(got, n)
				}
			}
			var gk, wk []string
			for i := range got {
				gk = append(gk, noticeKey(&got[i]))
			}
			for i := range want {
				wk = append(wk, want[i].key())
			}
			sort.Strings(gk)
			sort.Strings(wk)
			if strings.Join(gk, "\n") != strings.Join(wk, "\n") {
				t.Errorf("%s: l1_clash records differ from the truth:\n got:\n  %s\n want:\n  %s", r.name(), strings.Join(gk, "\n  "), strings.Join(wk, "\n  "))
			}
			// Each was made from events before the replica threw.
			for i := range got {
				for j := range want {
					if noticeKey(&got[i]) == want[j].key() && got[i].TsNs > want[j].ThrowTsNs {
						t.Errorf("%s: l1_clash on chip %d at %d, after the throw at %d", r.name(), got[i].Chip, got[i].TsNs, want[j].ThrowTsNs)
					}
				}
			}
			var p *devices.ProcessSummary
			for i := range sum.Processes {
				if sum.Processes[i].Pid == tr.Pid {
					p = &sum.Processes[i]
				}
			}
			if p == nil {
				t.Fatalf("no process %d in the summary", tr.Pid)
			}
			if p.Stats.L1Clashes != uint64(len(want)) || len(p.L1Clashes) != len(want) {
				t.Errorf("%s: summary counts %d clashes and lists %d, the replica threw for %d", r.name(), p.Stats.L1Clashes, len(p.L1Clashes), len(want))
			}
			// On chips that clashed, the minimum headroom is the clash's
			// (the scenario lowers headroom nowhere else).
			minWant := map[int32]int64{}
			for _, c := range want {
				h := int64(c.LowestL1Address) - int64(c.CBRegionEnd)
				if v, ok := minWant[c.Device]; !ok || h < v {
					minWant[c.Device] = h
				}
			}
			for _, d := range p.Devices {
				if w, ok := minWant[d.Device]; ok && (d.MinL1Headroom == nil || d.MinL1Headroom.Value != w) {
					t.Errorf("%s: chip %d min_l1_headroom %+v, want %d", r.name(), d.Device, d.MinL1Headroom, w)
				}
			}
			// The same program after the low buffers went fits, with less
			// room than --l1-warn: an l1_headroom record, above every clash.
			fits := false
			for _, n := range notes {
				if n.Type != devices.NoticeL1Headroom || n.Headroom < 0 {
					continue
				}
				above := true
				for _, c := range want {
					if c.Device == n.Chip && n.LowestL1Address < c.CBRegionEnd {
						above = false
					}
				}
				if above && n.Headroom < l1Warn && n.Headroom == int64(n.LowestL1Address)-int64(n.CBRegionEnd) {
					fits = true
				}
			}
			if !fits {
				t.Errorf("%s: no l1_headroom record for the program that fits once the low buffers were freed: %+v", r.name(), notes)
			}
		})
	}
}
