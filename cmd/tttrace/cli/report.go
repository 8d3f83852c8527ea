package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/session"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/perfetto"
	pprofexport "github.com/tttrace/tttrace/sinks/pprof"
)

const reportUsage = `Usage: tttrace report FILE [flags]

Reads the NDJSON of a run (tttrace --json -o FILE, or --save FILE) and writes
what the run wrote: the human report, or with --json the NDJSON (events, then
the summary line), and --pprof, --folded, --perfetto and --html. The events go
through the same ledger and outputs as when tracing, so the report and the
summary are the run's, byte for byte. The flags that shape the ledger (--l1-warn,
--max-chips, --keep-ended, --keep-ended-totals) are the run's, from the file's
first line; one given replays with that value instead (a file written before
that line: give the run's). A file
written with --no-events holds only the summary: the report is made from it,
--html without timelines and sites, and --pprof, --folded and --perfetto,
which need the events, are refused. Needs no
root. Exit status as tracing's (7 events lost, 8 --fail-on-leak, 9
--fail-on-oom, 10 --fail-on-trace-hazard, 11, 12); 1 for a file that cannot be
read to its end (the line it stopped at is said), 2 usage.

Flags:
`

// Report is `tttrace report FILE`.
func Report(args []string, stdout, stderr io.Writer) int {
	f := &Flags{}
	fs := newSubcommand("report", reportUsage, stdout, stderr)
	fs.BoolVar(&f.JSON, "json", false, "write the NDJSON (events and summary) instead of the human report")
	fs.StringVarP(&f.Output, "output", "o", "", "write the report or NDJSON to `FILE` instead of standard output")
	fs.BoolVar(&f.NoEvents, "no-events", false, "with --json, write only the summary line")
	fs.StringVar(&f.Perfetto, "perfetto", "", "write the timeline to `FILE` (thread names, read from /proc while tracing, are not in the NDJSON)")
	fs.DurationVar(&f.PerfettoOpMin, "perfetto-op-min", perfetto.DefaultOpMin, "with --perfetto, gather TT-NN op calls shorter than `DURATION` into one slice, as the run's --perfetto-op-min (0: a slice per call)")
	fs.StringVar(&f.HTML, "html", "", "write the report as one self-contained HTML page to `FILE` (charts need the events; from a summary alone, its numbers and lists)")
	fs.StringVar(&f.PProf, "pprof", "", "write device memory by allocation site to `FILE` (pprof)")
	fs.StringVar(&f.Folded, "folded", "", "write the same as folded stacks to `FILE`")
	fs.StringVar(&f.FoldedType, "folded-type", "inuse_space", "the `SAMPLE` type --folded carries")
	fs.Var(&f.L1Warn, "l1-warn", "as the run's --l1-warn `BYTES`")
	fs.IntVar(&f.MaxChips, "max-chips", devices.DefaultMaxChips, "as the run's --max-chips")
	fs.IntVar(&f.KeepEnded, "keep-ended", devices.DefaultKeepEnded, "as the run's --keep-ended")
	fs.IntVar(&f.KeepEndedTotals, "keep-ended-totals", devices.DefaultKeepEndedTotals, "as the run's --keep-ended-totals")
	fs.Var(&f.FailOnLeak, "fail-on-leak", "exit 8 when more than `BYTES` were left allocated")
	fs.Lookup("fail-on-leak").NoOptDefVal = "0"
	fs.BoolVar(&f.FailOnOOM, "fail-on-oom", false, "exit 9 when an allocation failed")
	fs.BoolVar(&f.FailOnTraceHazard, "fail-on-trace-hazard", false, "exit 10 on a trace hazard")
	if status, done := fs.parse(args); done {
		return status
	}
	usage := fs.usage
	switch {
	case fs.NArg() != 1:
		fs.Usage()
		return ExitUsage
	case !slices.Contains(pprofexport.SampleTypes, f.FoldedType):
		return usage("--folded-type %q: one of %s", f.FoldedType, strings.Join(pprofexport.SampleTypes, ", "))
	case f.NoEvents && !f.JSON:
		return usage("--no-events goes with --json")
	case f.MaxChips <= 0 || f.KeepEnded <= 0 || f.KeepEndedTotals <= 0:
		return usage("--max-chips, --keep-ended and --keep-ended-totals must be at least 1")
	case f.PerfettoOpMin < 0:
		return usage("--perfetto-op-min cannot be negative")
	}
	f.FailOnLeakSet = fs.Changed("fail-on-leak")
	path := fs.Arg(0)
	in, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace report: %s\n", sinks.Printable(err.Error()))
		return ExitError
	}
	defer in.Close()
	rd := bufio.NewReaderSize(in, 1<<16)
	if head, _ := rd.Peek(len(summaryHead)); bytes.Equal(head, []byte(summaryHead)) && (f.PProf != "" || f.Folded != "" || f.Perfetto != "") {
		return usage("%s holds only the run's summary (--no-events): --pprof, --folded and --perfetto need its events", path)
	}
	set := map[string]bool{}
	for _, name := range []string{"l1-warn", "max-chips", "keep-ended", "keep-ended-totals"} {
		set[name] = fs.Changed(name)
	}
	code, err := replay(rd, f, set, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace report: %s: %s\n", sinks.Printable(path), sinks.Printable(err.Error()))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return ExitError
	}
	return code
}

// summaryHead starts a summary line; a file that starts with one has no
// events (--no-events).
const summaryHead = `{"type":"summary"`

// replay feeds the outputs f asks for with the run read from in; set
// names the ledger's flags given (session.ReplayConfig.Set).
func replay(in io.Reader, f *Flags, set map[string]bool, stdout, stderr io.Writer) (int, error) {
	env := &outputEnv{f: f, out: stdout, stderr: stderr}
	defer func() {
		for _, o := range env.files {
			_ = o.Close()
		}
	}()
	if f.Output != "" {
		of, err := env.file(f.Output)
		if err != nil {
			return 0, fail(ExitError, "output: %w", err)
		}
		env.out = of
	}
	var ks []sinks.Sink
	for _, mk := range []func(*outputEnv) (sinks.Sink, error){reportOutput, perfettoOutput, pprofOutput, htmlOutput} {
		k, err := mk(env)
		if err != nil {
			for _, k := range ks {
				_ = k.Close()
			}
			return 0, err
		}
		if w, ok := k.(*perfetto.Writer); ok {
			w.Comm = nil // the run's threads are not this host's processes now
		}
		if k != nil {
			ks = append(ks, k)
		}
	}
	res, err := session.Replay(in, session.ReplayConfig{
		L1Warn: f.L1Warn.Bytes(), MaxChips: f.MaxChips, SiteUsage: f.PProf != "" || f.Folded != "" || f.HTML != "",
		KeepEnded: f.KeepEnded, KeepEndedTotals: f.KeepEndedTotals, Log: sinks.PrintableWriter(stderr), Set: set,
	}, ks)
	if err != nil {
		return 0, err
	}
	for _, o := range env.files {
		if err := o.Keep(); err != nil {
			return 0, fail(ExitError, "output: %w", err)
		}
	}
	return f.status(&session.Result{Summary: res.Summary}, stderr), nil
}
