package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CgroupEntry is one line of /proc/PID/cgroup: a cgroup hierarchy and the
// process's cgroup in it. The unified (v2) hierarchy is ID 0 with no
// controllers; each v1 hierarchy has its own ID and controllers.
type CgroupEntry struct {
	ID          int
	Controllers string // "memory", "cpu,cpuacct", "name=systemd"; "" for v2
	Path        string // as the kernel prints it for the reader's cgroup namespace: "/a/b", or "/../x" outside its root
}

// Bounds of /proc/PID/cgroup: a host has a dozen hierarchies and a path
// is at most a few hundred bytes; the names of cgroups are made by
// whoever may make them (a delegated subtree), so the file is read as
// hostile.
const (
	MaxCgroupFile  = 64 << 10
	MaxCgroupLines = 64
)

// ErrCgroupFormat is returned for a /proc/PID/cgroup that is not what the
// kernel writes for a cgroup whose names have no newline: a malformed
// line, a hierarchy listed twice (a cgroup named with a newline can make
// the text of a line of its own), too many lines.
var ErrCgroupFormat = errors.New("not a well-formed cgroup file")

// Cgroups reads pid's cgroups (/proc/PID/cgroup).
func Cgroups(pid int) ([]CgroupEntry, error) {
	b, err := procFile(pid, "cgroup", MaxCgroupFile)
	if err != nil {
		return nil, err
	}
	return ParseCgroups(b)
}

// ParseCgroups parses the text of a /proc/PID/cgroup: "ID:CONTROLLERS:PATH"
// lines. Any line not of that form, an ID seen twice, a path not starting
// with '/' or holding a control character, or more than MaxCgroupLines
// lines make the whole file ErrCgroupFormat: a line the kernel did not
// write as such must not be taken for one.
func ParseCgroups(b []byte) ([]CgroupEntry, error) {
	if len(b) > MaxCgroupFile {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrCgroupFormat, MaxCgroupFile)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCgroupFormat)
	}
	if bytes.Count(b, []byte("\n")) >= MaxCgroupLines {
		return nil, fmt.Errorf("%w: more than %d lines", ErrCgroupFormat, MaxCgroupLines)
	}
	var out []CgroupEntry
	seen := map[int]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		id, rest, ok1 := strings.Cut(line, ":")
		ctl, path, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: line %d has no ID:CONTROLLERS:PATH", ErrCgroupFormat, i+1)
		}
		n, err := strconv.Atoi(id)
		if err != nil || n < 0 || len(id) > 6 || id != strconv.Itoa(n) {
			return nil, fmt.Errorf("%w: line %d: hierarchy id %q", ErrCgroupFormat, i+1, cut(id))
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: hierarchy %d listed twice", ErrCgroupFormat, n)
		}
		seen[n] = true
		if !strings.HasPrefix(path, "/") || strings.ContainsFunc(path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("%w: line %d: path %q", ErrCgroupFormat, i+1, cut(path))
		}
		if strings.ContainsFunc(ctl, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("%w: line %d: controllers %q", ErrCgroupFormat, i+1, cut(ctl))
		}
		out = append(out, CgroupEntry{ID: n, Controllers: ctl, Path: path})
	}
	return out, nil
}

// cut shortens a value from a process for a message.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
