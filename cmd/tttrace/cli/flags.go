// Package cli is tttrace's command line: the flags, the choice of outputs
// (package sinks), doctor, and the mapping of the runtime's results and
// error kinds (package session) to exit statuses. cmd/tttrace's main only
// parses and calls Run.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/kube"
	"github.com/tttrace/tttrace/session"
	otlpexport "github.com/tttrace/tttrace/sinks/otlp"
	"github.com/tttrace/tttrace/sinks/perfetto"
	pprofexport "github.com/tttrace/tttrace/sinks/pprof"
	promexport "github.com/tttrace/tttrace/sinks/prometheus"
	"github.com/tttrace/tttrace/ttmetal"
)

// Exit statuses of tttrace itself. In "-- CMD" mode tttrace exits with
// CMD's status instead, unless tracing failed or lost events.
const (
	ExitOK          = 0
	ExitError       = 1   // anything not listed below
	ExitUsage       = 2   // bad flags or arguments
	ExitPermission  = 3   // not root / BPF refused
	ExitNoProcess   = 4   // -p PID does not exist
	ExitNoLibrary   = 5   // library not found, or not mapped within --wait
	ExitUnsupported = 6   // library lacks symbols tttrace needs, or its layout is unknown
	ExitLost        = 7   // tracing worked but events were lost: the ledger is incomplete
	ExitLeaks       = 8   // --fail-on-leak: more device memory was left allocated than allowed
	ExitOOM         = 9   // --fail-on-oom: a traced process had a failed device allocation (caught or not)
	ExitTraceHazard = 10  // --fail-on-trace-hazard: a trace replay overwrote live buffers, or another trace hazard
	ExitLateLibrary = 11  // a process's library was probed only after it mapped it: its calls before were missed
	ExitBadLayout   = 12  // impossible buffer types or sizes: the layout does not fit the library, the numbers cannot be trusted
	ExitGrowth      = 13  // tttrace diff --fail-on-growth: a memory counter grew more than allowed from run A to run B
	ExitNotFound    = 127 // CMD not found (as a shell reports it)
)

// Flags are tttrace's options.
type Flags struct {
	PIDs     []int
	Lib      string
	Layout   string
	Probes   ttmetal.ProbeMode
	JSON     bool
	Output   string
	NoEvents bool
	// Save: also write the run's NDJSON, events included, to this file
	// (--save), whatever else is written: tttrace report and tttrace diff
	// read it.
	Save     string
	Perfetto string
	// PerfettoOpMin: TT-NN op calls shorter than this are gathered into
	// one slice of the timeline (--perfetto-op-min).
	PerfettoOpMin time.Duration
	// HTML: also write the report as one self-contained HTML page.
	HTML     string
	NoStacks bool // no allocation stacks
	NoOps    bool // no TT-NN op probes
	// RingSize is --ring-size (a power of two).
	RingSize  ByteSize
	Wait      time.Duration
	Interval  time.Duration
	ReadyFile string
	Listen    string // serve Prometheus metrics at this host:port
	// OTLP: push the same metrics to this OTLP/HTTP URL (--otlp), every
	// OTLPInterval, each export within OTLPTimeout, with OTLPHeaders,
	// OTLPCompression, OTLPCA, OTLPInsecureSkipVerify.
	OTLP                   string
	OTLPInterval           time.Duration
	OTLPTimeout            time.Duration
	OTLPHeaders            []string
	OTLPCompression        string
	OTLPCA                 string
	OTLPInsecureSkipVerify bool

	// --pprof: a pprof profile of device memory by site; --folded: folded
	// stacks of the same, carrying the sample type FoldedType.
	PProf, Folded, FoldedType string
	// Host names this machine in the outputs (--host, default its name).
	Host string
	// DevRoot: tests only: a directory whose dev/tenstorrent and sys stand
	// for every process's /dev/tenstorrent and the host's /sys.
	DevRoot string
	// Snapshots: each value asks for a snapshot (SIGUSR1); set by Main.
	Snapshots <-chan struct{}
	// Marks: each value starts a window (SIGUSR2, tttrace mark); set by
	// Main.
	Marks <-chan session.MarkRequest

	// MetricsLabels: the per-process labels of the metrics (--metrics-labels).
	MetricsLabels []string
	// PodResources: the kubelet's pod-resources socket ("": not asked);
	// PodDomains: the resource domains of Tenstorrent devices there.
	PodResources string
	PodDomains   []string
	// MaxChips: distinct chips a process may touch (--max-chips).
	MaxChips int
	// KeepEnded, KeepEndedTotals: retention of ended processes.
	KeepEnded, KeepEndedTotals int
	Follow                     bool
	All                        bool
	NoMulti                    bool // hidden: classic uprobes even where uprobe_multi links exist (tests)
	AtEntry                    bool // hidden: entry probes on the first instruction, not placed (measurements)
	NoAllocatorProbes          bool // hidden: the allocator's probes left out (measurements)
	Timing                     bool // hidden: say how long each step of start-up and teardown took
	KnownStacks                bool // stacks seen before are sent as a token (bpf/stack.h; on by default)
	CheckKnownStacks           bool // hidden: known stacks come with their copy, checked against their token
	// FailOnLeak is --fail-on-leak's threshold, FailOnLeakSet whether the
	// gate is on.
	FailOnLeak    ByteSize
	FailOnLeakSet bool
	// FailOnOOM: --fail-on-oom.
	FailOnOOM bool
	// FailOnTraceHazard: --fail-on-trace-hazard.
	FailOnTraceHazard bool
	// L1Warn is --l1-warn (0: off).
	L1Warn   ByteSize
	ShowHelp bool
	ShowVer  bool
	Command  []string
}

const usageHead = `tttrace shows where Tenstorrent device memory goes in a program using
TT-Metal: per chip, the DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY and
circular-buffer bytes in use, their peaks, leaks and lifecycle anomalies.
It attaches eBPF uprobes to libtt_metal.so; TT-Metal needs no rebuild and no
environment variables. Needs root (or CAP_BPF + CAP_PERFMON).

Usage:
  tttrace [flags] -p PID [-p PID ...]   trace running processes
  tttrace [flags] -- CMD [ARGS...]      start CMD traced from its first
                                        instruction; exit with its status
  tttrace [flags] --all                 trace every process using TT-Metal,
                                        including ones that start later
  tttrace doctor [LIB | -p PID] [--json]
                                        check a library: layout, probe plan,
                                        attach points, kernel features
  tttrace snapshot PID                  ask the tttrace running as PID to
                                        write its report, summary and profile
                                        as of now (as kill -USR1 PID does)
  tttrace mark PID [NAME]               ask it to start a window (as kill -USR2
                                        PID does): peaks and memory_stats per
                                        window in the summary, the report and
                                        --listen's /v1/memory_stats
  tttrace report FILE [flags]           the report, summary (--json), --pprof,
                                        --folded and --perfetto of a saved run
                                        (--json or --save), from its NDJSON
  tttrace diff A B [flags]              what changed from run A to run B (their
                                        NDJSON or summaries): per process, chip
                                        and type; --fail-on-growth for CI
  tttrace mcp --runs DIR [--live]       a Model Context Protocol server (stdio)
                                        for agents: chips, holders, failed
                                        allocations, hazards, leaks, windows
                                        and diffs of saved or running runs

Examples:
  sudo tttrace -p 4242
  sudo tttrace --lib build/lib/libtt_metal.so -- python -m pytest tests/ttnn
  sudo tttrace --json -o trace.ndjson -- ./my_workload
  sudo tttrace --json --no-events -p 4242 | jq '.processes[].devices'
  sudo tttrace --perfetto mem.pftrace -- ./my_workload   (then open
                                        mem.pftrace at ui.perfetto.dev)
  sudo tttrace --html mem.html -- ./my_workload   (open mem.html from
                                        disk: charts, failures, leaks, sites)
  sudo tttrace --all --listen 127.0.0.1:9464   # Prometheus scrapes /metrics
  sudo tttrace --all --otlp http://127.0.0.1:4318   # push the same metrics
                                        to an OpenTelemetry collector

Without --lib, tttrace finds the library in the process (by name, or by its
symbols if renamed), probes likely copies before they load (the command's
directories, LD_LIBRARY_PATH, PYTHONPATH, TT_METAL_HOME, the interpreter's
site-packages), and hears of any other through the dynamic loader.

Tracing ends when every traced process has exited or on SIGINT/SIGTERM;
the summary (per-chip totals, peaks, leaks) is printed then. A process
that ends while others are traced gets its own report at once.

Flags:
`

const usageTail = `
Exit status: in "-- CMD" mode, CMD's status (128+N if killed by signal N);
otherwise 0. Errors of tttrace itself: 1 other, 2 usage, 3 permission,
4 no such process, 5 library not found, 6 unsupported library, 7 events were
lost (the ledger is incomplete), 8 more device memory left allocated than
--fail-on-leak allows, 9 a failed device allocation with --fail-on-oom,
10 a trace hazard with --fail-on-trace-hazard (a Metal trace replay that
overwrites live buffers, a replay of a released trace or of one whose device
closed, a trace buffer under another live trace's high-water mark),
11 a process loaded a TT-Metal library that was not probed in advance (with
--all: one no process had mapped before), so its calls before the probes
landed were missed (late_library; give --lib to trace it from the start),
12 the layout tttrace read Buffer with does not fit the library (impossible
buffer types or sizes were read: the numbers cannot be trusted), 13 (tttrace
diff) a memory counter grew from run A to run B more than --fail-on-growth
allows, 127 CMD not found. In "-- CMD" mode 7, 8, 11 and 12 are reported
only when CMD succeeded;
7 wins over 12, 12 over 11, and all three over 8 (a ledger incomplete or untrusted
cannot judge leaks); 9 wins over every other status, CMD's included (an
allocation seen failing did fail), then 10 (a replay seen overwriting live
buffers did).

CI gate: sudo tttrace --fail-on-leak -- python -m pytest tests/  exits 8 if
any test left device memory allocated (the report lists where);
--fail-on-oom exits 9 if any allocation failed, even one the tests caught
(the report says why each failed and what filled the chip).

L1 clashes: when a program's circular buffers reach past the lowest L1 buffer
of a chip (TT-Metal then throws "circular buffers ... clash with L1
buffers"), tttrace says at once which L1 buffers are in the way (an l1_clash
record, a note on stderr, the report). --l1-warn 64K also reports chips whose
headroom (lowest L1 buffer - end of the CB region) drops under 64 KiB.

Allocators read from memory: attached to a running process (-p, --all),
tttrace reads the allocators of the chips it opened before from its memory:
at most 8 MiB in 8192 reads of it, and free lists of 262144 blocks in all,
per process; none of chips past --max-chips. A process over that budget
has no allocator view read from memory, and says why.

Physical chips: a process's chip ids are named (chip_uid) by their UMD
unique id where its memory shows it (its Devices' SHM counters and the
/dev/shm/tt_device_<id>_memory files it maps; chips reached over Ethernet
too; needs the library's DWARF), else by PCI address from its
TT_VISIBLE_DEVICES and /dev/tenstorrent, counted in host-wide sums
(--listen's tttrace_chip_memory_bytes, the live view) only on the devices
it is seen holding open (/proc/PID/fd); the others have chip_uid null, and
say why.

The NDJSON schema is documented in docs/ndjson.md.
`

// Parse reads args (without the program name).
func Parse(args []string, stderr io.Writer) (*Flags, error) {
	f := &Flags{}
	fs := pflag.NewFlagSet("tttrace", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.IntSliceVarP(&f.PIDs, "pid", "p", nil, "trace the running process `PID` (repeatable); the allocators of the chips it opened before are read from its memory, within a budget (below)")
	fs.StringVar(&f.Lib, "lib", "", "the TT-Metal library to probe, when it is not found in the process (`PATH` to libtt_metal.so)")
	fs.StringVar(&f.Layout, "layout", "", "read Buffer/Device field offsets from `FILE` (JSON, see docs/layout.md) instead of detecting them")
	fs.Var(&f.Probes, "probes", "probe `PLAN`: tracker (GraphTracker::track_*), lifecycle (Buffer's own functions) or auto (from the library's code)")
	fs.BoolVar(&f.JSON, "json", false, "write NDJSON (one event per line, then the summary) instead of the human report")
	fs.StringVarP(&f.Output, "output", "o", "", "write the report or NDJSON to `FILE` instead of standard output (made 0600 and put in place when tracing ends; a symbolic link is refused)")
	fs.BoolVar(&f.NoEvents, "no-events", false, "with --json, write only the summary line")
	fs.StringVar(&f.Save, "save", "", "also write the run's NDJSON, events included, to `FILE` (as --json -o FILE does), whatever else is written: `tttrace report FILE` gives its report and outputs again, `tttrace diff` compares two runs")
	fs.StringVar(&f.Perfetto, "perfetto", "", "also write a timeline to `FILE` (Perfetto protobuf; open it at https://ui.perfetto.dev): a bytes counter per process, chip and memory type, instants at device closes, exits, anomalies and lost records, a slice per TT-NN op call on its thread; see docs/perfetto.md")
	fs.DurationVar(&f.PerfettoOpMin, "perfetto-op-min", perfetto.DefaultOpMin, "with --perfetto, gather a thread's TT-NN op calls shorter than `DURATION` into one slice (a \"calls\" count; \"short ops\" when they were of several ops) so that a run of millions of ops stays small; 0: a slice per call")
	fs.StringVar(&f.HTML, "html", "", "also write the report as one self-contained HTML page to `FILE` (opens from disk, fetches nothing): per chip memory over time per buffer type with the peaks marked, the allocator's use and largest free block, failed allocations with their cause and holders, L1 headroom and clashes, trace hazards, leaks and their sites, the sites as an icicle view; timelines downsampled keeping every peak exactly; see docs/html.md")
	fs.StringVar(&f.PProf, "pprof", "", "also write device memory by allocation site to `FILE` when tracing ends: a gzipped pprof profile (go tool pprof -top FILE) with inuse_space/inuse_objects (live: the leaks), alloc_space/alloc_objects, peak_space, l1_core_peak_space (what filled each chip's busiest core at its L1 peak: buffers by site, resident CBs by program), labels pid, chip, type; see docs/pprof.md")
	fs.StringVar(&f.Folded, "folded", "", "also write the same as folded stacks to `FILE` (flamegraph.pl, speedscope, inferno)")
	fs.StringVar(&f.FoldedType, "folded-type", "inuse_space", "the `SAMPLE` type --folded carries: inuse_space, inuse_objects, alloc_space, alloc_objects, peak_space or l1_core_peak_space")
	fs.BoolVar(&f.NoStacks, "no-stacks", false, "do not capture where buffers are allocated (no sites in the report)")
	fs.BoolVar(&f.NoOps, "no-ops", false, "do not probe TT-NN's op functions (_ttnn*.so, _ttnncpp.so, libttnn*.so): records no longer name the op (ttnn.matmul, its device op and runtime id) they were made in, which costs one probe hit per op call and one look at the thread's op frames per allocation; see docs/probes.md")
	f.RingSize = ByteSize{n: 64 << 20, powerOfTwo: true}
	fs.Var(&f.RingSize, "ring-size", "BPF ring buffer `SIZE` (power of two; K, M, G suffixes): kernel memory held while tracing (tttrace itself maps ~2 MiB of it); smaller loses records sooner in a burst the reader cannot keep up with (counted, exit 7)")
	fs.DurationVar(&f.Wait, "wait", 0, "with -p, fail if a process has not loaded libtt_metal.so after `DURATION` (0: wait until it exits)")
	fs.DurationVar(&f.Interval, "interval", time.Second, "refresh the live per-chip view every `DURATION` (-p, --all; stderr a terminal; 0 turns it off); a terminal too short for every chip's block gets a line per chip, the most pressed first, as many as fit")
	fs.StringVar(&f.Listen, "listen", "", "serve Prometheus metrics at http://`ADDR`/metrics while tracing (e.g. 127.0.0.1:9464; :9464 on every interface); the endpoint stops with tttrace. Bounds: 64 connections, 8 per peer (remote IP; IPv6 /64), a new connection taking the place of one waiting for a request or not reading its answer, so held sockets cannot keep a scrape out; requests with a body refused; the chips whose leaked and failure series exist are those of the traced processes and of the last --keep-ended ended ones (a chip trimmed away or closed with nothing left is forgotten), at most 1024 with series of their own. See docs/prometheus.md")
	fs.StringVar(&f.OTLP, "otlp", "", "push the metrics of --listen to an OpenTelemetry collector at `URL` every --otlp-interval (OTLP HTTP/protobuf; http://HOST:4318, or https://...; no path: /v1/metrics), under OpenTelemetry's names (hw.gpu.memory.usage per physical chip, tttrace.* per process; the pod as k8s.pod.name); with or without --listen. Never waits: a failed export is dropped (the values are cumulative) and said on the log once per interval. OTEL_EXPORTER_OTLP_* and OTEL_RESOURCE_ATTRIBUTES apply where no flag says otherwise. See docs/otlp.md")
	fs.DurationVar(&f.OTLPInterval, "otlp-interval", otlpexport.DefaultInterval, "with --otlp, the time `D` between exports (at least 100ms)")
	fs.DurationVar(&f.OTLPTimeout, "otlp-timeout", otlpexport.DefaultTimeout, "with --otlp, the most one export may take, retries included (at most --otlp-interval)")
	fs.StringArrayVar(&f.OTLPHeaders, "otlp-header", nil, "with --otlp, send the header `KEY=VALUE` with every request (repeatable); the command line is readable by every local user: give a token in OTEL_EXPORTER_OTLP_METRICS_HEADERS instead")
	fs.StringVar(&f.OTLPCompression, "otlp-compression", "", "with --otlp, compress the requests: `gzip` or none (default: the SDK's, or OTEL_EXPORTER_OTLP_COMPRESSION)")
	fs.StringVar(&f.OTLPCA, "otlp-ca", "", "with an https --otlp, also trust the PEM certificates in `FILE`")
	fs.BoolVar(&f.OTLPInsecureSkipVerify, "otlp-insecure-skip-verify", false, "with an https --otlp, trust any certificate (a test collector)")
	fs.StringSliceVar(&f.MetricsLabels, "metrics-labels", promexport.ProcessLabels, "with --listen, the per-process `LABELS` of the metrics (pid, command, host, rank, mesh_id, mesh_host_rank, pod, namespace, container); --metrics-labels pid keeps command lines, which may hold secrets, out of the metrics")
	fs.StringVar(&f.PodResources, "pod-resources", kube.DefaultSocket, "name the Kubernetes pod and container of each traced process that runs in a pod (its cgroup gives the pod's UID and the container's ID): the kubelet's pod-resources API at `SOCKET` is asked, off the records' path and at most once a second, which pod's container holds the Tenstorrent devices the process has open; in the summary, the live view and the metrics' pod, namespace and container labels (\"\": do not ask). See docs/kubernetes.md")
	fs.StringSliceVar(&f.PodDomains, "pod-device-domain", []string{kube.DefaultDomain}, "the resource `DOMAINS` of Tenstorrent devices in the kubelet's pod resources: device plugin resources DOMAIN/NAME, DRA drivers and CDI vendors DOMAIN or a subdomain of it")
	fs.IntVar(&f.MaxChips, "max-chips", devices.DefaultMaxChips, "distinct chips a process may touch: events on more chips count nothing and are too_many_chips anomalies, and the allocators of more chips are not read from its memory (a bound on what a hostile process can make tttrace hold)")
	fs.IntVar(&f.KeepEnded, "keep-ended", devices.DefaultKeepEnded, "keep the last `N` ended processes in full (leak lists, sites, anomalies) for the final report; older ones keep only their totals and counters")
	fs.IntVar(&f.KeepEndedTotals, "keep-ended-totals", devices.DefaultKeepEndedTotals, "keep `N` more ended processes as totals only (their command line cut at 4 KiB); older ones are only summed (dropped_processes); bounds tttrace's memory under --all")
	fs.Var(&f.FailOnLeak, "fail-on-leak", "exit 8 when more than `BYTES` of device memory are left allocated when tracing ends (bare flag: any leak; K, M, G suffixes); a CI gate")
	fs.Lookup("fail-on-leak").NoOptDefVal = "0"
	fs.BoolVar(&f.FailOnTraceHazard, "fail-on-trace-hazard", false, "exit 10 when a traced process replayed a Metal trace over live buffers allocated after its capture (trace_hazard), replayed a released trace or one whose device closed, or placed a trace buffer under another live trace's high-water mark; a CI gate")
	fs.BoolVar(&f.FailOnOOM, "fail-on-oom", false, "exit 9 when a traced process had any failed device allocation (TT-Metal's \"Out of Memory\"), even one it caught; a CI gate")
	fs.Var(&f.L1Warn, "l1-warn", "report (l1_headroom) a chip whose L1 headroom, lowest L1 buffer address minus the end of the circular-buffer region, drops under `BYTES` (K, M suffixes); clashes (l1_clash) are reported always")
	fs.StringVar(&f.Host, "host", "", "name this machine `HOST` on every process in the outputs (default: its host name); with one tttrace per host, ranks are told apart by host")
	fs.StringVar(&f.ReadyFile, "ready-file", "", "create `FILE` once the probes are attached (for scripts and tests)")
	fs.BoolVar(&f.Follow, "follow", false, "also trace the processes the traced ones fork (default: on with -- CMD, off with -p)")
	fs.BoolVar(&f.All, "all", false, "trace every process that loads libtt_metal.so, now or later, until interrupted")
	fs.BoolVarP(&f.ShowHelp, "help", "h", false, "show this help")
	fs.BoolVar(&f.ShowVer, "version", false, "print the version")
	fs.BoolVar(&f.NoMulti, "no-uprobe-multi", false, "attach one classic uprobe per probe point, as on kernels before 6.6 (for tests)")
	_ = fs.MarkHidden("ready-file")
	fs.StringVar(&f.DevRoot, "dev-root", "", "read every process's /dev/tenstorrent and the host's /sys under `DIR` (for tests)")
	_ = fs.MarkHidden("dev-root")
	_ = fs.MarkHidden("no-uprobe-multi")
	fs.BoolVar(&f.AtEntry, "probe-at-entry", false, "put entry probes on each function's first instruction even where the kernel would single-step it (for measurements)")
	_ = fs.MarkHidden("probe-at-entry")
	fs.BoolVar(&f.NoAllocatorProbes, "no-allocator-probes", false, "leave the allocator's probes out: no allocator view (for measurements)")
	_ = fs.MarkHidden("no-allocator-probes")
	fs.BoolVar(&f.Timing, "timing", false, "say on stderr how long each step of start-up and teardown took (for measurements)")
	_ = fs.MarkHidden("timing")
	fs.BoolVar(&f.KnownStacks, "known-stacks", true, "send the stack of an allocation site seen before as a token instead of a copy (--known-stacks=false: copy and unwind every allocation's stack)")
	fs.BoolVar(&f.CheckKnownStacks, "check-known-stacks", false, "send the copy of a known stack too and check that it unwinds to the stack its token names (for tests)")
	_ = fs.MarkHidden("check-known-stacks")
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fmt.Fprint(stderr, fs.FlagUsages())
		fmt.Fprint(stderr, usageTail)
	}
	fs.SetInterspersed(true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			f.ShowHelp = true
			return f, nil
		}
		var bad *pflag.InvalidValueError
		if errors.As(err, &bad) {
			if _, ok := bad.GetFlag().Value.(*ByteSize); ok {
				// The size's own words: --ring-size: "6X" is not a number of bytes.
				err = fmt.Errorf("--%s: %w", bad.GetFlag().Name, errors.Unwrap(bad))
			}
		}
		return nil, usageError{err}
	}
	if f.ShowHelp {
		fs.Usage()
		return f, nil
	}
	if f.ShowVer {
		return f, nil
	}
	if fs.ArgsLenAtDash() >= 0 {
		if fs.ArgsLenAtDash() > 0 {
			return nil, usageError{fmt.Errorf("unexpected argument %q before --", fs.Args()[0])}
		}
		f.Command = fs.Args()
		if len(f.Command) == 0 {
			return nil, usageError{errors.New("-- must be followed by a command")}
		}
	} else if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected argument %q (put the command to trace after --)", fs.Arg(0))}
	}
	modes := 0
	for _, on := range []bool{len(f.PIDs) > 0, len(f.Command) > 0, f.All} {
		if on {
			modes++
		}
	}
	switch {
	case modes == 0:
		fs.Usage()
		return nil, usageError{errors.New("nothing to trace: give -p PID, -- CMD or --all")}
	case modes > 1:
		return nil, usageError{errors.New("-p, -- CMD and --all cannot be combined")}
	}
	if !fs.Changed("follow") {
		f.Follow = len(f.Command) > 0
	}
	if f.Wait > 0 && len(f.PIDs) == 0 {
		return nil, usageError{errors.New("--wait goes with -p")}
	}
	for _, p := range f.PIDs {
		if p <= 0 {
			return nil, usageError{fmt.Errorf("-p %d: not a process id", p)}
		}
	}
	if !slices.Contains(pprofexport.SampleTypes, f.FoldedType) {
		return nil, usageError{fmt.Errorf("--folded-type %q: one of %s", f.FoldedType, strings.Join(pprofexport.SampleTypes, ", "))}
	}
	if (f.PProf != "" || f.Folded != "") && f.NoStacks {
		return nil, usageError{errors.New("--pprof and --folded need the allocation stacks (not --no-stacks)")}
	}
	if f.Host == "" {
		f.Host, _ = os.Hostname()
	}
	if len(f.Host) > 255 || strings.ContainsFunc(f.Host, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, usageError{errors.New("--host: at most 255 printable characters")}
	}
	if f.NoEvents && !f.JSON {
		return nil, usageError{errors.New("--no-events goes with --json")}
	}
	f.FailOnLeakSet = fs.Changed("fail-on-leak")
	if fs.Changed("listen") {
		if err := promexport.CheckAddr(f.Listen); err != nil {
			return nil, usageError{fmt.Errorf("--listen: %w", err)}
		}
	}
	if err := checkOTLP(fs, f); err != nil {
		return nil, usageError{err}
	}
	if fs.Changed("metrics-labels") {
		if f.Listen == "" && f.OTLP == "" {
			return nil, usageError{errors.New("--metrics-labels goes with --listen or --otlp")}
		}
		if err := promexport.CheckLabels(f.MetricsLabels); err != nil {
			return nil, usageError{fmt.Errorf("--metrics-labels: %w", err)}
		}
	}
	if f.MaxChips <= 0 {
		return nil, usageError{errors.New("--max-chips must be at least 1")}
	}
	if f.KeepEnded <= 0 || f.KeepEndedTotals <= 0 {
		return nil, usageError{errors.New("--keep-ended and --keep-ended-totals must be at least 1")}
	}
	if f.Wait < 0 || f.Interval < 0 || f.PerfettoOpMin < 0 {
		return nil, usageError{errors.New("--wait, --interval and --perfetto-op-min cannot be negative")}
	}
	return f, nil
}

// usageError marks errors that deserve ExitUsage.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// checkOTLP checks the --otlp flags: every --otlp-* goes with --otlp, the
// URL, interval, timeout, headers and compression are checked before
// anything is traced.
func checkOTLP(fs *pflag.FlagSet, f *Flags) error {
	if f.OTLP == "" {
		for _, n := range []string{"otlp-interval", "otlp-timeout", "otlp-header", "otlp-compression", "otlp-ca", "otlp-insecure-skip-verify"} {
			if fs.Changed(n) {
				return fmt.Errorf("--%s goes with --otlp", n)
			}
		}
		if fs.Changed("otlp") {
			return errors.New("--otlp: an empty URL")
		}
		return nil
	}
	tg, err := otlpexport.ParseEndpoint(f.OTLP)
	if err != nil {
		return fmt.Errorf("--otlp: %w", err)
	}
	if tg.Plain && (f.OTLPCA != "" || f.OTLPInsecureSkipVerify) {
		return errors.New("--otlp-ca and --otlp-insecure-skip-verify go with an https --otlp")
	}
	if f.OTLPInterval < otlpexport.MinInterval {
		return fmt.Errorf("--otlp-interval %v: at least %v", f.OTLPInterval, otlpexport.MinInterval)
	}
	if f.OTLPTimeout <= 0 || f.OTLPTimeout > f.OTLPInterval {
		if fs.Changed("otlp-timeout") {
			return fmt.Errorf("--otlp-timeout %v: more than 0, at most --otlp-interval (%v)", f.OTLPTimeout, f.OTLPInterval)
		}
		f.OTLPTimeout = min(otlpexport.DefaultTimeout, f.OTLPInterval)
	}
	if len(f.OTLPHeaders) > otlpexport.MaxHeaders {
		return fmt.Errorf("--otlp-header: at most %d", otlpexport.MaxHeaders)
	}
	for _, h := range f.OTLPHeaders {
		if _, _, err := otlpexport.ParseHeader(h); err != nil {
			return fmt.Errorf("--otlp-header: %w", err)
		}
	}
	if c := f.OTLPCompression; c != "" && c != "gzip" && c != "none" {
		return fmt.Errorf("--otlp-compression %q: gzip or none", c)
	}
	return nil
}
