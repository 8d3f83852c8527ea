package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/session"
	"github.com/tttrace/tttrace/sinks"
)

// Marks (`tttrace mark PID [NAME]`): SIGUSR2 asks the tttrace running as
// PID to start a window. A signal carries no name, so the marker leaves it
// in a file of the mark directory first: a directory of the user both run
// as, mode 0700 (/run/tttrace for root, TMPDIR/tttrace-UID otherwise),
// which no one else can write; the file is PID.STAMP.MARKER.mark (STAMP:
// when it was written, in ns, so names sort in the order they were given).
// On SIGUSR2 tttrace takes its files (at most maxMarkFiles, each at most
// maxMarkFileBytes, each checked to be a regular file of its user, never
// followed through a link nor left behind) and starts a window per name
// in that order; none: one window without a name (kill -USR2 PID).

const (
	maxMarkFiles     = 64
	maxMarkFileBytes = 4096
)

// markDir is the mark directory of the user this process runs as.
func markDir() string {
	if uid := os.Geteuid(); uid != 0 {
		return filepath.Join(os.TempDir(), fmt.Sprintf("tttrace-%d", uid))
	}
	return "/run/tttrace"
}

// checkMarkDir says whether dir, opened as fd, is a directory of this
// user that no one else can write into.
func checkMarkDir(fd int, dir string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to this user", dir, st.Uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("%s has mode %#o: others may write there (want 0700)", dir, st.Mode&0o777)
	}
	return nil
}

// openMarkDir opens the mark directory (never through a link), making it
// when create says so.
func openMarkDir(create bool) (int, string, error) {
	dir := markDir()
	if create {
		if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, dir, fmt.Errorf("%s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, dir, fmt.Errorf("%s: %w", dir, err)
	}
	if err := checkMarkDir(fd, dir); err != nil {
		unix.Close(fd)
		return -1, dir, err
	}
	return fd, dir, nil
}

// Mark is `tttrace mark PID [NAME]`.
func Mark(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, markUsage)
		return ExitOK
	}
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprint(stderr, markUsage)
		return ExitUsage
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "tttrace mark: %q is not a process id\n", sinks.Printable(args[0]))
		return ExitUsage
	}
	var name string
	if len(args) == 2 {
		name = args[1]
		if len(name) > maxMarkFileBytes || !utf8.ValidString(name) {
			fmt.Fprintf(stderr, "tttrace mark: a window's name is at most %d bytes of UTF-8\n", maxMarkFileBytes)
			return ExitUsage
		}
	}
	// Only a tttrace: SIGUSR2 ends most other programs.
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		fmt.Fprintf(stderr, "tttrace mark: pid %d: no such process\n", pid)
		return ExitNoProcess
	}
	if c := strings.TrimSpace(string(comm)); c != "tttrace" {
		fmt.Fprintf(stderr, "tttrace mark: pid %d is %q, not tttrace: not signalled\n", pid, sinks.Printable(c))
		return ExitUsage
	}
	if pid == os.Getpid() {
		fmt.Fprintf(stderr, "tttrace mark: pid %d is this command\n", pid)
		return ExitUsage
	}
	file := ""
	if name != "" {
		if file, err = writeMarkName(pid, name); err != nil {
			fmt.Fprintf(stderr, "tttrace mark: %s\n", sinks.Printable(err.Error()))
			return ExitError
		}
	}
	if err := unix.Kill(pid, unix.SIGUSR2); err != nil {
		if file != "" {
			_ = os.Remove(file)
		}
		fmt.Fprintf(stderr, "tttrace mark: pid %d: %v\n", pid, err)
		if err == unix.EPERM {
			return ExitPermission
		}
		return ExitNoProcess
	}
	fmt.Fprintf(stdout, "tttrace mark: asked pid %d to start a window (its log says when it did)\n", pid)
	return ExitOK
}

// writeMarkName leaves name for the tttrace running as pid, in a file it
// makes anew in the mark directory; it returns the file's path.
func writeMarkName(pid int, name string) (string, error) {
	dfd, dir, err := openMarkDir(true)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	base := fmt.Sprintf("%d.%020d.%d.mark", pid, time.Now().UnixNano(), os.Getpid())
	fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, base), err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, base))
	_, err = f.WriteString(name)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, base, 0)
		return "", err
	}
	return f.Name(), nil
}

// takeMarkNames takes the names left for this process since it started,
// oldest first, and removes their files; what cannot be read is skipped.
func takeMarkNames(since time.Time) []string {
	dfd, _, err := openMarkDir(false)
	if err != nil {
		return nil
	}
	defer unix.Close(dfd)
	nfd, err := unix.Dup(dfd)
	if err != nil {
		return nil
	}
	d := os.NewFile(uintptr(nfd), "marks")
	ents, _ := d.ReadDir(4096)
	d.Close()
	prefix := strconv.Itoa(os.Getpid()) + "."
	var files []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".mark") {
			files = append(files, n)
		}
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		if len(names) == maxMarkFiles {
			break
		}
		name, err := readMarkFile(dfd, f)
		_ = unix.Unlinkat(dfd, f, 0)
		stamp, _ := strconv.ParseInt(strings.SplitN(f, ".", 3)[1], 10, 64)
		if err == nil && stamp >= since.UnixNano() {
			names = append(names, name)
		}
	}
	return names
}

// readMarkFile reads the mark file base of the directory dfd: a regular
// file of this user, at most maxMarkFileBytes.
func readMarkFile(dfd int, base string) (string, error) {
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Size > maxMarkFileBytes {
		return "", errors.New("not a mark file")
	}
	buf := make([]byte, maxMarkFileBytes+1)
	n, err := unix.Read(fd, buf)
	if err != nil || n > maxMarkFileBytes {
		return "", errors.New("not a mark file")
	}
	return string(buf[:n]), nil
}

// marksOnSignal turns SIGUSR2 into mark requests, each stamped with the
// time the signal was taken (the records' clock).
func marksOnSignal() (<-chan session.MarkRequest, func()) {
	reqs := make(chan session.MarkRequest, maxMarkFiles)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				var ts unix.Timespec
				_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
				names := takeMarkNames(processStart)
				if len(names) == 0 {
					names = []string{""}
				}
				for _, n := range names {
					select {
					case reqs <- session.MarkRequest{Name: n, TsNs: uint64(ts.Nano())}:
					case <-done:
						return
					}
				}
			case <-done:
				return
			}
		}
	}()
	return reqs, func() { signal.Stop(sig); close(done) }
}

const markUsage = `Usage: tttrace mark PID [NAME]

Asks the tttrace running as PID to start a window named NAME (the same as
kill -USR2 PID, which starts one without a name): from now to the next mark,
the summary, the report and --listen's /v1/memory_stats give per process and
chip the peaks in that window and, per buffer type, memory_stats as PJRT/JAX
give them (bytes_in_use, peak_bytes_in_use, bytes_limit,
largest_free_block_bytes). Window 0 runs from the start to the first mark.
The name travels in a file of a directory only the user tttrace runs as can
write (/run/tttrace for root). Tracing goes on.
`
