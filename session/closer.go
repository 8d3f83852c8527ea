package session

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// The link holder: once the summary is written, the probes' uprobe_multi
// links go to a process that holds them and exits, and the kernel closes
// them as part of its exit, so that tttrace exits without waiting for the
// RCU grace periods that closing a uprobe link waits for (25+ ms:
// docs/bench.md, rows 6). tttrace's own exit would wait for them: an
// exiting process's descriptors are closed before its parent hears of its
// end. The holder is `cat` reading a pipe: it costs ~1 ms of CPU where a
// copy of tttrace (a Go start-up) costs ~30, and it ends only when tttrace
// closes the pipe's other end, once tttrace has dropped its own references
// to the links (probes.Tracer.DetachLater): a holder that ended at once
// (true(1), until 2026-11-29) often ended first, and tttrace, then holding
// the last references, closed the links one grace period after the other
// (1.5-2 s in one run of five on a loaded machine). Its exit closes the
// links in the background; no process is traced any more
// (session.finish), so the programs do nothing meanwhile.
var holders = []string{"/bin/cat", "/usr/bin/cat"}

// startCloser starts a holder of links and returns once it holds them
// (once it has exec'd), with the function that lets it end. Its stdin is
// the pipe, its stdout and stderr /dev/null (a pipe reading tttrace's
// output ends with tttrace), its process group its own (a terminal's ^C
// on tttrace does not reach it); nobody waits for it. Should tttrace die
// before release, its exit closes the pipe.
func startCloser(links []*os.File) (release func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	err = errors.New("no cat(1) found")
	for _, path := range holders {
		cmd := exec.Command(path)
		cmd.Env = []string{}
		cmd.Stdin = r
		cmd.ExtraFiles = links
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err = cmd.Start(); err == nil {
			_ = cmd.Process.Release()
			return func() { w.Close() }, nil
		}
	}
	w.Close()
	return nil, err
}
