package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/kube"
	"github.com/tttrace/tttrace/session"
	"github.com/tttrace/tttrace/sinks"
	otlpexport "github.com/tttrace/tttrace/sinks/otlp"
	"github.com/tttrace/tttrace/sinks/perfetto"
	pprofexport "github.com/tttrace/tttrace/sinks/pprof"
	promexport "github.com/tttrace/tttrace/sinks/prometheus"
	"github.com/tttrace/tttrace/ttmetal"
)

// Version is tttrace's version, set at build time.
var Version = "dev"

// exitError carries the exit status an error deserves.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

// ExecGate is the child side of "-- CMD"; main calls it first.
func ExecGate() { session.ExecGate() }

// Main parses args, runs tttrace and returns its exit status. Errors are
// printed once, on stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "doctor" {
		return Doctor(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "snapshot" {
		return Snapshot(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "report" {
		return Report(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "mark" {
		return Mark(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "diff" {
		return Diff(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "mcp" {
		return MCP(args[1:], os.Stdin, stdout, stderr)
	}
	f, err := Parse(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %s\n", sinks.Printable(err.Error()))
		return ExitUsage
	}
	if f.ShowHelp {
		return ExitOK
	}
	if f.ShowVer {
		fmt.Fprintf(stdout, "tttrace %s\n", Version)
		return ExitOK
	}
	ctx, stop := stopOnSignals(f, stderr)
	defer stop()
	snaps, stopSnaps := snapshotsOnSignal()
	defer stopSnaps()
	f.Snapshots = snaps
	marks, stopMarks := marksOnSignal()
	defer stopMarks()
	f.Marks = marks
	code, err := Run(ctx, f, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %s\n", sinks.Printable(err.Error()))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return exitCode(session.KindOf(err))
	}
	return code
}

// exitCode is the exit status of a runtime error of kind k.
func exitCode(k session.ErrorKind) int {
	switch k {
	case session.ErrUsage:
		return ExitUsage
	case session.ErrPermission:
		return ExitPermission
	case session.ErrNoProcess:
		return ExitNoProcess
	case session.ErrNoLibrary:
		return ExitNoLibrary
	case session.ErrUnsupported:
		return ExitUnsupported
	case session.ErrNotFound:
		return ExitNotFound
	}
	return ExitError
}

// stopOnSignals returns a context cancelled by SIGTERM, or by SIGINT. With
// -- CMD a first SIGINT (Ctrl-C, which the command receives too) keeps
// tracing while the command winds down, freeing what it frees; a second
// one stops at once.
func stopOnSignals(f *Flags, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		interrupts := 0
		for sig := range ch {
			if sig == os.Interrupt && len(f.Command) > 0 && interrupts == 0 {
				interrupts++
				fmt.Fprintf(stderr, "tttrace: interrupted: tracing until %s exits (Ctrl-C again to stop now)\n", sinks.Printable(f.Command[0]))
				continue
			}
			cancel()
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// outputEnv is what an output is made from: the flags, the report's
// writer (stdout or -o), stderr, and the files opened for the outputs.
type outputEnv struct {
	f           *Flags
	out, stderr io.Writer
	files       []*outFile
	// prom: --listen's exporter, whose snapshots --otlp reads too.
	prom *promexport.Exporter
}

// file opens an output file (see outFile) that Run makes when tracing ran.
func (e *outputEnv) file(path string) (*outFile, error) {
	o, err := newOutFile(path, e.f.All)
	if err != nil {
		return nil, err
	}
	e.files = append(e.files, o)
	return o, nil
}

// outputs are the sinks tttrace can write, in the order they are fed: each
// entry returns its sink when the flags ask for it (nil otherwise). A new
// output is one line here (and its flags).
var outputs = []func(e *outputEnv) (sinks.Sink, error){
	liveOutput,
	reportOutput,
	saveOutput,
	perfettoOutput,
	prometheusOutput,
	otlpOutput,
	pprofOutput,
	htmlOutput,
}

// pprofOutput is --pprof and --folded: device memory by allocation site.
func pprofOutput(e *outputEnv) (sinks.Sink, error) {
	f := e.f
	if f.PProf == "" && f.Folded == "" {
		return nil, nil
	}
	o := pprofexport.Options{FoldedType: f.FoldedType}
	if f.PProf != "" {
		w, err := e.file(f.PProf)
		if err != nil {
			return nil, fail(ExitError, "--pprof: %w", err)
		}
		o.Profile, o.SnapshotProfile = w, snapshotFiles(f.PProf)
	}
	if f.Folded != "" {
		w, err := e.file(f.Folded)
		if err != nil {
			return nil, fail(ExitError, "--folded: %w", err)
		}
		o.Folded, o.SnapshotFolded = w, snapshotFiles(f.Folded)
	}
	return pprofexport.New(o), nil
}

// snapshotFiles opens the file of a snapshot of the output at path:
// PATH.STAMP, made as an output file is (never through a link, 0600, put
// in place when complete).
func snapshotFiles(path string) sinks.OpenFunc {
	return func(stamp string) (io.WriteCloser, string, error) {
		name := path + "." + stamp
		o, err := newOutFile(name, false)
		if err != nil {
			return nil, name, err
		}
		return o, name, o.create()
	}
}

// reportOutput is the report, or NDJSON with --json, on stdout or -o; a
// snapshot goes into the stream on stdout, to a file of its own with -o.
func reportOutput(e *outputEnv) (sinks.Sink, error) {
	if e.f.JSON {
		n := sinks.NewNDJSON(e.out, e.f.NoEvents)
		if e.f.Output != "" {
			n.SnapshotTo(snapshotFiles(e.f.Output))
		}
		return n, nil
	}
	r := sinks.NewReport(e.out)
	if e.f.Output != "" {
		r.SnapshotTo(snapshotFiles(e.f.Output))
	}
	return r, nil
}

// saveOutput is --save: the run's NDJSON, events included, in a file.
func saveOutput(e *outputEnv) (sinks.Sink, error) {
	if e.f.Save == "" {
		return nil, nil
	}
	o, err := e.file(e.f.Save)
	if err != nil {
		return nil, fail(ExitError, "--save: %w", err)
	}
	return sinks.NewNDJSON(o, false), nil
}

// perfettoOutput is the --perfetto timeline file.
func perfettoOutput(e *outputEnv) (sinks.Sink, error) {
	if e.f.Perfetto == "" {
		return nil, nil
	}
	o, err := e.file(e.f.Perfetto)
	if err != nil {
		return nil, fail(ExitError, "--perfetto: %w", err)
	}
	w := perfetto.NewCloser(o)
	w.OpMin = e.f.PerfettoOpMin
	return w, nil
}

// prometheusOutput is the /metrics endpoint of --listen, bound now so a bad
// or busy address fails before tracing starts.
func prometheusOutput(e *outputEnv) (sinks.Sink, error) {
	f := e.f
	if f.Listen == "" {
		return nil, nil
	}
	x, err := promexport.Listen(f.Listen, promexport.Options{Labels: f.MetricsLabels, Host: f.Host})
	if err != nil {
		return nil, fail(ExitUsage, "--listen: %w", err)
	}
	e.prom = x
	return x, nil
}

// otlpOutput is --otlp: the series of --listen pushed to a collector,
// read from --listen's exporter when there is one (one snapshot for both),
// else from one of its own that it feeds.
func otlpOutput(e *outputEnv) (sinks.Sink, error) {
	f := e.f
	if f.OTLP == "" {
		return nil, nil
	}
	src, own := e.prom, false
	if src == nil {
		src, own = promexport.New(promexport.Options{Labels: f.MetricsLabels, Host: f.Host}), true
	}
	headers := map[string]string{}
	for _, h := range f.OTLPHeaders {
		k, v, _ := otlpexport.ParseHeader(h) // checked by Parse
		headers[k] = v
	}
	x, err := otlpexport.Start(src, own, otlpexport.Options{Endpoint: f.OTLP, Interval: f.OTLPInterval, Timeout: f.OTLPTimeout,
		Headers: headers, Compression: f.OTLPCompression, CAFile: f.OTLPCA, InsecureSkipVerify: f.OTLPInsecureSkipVerify,
		Host: f.Host, Version: Version, Log: e.stderr})
	if err != nil {
		return nil, fail(ExitUsage, "--otlp: %w", err)
	}
	return x, nil
}

// liveOutput is the live view on stderr when it is a terminal tttrace has
// to itself (-p, --all: with -- CMD the command writes there too, and
// redrawing in place would overwrite its output) and the human report is
// wanted.
func liveOutput(e *outputEnv) (sinks.Sink, error) {
	f, stderr := e.f, e.stderr
	file, ok := stderr.(*os.File)
	if !ok || f.JSON || f.Interval <= 0 || len(f.Command) > 0 {
		return nil, nil
	}
	if _, err := unix.IoctlGetTermios(int(file.Fd()), unix.TCGETS); err != nil {
		return nil, nil
	}
	fd := int(file.Fd())
	// Asked at each frame: a resized terminal's next frame fits it.
	return sinks.NewLive(stderr, f.Interval, func() (cols, rows int) {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil {
			return 80, 0
		}
		cols, rows = int(ws.Col), int(ws.Row)
		if cols == 0 {
			cols = 80
		}
		return cols, rows
	}), nil
}

// Run traces as f says and returns the exit status.
func Run(ctx context.Context, f *Flags, stdout, stderr io.Writer) (int, error) {
	env := &outputEnv{f: f, out: stdout, stderr: stderr}
	defer func() {
		for _, o := range env.files {
			_ = o.Close() // each sink closed its own: these are the leftovers of a failed start
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
	for _, mk := range outputs {
		k, err := mk(env)
		if err != nil {
			for _, k := range ks {
				_ = k.Close() // a half-made set of outputs: release what was opened
			}
			return 0, err
		}
		if k != nil {
			ks = append(ks, k)
		}
	}
	log := stderr
	for _, k := range ks {
		if lv, ok := k.(*sinks.Live); ok {
			// tttrace's own lines go above the live view's frame.
			log = lv.Log(stderr)
		}
	}
	cfg := f.config(log)
	if f.PodResources != "" {
		// Pods are named in the background (kube.Resolver): the kubelet
		// is asked only for processes found in a pod's cgroup.
		r, err := kube.NewResolver(kube.Options{Socket: f.PodResources, Domains: f.PodDomains, DevRoot: f.DevRoot})
		if err != nil {
			for _, k := range ks {
				_ = k.Close()
			}
			return 0, fail(ExitUsage, "--pod-resources %s: %w", f.PodResources, err)
		}
		defer r.Close()
		cfg.Pods = r
	}
	res, err := session.Run(ctx, cfg, ks)
	if err != nil {
		return 0, err
	}
	for _, o := range env.files {
		if err := o.Keep(); err != nil {
			return 0, fail(ExitError, "output: %w", err)
		}
	}
	return f.status(res, stderr), nil
}

// status is tttrace's exit status for a run that traced: the command's,
// or what the gates and the run's own problems say.
func (f *Flags) status(res *session.Result, stderr io.Writer) int {
	status := ExitOK
	if c := res.Command; c != nil {
		if c.Signal != 0 {
			status = 128 + c.Signal
		} else {
			status = c.Code
		}
	}
	if res.NoLibrary {
		fmt.Fprintf(stderr, "tttrace: no traced process loaded libtt_metal.so\n")
		if status == ExitOK {
			status = ExitNoLibrary
		}
	}
	if n := res.Summary.LostEvents; n > 0 {
		fmt.Fprintf(stderr, "tttrace: %d events lost: the ledger is incomplete (try a larger --ring-size)\n", n)
		if status == ExitOK {
			status = ExitLost
		}
	}
	if n := res.Summary.LayoutAnomalies; n > 0 {
		fmt.Fprintf(stderr, "tttrace: %d buffer(s) read with an impossible buffer type or size: the layout does not fit the library and the numbers cannot be trusted (see tttrace doctor, or give the right --layout)\n", n)
		if status == ExitOK {
			status = ExitBadLayout
		}
	}
	if n := lateLibraries(&res.Summary); n > 0 {
		fmt.Fprintf(stderr, "tttrace: %d process(es) loaded a TT-Metal library that was not probed in advance: their calls before it was probed are missed, their numbers are incomplete (give --lib to trace them from the start)\n", n)
		if status == ExitOK {
			status = ExitLateLibrary
		}
	}
	if f.FailOnLeakSet {
		n, bytes := leaked(&res.Summary)
		if bytes > f.FailOnLeak.Bytes() {
			fmt.Fprintf(stderr, "tttrace: %d leak(s), %d bytes of device memory left allocated: more than --fail-on-leak allows (%d)\n",
				n, bytes, f.FailOnLeak.Bytes())
			if status == ExitOK {
				status = ExitLeaks
			}
		}
	}
	if f.FailOnTraceHazard {
		var n uint64
		for _, p := range res.Summary.Processes {
			n += p.Traces.Problems()
		}
		if d := res.Summary.DroppedProcesses; d != nil {
			n += d.TraceProblems
		}
		if n > 0 {
			fmt.Fprintf(stderr, "tttrace: %d trace hazard(s) (--fail-on-trace-hazard); the report lists them\n", n)
			status = ExitTraceHazard
		}
	}
	if f.FailOnOOM {
		var n uint64
		for _, p := range res.Summary.Processes {
			n += p.Stats.AllocFailures
		}
		if n > 0 {
			fmt.Fprintf(stderr, "tttrace: %d failed device allocation(s) (--fail-on-oom); the report says why\n", n)
			status = ExitOOM
		}
	}
	return status
}

// lateLibraries counts the processes with late_library, dropped ones too.
func lateLibraries(s *devices.Summary) uint64 {
	var n uint64
	for i := range s.Processes {
		if s.Processes[i].LateLibrary {
			n++
		}
	}
	if d := s.DroppedProcesses; d != nil {
		n += d.LateLibrary
	}
	return n
}

// leaked counts the leaks of every process and their bytes, a mesh buffer
// once per chip it holds memory on.
func leaked(s *devices.Summary) (n int, bytes uint64) {
	for _, p := range s.Processes {
		for _, g := range p.LeakGroups { // sums the leaks, per chip and type
			n += int(g.Count)
			bytes = devices.SatAdd(bytes, g.Bytes)
		}
		for l := range p.AllUnplacedLeaks() {
			n++
			bytes = devices.SatAdd(bytes, l.Size)
		}
		if t := p.Trimmed; t != nil { // kept as totals only
			n += int(t.UnplacedLeaks)
			bytes = devices.SatAdd(bytes, t.UnplacedBytes)
		}
	}
	if d := s.DroppedProcesses; d != nil {
		n += int(d.Leaks)
		bytes = devices.SatAdd(bytes, d.LeakedBytes)
	}
	return n, bytes
}

// processStart is about when this process started: package variables
// are set before main runs (--timing counts from it).
var processStart = time.Now()

// analysis is how libraries are analysed, from the flags.
func (f *Flags) analysis() ttmetal.Options {
	opts := ttmetal.DefaultOptions()
	opts.LayoutFile, opts.Mode, opts.AtEntry, opts.NoAllocator = f.Layout, f.Probes, f.AtEntry, f.NoAllocatorProbes
	return opts
}

// config is the runtime's configuration from the flags.
func (f *Flags) config(log io.Writer) session.Config {
	// The log names paths and commands of traced processes.
	log = sinks.PrintableWriter(log)
	var tl *session.Timeline
	if f.Timing {
		tl = session.NewTimeline(log, processStart)
	}
	return session.Config{
		Timeline: tl, KnownStacks: f.KnownStacks, CheckKnownStacks: f.CheckKnownStacks,
		PIDs: f.PIDs, Command: f.Command, All: f.All, Follow: f.Follow,
		Lib: f.Lib, Analysis: f.analysis(),
		RingSize: int(f.RingSize.Bytes()), Wait: f.Wait, L1Warn: f.L1Warn.Bytes(), ReadyFile: f.ReadyFile, Log: log, SingleUprobes: f.NoMulti, NoStacks: f.NoStacks, NoOps: f.NoOps,
		MaxChips:  f.MaxChips,
		SiteUsage: f.PProf != "" || f.Folded != "" || f.HTML != "",
		Snapshots: f.Snapshots,
		Marks:     f.Marks,
		KeepEnded: f.KeepEnded, KeepEndedTotals: f.KeepEndedTotals,
		Host: f.Host, DevRoot: f.DevRoot,
	}
}
