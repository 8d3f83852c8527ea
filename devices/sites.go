package devices

import (
	"sort"
	"strings"
)

// Site is an allocation site: one distinct allocation stack of a process
// (native and Python frames), innermost frame first. The ledger keeps only
// its id per buffer; the runtime, which holds the stacks, describes it
// (SiteSource).
type Site struct {
	Site   uint32        `json:"site"`
	Native []NativeFrame `json:"native"`
	Python []PyFrame     `json:"python"`
	// Truncated: the stack was cut (depth limit, end of the copied stack,
	// a frame that could not be unwound).
	Truncated bool `json:"truncated"`
}

// NativeFrame is a machine-code frame.
type NativeFrame struct {
	PC     uint64 `json:"pc"`     // run-time address (a return address for callers)
	Module string `json:"module"` // the ELF file it is in, "" when in none
	// Function is the demangled symbol holding PC, "" when none does;
	// Offset is PC's offset in it, or PC's ELF address in Module then.
	Function string `json:"function"`
	Offset   uint64 `json:"offset"`
	File     string `json:"file,omitempty"` // from DWARF, when present
	Line     int    `json:"line,omitempty"`
}

// PyFrame is a Python frame.
type PyFrame struct {
	Function string `json:"function"` // qualname where the interpreter has it
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// LeakSite sums the leaks of one allocation site.
type LeakSite struct {
	Site uint32 `json:"site"`
	// Test is the pytest test that allocated (FILE::[Class::]test_func),
	// absent when no Python frame is a test function.
	Test    string  `json:"test,omitempty"`
	Count   uint64  `json:"count"`   // leaks (a mesh buffer: one per chip)
	Bytes   uint64  `json:"bytes"`   // their sizes
	Devices []int32 `json:"devices"` // chips they are on, ascending
}

// addSites describes with describe (which returns false for a site it
// does not know) the sites of ps's leaks, of the L1 buffers its
// l1_clashes name and of its alloc_failures (the request, the holders),
// and sums the leaks per site in LeakSites, most bytes
// first (then by site).
func (ps *ProcessSummary) addSites(describe func(site uint32) (Site, bool)) {
	by := map[uint32]*LeakSite{}
	var order, named []uint32 // leak sites; sites only clashes name
	add := func(lk *Leak) {
		if lk.Site == 0 {
			return
		}
		ls := by[lk.Site]
		if ls == nil {
			ls = &LeakSite{Site: lk.Site, Devices: []int32{}}
			by[lk.Site] = ls
			order = append(order, lk.Site)
		}
		ls.Count++
		ls.Bytes += lk.Size
		for _, d := range ls.Devices {
			if d == lk.Device {
				return
			}
		}
		ls.Devices = append(ls.Devices, lk.Device)
	}
	for lk := range ps.AllLeaks() {
		add(lk)
	}
	for lk := range ps.AllUnplacedLeaks() {
		add(lk)
	}
	seen := map[uint32]bool{}
	name := func(b *L1Buffer) {
		if b.Site != 0 && by[b.Site] == nil && !seen[b.Site] {
			seen[b.Site] = true
			named = append(named, b.Site)
		}
	}
	for i := range ps.L1Clashes {
		c := &ps.L1Clashes[i]
		name(&c.Lowest)
		for j := range c.L1Buffers {
			name(&c.L1Buffers[j])
		}
	}
	nameID := func(id uint32) { name(&L1Buffer{Site: id}) }
	for i := range ps.AllocFailures {
		f := &ps.AllocFailures[i]
		nameID(f.Site)
		for _, h := range f.Holders {
			nameID(h.Site)
		}
		for _, h := range f.HolderSites {
			nameID(h.Site)
		}
	}
	if tr := ps.Traces; tr != nil {
		for _, list := range [][]TraceNote{tr.Hazards, tr.RegionHazards, tr.CaptureAllocs} {
			for i := range list {
				if b := list[i].Buffer; b != nil {
					nameID(b.Site)
				}
				if b := list[i].Captured; b != nil {
					nameID(b.Site)
				}
			}
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	ps.Sites = ps.Sites[:0]
	ps.LeakSites = ps.LeakSites[:0]
	described := func(id uint32) (Site, bool) {
		s, ok := describe(id)
		if ok {
			if s.Native == nil {
				s.Native = []NativeFrame{}
			}
			if s.Python == nil {
				s.Python = []PyFrame{}
			}
			ps.Sites = append(ps.Sites, s)
		}
		return s, ok
	}
	for _, id := range order {
		ls := by[id]
		sort.Slice(ls.Devices, func(i, j int) bool { return ls.Devices[i] < ls.Devices[j] })
		if s, ok := described(id); ok {
			ls.Test = TestOf(s.Python)
		}
		ps.LeakSites = append(ps.LeakSites, *ls)
	}
	for _, id := range named {
		described(id)
	}
	sort.Slice(ps.Sites, func(i, j int) bool { return ps.Sites[i].Site < ps.Sites[j].Site })
	sort.SliceStable(ps.LeakSites, func(i, j int) bool { return ps.LeakSites[i].Bytes > ps.LeakSites[j].Bytes })
}

// TestOf names the pytest test of a Python stack (innermost first): the
// innermost frame that is a test function (a name starting with "test") in
// a test module (test_*.py or *_test.py), as FILE::[Class::]function with
// the file as the interpreter names it. "" when there is none.
func TestOf(frames []PyFrame) string {
	for _, f := range frames {
		base := f.File
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		if !strings.HasSuffix(base, ".py") || !(strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py")) {
			continue
		}
		parts := strings.Split(f.Function, ".")
		name := parts[len(parts)-1]
		if !strings.HasPrefix(name, "test") {
			continue
		}
		id := f.File
		for _, p := range parts {
			if p == "<locals>" {
				// A function defined inside another is not collected by
				// pytest: this frame is not the test.
				id = ""
				break
			}
			id += "::" + p
		}
		if id != "" {
			return id
		}
	}
	return ""
}

// PythonInfo is the CPython interpreter of a process, for its Python
// frames: an unsupported one gives none (never a wrong line).
type PythonInfo struct {
	Version   string `json:"version"`         // "3.12.1", "" when unknown
	Supported bool   `json:"supported"`       // Python frames are captured
	Error     string `json:"error,omitempty"` // why not
}
