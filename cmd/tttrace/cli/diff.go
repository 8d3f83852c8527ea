package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/session"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/diff"
)

const diffUsage = `Usage: tttrace diff A B [flags]

Compares two runs, A (the baseline) and B: each the NDJSON of a run
(tttrace --json -o FILE, or --save FILE) or a summary alone (--json
--no-events, or a snapshot's FILE.STAMP). Each is replayed as tttrace report
replays it; then, per process (matched by command: the n-th process of a
command in A with the n-th in B, and the runs' only unmatched processes with
each other), chip and type, it says what changed: the totals at the end, the
peaks and when they came (after the process's first event), the allocator's
numbers, the leaks, CB bytes, L1 per core (what the busiest core's L1
holds: l1_busiest_core_bytes) and the minimum L1 headroom, the allocation sites
that grew, appeared or vanished, the failed allocations, L1 clashes and
Metal trace problems one run has more of than the other, the windows
(tttrace mark; matched by name, else index) whose peaks or memory_stats
differ per chip, and the TT-NN ops (by op and device op) whose bytes, peaks,
calls, failures or leaks differ. Sites are matched by
their Python lines and symbolized native frames (function, module, DWARF
line), never by address: without DWARF, two calls in one native function with
the same Python stack are one site. With a summary alone, sites compare by
what they hold at the end (their leaks). Needs no root.

Exit status: 0; 13 with --fail-on-growth when a memory counter (a type's
bytes, the CB bytes or L1 per core of a chip of a process, at the end, at its
peak, or at its peak in a window both runs have) is higher in B by more than it allows; with --fail-on-growth, 7 when a run lost
events and 12 when its layout did not fit the library come first (a ledger
incomplete or untrusted cannot judge growth); 1 a file that cannot be read to
its end (the line it stopped at is said), 2 usage.

Flags:
`

// Diff is `tttrace diff A B`.
func Diff(args []string, stdout, stderr io.Writer) int {
	var (
		jsonOut  bool
		output   string
		limit    growthLimit
		maxChips int
		htmlOut  string
	)
	fs := newSubcommand("diff", diffUsage, stdout, stderr)
	fs.BoolVar(&jsonOut, "json", false, "write the comparison as one JSON object (docs/ndjson.md) instead of the table")
	fs.StringVarP(&output, "output", "o", "", "write to `FILE` instead of standard output")
	fs.StringVar(&htmlOut, "html", "", "also write the comparison as one self-contained HTML page to `FILE` (opens from disk, fetches nothing)")
	fs.Var(&limit, "fail-on-growth", "exit 13 when a memory counter of a chip of a process (a type's bytes, CBs, L1 per core) is higher in B, at the end, at its peak or at its peak in a window, by more than `BYTES|PCT%`: bytes (K, M, G suffixes) or a percentage of A's (a counter that was 0 in A grows past any percentage); a CI gate")
	fs.IntVar(&maxChips, "max-chips", devices.DefaultMaxChips, "as the runs' --max-chips")
	if status, done := fs.parse(args); done {
		return status
	}
	usage := fs.usage
	switch {
	case fs.NArg() != 2:
		fs.Usage()
		return ExitUsage
	case maxChips <= 0:
		return usage("--max-chips must be at least 1")
	}
	var runs [2]*diff.Run
	for i, path := range fs.Args() {
		r, err := diffRun(path, maxChips, fs.Changed("max-chips"))
		if err != nil {
			fmt.Fprintf(stderr, "tttrace diff: %s: %s\n", sinks.Printable(path), sinks.Printable(err.Error()))
			return ExitError
		}
		runs[i] = r
	}
	res := diff.Compare(runs[0], runs[1], fs.Arg(0), fs.Arg(1))
	if err := writeDiff(res, jsonOut, output, stdout); err != nil {
		fmt.Fprintf(stderr, "tttrace diff: %s\n", sinks.Printable(err.Error()))
		return ExitError
	}
	if htmlOut != "" {
		if err := writeDiffHTML(res, htmlOut); err != nil {
			fmt.Fprintf(stderr, "tttrace diff: --html: %s\n", sinks.Printable(err.Error()))
			return ExitError
		}
	}
	if !limit.set {
		return ExitOK
	}
	for _, ri := range []*diff.RunInfo{&res.A, &res.B} {
		if ri.LostEvents > 0 {
			fmt.Fprintf(stderr, "tttrace diff: %s lost %d events: its ledger is incomplete and cannot judge growth\n", sinks.Printable(ri.File), ri.LostEvents)
			return ExitLost
		}
	}
	for _, ri := range []*diff.RunInfo{&res.A, &res.B} {
		if ri.LayoutAnomalies > 0 {
			fmt.Fprintf(stderr, "tttrace diff: %s read buffers with a layout that does not fit its library: its numbers cannot judge growth\n", sinks.Printable(ri.File))
			return ExitBadLayout
		}
	}
	if over := res.Exceeding(limit.l); len(over) > 0 {
		g := &over[0]
		fmt.Fprintf(stderr, "tttrace diff: %d memory counter(s) grew more than --fail-on-growth %s allows; the most: %s chip %d %s at %s, %d -> %d bytes\n",
			len(over), limit.String(), pids(g.PidA, g.PidB), g.Device, g.Counter, sinks.Printable(diff.GrowthAt(g)), g.A, g.B)
		return ExitGrowth
	}
	return ExitOK
}

// pids names a process by its pid in A and B.
func pids(a, b *uint32) string {
	switch {
	case a != nil && b != nil:
		return fmt.Sprintf("pid %d (A) / %d (B)", *a, *b)
	case b != nil:
		return fmt.Sprintf("pid %d (only in B)", *b)
	}
	return "a process"
}

// diffRun replays the run in the file at path into a diff.Collector, as
// tttrace report replays it.
func diffRun(path string, maxChips int, maxChipsSet bool) (*diff.Run, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	c := diff.NewCollector()
	// Every ended process kept in full (up to the collector's bound): the
	// diff compares their sites. The log is the run's notes, not the diff's.
	// --l1-warn and, unless given, --max-chips are the run's (its run line).
	_, err = session.Replay(bufio.NewReaderSize(in, 1<<16), session.ReplayConfig{
		MaxChips: maxChips, SiteUsage: true, KeepEnded: diff.MaxProcesses, KeepEndedTotals: 1, Log: io.Discard,
		Set: map[string]bool{"max-chips": maxChipsSet, "keep-ended": true, "keep-ended-totals": true},
	}, []sinks.Sink{c})
	if err != nil {
		return nil, err
	}
	return c.Run()
}

// writeDiff writes res (as JSON, or the table) to path, or to stdout.
func writeDiff(res *diff.Result, jsonOut bool, path string, stdout io.Writer) error {
	var w io.Writer = stdout
	var o *outFile
	if path != "" {
		var err error
		if o, err = newOutFile(path, false); err != nil {
			return fmt.Errorf("output: %w", err)
		}
		w = o
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var err error
	if jsonOut {
		var b []byte
		if b, err = json.Marshal(res); err == nil {
			_, err = sinks.C1Escaped(bw).Write(append(b, '\n'))
		}
	} else {
		err = res.WriteText(bw)
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if o != nil {
		if err == nil {
			err = o.Keep()
		}
		if cerr := o.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// growthLimit is --fail-on-growth: BYTES, or PCT% of A's value.
type growthLimit struct {
	l   diff.Limit
	set bool
}

func (g *growthLimit) Set(s string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("%q is not a percentage", s)
		}
		g.l, g.set = diff.Limit{Pct: v, IsPct: true}, true
		return nil
	}
	var b ByteSize
	if err := b.Set(s); err != nil {
		return fmt.Errorf("%q is neither a number of bytes nor a percentage (PCT%%)", s)
	}
	g.l, g.set = diff.Limit{Bytes: b.Bytes()}, true
	return nil
}

func (g *growthLimit) String() string {
	switch {
	case !g.set:
		return ""
	case g.l.IsPct:
		return strconv.FormatFloat(g.l.Pct, 'g', -1, 64) + "%"
	}
	b := ByteSize{n: g.l.Bytes}
	return b.String()
}

func (g *growthLimit) Type() string { return "limit" }
