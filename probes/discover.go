package probes

import (
	"fmt"
	"github.com/tttrace/tttrace/procfs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
// A library is recognised by its symbols, so a renamed copy (or _ttnn.so
// with TT-Metal linked in) is found too.

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

// MappedObjects returns the distinct shared objects pid maps, as paths valid
// from this mount namespace, and the dynamic loader among them ("" if none).
func MappedObjects(pid int) (objs []string, loader string, err error) {
	maps, err := procfs.Maps(pid)
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
		p := procfs.Path(pid, m.Path)
		if strings.HasPrefix(base, "ld-linux") {
			loader = p
		}
		objs = append(objs, p)
	}
	return objs, loader, nil
}

// CandidateLibraries lists files that may be the TT-Metal library a
// process will load: libtt_metal.so* in the directories a TT-Metal user's
// process loads it from. pid is the process (0: one about to start with
// command and this process's environment and working directory). Only
// existing files are returned; whether they really are TT-Metal is for the
// caller to check (ttmetal.IsTTMetal).
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
	seen := map[FileKey]bool{}
	for _, d := range dirs {
		for _, sub := range []string{"", "lib", "build/lib", "ttnn/build/lib", "ttnn/ttnn/build/lib"} {
			matches, _ := filepath.Glob(filepath.Join(root+d, sub, "libtt_metal.so*"))
			for _, m := range matches {
				k, err := KeyOf(m)
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

// NsPid returns pid's id in its own (innermost) pid namespace, or 0 when it
// is the same as pid or unknown.
func NsPid(pid int) uint32 {
	f := strings.Fields(procfs.Status(pid, "NSpid"))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[len(f)-1])
	return uint32(n)
}

// ParentPid returns pid's parent, 0 if unknown.
func ParentPid(pid int) uint32 {
	f, err := procfs.Stat(pid) // state ppid ...
	if err != nil || len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return uint32(n)
}

// AllPids lists the processes in /proc.
func AllPids() []int { return procfs.Pids() }
