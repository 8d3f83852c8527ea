package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/sinks"
)

// snapshotsOnSignal turns SIGUSR1 into snapshot requests: one pending at
// most (signals that come while one waits are the same request).
func snapshotsOnSignal() (<-chan struct{}, func()) {
	reqs := make(chan struct{}, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				select {
				case reqs <- struct{}{}:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return reqs, func() { signal.Stop(sig); close(done) }
}

// Snapshot is `tttrace snapshot PID`: it asks the tttrace running as PID
// (SIGUSR1) to write its report, NDJSON summary and profile as of now, each
// to its configured output with a timestamped suffix; tracing goes on.
func Snapshot(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, snapshotUsage)
		return ExitOK
	}
	if len(args) != 1 {
		fmt.Fprint(stderr, snapshotUsage)
		return ExitUsage
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "tttrace snapshot: %q is not a process id\n", sinks.Printable(args[0]))
		return ExitUsage
	}
	// Only a tttrace: SIGUSR1 ends most other programs.
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		fmt.Fprintf(stderr, "tttrace snapshot: pid %d: no such process\n", pid)
		return ExitNoProcess
	}
	if name := strings.TrimSpace(string(comm)); name != "tttrace" {
		fmt.Fprintf(stderr, "tttrace snapshot: pid %d is %q, not tttrace: not signalled\n", pid, sinks.Printable(name))
		return ExitUsage
	}
	if pid == os.Getpid() {
		fmt.Fprintf(stderr, "tttrace snapshot: pid %d is this command\n", pid)
		return ExitUsage
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		fmt.Fprintf(stderr, "tttrace snapshot: pid %d: %v\n", pid, err)
		if err == unix.EPERM {
			return ExitPermission
		}
		return ExitNoProcess
	}
	fmt.Fprintf(stdout, "tttrace snapshot: asked pid %d for a snapshot (its log names the files)\n", pid)
	return ExitOK
}

const snapshotUsage = `Usage: tttrace snapshot PID

Asks the tttrace running as PID for a snapshot (the same as kill -USR1 PID):
it writes the report (or with --json the summary line), the --pprof profile
and the --folded stacks as of now, each to its output's path with a
timestamped suffix (-o out.ndjson: out.ndjson.20261124T073000.123Z); a
report or NDJSON on standard output gets the snapshot in its stream (NDJSON:
a "snapshot" line). Tracing goes on.
`
