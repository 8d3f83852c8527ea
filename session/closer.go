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
// end. The holder is `true`: it costs ~1 ms of CPU where a copy of tttrace
// (a Go start-up) costs ~30. Its exit closes the links one after the
// other (~25 ms each), in the background; no process is traced any more
// (session.finish), so the programs do nothing meanwhile.
var holders = []string{"/bin/true", "/usr/bin/true"}

// startCloser starts a holder of links and returns once it holds them
// (once it has exec'd). It has no stdin, stdout or stderr (a pipe reading
// tttrace's output ends with tttrace) and its own process group (a
// terminal's ^C on tttrace does not reach it); nobody waits for it.
func startCloser(links []*os.File) error {
	err := errors.New("no true(1) found")
	for _, path := range holders {
		cmd := exec.Command(path)
		cmd.Env = []string{}
		cmd.ExtraFiles = links
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err = cmd.Start(); err == nil {
			return cmd.Process.Release()
		}
	}
	return err
}
