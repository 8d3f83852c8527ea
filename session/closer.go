package session

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The link holder: once the summary is written, the probes' uprobe_multi
// links go to a process that holds them and then closes them, so that
// tttrace exits without waiting for the RCU grace periods that closing a
// uprobe link waits for (docs/bench.md, rows 6). tttrace's own exit would
// wait for them: an exiting process's descriptors are closed before its
// parent hears of its end.
//
// The holder is a copy of tttrace (holderEnv, holderName): it reads its
// stdin, a pipe, until tttrace closes the other end, once tttrace has
// dropped its own references to the links (probes.Tracer.DetachLater),
// then closes every link at once, one thread each, and exits. Links closed
// together share their grace periods: 25 links close in ~0.08 s where one
// after the other (an exiting process's descriptors, as cat(1) held them
// until 2026-11-29) took ~1.35 s, all that time with every probe still in
// the library, trapping in every process that calls it (a program run
// just after tttrace ran up to 5x slower for a second or two: docs/bench.md
// rows 6 and 8). A holder that ended at once (true(1), before) often ended
// first, and tttrace, then holding the last references, closed the links
// one grace period after the other. No process is traced any more
// (session.finish), so the programs do nothing meanwhile. Where the copy
// cannot start (tttrace's file replaced during the run), cat(1) holds
// them, as before.
const (
	holderEnv  = "TTTRACE_LINK_HOLDER"
	holderName = "tttrace-link-holder"
)

var holders = []string{"/bin/cat", "/usr/bin/cat"}

// A copy of tttrace started as the holder holds, closes and exits here,
// before main: in any program that links this package (tttrace, its
// tests).
func init() {
	if os.Getenv(holderEnv) == "1" && len(os.Args) == 1 && os.Args[0] == holderName {
		holdLinks(os.Stdin)
		os.Exit(0)
	}
}

// holdLinks waits for EOF (or an error) on in, then closes every BPF link
// descriptor this process has, together.
func holdLinks(in io.Reader) {
	_, _ = io.Copy(io.Discard, in)
	closeBPFLinks()
}

// closeBPFLinks closes, each on its own thread, the descriptors of this
// process that are BPF links (and nothing else: a descriptor the holder
// got by mistake is left to its exit).
func closeBPFLinks() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || target != "anon_inode:bpf_link" {
			continue
		}
		wg.Go(func() { _ = unix.Close(fd) })
	}
	wg.Wait()
}

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
	err = errors.New("no holder could start (tttrace's own file, cat(1))")
	try := func(path string, args []string, env []string) bool {
		cmd := exec.Command(path)
		cmd.Args = args
		cmd.Env = env
		cmd.Stdin = r
		cmd.ExtraFiles = links
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err = cmd.Start(); err != nil {
			return false
		}
		_ = cmd.Process.Release()
		return true
	}
	// /proc/self/exe: this very program, even if its file was replaced.
	if try("/proc/self/exe", []string{holderName}, []string{holderEnv + "=1"}) {
		return func() { w.Close() }, nil
	}
	for _, path := range holders {
		if try(path, []string{path}, []string{}) {
			return func() { w.Close() }, nil
		}
	}
	w.Close()
	return nil, err
}
