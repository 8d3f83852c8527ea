package session

import (
	"slices"

	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/ttmetal"
)

// aheadLib is a library opened and analysed (symbols, layout, plan: pure
// work on its file) while the BPF objects load, so the two overlap on a
// second CPU: the --lib library, or a command's candidates. Library takes
// it if the path still names the same file.
type aheadLib struct {
	path string
	key  probes.FileKey
	done chan struct{}
	// Set before done is closed.
	lib  *ttmetal.Library // nil: open failed (Library tries again itself)
	isTT bool
	prep *ttmetal.Prepared // nil: not prepared (not TT-Metal, or err)
	err  error             // Prepare's
}

// prepareAhead starts the analysis of each path in a goroutine of its own
// (at most a few: --lib, or the candidates of one command).
func prepareAhead(paths []string, explicit string, opts ttmetal.Options) map[string]*aheadLib {
	out := map[string]*aheadLib{}
	for _, p := range paths {
		if _, dup := out[p]; dup || len(out) == maxAhead {
			continue
		}
		key, err := probes.KeyOf(p)
		if err != nil {
			continue
		}
		a := &aheadLib{path: p, key: key, done: make(chan struct{})}
		out[p] = a
		go a.prepare(p == explicit, opts)
	}
	return out
}

// maxAhead bounds the libraries prepared ahead: each holds an open file.
const maxAhead = 8

func (a *aheadLib) prepare(explicit bool, opts ttmetal.Options) {
	defer close(a.done)
	// A crafted file: the panic is Library's to report, when it parses
	// the file again itself.
	defer func() {
		if r := recover(); r != nil {
			if a.lib != nil {
				a.lib.Close()
			}
			a.lib, a.prep, a.err = nil, nil, nil
		}
	}()
	lib, err := ttmetal.OpenLibrary(a.path)
	if err != nil {
		return
	}
	a.lib = lib
	a.isTT = ttmetal.IsTTMetal(lib)
	if !a.isTT && !explicit {
		return
	}
	a.prep, a.err = ttmetal.Prepare(lib, opts)
}

// aheadPrograms waits for the libraries prepared ahead and returns the
// programs their plans attach, for probes.Load to load with its own.
func aheadPrograms(ahead map[string]*aheadLib) []ttmetal.Program {
	var out []ttmetal.Program
	for _, a := range ahead {
		<-a.done
		if a.prep == nil || a.prep.Plan == nil {
			continue
		}
		for _, p := range a.prep.Plan.AttachPoints {
			if !slices.Contains(out, p.Program) {
				out = append(out, p.Program)
			}
		}
	}
	return out
}

// takeAhead returns the library prepared ahead for path, if it is still the
// file at path; the caller owns lib. ok false: do it all again.
func (b *bpfBackend) takeAhead(path string) (a *aheadLib, ok bool) {
	b.aheadMu.Lock()
	a = b.ahead[path]
	delete(b.ahead, path)
	b.aheadMu.Unlock()
	if a == nil {
		return nil, false
	}
	<-a.done
	if a.lib == nil {
		return nil, false
	}
	if k, err := probes.KeyOf(path); err != nil || k != a.key {
		a.lib.Close()
		return nil, false
	}
	return a, true
}

// dropAhead closes the libraries prepared ahead that no Library took.
func (b *bpfBackend) dropAhead() {
	b.aheadMu.Lock()
	defer b.aheadMu.Unlock()
	for p, a := range b.ahead {
		<-a.done
		if a.lib != nil {
			a.lib.Close()
		}
		delete(b.ahead, p)
	}
}
