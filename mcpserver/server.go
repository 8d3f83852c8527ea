// Package mcpserver is `tttrace mcp`: a Model Context Protocol server
// (github.com/modelcontextprotocol/go-sdk) that answers an agent's
// questions about tttrace runs: saved runs (the NDJSON of tttrace --save or
// --json -o, or a summary alone), replayed as tttrace report replays them,
// and running tttraces, through a snapshot (SIGUSR1, as tttrace snapshot;
// the Live the command line gives). Its tools give the chips' state, what
// holds the memory, the failed allocations explained, the hazards, the
// leaks by site, the windows' memory_stats, the TT-NN ops and the diff of
// two runs; every answer is bounded (bound.go) and carries its caveats
// (answers.go). It reads only the files and directories it was given
// (runs.go).
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tttrace/tttrace/devices"
)

// Options configure the server.
type Options struct {
	// Dirs: the runs beneath these directories may be read (--runs);
	// Files: these files too.
	Dirs, Files []string
	// MaxRunBytes bounds a file read (0: DefaultMaxRunBytes);
	// MaxAnswerBytes an answer's JSON (0: DefaultMaxAnswerBytes).
	MaxRunBytes    int64
	MaxAnswerBytes int
	// Live reaches running tttraces (nil: not allowed, --live not given).
	Live Live
	// Version is tttrace's.
	Version string
}

// Live asks running tttraces for snapshots.
type Live interface {
	// Snapshot asks the tttrace running as pid for a snapshot and returns
	// the path of the summary file it wrote.
	Snapshot(ctx context.Context, pid int) (string, error)
	// Tracers lists the tttraces running on this host.
	Tracers() ([]Tracer, error)
}

// Tracer is a running tttrace.
type Tracer struct {
	Pid       int    `json:"tttrace_pid"`
	Output    string `json:"output,omitempty" jsonschema:"the file it writes its NDJSON to (--json -o FILE): snapshots land beside it as FILE.STAMP"`
	Snapshots bool   `json:"snapshots" jsonschema:"tools can read it now, with tttrace_pid"`
	Why       string `json:"why,omitempty" jsonschema:"why tools cannot read it"`
}

// server is one tttrace mcp.
type server struct {
	runs     *runs
	live     Live
	maxBytes int
}

// New makes the server with its tools.
func New(o Options) (*mcp.Server, error) {
	r, err := newRuns(&o)
	if err != nil {
		return nil, err
	}
	s := &server{runs: r, live: o.Live, maxBytes: o.MaxAnswerBytes}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxAnswerBytes
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "tttrace", Title: "tttrace: Tenstorrent device memory", Version: o.Version},
		&mcp.ServerOptions{Instructions: instructions})
	if err := s.register(srv); err != nil {
		return nil, err
	}
	return srv, nil
}

const instructions = `tttrace traces where Tenstorrent device memory goes in programs using TT-Metal (per process, chip and buffer type: DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY, circular buffers). These tools read its runs: call list_runs first, then give a run's path as "run" (or, for a tttrace running now, its pid as "tttrace_pid"). Sizes are bytes; times (ts_ns) are CLOCK_MONOTONIC nanoseconds. Every answer carries "caveats" (read them: lost events or an untrusted layout make numbers wrong) and "cut" (what was left out: filter by pid or device, or raise limit).`

// RunArgs name a run and narrow the answer.
type RunArgs struct {
	Run        string `json:"run,omitempty" jsonschema:"a saved run: its path as list_runs gives it (or relative to a --runs directory)"`
	TTtracePID int    `json:"tttrace_pid,omitempty" jsonschema:"instead of run: the pid of a tttrace tracing now (list_runs lists them); it is asked for a snapshot and the answer is the state as of now"`
	Filter
}

// DiffArgs name two runs.
type DiffArgs struct {
	A           string `json:"a" jsonschema:"the baseline run (a path list_runs gives)"`
	B           string `json:"b,omitempty" jsonschema:"the run compared with it"`
	BTTtracePID int    `json:"b_tttrace_pid,omitempty" jsonschema:"instead of b: a tttrace tracing now, compared as of now"`
	Limit       int    `json:"limit,omitempty" jsonschema:"entries per list, default 20, at most 500"`
}

// ListArgs narrow list_runs.
type ListArgs struct {
	Limit int `json:"limit,omitempty" jsonschema:"files listed, newest first; default 20, at most 500"`
}

// ListAnswer is list_runs' answer.
type ListAnswer struct {
	Dirs    []string  `json:"dirs" jsonschema:"the directories tttrace mcp may read runs beneath"`
	Files   []RunFile `json:"files" jsonschema:"the runs, newest first"`
	Live    bool      `json:"live" jsonschema:"running tttraces may be asked for snapshots (tttrace mcp --live)"`
	Tracers []Tracer  `json:"tracers" jsonschema:"the tttraces running now, with --live"`
	Caveats []string  `json:"caveats"`
	Cut     []Cut     `json:"cut"`
}

type answer interface {
	finish(cuts []Cut, note string)
}

// schemaFor is the output schema of T: as the SDK would infer it, but
// with the types that marshal as text given as strings.
// An answer is a pointer to its struct, never nil: its schema is the
// struct's (type "object", as clients insist).
func schemaFor[T any]() (*jsonschema.Schema, error) {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[devices.NoticeKind](): {Type: "string"},
	}})
}

var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(bool)}

// addRunTool adds a tool answering about one run with build.
func addRunTool[A answer](s *server, srv *mcp.Server, name, title, desc string,
	build func(c *cutter, info RunInfo, sum *devices.Summary, f *Filter) (A, error)) error {
	out, err := schemaFor[A]()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t := &mcp.Tool{Name: name, Title: title, Description: desc + runArgsDoc, OutputSchema: out, Annotations: readOnly}
	mcp.AddTool(srv, t, func(ctx context.Context, _ *mcp.CallToolRequest, in RunArgs) (*mcp.CallToolResult, A, error) {
		var zero A
		ru, info, err := s.source(ctx, in.Run, in.TTtracePID)
		if err != nil {
			return nil, zero, err
		}
		f := in.Filter
		a, err := bounded(s.maxBytes, limitOf(f.Limit), func(c *cutter) (A, error) {
			return build(c, info, ru.sum, &f)
		}, func(a A, cuts []Cut, note string) A { a.finish(cuts, note); return a })
		return nil, a, err
	})
	return nil
}

const runArgsDoc = ` Give run (a saved run's path from list_runs) or tttrace_pid (a tttrace tracing now: a snapshot is taken); pid and device narrow the answer to one traced process and chip; limit bounds each list (the answer's "cut" says what was left out). The answer's "run" says what was read; "caveats" what limits it.`

func (s *server) register(srv *mcp.Server) error {
	list, err := schemaFor[*ListAnswer]()
	if err != nil {
		return err
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "list_runs", Title: "tttrace runs", Annotations: readOnly, OutputSchema: list,
		Description: `Lists the runs these tools can read: the NDJSON files of tttrace runs (tttrace --save FILE, or --json -o FILE) and summaries alone (--json --no-events, and snapshots FILE.STAMP) beneath the directories tttrace mcp was given, newest first, with their size, time and kind; and, when tttrace mcp runs with --live, the tttraces tracing now (their pid is the tttrace_pid other tools take; one can be read when it writes --json -o FILE into one of those directories). Call this first.`},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ListArgs) (*mcp.CallToolResult, *ListAnswer, error) {
			a, err := bounded(s.maxBytes, limitOf(in.Limit), func(c *cutter) (*ListAnswer, error) { return s.listRuns(c) },
				func(a *ListAnswer, cuts []Cut, note string) *ListAnswer {
					a.Cut = cuts
					if a.Cut == nil {
						a.Cut = []Cut{}
					}
					if note != "" {
						a.Caveats = append(a.Caveats, note)
					}
					return a
				})
			return nil, a, err
		})
	tools := []error{
		addRunTool(s, srv, "chips", "chips' memory now and at peak",
			`The state of every chip of every traced process, as tttrace's summary has it: per chip the bytes in use per buffer type (dram_bytes, l1_bytes, l1_small_bytes, trace_bytes, system_memory_bytes; at the end of a run what was left allocated, in a snapshot what is held now), cb_bytes (circular buffers resident on the busiest core) with cb_registered_bytes and cb_resident_total_bytes, live_buffers, the peak of each with its time (peaks), the L1 headroom now and at its lowest, the physical chip (chip_uid, pci, dev; null chip_uid: unknown), and the allocator's view per type as TT-Metal's get_statistics gives it (banks, bank_size, per bank total_allocated_bytes, total_free_bytes, largest_free_block_bytes, and alloc_failures); the own allocators of live MeshDevices.`,
			chipsAnswer),
		addRunTool(s, srv, "top_holders", "what holds device memory",
			`What holds each process's device memory: the largest buffers held (address, size, page size, chip, type, the allocating thread, its site and where in one line) and the allocation sites holding the most bytes per chip and type (in_use_bytes, in_use_buffers; and, when the run's events were read, peak_bytes: what the site held when the chip's counter reached its peak, alloc_bytes: what it allocated in all). For a process that ended these are what it left allocated (its leaks); for one still running (a snapshot) what it holds now. Sites are described (Python frames: function, file, line; native frames: function, module, DWARF file and line) in site_descriptions.`,
			holdersAnswer),
		addRunTool(s, srv, "failed_allocations", "failed device allocations, explained",
			`Each failed device allocation (TT-Metal threw "Out of Memory", even if the program caught it): the chip (or mesh) and buffer type, the request (size, page size, banks, size per bank, span), the allocator's numbers at the request (total allocated, free, largest free block, per bank), the cause (exhausted, fragmented, larger_than_bank) with an explanation that says what would make it fit, where it was asked for, and the buffers that held that chip and type then (holders, largest first, with holder_sites: the sites holding most); count is all of them (the summary keeps the first 100).`,
			failuresAnswer),
		addRunTool(s, srv, "hazards", "trace hazards, L1 clashes and anomalies",
			`What went wrong besides running out of memory: Metal trace hazards (a replay that overwrote a live buffer allocated after the capture: the buffer in danger and the captured one it overlaps), replays of released traces or closed devices, trace buffers under another live trace's high-water mark; L1 clashes (a program's circular buffers reaching past the lowest live L1 buffer: TT-Metal throws) with the L1 buffers in the way; each chip's L1 headroom (lowest L1 buffer minus the CB region's end) now and at its lowest; lifecycle anomalies (double frees, frees of unknown buffers, unknown devices, ...) by kind with the first ones.`,
			hazardsAnswer),
		addRunTool(s, srv, "leaks_by_site", "leaks by allocation site",
			`What each process left allocated when it ended (for a process still running, a snapshot: what it holds now), summed per allocation site, most bytes first: count, bytes, the chips, the pytest test that allocated (when a Python frame is one) and the site described (Python and native frames); the totals per chip and type (leak_groups), the leaks without a known site, and mesh buffers on chips never learned (unplaced).`,
			leaksAnswer),
		addRunTool(s, srv, "windows", "windows' peaks and memory_stats",
			`The windows of each process (tttrace mark PID NAME starts one; window 0 runs from the start): per window and chip the peak of each counter in the window with when it was reached, and per allocator type memory_stats as PJRT/JAX give them (bytes_in_use, peak_bytes_in_use, bytes_limit, largest_free_block_bytes). The last window is the current one (end_ts_ns null). A process with no mark has no windows.`,
			windowsAnswer),
		addRunTool(s, srv, "ops", "TT-NN ops: what each op allocated, failed and leaked",
			`What each process did per TT-NN op (the Python name, ttnn.matmul, ttnn.conv2d) and device operation launched in it (MatmulDeviceOperation), as tttrace's summary has it: calls or launches, the buffers allocated in it and their bytes, the process's DRAM and L1 bytes at their highest right after one of its allocations, the CB bytes laid out in it, its failed allocations, and its buffers still live at the end (leaked) or now (a snapshot); most bytes first. An op is known when tttrace found the process's TT-NN library (not with --no-ops); a process that ran no op has no rows.`,
			opsAnswer),
	}
	if err := errors.Join(tools...); err != nil {
		return err
	}
	ds, err := schemaFor[*DiffAnswer]()
	if err != nil {
		return err
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "diff_runs", Title: "what changed between two runs", Annotations: readOnly, OutputSchema: ds,
		Description: `Compares run a (the baseline) with run b, as tttrace diff a b --json does: processes matched by command; per process and chip the counters at the end and at their peak in each run with the difference (and when the peak came after the process's first event), the leaks per type, the allocator's numbers, the lowest L1 headroom; the allocation sites that grew, shrank, appeared or vanished (matched by Python lines and symbolized native frames, never by address); failed allocations, L1 clashes and trace problems one run has more of; the windows (tttrace mark; matched by name, else index) whose per-chip peaks or memory_stats differ; the TT-NN ops rows (by op and device op) whose calls, bytes, peaks, failures or leaks differ; and growth: every counter higher in b at the end, at its peak or at its peak in a window, most bytes first. b may instead be b_tttrace_pid, a tttrace tracing now (compared as of now). Caveats of each run are prefixed A: and B:.`},
		func(ctx context.Context, _ *mcp.CallToolRequest, in DiffArgs) (*mcp.CallToolResult, *DiffAnswer, error) {
			ra, ia, err := s.source(ctx, in.A, 0)
			if err != nil {
				return nil, nil, fmt.Errorf("a: %w", err)
			}
			rb, ib, err := s.source(ctx, in.B, in.BTTtracePID)
			if err != nil {
				return nil, nil, fmt.Errorf("b: %w", err)
			}
			a, err := bounded(s.maxBytes, limitOf(in.Limit), func(c *cutter) (*DiffAnswer, error) { return diffAnswer(c, ia, ib, ra, rb) },
				func(a *DiffAnswer, cuts []Cut, note string) *DiffAnswer {
					a.Cut = cuts
					if a.Cut == nil {
						a.Cut = []Cut{}
					}
					if note != "" {
						a.Caveats = append(a.Caveats, note)
					}
					return a
				})
			return nil, a, err
		})
	return nil
}

// source loads the run a tool names: a file, or a running tttrace's
// snapshot.
func (s *server) source(ctx context.Context, name string, tttracePID int) (*run, RunInfo, error) {
	switch {
	case name != "" && tttracePID != 0:
		return nil, RunInfo{}, errors.New("give run or tttrace_pid, not both")
	case tttracePID < 0:
		return nil, RunInfo{}, fmt.Errorf("tttrace_pid %d is not a process id", tttracePID)
	case tttracePID != 0:
		if s.live == nil {
			return nil, RunInfo{}, errors.New("tttrace mcp was started without --live: it may not signal running tttraces")
		}
		path, err := s.live.Snapshot(ctx, tttracePID)
		if err != nil {
			return nil, RunInfo{}, err
		}
		ru, err := s.runs.load(ctx, path)
		if err != nil {
			return nil, RunInfo{}, err
		}
		info := ru.info
		info.Source, info.TTtracePID = "snapshot", tttracePID
		return ru, info, nil
	}
	ru, err := s.runs.load(ctx, name)
	if err != nil {
		return nil, RunInfo{}, err
	}
	return ru, ru.info, nil
}

// listRuns is list_runs' answer.
func (s *server) listRuns(c *cutter) (*ListAnswer, error) {
	a := &ListAnswer{Dirs: s.runs.dirs, Files: []RunFile{}, Live: s.live != nil, Tracers: []Tracer{}, Caveats: []string{}}
	if a.Dirs == nil {
		a.Dirs = []string{}
	}
	files, looked, more := s.runs.list()
	total := uint64(len(files))
	a.Files = keep(c, "files", files, total)
	for i := range a.Files {
		a.Files[i].Kind = s.runs.kind(a.Files[i].Path)
	}
	if more {
		a.Caveats = append(a.Caveats, fmt.Sprintf("only the first %d entries of the directories were looked at", looked))
	}
	if s.live != nil {
		ts, err := s.live.Tracers()
		if err != nil {
			a.Caveats = append(a.Caveats, "running tttraces: "+str(err.Error()))
		}
		for i := range ts {
			if t := &ts[i]; t.Snapshots && !s.runs.mayHold(t.Output) {
				t.Snapshots, t.Why = false, fmt.Sprintf("its snapshots land beside %s, outside the --runs directories", str(t.Output))
			}
		}
		a.Tracers = keep(c, "tracers", ts, 0)
		if a.Tracers == nil {
			a.Tracers = []Tracer{}
		}
	}
	return a, nil
}
