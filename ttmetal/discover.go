package ttmetal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tttrace/tttrace/procfs"
)

// How tttrace finds the TT-Metal library of a process without --lib:
//
//  1. Before the process runs TT-Metal code, every candidate file that
//     could be it (CandidateLibraries) is probed by inode. A uprobe on an
//     inode fires in every process that maps the file later, so a candidate
//     that is loaded is traced from its first call: nothing is missed.
//  2. ld.so calls _dl_debug_state after every change of the link map
//     (start-up and each dlopen). A probe there tells the tracer to look at
//     the process's mappings; a TT-Metal library found there that was not a
//     candidate is attached at once, and the process is marked as attached
//     late, because calls made before that are not seen.
//
// A library is recognised by its symbols (IsTTMetal), so a renamed copy
// (or _ttnn.so with TT-Metal linked in) is found too.

// ErrNotMapped is returned when a process has not mapped a TT-Metal library.
var ErrNotMapped = errors.New("libtt_metal.so is not mapped")

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
		if isTTMetalFile(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d: %w", pid, ErrNotMapped)
}

// isTTMetalFile reports whether the file at path is a TT-Metal library. A
// file that makes the reader panic is not one (elfx.Recover's rule: one
// bad file is refused, the search goes on).
func isTTMetalFile(path string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	lib, err := OpenLibrary(path)
	if err != nil {
		return false
	}
	defer lib.Close()
	return IsTTMetal(lib)
}

// CandidateLibraries lists files that may be the TT-Metal library a
// process will load: libtt_metal.so* in the directories a TT-Metal user's
// process loads it from. pid is the process (0: one about to start with
// command and this process's environment and working directory). Only
// existing files are returned; whether they really are TT-Metal is for the
// caller to check (IsTTMetal).
func CandidateLibraries(pid int, command []string) []string {
	env := os.Environ()
	cwd, _ := os.Getwd()
	root := ""
	if pid > 0 {
		env, _ = procfs.Environ(pid)
		cwd, _ = procfs.Cwd(pid)
		root = procfs.Root(pid)
		command, _ = procfs.Cmdline(pid)
		if exe, err := procfs.Exe(pid); err == nil {
			command = append(command, exe)
		}
	}
	var dirs []string
	add := func(d string) {
		if d == "" {
			return
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(cwd, d)
		}
		dirs = append(dirs, d)
	}
	add(cwd)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_LIBRARY_PATH", "PYTHONPATH":
			for _, d := range strings.Split(v, ":") {
				add(d)
			}
		case "TT_METAL_HOME":
			add(v)
		case "VIRTUAL_ENV", "CONDA_PREFIX":
			add(v)
			sitePackages(filepath.Join(root, v), add)
		}
	}
	var words []string
	for _, a := range command {
		// A shell script (sh -c "exec python3 /x/run.py ...", as wrappers
		// and pyenv-style shims run things) names its paths inside one
		// argument: take every word.
		words = append(words, strings.Fields(a)...)
	}
	for _, a := range words {
		// Paths named on the command line: the program, scripts, test dirs.
		if !strings.Contains(a, "/") {
			continue
		}
		if !filepath.IsAbs(a) {
			a = filepath.Join(cwd, a)
		}
		d := filepath.Dir(a)
		add(d)
		if strings.HasPrefix(filepath.Base(a), "python") {
			// An interpreter: its installation's site-packages.
			sitePackages(filepath.Join(root, filepath.Dir(d)), add)
		}
	}
	var out []string
	seen := map[procfs.FileKey]bool{}
	for _, d := range dirs {
		for _, sub := range []string{"", "lib", "build/lib", "ttnn/build/lib", "ttnn/ttnn/build/lib"} {
			matches, _ := filepath.Glob(filepath.Join(root+d, sub, "libtt_metal.so*"))
			for _, m := range matches {
				k, err := procfs.KeyOf(m)
				if err != nil || seen[k] || !procfs.IsRegular(m) {
					continue
				}
				seen[k] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// sitePackages adds prefix/lib/python3*/site-packages and dist-packages.
func sitePackages(prefix string, add func(string)) {
	for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "local/lib/python3*/dist-packages"} {
		ms, _ := filepath.Glob(filepath.Join(prefix, pat))
		for _, m := range ms {
			add(m)
		}
	}
}
