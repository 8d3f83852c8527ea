package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes"
)

// findLibrary decides which file to probe. With -p it also reports which
// processes had the library mapped already (their ledgers start late).
func findLibrary(ctx context.Context, f *Flags) (string, map[int]bool, error) {
	mapped := map[int]bool{}
	if f.Lib != "" {
		st, err := os.Stat(f.Lib)
		if err != nil {
			return "", nil, fail(ExitNoLibrary, "--lib: %w", err)
		}
		for _, pid := range f.PIDs {
			if p, err := probes.FindMappedLibrary(pid); err == nil && sameFile(p, st) {
				mapped[pid] = true
			}
		}
		return f.Lib, mapped, nil
	}
	if len(f.Command) > 0 {
		return "", nil, fail(ExitNoLibrary, "-- CMD needs --lib PATH: the command loads libtt_metal.so after it starts, "+
			"so tttrace cannot read it from the process yet (e.g. --lib $TT_METAL_HOME/build/lib/libtt_metal.so)")
	}
	var path string
	var first os.FileInfo
	for _, pid := range f.PIDs {
		p, err := waitMapped(ctx, pid, f.Wait)
		if err != nil {
			return "", nil, err
		}
		st, err := os.Stat(p)
		if err != nil {
			return "", nil, fail(ExitNoLibrary, "pid %d: %w", pid, err)
		}
		if first == nil {
			path, first = p, st
		} else if !os.SameFile(first, st) {
			return "", nil, fail(ExitUsage, "pid %d maps a different TT-Metal library (%s) than the other processes (%s): trace them with separate tttrace runs", pid, p, path)
		}
		mapped[pid] = true
	}
	return path, mapped, nil
}

func sameFile(path string, st os.FileInfo) bool {
	o, err := os.Stat(path)
	return err == nil && os.SameFile(o, st)
}

// waitMapped returns the TT-Metal library pid maps, waiting for it to be
// loaded for at most wait (0: as long as the process lives).
func waitMapped(ctx context.Context, pid int, wait time.Duration) (string, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	announced := false
	for {
		p, err := probes.FindMappedLibrary(pid)
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, probes.ErrNoProcess):
			return "", fail(ExitNoLibrary, "pid %d exited without loading libtt_metal.so", pid)
		case !errors.Is(err, probes.ErrNotMapped):
			return "", fail(ExitError, "pid %d: %w", pid, err)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return "", fail(ExitNoLibrary, "pid %d did not load libtt_metal.so within --wait %s (give the library with --lib to trace it as soon as it loads)", pid, wait)
		}
		if !announced {
			fmt.Fprintf(os.Stderr, "tttrace: waiting for pid %d to load libtt_metal.so\n", pid)
			announced = true
		}
		select {
		case <-ctx.Done():
			return "", fail(ExitError, "interrupted while waiting for pid %d to load libtt_metal.so", pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The exec gate: "-- CMD" starts a copy of tttrace that blocks on a pipe
// and then execs CMD, so CMD's pid is known and traced before its first
// instruction. If tttrace dies first, the pipe closes and CMD never runs.
const gateEnv = "TTTRACE_EXEC_GATE"

// gateFD is the pipe's read end in the gated child (after stdin, out, err).
const gateFD = 3

// ExecGate is the child side of the gate; main calls it first. It returns
// only when this process is not a gate.
func ExecGate() {
	if os.Getenv(gateEnv) != "1" {
		return
	}
	var b [1]byte
	n, _ := unix.Read(gateFD, b[:])
	unix.Close(gateFD)
	if n != 1 {
		os.Exit(ExitError) // tttrace went away before releasing us
	}
	os.Unsetenv(gateEnv)
	if len(os.Args) < 3 {
		os.Exit(ExitUsage)
	}
	err := syscall.Exec(os.Args[1], os.Args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "tttrace: exec %s: %v\n", os.Args[1], err)
	os.Exit(ExitNotFound)
}

type gatedChild struct {
	cmd *exec.Cmd
	w   *os.File // the gate's write end
}

func startGated(command []string) (*gatedChild, error) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return nil, fail(ExitNotFound, "%s: command not found", command[0])
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fail(ExitError, "find tttrace's own executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fail(ExitError, "pipe: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Args = append([]string{command[0], path}, command...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), gateEnv+"=1")
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fail(ExitError, "start %s: %w", command[0], err)
	}
	r.Close()
	return &gatedChild{cmd: cmd, w: w}, nil
}

func (c *gatedChild) pid() int { return c.cmd.Process.Pid }

// release lets the child exec the command.
func (c *gatedChild) release() error {
	_, err := c.w.Write([]byte{1})
	c.w.Close()
	c.w = nil
	if err != nil {
		return fail(ExitError, "release %s: %w", c.cmd.Args[0], err)
	}
	return nil
}

// wait returns the command's exit code, or the signal that killed it.
func (c *gatedChild) wait() (code, signal int) {
	err := c.cmd.Wait()
	st, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		if err != nil {
			return ExitError, 0
		}
		return 0, 0
	}
	if st.Signaled() {
		return -1, int(st.Signal())
	}
	return st.ExitStatus(), 0
}

// abandon closes the gate if it was never released: the child then exits
// without running the command.
func (c *gatedChild) abandon() {
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
}

func joinArgs(args []string) string { return strings.Join(args, " ") }
