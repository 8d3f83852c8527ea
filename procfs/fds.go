package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MaxFDs bounds the open files of a process looked at for its devices (a
// process can hold up to its RLIMIT_NOFILE, a million or more).
const MaxFDs = 1 << 14

// ErrTooManyFDs is returned, with what was found, when a process holds
// more open files than MaxFDs and not every device asked for was among
// the first.
var ErrTooManyFDs = fmt.Errorf("more than %d open files", MaxFDs)

// HeldDevices says which of the character devices rdevs (device numbers,
// as stat's st_rdev) pid holds open. Each entry of /proc/PID/fd is
// stat'ed, which follows it to the open file itself: what its link's text
// says is never trusted (a process can name a file /dev/tenstorrent/0 in
// a mount namespace of its own), and nothing is opened. It stops once
// every device is found.
func HeldDevices(pid int, rdevs []uint64) (map[uint64]bool, error) {
	held, err := heldDevices(fmt.Sprintf("/proc/%d/fd", pid), rdevs)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return held, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return held, err
}

// heldDevices is HeldDevices over the entries of dir.
func heldDevices(dir string, rdevs []uint64) (map[uint64]bool, error) {
	want := map[uint64]bool{}
	for _, r := range rdevs {
		want[r] = true
	}
	held := map[uint64]bool{}
	if len(want) == 0 {
		return held, nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return held, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	seen := 0
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if seen++; seen > MaxFDs {
				return held, fmt.Errorf("%s: %w", dir, ErrTooManyFDs)
			}
			var st unix.Stat_t
			if unix.Stat(filepath.Join(dir, n), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
				continue
			}
			if r := uint64(st.Rdev); want[r] && !held[r] {
				held[r] = true
				if len(held) == len(want) {
					return held, nil
				}
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return held, nil
		}
		if err != nil {
			return held, err
		}
	}
}
