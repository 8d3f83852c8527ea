package probes

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tttrace/tttrace/ttmetal"
)

// ErrNoProcess is returned for a PID that does not exist.
var ErrNoProcess = errors.New("no such process")

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

// Mapping is one file-backed line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Offset     uint64
	Perms      string
	Path       string
}

// Maps reads the file-backed mappings of pid.
func Maps(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return nil, err
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		var m Mapping
		se := strings.SplitN(fields[0], "-", 2)
		if len(se) != 2 {
			continue
		}
		m.Start, _ = strconv.ParseUint(se[0], 16, 64)
		m.End, _ = strconv.ParseUint(se[1], 16, 64)
		m.Offset, _ = strconv.ParseUint(fields[2], 16, 64)
		m.Perms = fields[1]
		m.Path = strings.Join(fields[5:], " ")
		out = append(out, m)
	}
	return out, sc.Err()
}

// FindMappedLibrary returns the TT-Metal library pid has mapped, as a path
// valid from this mount namespace (through /proc/PID/root). A library named
// libtt_metal.so* is taken first; otherwise each mapped shared object is
// checked for TT-Metal's symbols, so a renamed copy is found too.
func FindMappedLibrary(pid int) (string, error) {
	maps, err := Maps(pid)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	var candidates []string
	for _, m := range maps {
		if seen[m.Path] || strings.HasSuffix(m.Path, " (deleted)") {
			continue
		}
		seen[m.Path] = true
		if strings.HasPrefix(filepath.Base(m.Path), "libtt_metal.so") {
			return procRootPath(pid, m.Path), nil
		}
		if strings.Contains(filepath.Base(m.Path), ".so") {
			candidates = append(candidates, m.Path)
		}
	}
	for _, c := range candidates {
		p := procRootPath(pid, c)
		lib, err := ttmetal.OpenLibrary(p)
		if err != nil {
			continue
		}
		ok := ttmetal.IsTTMetal(lib)
		lib.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d: %w", pid, ErrNotMapped)
}

// procRootPath makes a path from pid's mount namespace usable from ours.
func procRootPath(pid int, path string) string {
	return fmt.Sprintf("/proc/%d/root%s", pid, path)
}

// Cmdline returns pid's command line, arguments separated by spaces.
func Cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
