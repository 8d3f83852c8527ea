package main

// --pprof and --folded end to end: the profile of a real traced replica
// run, read by the real `go tool pprof`, against the ledger's leaks and
// alloc events (NDJSON) and the replica's own truth (totals and peaks per
// chip and type, L1 per core at its peak).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// rawSample is one sample of `go tool pprof -raw`.
type rawSample struct {
	// inuse_space, inuse_objects, alloc_space, alloc_objects, peak_space,
	// l1_core_peak_space
	v                                 [6]uint64
	pid, chip, typ, site, program, op string
	locs                              int
}

// pprofTool runs `go tool pprof ARGS...` and returns its standard output.
func pprofTool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "pprof"}, args...)...)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool pprof %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var (
	rawValues = regexp.MustCompile(`^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+): ([\d ]*)$`)
	rawLabel  = regexp.MustCompile(`(\w+):\[([^\]]*)\]`)
)

// readRaw parses `go tool pprof -raw FILE`.
func readRaw(t *testing.T, path string) []rawSample {
	t.Helper()
	out := pprofTool(t, "-raw", path)
	if !strings.Contains(out, "inuse_space/bytes[dflt] inuse_objects/count alloc_space/bytes alloc_objects/count peak_space/bytes l1_core_peak_space/bytes") {
		t.Fatalf("-raw: not the sample types expected:\n%.2000s", out)
	}
	var ss []rawSample
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := rawValues.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var s rawSample
		for i := range 6 {
			s.v[i], _ = strconv.ParseUint(m[1+i], 10, 64)
		}
		s.locs = len(strings.Fields(m[7]))
		if !sc.Scan() {
			t.Fatal("-raw: a sample without labels")
		}
		for _, l := range rawLabel.FindAllStringSubmatch(sc.Text(), -1) {
			switch l[1] {
			case "pid":
				s.pid = l[2]
			case "chip":
				s.chip = l[2]
			case "type":
				s.typ = l[2]
			case "site":
				s.site = l[2]
			case "program":
				s.program = l[2]
			case "op":
				s.op = l[2]
			}
		}
		ss = append(ss, s)
	}
	if len(ss) == 0 {
		t.Fatalf("-raw: no sample:\n%.2000s", out)
	}
	return ss
}

type ctKey struct {
	chip int32
	typ  string
}

type siteCT struct {
	site string
	chip int32
	typ  string
}

// TestE2EPProf: basic, mesh and galaxy (buffers of every type), cb_cache
// (a program cache whose CBs are several times L1, per-core buffers beside
// resident CBs, lockstep L1 beside CBs) and ops (TT-NN ops laying CBs
// out). Per chip and type the samples sum to the truth's totals and
// peaks; l1_core_peak_space (what filled the busiest core at the peak of
// L1 per core) checkL1CorePeak compares.
func TestE2EPProf(t *testing.T) {
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "galaxy", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "cb_cache", args: []string{"--leak"}, peaks: true},
		{variant: "gcc-O2", mode: "cmd", scenario: "ops", args: []string{"--leak"}, peaks: true},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			prof, folded := filepath.Join(dir, "mem.pb.gz"), filepath.Join(dir, "mem.folded")
			r.flags = []string{"--pprof", prof, "--folded", folded}
			holdForSites(t, &r)
			var out string
			r.out = &out
			sum, tr := trace(t, r)
			for _, d := range compare(r, sum, tr) {
				t.Error(d)
			}
			p := procOf(t, sum, tr.Pid)
			pid := fmt.Sprint(tr.Pid)
			samples := readRaw(t, prof)

			// The replica's truth: per chip and type, the samples' in-use
			// bytes sum to the total now, their peak bytes to the peak.
			inuse, peak := map[ctKey]uint64{}, map[ctKey]uint64{}
			bySite := map[siteCT]rawSample{}
			for _, s := range samples {
				if s.pid != pid {
					t.Errorf("sample of pid %s, traced %s", s.pid, pid)
				}
				if s.locs == 0 {
					t.Errorf("sample %+v has no location", s)
				}
				c, err := strconv.ParseInt(s.chip, 10, 32)
				if err != nil {
					t.Errorf("sample chip %q", s.chip)
				}
				k := ctKey{int32(c), s.typ}
				inuse[k] += s.v[0]
				peak[k] += s.v[4]
				sk := siteCT{s.site, int32(c), s.typ}
				if _, dup := bySite[sk]; dup {
					t.Errorf("two samples for site %s chip %d %s", s.site, c, s.typ)
				}
				bySite[sk] = s
			}
			for i := range tr.Devices {
				d := &tr.Devices[i]
				for typ, field := range truthFields {
					if strings.HasPrefix(typ, "CB") {
						continue // no allocation site
					}
					k := ctKey{d.Device, typ}
					if inuse[k] != d.total(field) || peak[k] != d.Peaks[field] {
						t.Errorf("chip %d %s: profile in use %d, at peak %d; truth %d, %d", d.Device, typ, inuse[k], peak[k], d.total(field), d.Peaks[field])
					}
				}
			}
			// The ledger's leaks, per site: in-use bytes and objects.
			type tot struct{ bytes, objs uint64 }
			leaks := map[siteCT]tot{}
			for _, lk := range p.Leaks {
				k := siteCT{fmt.Sprint(lk.Site), lk.Device, lk.Type}
				w := leaks[k]
				leaks[k] = tot{w.bytes + lk.Size, w.objs + 1}
			}
			for k, s := range bySite {
				if w := leaks[k]; w.bytes != s.v[0] || w.objs != s.v[1] {
					t.Errorf("site %s chip %d %s: in use %d bytes in %d, the ledger's leaks %d in %d", k.site, k.chip, k.typ, s.v[0], s.v[1], w.bytes, w.objs)
				}
			}
			for k, w := range leaks {
				if s := bySite[k]; s.v[0] != w.bytes {
					t.Errorf("site %s chip %d %s: the ledger's leaks hold %d bytes, the profile %d", k.site, k.chip, k.typ, w.bytes, s.v[0])
				}
			}
			// Allocated: the counted allocs of the NDJSON stream, per site,
			// on their chip (a mesh buffer on each chip of its mesh).
			meshChips := map[string]map[int32]bool{}
			for _, lk := range p.Leaks {
				if lk.Mesh {
					if meshChips[lk.MeshDevice] == nil {
						meshChips[lk.MeshDevice] = map[int32]bool{}
					}
					meshChips[lk.MeshDevice][lk.Device] = true
				}
			}
			allocs := allocsOf(t, out, meshChips)
			if r.scenario == "basic" {
				for k, s := range bySite {
					if w := allocs[k]; w.bytes != s.v[2] || w.objs != s.v[3] {
						t.Errorf("site %s chip %d %s: allocated %d bytes in %d, the stream's allocs %d in %d", k.site, k.chip, k.typ, s.v[2], s.v[3], w.bytes, w.objs)
					}
				}
				for k, w := range allocs {
					if bySite[k].v[2] != w.bytes {
						t.Errorf("site %s chip %d %s: the stream allocated %d bytes, the profile %d", k.site, k.chip, k.typ, w.bytes, bySite[k].v[2])
					}
				}
			}
			// -traces shows each leaking sample's bytes with its labels, and
			// the frames of the site: Buffer::create is in every stack (a
			// CB sample's one frame names its program, whole: pprof does
			// not cut an op name's "<...>" or "(...)" out of it).
			traces := pprofTool(t, "-traces", "-unit=byte", prof)
			blocks := strings.Split(traces, "-----------+-------------------------------------------------------")
			shown := 0
			for _, b := range blocks[1:] {
				if strings.TrimSpace(b) == "" {
					continue
				}
				if labelOf(b, "type") == "CB" {
					if !strings.Contains(b, "(circular buffers of program "+labelOf(b, "program")) {
						t.Errorf("-traces: a CB sample whose frame does not name its program:\n%s", b)
					}
					continue
				}
				if !strings.Contains(b, "tt::tt_metal::Buffer::create") && !strings.Contains(b, "MeshBuffer::create") {
					t.Errorf("-traces: a stack without Buffer::create:\n%s", b)
				}
				site := labelOf(b, "site")
				c, _ := strconv.ParseInt(labelOf(b, "chip"), 10, 32)
				k := siteCT{site, int32(c), labelOf(b, "type")}
				if w := leaks[k]; w.bytes > 0 {
					if !strings.Contains(b, fmt.Sprintf(" %dB ", w.bytes)) {
						t.Errorf("-traces: site %s chip %d %s does not show %dB:\n%s", k.site, k.chip, k.typ, w.bytes, b)
					}
					shown++
				}
			}
			if shown != len(leaks) {
				t.Errorf("-traces showed %d leaking samples, the ledger has %d site/chip/type groups", shown, len(leaks))
			}
			// -top: the total in use is the leaks' bytes.
			var leaked uint64
			for _, w := range leaks {
				leaked += w.bytes
			}
			if top := pprofTool(t, "-top", "-unit=byte", prof); !strings.Contains(top, fmt.Sprintf("of %dB total", leaked)) {
				t.Errorf("-top does not say %dB in use:\n%.600s", leaked, top)
			}
			checkL1CorePeak(t, r.scenario, prof, out, p, tr, samples)
			// Folded stacks: per chip and type, the in-use bytes again.
			fb, err := os.ReadFile(folded)
			if err != nil {
				t.Fatal(err)
			}
			fold := map[ctKey]uint64{}
			for _, line := range strings.Split(strings.TrimSpace(string(fb)), "\n") {
				if line == "" {
					continue
				}
				i := strings.LastIndexByte(line, ' ')
				v, err := strconv.ParseUint(line[i+1:], 10, 64)
				parts := strings.Split(line[:i], ";")
				if err != nil || len(parts) < 4 || parts[0] != "pid "+pid {
					t.Fatalf("folded line %q", line)
				}
				c, _ := strconv.ParseInt(strings.TrimPrefix(parts[1], "chip "), 10, 32)
				fold[ctKey{int32(c), parts[2]}] += v
			}
			for k, v := range inuse {
				if fold[k] != v {
					t.Errorf("folded chip %d %s: %d, the profile %d", k.chip, k.typ, fold[k], v)
				}
			}
		})
	}
}

// checkL1CorePeak compares the l1_core_peak_space samples of profile prof
// (of a run of scenario) with the replica's truth (per chip, peak_l1_busiest_core): they sum to
// its total_bytes, the CB samples (at most one per chip) to its cb_bytes,
// the buffer samples to its l1_buffer_bytes; the CB sample names the
// program the summary's peak names, and the op of that program's cb_layout
// records in the NDJSON stream out. `go tool pprof
// -sample_index=l1_core_peak_space -top` totals the chips' peaks, and with
// -tagfocus one chip's.
func checkL1CorePeak(t *testing.T, scenario, prof, out string, p *devices.ProcessSummary, tr *truth, samples []rawSample) {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	var lt struct {
		Devices []struct {
			Device int32        `json:"device"`
			Peak   *l1CoreTruth `json:"peak_l1_busiest_core"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &lt); err != nil {
		t.Fatalf("truth: %v", err)
	}
	type sums struct{ total, cb, buffers, cbSamples uint64 }
	got := map[string]*sums{}
	progs := map[string]rawSample{}
	for _, s := range samples {
		if got[s.chip] == nil {
			got[s.chip] = &sums{}
		}
		g := got[s.chip]
		g.total += s.v[5]
		if s.typ == "CB" {
			g.cb += s.v[5]
			g.cbSamples++
			progs[s.chip] = s
			if s.v[0] != 0 || s.v[2] != 0 || s.v[4] != 0 {
				t.Errorf("chip %s: a CB sample with buffer values %v", s.chip, s.v)
			}
			continue
		}
		g.buffers += s.v[5]
	}
	// The op each program's CBs were laid out in, from the stream.
	layoutOp := map[string]string{}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var rec struct {
			Type    string         `json:"type"`
			Program string         `json:"program"`
			Op      *devices.OpRef `json:"op"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Type != "cb_layout" || rec.Op == nil {
			continue
		}
		op := rec.Op.Name
		if rec.Op.DeviceOp != "" {
			op += " > " + rec.Op.DeviceOp
		}
		layoutOp[rec.Program] = op
	}
	peakOf := map[string]*devices.L1Core{}
	for i := range p.Devices {
		peakOf[fmt.Sprint(p.Devices[i].Device)] = p.Devices[i].PeakL1BusiestCore
	}
	var all, withCBs, withOp uint64
	for _, d := range lt.Devices {
		chip := fmt.Sprint(d.Device)
		g := got[chip]
		if g == nil {
			g = &sums{}
		}
		var w l1CoreTruth
		if d.Peak != nil {
			w = *d.Peak
		}
		all += w.TotalBytes
		if g.total != w.TotalBytes || g.cb != w.CBBytes || g.buffers != w.L1BufferBytes || g.cbSamples > 1 {
			t.Errorf("chip %s: l1_core_peak_space %d (CBs %d in %d samples, buffers %d); the truth's peak_l1_busiest_core: total %d, cb_bytes %d, l1_buffer_bytes %d",
				chip, g.total, g.cb, g.cbSamples, g.buffers, w.TotalBytes, w.CBBytes, w.L1BufferBytes)
		}
		if g.cbSamples == 0 {
			continue
		}
		withCBs++
		s, pk := progs[chip], peakOf[chip]
		if pk == nil || s.program != pk.Program {
			t.Errorf("chip %s: CB sample of program %q, the summary's peak %+v", chip, s.program, pk)
		}
		if op := layoutOp[s.program]; s.op != op {
			t.Errorf("chip %s: CB sample of program %s in op %q; its cb_layout records say %q", chip, s.program, s.op, op)
		} else if op != "" {
			withOp++
		}
		// A tag value that reads as a number is a numeric filter, which
		// no string label matches: the chip as a regular expression.
		if top := pprofTool(t, "-sample_index=l1_core_peak_space", "-tagfocus=chip=^"+chip+"$", "-top", "-unit=byte", prof); !strings.Contains(top, fmt.Sprintf("accounting for %dB, ", w.TotalBytes)) ||
			!strings.Contains(top, "(circular buffers of program "+s.program) {
			t.Errorf("chip %s: -top does not show %dB with program %s's CBs:\n%.1500s", chip, w.TotalBytes, s.program, top)
		}
	}
	if all > 0 {
		if top := pprofTool(t, "-sample_index=l1_core_peak_space", "-top", "-unit=byte", prof); !strings.Contains(top, fmt.Sprintf("of %dB total", all)) {
			t.Errorf("-sample_index=l1_core_peak_space -top does not say %dB total:\n%.1500s", all, top)
		}
	}
	t.Logf("l1_core_peak_space: %d B over %d chips, %d with CBs at the peak, %d of them laid out in an op", all, len(lt.Devices), withCBs, withOp)
	if scenario == "cb_cache" && withCBs < 3 || scenario == "ops" && withOp == 0 {
		t.Errorf("%s: %d chips with CBs at the peak, %d of them laid out in an op: the test proves too little", scenario, withCBs, withOp)
	}
}

func labelOf(block, key string) string {
	for _, l := range strings.Split(block, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key+":" {
			return f[1]
		}
	}
	return ""
}

// allocsOf sums the counted allocs of the NDJSON stream per site, chip
// and type; a mesh buffer on the chips its mesh has in meshChips.
func allocsOf(t *testing.T, path string, meshChips map[string]map[int32]bool) map[siteCT]struct{ bytes, objs uint64 } {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[siteCT]struct{ bytes, objs uint64 }{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var a struct {
			Type       string `json:"type"`
			DeviceKind string `json:"device_kind"`
			Device     int32  `json:"device"`
			BufferType string `json:"buffer_type"`
			Size       uint64 `json:"size"`
			Hooked     bool   `json:"hooked"`
			OwnsData   bool   `json:"owns_data"`
			Site       uint32 `json:"site"`
		}
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil || a.Type != "alloc" || a.Hooked || !a.OwnsData || a.Size == 0 || a.DeviceKind != "chip" {
			continue
		}
		k := siteCT{fmt.Sprint(a.Site), a.Device, a.BufferType}
		w := out[k]
		out[k] = struct{ bytes, objs uint64 }{w.bytes + a.Size, w.objs + 1}
	}
	return out
}
