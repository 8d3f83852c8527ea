package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/mcpserver"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
)

const mcpUsage = `Usage: tttrace mcp [--runs DIR ...] [FILE ...] [--live] [flags]

A Model Context Protocol server on standard input and output, for agents
(Claude Code, Cursor, VS Code, any MCP client): it answers questions about
tttrace runs with tools. Saved runs are the NDJSON a run wrote (tttrace --save
FILE, or --json -o FILE) or a summary alone (--json --no-events, a snapshot's
FILE.STAMP), replayed as tttrace report replays them; only the FILEs named
here and the files beneath the --runs directories are read (a name from the
agent that leads out of them, by .. or a link, is refused), each at most
--max-run-bytes. With --live, a tool may ask a tttrace tracing now (its pid)
for a snapshot, as tttrace snapshot does: that tttrace must write --json -o
FILE with FILE beneath a --runs directory, and tttrace mcp must be allowed to
signal it (root, or its user). Saved runs need no root.

Tools: list_runs (call it first), chips (totals, peaks, allocator per chip),
top_holders (largest buffers and sites holding memory), failed_allocations
(each with its cause explained and what held the chip), hazards (trace
hazards, L1 clashes, headroom, anomalies), leaks_by_site, windows (peaks and
memory_stats per window of tttrace mark) and diff_runs (tttrace diff). Each
answer is at most --max-answer-bytes of JSON, says in "cut" what it left out
and in "caveats" what limits it (lost events, an untrusted layout, chips of
unknown identity, allocations without a site). See docs/mcp.md.

An agent's configuration (e.g. .mcp.json, claude_desktop_config.json):
  {"mcpServers": {"tttrace": {"command": "tttrace",
    "args": ["mcp", "--runs", "/home/me/runs"]}}}

Flags:
`

// MCP is `tttrace mcp`.
func MCP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var (
		dirs      []string
		live      bool
		maxRun    = ByteSize{n: mcpserver.DefaultMaxRunBytes}
		maxAnswer = ByteSize{n: mcpserver.DefaultMaxAnswerBytes}
		wait      time.Duration
	)
	fs := newSubcommand("mcp", mcpUsage, stdout, stderr)
	fs.StringArrayVar(&dirs, "runs", nil, "read the runs beneath `DIR` (repeatable): the tools list them and take their paths")
	fs.BoolVar(&live, "live", false, "let the tools ask a tttrace tracing now for a snapshot (SIGUSR1, as tttrace snapshot); it must write --json -o FILE beneath a --runs DIR")
	fs.Var(&maxRun, "max-run-bytes", "read no run file larger than `BYTES` (K, M, G suffixes)")
	fs.Var(&maxAnswer, "max-answer-bytes", "answer with at most `BYTES` of JSON: lists are cut further to fit, and the answer says so")
	fs.DurationVar(&wait, "snapshot-timeout", 30*time.Second, "with --live, wait at most `DURATION` for a snapshot")
	if status, done := fs.parse(args); done {
		return status
	}
	usage := fs.usage
	switch {
	case len(dirs) == 0 && fs.NArg() == 0:
		fs.Usage()
		return usage("nothing to read: give --runs DIR or FILEs")
	case maxAnswer.Bytes() < 4096 || maxAnswer.Bytes() > 64<<20:
		return usage("--max-answer-bytes: between 4K and 64M")
	case maxRun.Bytes() == 0:
		return usage("--max-run-bytes must be more than 0")
	case wait <= 0:
		return usage("--snapshot-timeout must be more than 0")
	}
	o := mcpserver.Options{Dirs: dirs, Files: fs.Args(), MaxRunBytes: int64(min(maxRun.Bytes(), 1<<62)),
		MaxAnswerBytes: int(maxAnswer.Bytes()), Version: Version}
	if live {
		o.Live = &liveTracers{wait: wait}
	}
	srv, err := mcpserver.New(o)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace mcp: %s\n", sinks.Printable(err.Error()))
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		fmt.Fprintf(stderr, "tttrace mcp: %s\n", sinks.Printable(err.Error()))
		return ExitError
	}
	return ExitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// liveTracers reaches the tttraces running on this host: a snapshot is
// asked with SIGUSR1 (as tttrace snapshot asks) and read from the file it
// lands in, FILE.STAMP beside the --json -o FILE of the tracer's command
// line.
type liveTracers struct {
	wait time.Duration
}

// maxProcs bounds the processes Tracers looks at.
const maxProcs = 1 << 16

// output is the NDJSON file the tttrace running as pid writes (its
// --json -o FILE, made absolute with its working directory), or why none.
func tracerOutput(pid int) (string, error) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "", fmt.Errorf("pid %d: no such process", pid)
	}
	if name := strings.TrimSpace(string(comm)); name != "tttrace" {
		return "", fmt.Errorf("pid %d is %q, not tttrace: not signalled", pid, sinks.Printable(name))
	}
	if pid == os.Getpid() {
		return "", fmt.Errorf("pid %d is this tttrace mcp", pid)
	}
	args, err := procfs.Cmdline(pid)
	if err != nil || len(args) == 0 {
		return "", fmt.Errorf("pid %d: its command line cannot be read", pid)
	}
	if len(args) > 1 {
		switch args[1] {
		case "doctor", "snapshot", "report", "mark", "diff", "mcp":
			return "", fmt.Errorf("pid %d is tttrace %s, which traces nothing", pid, args[1])
		}
	}
	f, err := Parse(args[1:], io.Discard)
	if err != nil || f.ShowHelp || f.ShowVer {
		return "", fmt.Errorf("pid %d: its command line is not one this tttrace reads as tracing", pid)
	}
	if !f.JSON || f.Output == "" {
		return "", fmt.Errorf("pid %d writes no NDJSON file: a snapshot is read when tttrace runs with --json -o FILE (FILE beneath a --runs directory)", pid)
	}
	path := f.Output
	if !filepath.IsAbs(path) {
		cwd, err := procfs.Cwd(pid)
		if err != nil {
			return "", fmt.Errorf("pid %d: its working directory cannot be read (%v): run tttrace mcp as root or as its user", pid, err)
		}
		path = filepath.Join(cwd, path)
	}
	return filepath.Clean(path), nil
}

// Snapshot asks the tttrace running as pid for a snapshot and returns the
// summary file it wrote.
func (l *liveTracers) Snapshot(ctx context.Context, pid int) (string, error) {
	out, err := tracerOutput(pid)
	if err != nil {
		return "", err
	}
	dir, base := filepath.Dir(out), filepath.Base(out)+"."
	before, err := snapshotNames(dir, base)
	if err != nil {
		return "", err
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		if err == unix.EPERM {
			return "", fmt.Errorf("pid %d: not allowed to signal it: run tttrace mcp as root or as the user it runs as", pid)
		}
		return "", fmt.Errorf("pid %d: %v", pid, err)
	}
	deadline := time.Now().Add(l.wait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		now, err := snapshotNames(dir, base)
		if err != nil {
			return "", err
		}
		for n := range now {
			if !before[n] {
				return filepath.Join(dir, n), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("pid %d wrote no snapshot beside %s within %s (its log says why)", pid, sinks.Printable(out), l.wait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// snapshotNames are the names in dir of base's snapshots (base then a
// snapshot's stamp), looking at most at maxProcs entries.
func snapshotNames(dir, base string) (map[string]bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names := map[string]bool{}
	for seen := 0; seen < maxProcs; {
		ents, err := d.Readdirnames(1024)
		seen += len(ents)
		for _, n := range ents {
			if stamp, ok := strings.CutPrefix(n, base); ok {
				if _, err := time.Parse("20060102T150405.000Z", stamp); err == nil {
					names[n] = true
				}
			}
		}
		if err == io.EOF || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

// Tracers lists the tttraces running on this host.
func (l *liveTracers) Tracers() ([]mcpserver.Tracer, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(maxProcs)
	if err != nil && err != io.EOF {
		return nil, err
	}
	var out []mcpserver.Tracer
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, err := os.ReadFile("/proc/" + n + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "tttrace" {
			continue
		}
		t := mcpserver.Tracer{Pid: pid}
		if args, err := procfs.Cmdline(pid); err == nil && len(args) > 1 && (args[1] == "mcp" || args[1] == "snapshot" || args[1] == "mark") {
			continue // not a tracer
		}
		if out, err := tracerOutput(pid); err != nil {
			t.Why = err.Error()
		} else {
			t.Output, t.Snapshots = out, true
		}
		out = append(out, t)
	}
	return out, nil
}
