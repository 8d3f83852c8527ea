package session

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The link closer: once the summary is written, the probes' links go to a
// copy of tttrace that closes them, so that tttrace exits without waiting
// for the RCU grace periods that closing a uprobe link waits for (25+ ms:
// docs/bench.md, rows 6). An exiting process would wait for them too: its
// descriptors are closed before its parent hears of its end.
const closerEnv = "TTTRACE_LINK_CLOSER"

// closerFirstFD is the first link's descriptor in the closer (after stdin,
// out, err).
const closerFirstFD = 3

// maxCloserLinks bounds what a closer believes its environment.
const maxCloserLinks = 1 << 16

// ExecCloser is the closer's side; a program that uses Run must call it
// first thing in main. It returns only when this process is not a closer.
func ExecCloser() {
	v := os.Getenv(closerEnv)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxCloserLinks {
		os.Exit(2)
	}
	// Together: links closed at the same time share their grace periods.
	var wg sync.WaitGroup
	for fd := closerFirstFD; fd < closerFirstFD+n; fd++ {
		wg.Go(func() { unix.Close(fd) })
	}
	wg.Wait()
	os.Exit(0)
}

// startCloser starts a closer holding links, and returns once it holds
// them (once it has exec'd). It has no stdin, stdout or stderr (a pipe
// reading tttrace's output ends with tttrace) and its own process group
// (a terminal's ^C on tttrace does not reach it).
func startCloser(links []*os.File) error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"tttrace-link-closer"}
	cmd.Env = []string{closerEnv + "=" + strconv.Itoa(len(links))}
	cmd.ExtraFiles = links
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Not waited for: it outlives tttrace, whose end reparents it.
	return cmd.Process.Release()
}
