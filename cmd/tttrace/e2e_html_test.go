package main

// --html end to end, in a real browser: replica scenarios (a failed
// allocation, L1 clashes, Metal trace hazards) traced live with --html and
// --json; `tttrace report` on the saved NDJSON writes the same page byte for
// byte; Debian's headless Chromium opens it from a file:// URL and, through
// the DevTools protocol, the test sees no console message of level error, no
// exception and no request but the page's own; every number in the DOM
// (data-field, data-value: sinks/html) equals the run's summary line,
// including the peaks the charts' script marks on the series it drew (L1
// per core's: peak_l1_busiest_core's total, on cb_cache's chips); a
// screenshot of the page shows the charts (their regions hold the series'
// colours, not a blank). The diff page of two of the runs is checked the
// same way against `tttrace diff --json`.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromium is the browser's path; without one the test is skipped, but not
// under CI, where scripts/deps.sh test installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found: CI checks the --html page in a browser (scripts/deps.sh test installs Debian's chromium)")
	}
	t.Skip("chromium not found: the --html page is not checked in a browser (scripts/deps.sh test installs Debian's chromium)")
	return ""
}

// browserPage is what a page showed in the browser.
type browserPage struct {
	Numbers []map[string]string // every element with data-field: its data attributes
	Charts  []chartBox          // the chart regions, in page coordinates
	Shot    image.Image         // the whole page
	Errors  []string            // console errors, exceptions, requests not the page's
}

type chartBox struct {
	Kind, Proc, Chip, Type string
	X, Y, W, H             float64
}

// collect is the script run in the page once drawn: the numbers and the
// charts' boxes.
const collect = `(() => {
  const nums = [...document.querySelectorAll('[data-field]')].map(e => {
    const a = {};
    for (const x of e.attributes) if (x.name.startsWith('data-')) a[x.name] = x.value;
    return a;
  });
  const charts = [...document.querySelectorAll('.chart.one, .chart.alloc, .icicle')].map(e => {
    const r = e.getBoundingClientRect();
    return {Kind: e.className, Proc: e.closest('[data-proc]').getAttribute('data-proc'), Chip: e.parentElement.getAttribute('data-chip') || e.getAttribute('data-chip') || '',
      Type: e.getAttribute('data-type') || '', X: r.left + scrollX, Y: r.top + scrollY, W: r.width, H: r.height};
  });
  return {Numbers: nums, Charts: charts};
})()`

// openPage loads path in a headless Chromium and collects what it showed.
func openPage(t *testing.T, browser, path string) *browserPage {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	url := "file://" + abs
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	stop := time.AfterFunc(2*time.Minute, bcancel) // a browser that hangs fails the test, not the suite
	defer stop.Stop()
	var mu sync.Mutex
	bp := &browserPage{}
	note := func(s string) {
		mu.Lock()
		bp.Errors = append(bp.Errors, s)
		mu.Unlock()
	}
	// Runtime, Log and Network are enabled by chromedp on every target.
	if err := chromedp.Listen(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			desc := ""
			if d.Exception != nil {
				desc = d.Exception.Description
			}
			note(fmt.Sprintf("exception at %s:%d: %s %s", d.URL, d.LineNumber, d.Text, desc))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, fmt.Sprintf("%s%s", a.Value, a.Description))
				}
				note(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				note(fmt.Sprintf("log %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			if ev.Request.URL != url {
				note("request: " + ev.Request.URL)
			}
		}
	}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitReady("body"), chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	got, err := chromedp.Run(bctx, chromedp.Evaluate[struct {
		Numbers []map[string]string
		Charts  []chartBox
	}](collect))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	bp.Numbers, bp.Charts, bp.Shot = got.Numbers, got.Charts, img
	return bp
}

// colours counts the pixels of each colour in a box of img, below its
// first top rows (a chart's legend).
func colours(img image.Image, b chartBox, top int) map[[3]uint8]int {
	out := map[[3]uint8]int{}
	for y := int(b.Y) + top; y < int(b.Y+b.H) && y < img.Bounds().Max.Y; y++ {
		for x := int(b.X); x < int(b.X+b.W) && x < img.Bounds().Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			out[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	return out
}

// near counts the pixels of px within a few levels of colour c (a line is
// drawn antialiased).
func near(px map[[3]uint8]int, c [3]uint8) int {
	n := 0
	for k, v := range px {
		d := 0
		for i := range k {
			d = max(d, int(k[i])-int(c[i]), int(c[i])-int(k[i]))
		}
		if d <= 24 {
			n += v
		}
	}
	return n
}

// seriesColour is each drawn type's line colour (page.js).
var seriesColour = map[string][3]uint8{
	"DRAM": {0x4e, 0x79, 0xa7}, "L1": {0xf2, 0x8e, 0x2b}, "L1_SMALL": {0xe1, 0x57, 0x59}, "TRACE": {0x76, 0xb7, 0xb2},
	"SYSTEM_MEMORY": {0x59, 0xa1, 0x4f}, "CB": {0xb0, 0x7a, 0xa1}, "L1_CORE": {0x9c, 0x75, 0x5f},
	"dram": {0x4e, 0x79, 0xa7}, "l1": {0xf2, 0x8e, 0x2b}, "l1_small": {0xe1, 0x57, 0x59}, "trace": {0x76, 0xb7, 0xb2},
}

// jsonPath finds the number at a dotted path of v ("" and false: none).
func jsonPath(v any, path string) (string, bool) {
	for _, seg := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	n, ok := v.(json.Number)
	return n.String(), ok
}

// checkDOM compares every number of the page with root (the summary line,
// or the diff's JSON object); it returns how many of each field it saw.
func checkDOM(t *testing.T, nums []map[string]string, root any) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, a := range nums {
		base := root
		if p := a["data-proc"]; a["data-scope"] == "" && p != "" {
			procs := root.(map[string]any)["processes"].([]any)
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(procs) {
				t.Fatalf("%v: no such process", a)
			}
			base = procs[i]
			if c := a["data-chip"]; c != "" {
				base = nil
				for _, d := range procs[i].(map[string]any)["devices"].([]any) {
					if d.(map[string]any)["device"].(json.Number).String() == c {
						base = d
					}
				}
				if base == nil {
					t.Fatalf("%v: no such chip", a)
				}
			}
		}
		want, ok := jsonPath(base, a["data-field"])
		if !ok || want != a["data-value"] {
			t.Errorf("the page shows %v; the JSON has %q (%v)", a, want, ok)
		}
		k := a["data-field"]
		if strings.Contains(a["class"], "peak") || a["data-ts"] != "" {
			k = "drawn " + k
		}
		seen[k]++
	}
	return seen
}

// lastLine is the last line of an NDJSON file, its numbers exact.
func lastLine(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	d := json.NewDecoder(bytes.NewReader(lines[len(lines)-1]))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestE2EHTML(t *testing.T) {
	browser := chromium(t)
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	tmp := t.TempDir()
	saved := map[string]string{}
	for _, c := range []struct {
		name  string
		work  []string
		want  []string // fields the page must show
		drawn string   // the peak a chart must mark ("": DRAM's)
	}{
		{"oom", []string{filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150", "--leak"},
			[]string{"alloc_failures.0.size", "alloc_failures.0.holders_count", "allocator.dram.total_allocated_bytes", "leak_groups.0.bytes"}, ""},
		{"l1-clash", []string{filepath.Join(dir, "ttwork"), "--scenario", "l1", "--leak"},
			[]string{"l1_clashes.0.headroom", "min_l1_headroom.value", "peaks.l1_bytes.value"}, ""},
		{"trace-hazards", []string{filepath.Join(dir, "ttwork"), "--scenario", "traces"},
			[]string{"traces.hazard_count", "traces.hazards.0.seq", "peaks.trace_bytes.value"}, ""},
		// L1 per core: the busiest core now and at its peak (core, L1
		// buffers, resident CBs, total, L1 size, when), its series drawn.
		{"l1-per-core", []string{filepath.Join(dir, "ttwork"), "--scenario", "cb_cache", "--leak"},
			[]string{"l1_busiest_core.total_bytes", "l1_busiest_core.l1_buffer_bytes", "l1_busiest_core.cb_bytes", "l1_busiest_core.l1_size",
				"l1_busiest_core.core.0", "peak_l1_busiest_core.total_bytes", "peak_l1_busiest_core.core.1", "peak_l1_busiest_core.ts_ns",
				"peaks.cb_bytes.value"}, "peak_l1_busiest_core.total_bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, live, again := filepath.Join(tmp, c.name+".ndjson"), filepath.Join(tmp, c.name+".html"), filepath.Join(tmp, c.name+".replay.html")
			args := append([]string{"--json", "-o", run, "--html", live, "--lib", lib, "--"}, c.work...)
			if code := runTool(t, bin, args...); code != 0 && code != 134 {
				t.Fatalf("live run: exit %d", code)
			}
			saved[c.name] = run
			if code := runTool(t, bin, "report", run, "--html", again); code != 0 {
				t.Fatalf("tttrace report --html: exit %d", code)
			}
			sameBytes(t, "the page of the replayed run", live, again)
			if st, err := os.Stat(live); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("the page: %v, mode %v; want 0600", err, st.Mode())
			}
			sum := lastLine(t, run)
			bp := openPage(t, browser, live)
			for _, e := range bp.Errors {
				t.Errorf("in the browser: %s", e)
			}
			seen := checkDOM(t, bp.Numbers, sum)
			for _, f := range append(c.want, "dram_bytes", "peaks.dram_bytes.value", "events") {
				if seen[f] == 0 {
					t.Errorf("the page shows no %s", f)
				}
			}
			// Each chip's drawn peak is the summary's (checked above with
			// every number): the chart drew it.
			drawn := c.drawn
			if drawn == "" {
				drawn = "peaks.dram_bytes.value"
				if seen["peaks.dram_bytes.ts_ns"] == 0 {
					t.Errorf("the page shows no peaks.dram_bytes.ts_ns")
				}
			}
			if seen["drawn "+drawn] == 0 {
				t.Errorf("no %s marked on a chart: %v", drawn, seen)
			}
			if c.drawn != "" {
				// Every chip whose L1 per core peaked has it drawn, its
				// marker the summary's (checkDOM).
				chips := 0
				for _, p := range sum.(map[string]any)["processes"].([]any) {
					for _, d := range p.(map[string]any)["devices"].([]any) {
						if pk, ok := d.(map[string]any)["peak_l1_busiest_core"]; ok && pk.(map[string]any)["total_bytes"].(json.Number).String() != "0" {
							chips++
						}
					}
				}
				if seen["drawn "+drawn] != chips || chips < 3 {
					t.Errorf("%s drawn on %d chip(s); the summary has %d", drawn, seen["drawn "+drawn], chips)
				}
			}
			// The charts are drawn: each region holds its series' colour,
			// and more than a blank.
			if len(bp.Charts) == 0 {
				t.Fatal("no chart in the page")
			}
			for _, b := range bp.Charts {
				if b.W < 100 || b.H < 50 {
					t.Errorf("chart %+v: too small", b)
					continue
				}
				// Below the legend, a series' line: at least 100 pixels of
				// its colour (its peak's marker alone is a few dozen).
				px := colours(bp.Shot, b, 20)
				if len(px) < 4 {
					t.Errorf("chart %+v is blank: %d colours", b, len(px))
				}
				if col, ok := seriesColour[b.Type]; ok && near(px, col) < 100 {
					t.Errorf("chart %+v: %d pixels of its series' colour %x", b, near(px, col), col)
				}
			}
			t.Logf("%d numbers, %d charts checked", len(bp.Numbers), len(bp.Charts))
		})
	}
	if t.Failed() || len(saved) < 2 {
		return
	}
	// The diff page of two runs, against diff --json.
	page, js := filepath.Join(tmp, "diff.html"), filepath.Join(tmp, "diff.json")
	if code := runTool(t, bin, "diff", saved["l1-clash"], saved["oom"], "--json", "-o", js, "--html", page); code != 0 {
		t.Fatalf("tttrace diff --html: exit %d", code)
	}
	res := lastLine(t, js)
	bp := openPage(t, browser, page)
	for _, e := range bp.Errors {
		t.Errorf("diff page in the browser: %s", e)
	}
	seen := checkDOM(t, bp.Numbers, res)
	for _, f := range []string{"a.events", "b.events", "processes.0.chips.0.counters.0.peak.b"} {
		if seen[f] == 0 {
			t.Errorf("the diff page shows no %s", f)
		}
	}
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "http://") || strings.Contains(l, "https://") {
			if !strings.Contains(l, "www.w3.org/2000/svg") {
				t.Errorf("the diff page names a URL: %.200s", l)
			}
		}
	}
}
