package probes

import (
	"errors"
	"fmt"
	"github.com/tttrace/tttrace/procfs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tttrace/tttrace/ttmetal"
)

// ErrNoProcess is returned for a PID that does not exist.
var ErrNoProcess = procfs.ErrNoProcess

// ErrNotMapped is returned when a process has not mapped a TT-Metal library.
var ErrNotMapped = errors.New("libtt_metal.so is not mapped")

// ProcessExists reports whether pid names a live process.
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

// FindMappedLibrary returns the TT-Metal library pid has mapped, as a path
// valid from this mount namespace (through /proc/PID/root). A library named
// libtt_metal.so* is taken first; otherwise each mapped shared object is
// checked for TT-Metal's symbols, so a renamed copy is found too.
func FindMappedLibrary(pid int) (string, error) {
	maps, err := procfs.Maps(pid)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	var candidates []string
	for _, m := range maps {
		if !m.File() || seen[m.Path] || m.Deleted() {
			continue
		}
		seen[m.Path] = true
		if strings.HasPrefix(filepath.Base(m.Path), "libtt_metal.so") {
			return procfs.Path(pid, m.Path), nil
		}
		if strings.Contains(filepath.Base(m.Path), ".so") {
			candidates = append(candidates, m.Path)
		}
	}
	for _, c := range candidates {
		p := procfs.Path(pid, c)
		if isTTMetal(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d: %w", pid, ErrNotMapped)
}

// Cmdline returns pid's command line, arguments separated by spaces.
func Cmdline(pid int) string {
	args, err := procfs.Cmdline(pid)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Join(args, " "))
}

// isTTMetal reports whether the file at path is a TT-Metal library. A
// file that makes the reader panic is not one (elfx.Recover's rule: one
// bad file is refused, the search goes on).
func isTTMetal(path string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		return false
	}
	defer lib.Close()
	return ttmetal.IsTTMetal(lib)
}
