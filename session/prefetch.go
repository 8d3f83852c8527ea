package session

import (
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// libAnalysis is a library file opened and analysed as Library needs it.
type libAnalysis struct {
	lib     *ttmetal.Library // nil: openErr
	openErr error
	isTT    bool              // asked only when recognising
	prep    *ttmetal.Prepared // nil: not TT-Metal, or err
	err     error             // Prepare's
}

// analyse opens path and, recognising, stops there if it is not TT-Metal;
// then works out its symbols, layout and plan. A panic (a crafted file)
// closes the library and goes on up.
func analyse(path string, recognise bool, opts ttmetal.Options, tl *Timeline) (a libAnalysis) {
	if a.lib, a.openErr = ttmetal.OpenLibrary(path); a.openErr != nil {
		return a
	}
	defer func() {
		if r := recover(); r != nil {
			a.lib.Close()
			panic(r)
		}
	}()
	if recognise {
		if a.isTT = ttmetal.IsTTMetal(a.lib); !a.isTT {
			return a
		}
	}
	tl.Mark(path + ": opened, recognised")
	if a.prep, a.err = ttmetal.Prepare(a.lib, opts); a.err == nil {
		tl.Mark(path + ": symbols, layout, plan")
	}
	return a
}

// aheadLib is a library analysed while the BPF objects load, so the two
// overlap on a second CPU: the --lib library, or a command's candidates.
// Library takes it if it asks the same (recognise) of the same file.
type aheadLib struct {
	key         procfs.FileKey
	recognise   bool
	done        chan struct{}
	libAnalysis // set before done is closed; lib nil: Library does it again
}

// prepareAhead starts the analysis of each path in a goroutine of its own
// (at most a few: --lib, or the candidates of one command). explicit is
// the path Library will be asked to probe whatever it is (--lib).
func prepareAhead(paths []string, explicit string, opts ttmetal.Options) map[string]*aheadLib {
	out := map[string]*aheadLib{}
	for _, p := range paths {
		if _, dup := out[p]; dup || len(out) == maxAhead {
			continue
		}
		key, err := procfs.KeyOf(p)
		if err != nil {
			continue
		}
		a := &aheadLib{key: key, recognise: p != explicit, done: make(chan struct{})}
		out[p] = a
		go func() {
			defer close(a.done)
			// A crafted file: the panic is Library's to report, when it
			// analyses the file again itself.
			defer func() {
				if recover() != nil {
					a.libAnalysis = libAnalysis{}
				}
			}()
			a.libAnalysis = analyse(p, a.recognise, opts, nil)
		}()
	}
	return out
}

// maxAhead bounds the libraries prepared ahead: each holds an open file.
const maxAhead = 8

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
			out = append(out, p.Program)
		}
	}
	return out
}

// takeAhead returns the analysis made ahead for path, if it asked what
// Library asks (recognise) of what is still the file at path; the caller
// owns its lib. ok false: do it all again.
func (b *bpfBackend) takeAhead(path string, recognise bool) (a *aheadLib, ok bool) {
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
	if k, err := procfs.KeyOf(path); err != nil || k != a.key || a.recognise != recognise {
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
