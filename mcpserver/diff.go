package mcpserver

import (
	"fmt"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks/diff"
)

// DiffAnswer is diff_runs' answer: tttrace diff A B --json, bounded.
type DiffAnswer struct {
	A       RunInfo      `json:"a"`
	B       RunInfo      `json:"b"`
	Caveats []string     `json:"caveats" jsonschema:"what limits the comparison (each run's caveats, prefixed A: or B:)"`
	Cut     []Cut        `json:"cut"`
	Diff    *diff.Result `json:"diff" jsonschema:"as tttrace diff --json: processes matched by command (changed, appeared, vanished) with per chip the counters at the end and at their peak (a, b, delta; peak_at_ns after the process's first event), leaks per type, the allocator's numbers, the min L1 headroom; the sites that grew, shrank, appeared or vanished (matched by Python lines and symbolized native frames, never addresses); the failed allocations, clashes and trace problems one run has more of; windows (matched by name, else index) whose per-chip peaks or memory_stats differ; TT-NN ops rows whose figures differ; growth: every counter higher in B (at the end, its peak, or its peak in a window: at window_peak), most bytes first"`
}

func diffAnswer(c *cutter, ia, ib RunInfo, ra, rb *run) (*DiffAnswer, error) {
	da, err := ra.diff()
	if err != nil {
		return nil, fmt.Errorf("run A: %w", err)
	}
	db, err := rb.diff()
	if err != nil {
		return nil, fmt.Errorf("run B: %w", err)
	}
	res := *diff.Compare(da, db, ia.File, ib.File)
	res.Processes = keep(c, "processes", res.Processes, 0)
	procs := make([]diff.ProcessDiff, len(res.Processes))
	for i, p := range res.Processes {
		who := fmt.Sprintf("process %d (%s)", i, str(p.Command))
		p.Command, p.CommandB = str(p.Command), str(p.CommandB)
		p.Chips = keep(c, who+" chips", p.Chips, 0)
		p.Meshes = keep(c, who+" meshes", p.Meshes, 0)
		p.Sites = keep(c, who+" sites", p.Sites, 0)
		sites := make([]diff.SiteDiff, len(p.Sites))
		for j, s := range p.Sites {
			s.Site = cutRef(s.Site)
			sites[j] = s
		}
		p.Sites = sites
		p.Records = keep(c, who+" records", p.Records, 0)
		recs := make([]diff.RecordDiff, len(p.Records))
		for j, r := range p.Records {
			if r.Record != nil {
				rc := *r.Record
				rc.Site, rc.Other = cutRef(rc.Site), cutRef(rc.Other)
				r.Record = &rc
			}
			recs[j] = r
		}
		p.Records = recs
		p.Windows = keep(c, who+" windows", p.Windows, 0)
		wins := make([]diff.WindowDiff, len(p.Windows))
		for j, w := range p.Windows {
			w.Name, w.NameB = str(w.Name), str(w.NameB)
			w.Chips = keep(c, fmt.Sprintf("%s window %d chips", who, j), w.Chips, 0)
			wins[j] = w
		}
		p.Windows = wins
		p.Ops = keep(c, who+" ops", p.Ops, 0)
		ops := make([]diff.OpDiff, len(p.Ops))
		for j, o := range p.Ops {
			o.Name, o.DeviceOp = str(o.Name), str(o.DeviceOp)
			ops[j] = o
		}
		p.Ops = ops
		procs[i] = p
	}
	res.Processes = procs
	res.Growth = keep(c, "growth", res.Growth, 0)
	growth := make([]diff.Growth, len(res.Growth))
	for i, g := range res.Growth {
		g.Command = str(g.Command)
		if w := g.Window; w != nil {
			g.Window = &diff.WindowRef{Index: w.Index, Name: str(w.Name)}
		}
		growth[i] = g
	}
	res.Growth = growth
	a := &DiffAnswer{A: ia, B: ib, Diff: &res, Caveats: []string{}}
	for _, x := range []struct {
		tag  string
		info RunInfo
		r    *run
	}{{"A: ", ia, ra}, {"B: ", ib, rb}} {
		ps := make([]*devices.ProcessSummary, 0, len(x.r.sum.Processes))
		for i := range x.r.sum.Processes {
			ps = append(ps, &x.r.sum.Processes[i])
		}
		for _, cv := range caveats(&x.info, x.r.sum, ps, &Filter{}) {
			a.Caveats = append(a.Caveats, x.tag+cv)
		}
	}
	if len(a.Caveats) > maxCaveats {
		n := len(a.Caveats) - maxCaveats + 1
		a.Caveats = append(a.Caveats[:maxCaveats-1], fmt.Sprintf("... %d more caveats", n))
	}
	return a, nil
}

// cutRef is a site reference with its strings bounded and at most
// maxFrames frames of each kind.
func cutRef(r *diff.SiteRef) *diff.SiteRef {
	if r == nil {
		return nil
	}
	c := &diff.SiteRef{Python: []devices.PyFrame{}, Native: []diff.Frame{}, Truncated: r.Truncated, Unknown: r.Unknown}
	for i, f := range r.Python {
		if i == maxFrames {
			c.Truncated = true
			break
		}
		c.Python = append(c.Python, devices.PyFrame{Function: str(f.Function), File: str(f.File), Line: f.Line})
	}
	for i, f := range r.Native {
		if i == maxFrames {
			c.Truncated = true
			break
		}
		f.Function, f.Module, f.File = str(f.Function), str(f.Module), str(f.File)
		c.Native = append(c.Native, f)
	}
	return c
}
