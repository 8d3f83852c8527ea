// Package procfs is the one reader of /proc for everything that looks at a
// process: its memory map, environment, command line, paths in its mount
// namespace. What a process puts there is hostile (a path with spaces or
// newlines, an environment of megabytes): every read is bounded, and a
// file opened through a process's view of the file system is opened
// without blocking and used only when it is a regular file (a FIFO named
// like a library must not hang the tracer).
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxFile is the most bytes read from one /proc file (a process's maps
// with tens of thousands of mappings is a few MB).
const MaxFile = 64 << 20

// ErrTooLarge is returned for a /proc file longer than the limit.
var ErrTooLarge = errors.New("file larger than the limit")

// ReadFile reads at most max bytes of path; more is ErrTooLarge. The file
// is opened with OpenRegular's rules except that /proc's own files (which
// stat as empty regular files) are what it is for.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, ErrTooLarge, max)
	}
	return b, nil
}

// ErrNotRegular is returned for a path that names anything but a regular
// file.
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens path read-only without blocking and returns it only
// when it is a regular file: a FIFO, a device or a socket is refused
// before anything reads it.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// IsRegular reports whether path names a regular file, without opening it
// (a stat, which follows symbolic links, never blocks).
func IsRegular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// Path is the path of pid's file p as seen from this mount namespace:
// /proc/PID/root/p.
func Path(pid int, p string) string {
	return fmt.Sprintf("/proc/%d/root%s", pid, p)
}

// Root is pid's root directory as seen from here (/proc/PID/root).
func Root(pid int) string { return fmt.Sprintf("/proc/%d/root", pid) }

// ErrNoProcess is returned for a pid that does not exist (any more).
var ErrNoProcess = errors.New("no such process")

func procFile(pid int, name string, max int64) ([]byte, error) {
	b, err := ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name), max)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return b, err
}

// MaxArgs bounds what Environ and Cmdline read (the kernel's ARG_MAX for
// both together is 2 MiB by default; a process can rewrite its own).
const MaxArgs = 4 << 20

// Environ returns pid's environment, "KEY=value" strings (what the
// process started with: /proc/PID/environ).
func Environ(pid int) ([]string, error) {
	b, err := procFile(pid, "environ", MaxArgs)
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

// Getenv returns the value of key in env ("KEY=value" strings) and
// whether it is set; the last setting wins, as in getenv(3)'s usual
// libc.
func Getenv(env []string, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == key {
			v, ok = val, true
		}
	}
	return v, ok
}

// Cmdline returns pid's arguments.
func Cmdline(pid int) ([]string, error) {
	b, err := procFile(pid, "cmdline", MaxArgs)
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

func splitNUL(b []byte) []string {
	var out []string
	for _, s := range bytes.Split(b, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out
}

// Exe is the path of pid's executable in its mount namespace.
func Exe(pid int) (string, error) { return os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)) }

// Cwd is pid's working directory in its mount namespace.
func Cwd(pid int) (string, error) { return os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)) }

// Status returns the value of a field of /proc/PID/status ("" when absent).
func Status(pid int, field string) string {
	b, err := procFile(pid, "status", 1<<20)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// Stat returns the fields of /proc/PID/stat after the command name
// (field 3, the state, first): the name may hold spaces and parentheses.
func Stat(pid int) ([]string, error) {
	b, err := procFile(pid, "stat", 1<<16)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("pid %d: stat without a command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// Pids lists the processes in /proc.
func Pids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}
