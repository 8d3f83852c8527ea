package mcpserver

// The runs the server may read: files named on the command line, and files
// under the directories given with --runs, nothing else. A name from a tool
// call is hostile: it is opened beneath its directory with openat2
// (RESOLVE_BENEATH: no "..", no absolute link, no magic link leads out of
// it), never followed out, and only a regular file no larger than
// Options.MaxRunBytes is read, through a reader that stops at that size and
// when the call is cancelled. A run is replayed once (session.Replay, as
// tttrace report does) and kept, at most maxCached of them, by file
// identity (device, inode, size, modification time).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/session"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/diff"
)

const (
	// maxCached: runs kept replayed.
	maxCached = 4
	// maxNameBytes bounds a run's name in a tool call.
	maxNameBytes = 4096
	// maxListed bounds the files list_runs looks at (all directories).
	maxListed = 10000
	// maxDepth bounds how deep list_runs walks below a directory.
	maxDepth = 8
)

// run is a replayed run.
type run struct {
	info RunInfo
	sum  *devices.Summary
	// diffRun: what tttrace diff compares of it, made on first use.
	diffOnce sync.Once
	diffRun  *diff.Run
	diffErr  error
}

// fileKey is a file's identity and version.
type fileKey struct {
	dev, ino    uint64
	size, mtime int64
}

// runs opens, replays and caches runs.
type runs struct {
	dirs    []string // absolute, cleaned
	files   []string // absolute, cleaned
	given   []string // the files as named on the command line
	maxSize int64

	mu    sync.Mutex // one replay at a time
	cache map[fileKey]*run
	order []fileKey // oldest first
}

func newRuns(o *Options) (*runs, error) {
	r := &runs{maxSize: o.MaxRunBytes, cache: map[fileKey]*run{}}
	if r.maxSize <= 0 {
		r.maxSize = DefaultMaxRunBytes
	}
	for _, d := range o.Dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("--runs %s: %w", d, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("--runs: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("--runs %s: not a directory", d)
		}
		r.dirs = append(r.dirs, abs)
	}
	for _, f := range o.Files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", f)
		}
		r.files = append(r.files, abs)
		r.given = append(r.given, f)
	}
	return r, nil
}

// open opens the run called name: a file named on the command line (by
// that name, its base name or its absolute path), or a file beneath a --runs
// directory (a path relative to one, tried in order, or an absolute path
// inside one). It returns the file and its absolute path.
func (r *runs) open(name string) (*os.File, string, error) {
	switch {
	case name == "":
		return nil, "", errors.New("no run named: give a file list_runs lists")
	case len(name) > maxNameBytes:
		return nil, "", fmt.Errorf("a run's name is at most %d bytes", maxNameBytes)
	case strings.IndexByte(name, 0) >= 0:
		return nil, "", errors.New("a run's name holds a NUL byte")
	}
	clean := filepath.Clean(name)
	for i, f := range r.files {
		if clean == f || name == r.given[i] || (!strings.Contains(name, "/") && name == filepath.Base(f)) {
			fd, err := unix.Open(f, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, f, &os.PathError{Op: "open", Path: f, Err: err}
			}
			return os.NewFile(uintptr(fd), f), f, nil
		}
	}
	if filepath.IsAbs(clean) {
		for _, d := range r.dirs {
			if rel, ok := beneath(d, clean); ok {
				return openBeneath(d, rel)
			}
		}
		return nil, "", fmt.Errorf("%s is outside what tttrace mcp may read (its --runs directories and the files named to it)", sinks.Printable(name))
	}
	var first error
	for _, d := range r.dirs {
		f, path, err := openBeneath(d, clean)
		if err == nil {
			return f, path, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("%s: no such run (tttrace mcp reads its --runs directories and the files named to it)", sinks.Printable(name))
	}
	return nil, "", first
}

// mayHold says whether a file at path (a snapshot beside it) is beneath a
// --runs directory.
func (r *runs) mayHold(path string) bool {
	for _, d := range r.dirs {
		if _, ok := beneath(d, filepath.Dir(filepath.Clean(path))+"/x"); ok {
			return true
		}
	}
	return false
}

// beneath says whether path is inside dir, and its path relative to dir.
func beneath(dir, path string) (string, bool) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// openBeneath opens rel beneath dir: nothing on the way may lead out of
// dir (RESOLVE_BENEATH), and /proc's magic links are refused.
func openBeneath(dir, rel string) (*os.File, string, error) {
	path := filepath.Join(dir, rel)
	if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, path, fmt.Errorf("%s is outside %s", sinks.Printable(rel), dir)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, path, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.EXDEV):
		return nil, path, fmt.Errorf("%s leads outside %s (a link or ..): not read", sinks.Printable(rel), dir)
	case errors.Is(err, unix.ENOSYS):
		return nil, path, errors.New("this kernel lacks openat2 (Linux 5.6), which reading runs safely needs")
	case err != nil:
		return nil, path, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), path, nil
}

// check says whether f is a run that may be read, and its identity.
func (r *runs) check(f *os.File) (fileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileKey{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileKey{}, fmt.Errorf("%s is not a regular file", sinks.Printable(f.Name()))
	}
	if st.Size > r.maxSize {
		return fileKey{}, fmt.Errorf("%s is %s, more than tttrace mcp reads (--max-run-bytes %s)", sinks.Printable(f.Name()),
			sinks.HumanBytes(uint64(st.Size)), sinks.HumanBytes(uint64(r.maxSize)))
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}, nil
}

// load returns the run called name, replayed.
func (r *runs) load(ctx context.Context, name string) (*run, error) {
	f, path, err := r.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	key, err := r.check(f)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cache[key]; c != nil {
		return c, nil
	}
	in := &boundedReader{ctx: ctx, r: f, left: r.maxSize}
	res, err := session.Replay(in, session.ReplayConfig{
		MaxChips: devices.DefaultMaxChips, SiteUsage: true,
		KeepEnded: devices.DefaultKeepEnded, KeepEndedTotals: devices.DefaultKeepEndedTotals, Log: io.Discard,
	}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", sinks.Printable(path), err)
	}
	s := &res.Summary
	ru := &run{sum: s, info: RunInfo{
		Source: "file", File: path, SummaryOnly: res.SummaryOnly, Events: s.Events, LostEvents: s.LostEvents,
		Complete: s.Complete, LayoutAnomalies: s.LayoutAnomalies, Processes: len(s.Processes),
	}}
	if len(r.order) == maxCached {
		delete(r.cache, r.order[0])
		r.order = r.order[1:]
	}
	r.cache[key] = ru
	r.order = append(r.order, key)
	return ru, nil
}

// diff is what tttrace diff compares of the run.
func (ru *run) diff() (*diff.Run, error) {
	ru.diffOnce.Do(func() { ru.diffRun, ru.diffErr = diff.FromSummary(ru.sum, !ru.info.SummaryOnly) })
	return ru.diffRun, ru.diffErr
}

// boundedReader reads at most left bytes, and nothing once ctx is done.
type boundedReader struct {
	ctx  context.Context
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left <= 0 {
		return 0, errors.New("the file grew past --max-run-bytes while read")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// RunFile is a file list_runs found.
type RunFile struct {
	Path     string    `json:"path" jsonschema:"the run's absolute path: give it as run (a path relative to a --runs directory works too)"`
	Bytes    int64     `json:"bytes"`
	Modified time.Time `json:"modified"`
	// Kind: "ndjson" (a run with its events), "summary" (a summary line
	// alone: --no-events, or a snapshot FILE.STAMP), "other".
	Kind string `json:"kind" jsonschema:"ndjson: the run with its events (tttrace --save FILE, --json -o FILE); summary: its summary line alone (--json --no-events, or a snapshot FILE.STAMP); other: not a tttrace run"`
}

// list finds the runs: the named files and the regular files beneath the
// directories (at most maxListed looked at), newest first.
func (r *runs) list() (files []RunFile, looked int, more bool) {
	add := func(path string, st fs.FileInfo) {
		files = append(files, RunFile{Path: path, Bytes: st.Size(), Modified: st.ModTime().UTC()})
	}
	for _, f := range r.files {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			add(f, st)
		}
		looked++
	}
	for _, d := range r.dirs {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if looked >= maxListed {
				more = true
				return filepath.SkipAll
			}
			looked++
			if e.IsDir() {
				if path != d && strings.Count(path[len(d):], "/") > maxDepth {
					return filepath.SkipDir
				}
				return nil
			}
			if !e.Type().IsRegular() {
				return nil
			}
			if st, err := e.Info(); err == nil {
				add(path, st)
			}
			return nil
		})
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].Modified.After(files[j].Modified) })
	return files, looked, more
}

// kind tells a run file's kind from its first bytes.
func (r *runs) kind(path string) string {
	f, _, err := r.open(path)
	if err != nil {
		return "other"
	}
	defer f.Close()
	if _, err := r.check(f); err != nil {
		return "other"
	}
	var head [64]byte
	n, _ := io.ReadFull(f, head[:])
	s := string(head[:n])
	switch {
	case strings.HasPrefix(s, `{"type":"summary"`):
		return "summary"
	case strings.HasPrefix(s, `{"type":"`):
		return "ndjson"
	}
	return "other"
}
