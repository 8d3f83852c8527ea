package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A process's facts as tttrace follows it: whether it exists, its parent
// and namespace pid, the shared objects it maps, and files by identity
// (a uprobe is on an inode, whatever path names it).

// FileKey identifies a file by device and inode.
type FileKey struct{ Dev, Ino uint64 }

// KeyOf returns the FileKey of path (a stat: it never blocks, whatever
// path names).
func KeyOf(path string) (FileKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return FileKey{}, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return FileKey{}, fmt.Errorf("%s: no inode", path)
	}
	return FileKey{Dev: uint64(sys.Dev), Ino: sys.Ino}, nil
}

// ProcessExists reports whether pid names a live process (ErrNoProcess
// if not).
func ProcessExists(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	err := syscall.Kill(pid, 0)
	switch {
	case err == nil, errors.Is(err, syscall.EPERM):
		return nil
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// MappedObjects returns the distinct shared objects pid maps, as paths valid
// from this mount namespace, and the dynamic loader among them ("" if none).
func MappedObjects(pid int) (objs []string, loader string, err error) {
	maps, err := Maps(pid)
	if err != nil {
		return nil, "", err
	}
	seen := map[string]bool{}
	for _, m := range maps {
		if !m.File() || seen[m.Path] || m.Deleted() {
			continue
		}
		seen[m.Path] = true
		base := filepath.Base(m.Path)
		if !strings.Contains(base, ".so") {
			continue
		}
		p := Path(pid, m.Path)
		if strings.HasPrefix(base, "ld-linux") {
			loader = p
		}
		objs = append(objs, p)
	}
	return objs, loader, nil
}

// NsPid returns pid's id in its own (innermost) pid namespace, or 0 when it
// is the same as pid or unknown.
func NsPid(pid int) uint32 {
	f := strings.Fields(Status(pid, "NSpid"))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[len(f)-1])
	return uint32(n)
}

// ParentPid returns pid's parent, 0 if unknown.
func ParentPid(pid int) uint32 {
	f, err := Stat(pid) // state ppid ...
	if err != nil || len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return uint32(n)
}

// Command returns pid's command line, arguments separated by spaces (""
// if unknown).
func Command(pid int) string {
	args, err := Cmdline(pid)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Join(args, " "))
}
