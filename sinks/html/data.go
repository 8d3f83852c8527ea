package html

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks"
	pprofexport "github.com/tttrace/tttrace/sinks/pprof"
)

// The charts' data, embedded in the page as JSON (page.js draws it). Times
// are ns after the run's first sample; a series is a flat array of
// [time, value, time, value, ...], each value held until the next time.

type jsData struct {
	Procs []*jsProc `json:"procs"`
}

type jsProc struct {
	Proc   int       `json:"proc"`
	Pid    uint32    `json:"pid"`
	End    uint64    `json:"end"` // the last sample's time
	Chips  []*jsChip `json:"chips"`
	Icicle *icNode   `json:"icicle,omitempty"`
	chips  [][]*Series
}

type jsChip struct {
	Chip   int32      `json:"chip"`
	Mem    []jsSeries `json:"mem"`
	Alloc  []jsAlloc  `json:"alloc"`
	series []*Series
}

type jsSeries struct {
	Type  string `json:"type"`
	Label string `json:"label"` // its legend
	Field string `json:"field"` // the counter (devices.Counter's name)
	// Peak: the summary's field of its peak, which the drawn peak's
	// marker names ("" : none, no marker); Cap: a line at that value (L1
	// per core: a core's L1 size), 0 for none.
	Peak string   `json:"peak"`
	Cap  uint64   `json:"cap,omitempty"`
	Pts  []uint64 `json:"pts"`
	s    *Series
}

// jsAlloc is one bank manager of a chip: its capacity (banks x allocatable
// bytes per bank), used bytes and largest free block over time.
type jsAlloc struct {
	Type     string   `json:"type"` // dram, l1, l1_small, trace
	Banks    uint32   `json:"banks"`
	Capacity uint64   `json:"capacity"`
	Used     []uint64 `json:"used"`
	Big      []uint64 `json:"largest_free"`
	used     *Series
	big      *Series
}

// fill turns the series into arrays, times after t0.
func (p *jsProc) fill(t0 uint64) {
	flat := func(s *Series) []uint64 {
		ps := s.Points()
		out := make([]uint64, 0, 2*len(ps))
		for _, pt := range ps {
			ts := uint64(0)
			if pt.TsNs > t0 {
				ts = pt.TsNs - t0
			}
			out = append(out, ts, pt.Value)
			p.End = max(p.End, ts)
		}
		return out
	}
	for _, c := range p.Chips {
		if c.Mem == nil {
			c.Mem = []jsSeries{}
		}
		if c.Alloc == nil {
			c.Alloc = []jsAlloc{}
		}
		for i := range c.Mem {
			c.Mem[i].Pts = flat(c.Mem[i].s)
		}
		for i := range c.Alloc {
			c.Alloc[i].Used, c.Alloc[i].Big = flat(c.Alloc[i].used), flat(c.Alloc[i].big)
		}
	}
	if p.Chips == nil {
		p.Chips = []*jsChip{}
	}
}

// icNode is a frame of the icicle view: its name, file:line, what the
// sites under it did (in use, allocated, held at their chip's peak, in
// bytes) and its callees.
type icNode struct {
	Name  string    `json:"n"`
	File  string    `json:"f,omitempty"`
	V     [3]uint64 `json:"v"`
	Kids  []*icNode `json:"c,omitempty"`
	kids  map[string]*icNode
	depth int
}

func (n *icNode) child(name, file string) *icNode {
	k := name + "\x00" + file
	c := n.kids[k]
	if c == nil {
		c = &icNode{Name: name, File: file, kids: map[string]*icNode{}, depth: n.depth + 1}
		n.kids[k] = c
		n.Kids = append(n.Kids, c)
	}
	return c
}

func (n *icNode) add(v [3]uint64) {
	for i := range v {
		n.V[i] = devices.SatAdd(n.V[i], v[i])
	}
}

// icicle is ps's allocation sites as a tree: the process, then the buffer
// type, then the frames from the outermost (pprof's frames of each site),
// each node with the sum of the sites under it over the process's chips.
// At most maxIcicleSites sites per type are placed (those that allocated
// most); the others are one node. The tree is then cut to MaxIcicleNodes:
// the nodes that are the largest part of the root in some measure stay,
// what their dropped callees did is one "(other)" node under them.
func icicle(ps *devices.ProcessSummary) *icNode {
	root := &icNode{Name: fmt.Sprintf("pid %d", ps.Pid), kids: map[string]*icNode{}}
	type key struct {
		site uint32
		typ  string
	}
	sums := map[key]*[3]uint64{}
	descs := map[uint32]*devices.Site{}
	var order []key
	for i := range ps.SiteUsage {
		u := &ps.SiteUsage[i]
		k := key{u.Site, u.Type}
		v := sums[k]
		if v == nil {
			v = &[3]uint64{}
			sums[k] = v
			order = append(order, k)
		}
		v[0] = devices.SatAdd(v[0], u.InuseBytes)
		v[1] = devices.SatAdd(v[1], u.AllocBytes)
		v[2] = devices.SatAdd(v[2], u.PeakBytes)
		if u.Desc != nil {
			descs[u.Site] = u.Desc
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := sums[order[i]], sums[order[j]]
		if a[1] != b[1] {
			return a[1] > b[1]
		}
		return order[i].site < order[j].site
	})
	placed := map[string]int{}
	others := map[string]*icNode{}
	for _, k := range order {
		v := *sums[k]
		if v == [3]uint64{} {
			continue
		}
		root.add(v)
		tn := root.child(k.typ, "")
		tn.add(v)
		if placed[k.typ] >= maxIcicleSites {
			o := others[k.typ]
			if o == nil {
				o = tn.child("(other sites)", "")
				others[k.typ] = o
			}
			o.add(v)
			continue
		}
		placed[k.typ]++
		n := tn
		fs := pprofexport.Frames(descs[k.site])
		for i := len(fs) - 1; i >= 0; i-- {
			f := fs[i]
			file := ""
			if f.File != "" {
				file = sinks.Printable(filepath.Base(f.File))
				if f.Line > 0 {
					file += fmt.Sprintf(":%d", f.Line)
				}
			}
			n = n.child(sinks.Printable(f.Function), file)
			n.add(v)
		}
	}
	prune(root, MaxIcicleNodes)
	return root
}

// prune keeps at most limit nodes of the tree at root (at least the root):
// the nodes that are the largest share of the root's value in any of its
// measures, parents before children (a parent holds at least what each
// child does); a node that lost callees gets one "(other)" callee with
// what they did. Half of limit goes to kept nodes, the rest to those.
func prune(root *icNode, limit int) {
	var all []*icNode
	var walk func(n *icNode)
	walk = func(n *icNode) {
		all = append(all, n)
		for _, c := range n.Kids {
			walk(c)
		}
	}
	walk(root)
	if len(all) <= limit {
		return
	}
	share := func(n *icNode) float64 {
		s := 0.0
		for i := range n.V {
			if root.V[i] > 0 {
				s = maxf(s, float64(n.V[i])/float64(root.V[i]))
			}
		}
		return s
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := share(all[i]), share(all[j])
		if a != b {
			return a > b
		}
		return all[i].depth < all[j].depth
	})
	keep := map[*icNode]bool{}
	for _, n := range all[:max(limit/2, 1)] {
		keep[n] = true
	}
	var cut func(n *icNode)
	cut = func(n *icNode) {
		var kept []*icNode
		var rest [3]uint64
		dropped := false
		for _, c := range n.Kids {
			if keep[c] {
				kept = append(kept, c)
				cut(c)
				continue
			}
			dropped = true
			for i := range rest {
				rest[i] = devices.SatAdd(rest[i], c.V[i])
			}
		}
		if dropped {
			kept = append(kept, &icNode{Name: "(other)", V: rest})
		}
		n.Kids = kept
	}
	cut(root)
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}
