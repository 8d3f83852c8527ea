package session

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The exec gate: "-- CMD" starts a copy of tttrace that blocks on a pipe
// and then execs CMD, so CMD's pid is known and traced before its first
// instruction. If tttrace dies first, the pipe closes and CMD never runs.
const gateEnv = "TTTRACE_EXEC_GATE"

// gateFD is the pipe's read end in the gated child (after stdin, out, err).
const gateFD = 3

// Exit statuses of a gated child that never ran the command (as a shell
// reports them).
const (
	gateExitError    = 1   // tttrace went away before releasing it
	gateExitUsage    = 2   // started without a command
	gateExitNotFound = 127 // exec failed
)

// ExecGate is the child side of the gate; a program that uses Run with
// Config.Command must call it first thing in main. It returns
// only when this process is not a gate.
func ExecGate() {
	if os.Getenv(gateEnv) != "1" {
		return
	}
	var b [1]byte
	n, _ := unix.Read(gateFD, b[:])
	unix.Close(gateFD)
	if n != 1 {
		os.Exit(gateExitError) // tttrace went away before releasing us
	}
	os.Unsetenv(gateEnv)
	if len(os.Args) < 3 {
		os.Exit(gateExitUsage)
	}
	err := syscall.Exec(os.Args[1], os.Args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "tttrace: exec %s: %v\n", os.Args[1], err)
	os.Exit(gateExitNotFound)
}

// The gate execs from the main thread: a pid names the task of the main
// thread, and a probe limited to the command's process (the loader probe
// with --follow=false) follows that task through exec. An exec from another
// thread would leave the probe on the old main thread's task. Go runs main
// on the startup thread when an init function locks it.
func init() {
	if os.Getenv(gateEnv) == "1" {
		runtime.LockOSThread()
	}
}

type gatedChild struct {
	cmd *exec.Cmd
	w   *os.File // the gate's write end
}

func startGated(command []string) (*gatedChild, error) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return nil, errorf(ErrNotFound, "%s: command not found", command[0])
	}
	self, err := os.Executable()
	if err != nil {
		return nil, errorf(ErrInternal, "find tttrace's own executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, errorf(ErrInternal, "pipe: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Args = append([]string{command[0], path}, command...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), gateEnv+"=1")
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, errorf(ErrInternal, "start %s: %w", command[0], err)
	}
	r.Close()
	return &gatedChild{cmd: cmd, w: w}, nil
}

// Pid is the child's pid (the command's, once released).
func (c *gatedChild) Pid() int { return c.cmd.Process.Pid }

// Release lets the child exec the command.
func (c *gatedChild) Release() error {
	_, err := c.w.Write([]byte{1})
	c.w.Close()
	c.w = nil
	if err != nil {
		return errorf(ErrInternal, "release %s: %w", c.cmd.Args[0], err)
	}
	return nil
}

// Wait returns the command's exit code, or the signal that killed it.
func (c *gatedChild) Wait() (code, signal int) {
	err := c.cmd.Wait()
	st, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		if err != nil {
			return gateExitError, 0
		}
		return 0, 0
	}
	if st.Signaled() {
		return -1, int(st.Signal())
	}
	return st.ExitStatus(), 0
}

// Abandon closes the gate if it was never released: the child then exits
// without running the command.
func (c *gatedChild) Abandon() {
	if c.w != nil {
		c.w.Close()
		c.w = nil
	}
}
