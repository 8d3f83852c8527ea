// Package pprof writes device memory by allocation site in the formats
// profilers already read: a gzipped pprof profile (--pprof, read by `go
// tool pprof`, built with github.com/google/pprof/profile) and folded
// stacks (--folded, for flamegraph.pl, speedscope, inferno).
//
// The rows are the ledger's per-site accounting (devices.SiteUsage: the
// ledger needs devices.Options.SiteUsage), one sample per process, site,
// chip and buffer type, with six values:
//
//   - inuse_space, inuse_objects: held now; at the end of tracing, the leaks
//   - alloc_space, alloc_objects: charged on the chip while traced
//   - peak_space: held when the chip's counter of that type reached its peak
//   - l1_core_peak_space: held on the chip's busiest core when L1 per core
//     reached its peak (peak_l1_busiest_core)
//
// and the labels pid, chip, type and site (the site's id in the NDJSON
// stream and summary; 0: its stack is unknown). A mesh buffer counts on every chip of
// its mesh, as in the report; a live mesh buffer whose chips were never
// learned is an inuse sample with chip "unplaced". Circular buffers have no
// allocation site: the CBs resident on the busiest core at that peak are
// one more l1_core_peak_space sample per chip, type CB, on a frame naming
// their program and the op they were laid out in, so that sample type sums
// per chip to peak_l1_busiest_core.total_bytes. docs/pprof.md says more.
package pprof

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks"
)

// SampleTypes are the profile's sample types, in order; the first is the
// default one.
var SampleTypes = []string{"inuse_space", "inuse_objects", "alloc_space", "alloc_objects", "peak_space", "l1_core_peak_space"}

const (
	vInuseSpace = iota
	vInuseObjects
	vAllocSpace
	vAllocObjects
	vPeakSpace
	vL1CorePeakSpace
	nValues
)

// Frames that are not code.
const (
	unknownSite = "(unknown allocation site)"
	truncated   = "(stack truncated)"
)

// cbFrame names the CBs of program prog (hex) resident on a chip's
// busiest core, laid out in op (its op label; "": none): the frame of
// their l1_core_peak_space sample.
func cbFrame(prog, op string) string {
	if op == "" {
		return "(circular buffers of program " + prog + ")"
	}
	return "(circular buffers of program " + prog + ", laid out in " + op + ")"
}

// Build makes the profile of s (a summary with SiteUsage and their
// descriptions filled in) taken at now.
func Build(s *devices.Summary, now time.Time) *profile.Profile {
	p := &profile.Profile{
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		TimeNanos:         now.UnixNano(),
		DefaultSampleType: SampleTypes[0],
		Comments:          []string{"tttrace: Tenstorrent device memory by allocation site"},
	}
	for i, t := range SampleTypes {
		unit := "bytes"
		if i == vInuseObjects || i == vAllocObjects {
			unit = "count"
		}
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: t, Unit: unit})
	}
	b := builder{p: p, locs: map[frameKey]*profile.Location{}, funcs: map[funcKey]*profile.Function{}}
	for i := range s.Processes {
		ps := &s.Processes[i]
		pid := strconv.FormatUint(uint64(ps.Pid), 10)
		chains := map[uint32][]*profile.Location{}
		chain := func(site uint32, d *devices.Site) []*profile.Location {
			c, ok := chains[site]
			if !ok {
				c = b.chain(d)
				chains[site] = c
			}
			return c
		}
		for j := range ps.SiteUsage {
			u := &ps.SiteUsage[j]
			var v [nValues]int64
			v[vInuseSpace] = int64(u.InuseBytes)
			v[vInuseObjects] = int64(u.InuseObjects)
			v[vAllocSpace] = int64(u.AllocBytes)
			v[vAllocObjects] = int64(u.AllocObjects)
			v[vPeakSpace] = int64(u.PeakBytes)
			v[vL1CorePeakSpace] = int64(u.L1CorePeakBytes)
			b.sample(chain(u.Site, u.Desc), v, siteLabel(u.Site), pid, strconv.FormatInt(int64(u.Device), 10), chipUID(ps, u.Device), u.Type, opLabel(u.Op), "")
		}
		// The CBs on each chip's busiest core at its L1-per-core peak (the
		// sites' rows hold the rest of it; a trimmed process has none).
		for j := range ps.Devices {
			d := &ps.Devices[j]
			pk := d.PeakL1BusiestCore
			if ps.Trimmed != nil || pk == nil || pk.CBBytes == 0 {
				continue
			}
			var v [nValues]int64
			v[vL1CorePeakSpace] = int64(pk.CBBytes)
			op := opLabel(pk.Op)
			chain := []*profile.Location{b.marker(cbFrame(pk.Program, op))}
			b.sample(chain, v, "", pid, strconv.FormatInt(int64(d.Device), 10), chipUID(ps, d.Device), "CB", op, pk.Program)
		}
		// Live mesh buffers of a mesh whose chips were never learned:
		// held, but on no chip the ledger knows.
		type unplaced struct {
			site uint32
			typ  string
		}
		var order []unplaced
		sums := map[unplaced]*[nValues]int64{}
		for lk := range ps.AllUnplacedLeaks() {
			k := unplaced{lk.Site, lk.Type}
			if sums[k] == nil {
				sums[k] = &[nValues]int64{}
				order = append(order, k)
			}
			sums[k][vInuseSpace] += int64(lk.Size)
			sums[k][vInuseObjects]++
		}
		for _, k := range order {
			b.sample(chain(k.site, siteDesc(ps, k.site)), *sums[k], siteLabel(k.site), pid, "unplaced", "", k.typ, "", "")
		}
	}
	return p
}

// chipUID is the physical chip (chip_uid) of ps's chip id dev, "" when
// not known.
func chipUID(ps *devices.ProcessSummary, dev int32) string {
	for i := range ps.Devices {
		if d := &ps.Devices[i]; d.Device == dev && d.UID != nil {
			return *d.UID
		}
	}
	return ""
}

// siteDesc finds the description of site in ps (Sites, then SiteUsage).
func siteDesc(ps *devices.ProcessSummary, site uint32) *devices.Site {
	for i := range ps.Sites {
		if ps.Sites[i].Site == site {
			return &ps.Sites[i]
		}
	}
	for i := range ps.SiteUsage {
		if ps.SiteUsage[i].Site == site && ps.SiteUsage[i].Desc != nil {
			return ps.SiteUsage[i].Desc
		}
	}
	return nil
}

type frameKey struct {
	fn, file string
	line     int
}

type funcKey struct{ name, file string }

type builder struct {
	p     *profile.Profile
	locs  map[frameKey]*profile.Location
	funcs map[funcKey]*profile.Function
}

// opLabel is the op label of a sample: the TT-NN op (and device op) its
// buffers were allocated in, "ttnn.conv2d > MatmulDeviceOperation"; "":
// none.
func opLabel(o *devices.OpRef) string {
	switch {
	case o == nil:
		return ""
	case o.DeviceOp == "":
		return o.Name
	}
	return o.Name + " > " + o.DeviceOp
}

// siteLabel is the site label of a site's samples.
func siteLabel(site uint32) string { return strconv.FormatUint(uint64(site), 10) }

// sample adds one sample; site labels it unless "" (CBs have none),
// chipUID (the physical chip) when known, op (the TT-NN op) when made in
// one, program (a ProgramImpl*, hex) for CBs.
func (b *builder) sample(chain []*profile.Location, v [nValues]int64, site, pid, chip, chipUID, typ, op, program string) {
	if v == ([nValues]int64{}) {
		return
	}
	label := map[string][]string{"pid": {pid}, "chip": {chip}, "type": {typ}}
	if site != "" {
		label["site"] = []string{site}
	}
	if program != "" {
		label["program"] = []string{program}
	}
	if chipUID != "" {
		label["chip_uid"] = []string{sinks.Printable(chipUID)}
	}
	if op != "" {
		label["op"] = []string{sinks.Printable(op)}
	}
	b.p.Sample = append(b.p.Sample, &profile.Sample{Location: chain, Value: v[:], Label: label})
}

// loc is the location of a frame. Its names come from the traced process
// and its files (symbols, Python qualified names, paths) and are made
// sinks.Printable: `go tool pprof -top` prints them raw to a terminal.
func (b *builder) loc(fn, file string, line int) *profile.Location {
	k := frameKey{fn, file, line}
	if l := b.locs[k]; l != nil {
		return l
	}
	fk := funcKey{fn, file}
	f := b.funcs[fk]
	if f == nil {
		name := sinks.Printable(fn)
		f = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: sinks.Printable(file)}
		b.funcs[fk] = f
		b.p.Function = append(b.p.Function, f)
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: f, Line: int64(line)}}}
	b.locs[k] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// marker is the location of a frame that is no code (a CB's), named fn.
// Its function has no system name: pprof takes it as demangled already
// and shows it whole (it cuts "(...)" and "<...>" from a name that looks
// like C++, which an op's name may).
func (b *builder) marker(fn string) *profile.Location {
	k := frameKey{fn: fn, line: -1}
	if l := b.locs[k]; l != nil {
		return l
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: sinks.Printable(fn)}
	b.p.Function = append(b.p.Function, f)
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: f}}}
	b.locs[k] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// chain is a site's location chain, innermost first (Frames).
func (b *builder) chain(d *devices.Site) []*profile.Location {
	fs := Frames(d)
	c := make([]*profile.Location, len(fs))
	for i, f := range fs {
		c[i] = b.loc(f.Function, f.File, f.Line)
	}
	return c
}

// Frame is one frame of a site as the profile names it.
type Frame struct {
	Function string
	File     string // source file, else the ELF file; "" for markers
	Line     int
}

// Frames is the stack of a site, innermost first: its native frames up to
// the first one in the Python interpreter, its Python frames, then the
// interpreter's native frames and the rest (the Python frames sit on top
// of the interpreter frames that run them). Without an interpreter frame,
// the Python frames come after the native ones. A truncated stack ends
// with a marker frame; an unknown site is one marker frame.
func Frames(d *devices.Site) []Frame {
	if d == nil {
		return []Frame{{Function: unknownSite}}
	}
	py := make([]Frame, len(d.Python))
	for i, f := range d.Python {
		py[i] = Frame{Function: f.Function, File: f.File, Line: f.Line}
	}
	out := make([]Frame, 0, len(d.Native)+len(py)+1)
	placed := len(py) == 0
	for i := range d.Native {
		f := &d.Native[i]
		if !placed && interpreter(f.Module) {
			out = append(out, py...)
			placed = true
		}
		out = append(out, nativeFrame(f))
	}
	if !placed {
		out = append(out, py...)
	}
	if d.Truncated {
		out = append(out, Frame{Function: truncated})
	}
	if len(out) == 0 {
		out = append(out, Frame{Function: unknownSite})
	}
	return out
}

// interpreter says a module is CPython's (libpython3.x.so or a python3.x
// executable with the interpreter linked in).
func interpreter(module string) bool {
	base := filepath.Base(module)
	return strings.HasPrefix(base, "libpython") || strings.HasPrefix(base, "python")
}

func nativeFrame(f *devices.NativeFrame) Frame {
	fn := f.Function
	if fn == "" {
		// No symbol: the ELF address in its file.
		fn = fmt.Sprintf("%s+%#x", filepath.Base(f.Module), f.Offset)
		if f.Module == "" {
			fn = fmt.Sprintf("%#x", f.PC)
		}
	}
	file := f.File
	if file == "" {
		file = f.Module
	}
	return Frame{Function: fn, File: file, Line: f.Line}
}

// WriteFolded writes the samples of p as folded stacks, one line per
// sample with a non-zero value of sampleType: "pid N;chip C;TYPE;", the
// TT-NN op it was allocated in (its op label) when there is one, then the
// frames outermost first, a space and the value.
func WriteFolded(w io.Writer, p *profile.Profile, sampleType string) error {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("no sample type %q", sampleType)
	}
	lines := map[string]int64{}
	var order []string
	var sb strings.Builder
	for _, s := range p.Sample {
		v := s.Value[idx]
		if v == 0 {
			continue
		}
		sb.Reset()
		fmt.Fprintf(&sb, "pid %s;chip %s;%s", label(s, "pid"), label(s, "chip"), label(s, "type"))
		if op := s.Label["op"]; len(op) > 0 {
			sb.WriteByte(';')
			sb.WriteString(foldedName(op[0]))
		}
		for i := len(s.Location) - 1; i >= 0; i-- {
			for j := len(s.Location[i].Line) - 1; j >= 0; j-- {
				ln := s.Location[i].Line[j]
				sb.WriteByte(';')
				sb.WriteString(foldedName(ln.Function.Name))
				if ln.Line > 0 {
					fmt.Fprintf(&sb, " (%s:%d)", foldedName(filepath.Base(ln.Function.Filename)), ln.Line)
				}
			}
		}
		k := sb.String()
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		lines[k] += v
	}
	sort.Strings(order)
	bw := bufio.NewWriter(w)
	for _, k := range order {
		fmt.Fprintf(bw, "%s %d\n", k, lines[k])
	}
	return bw.Flush()
}

func label(s *profile.Sample, key string) string {
	if v := s.Label[key]; len(v) > 0 {
		return v[0]
	}
	return "?"
}

// foldedName keeps a frame name on its line and out of the separators:
// made sinks.Printable (line ends and every other control character
// become escapes, which hold neither ';' nor spaces), then ';' becomes ','.
// A space may stay: the value is after a line's last one.
func foldedName(s string) string {
	return strings.ReplaceAll(sinks.Printable(s), ";", ",")
}

// Sink writes the profile and the folded stacks when tracing ends (and on
// a snapshot, Snapshot).
type Sink struct {
	sinks.Base
	opts Options
}

// Options say where the sink writes.
type Options struct {
	Profile io.Writer // the pprof profile (nil: none)
	Folded  io.Writer // folded stacks (nil: none)
	// FoldedType is the sample type the folded stacks carry.
	FoldedType string
	// SnapshotProfile and SnapshotFolded open a snapshot's own files
	// (nil: that output has no snapshots).
	SnapshotProfile, SnapshotFolded sinks.OpenFunc
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// New returns the sink.
func New(o Options) *Sink {
	if o.FoldedType == "" {
		o.FoldedType = SampleTypes[0]
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Sink{opts: o}
}

// Summary writes the outputs.
func (k *Sink) Summary(s *devices.Summary) error {
	return k.write(s, k.opts.Profile, k.opts.Folded)
}

func (k *Sink) write(s *devices.Summary, prof, folded io.Writer) error {
	p := Build(s, k.opts.Now())
	if prof != nil {
		if err := p.Write(prof); err != nil {
			return fmt.Errorf("pprof: %w", err)
		}
	}
	if folded != nil {
		if err := WriteFolded(folded, p, k.opts.FoldedType); err != nil {
			return fmt.Errorf("folded: %w", err)
		}
	}
	return nil
}

// Snapshot writes the profile and the folded stacks as of now, each to
// a file of its own.
func (k *Sink) Snapshot(s *devices.Summary, stamp string) ([]string, error) {
	p := Build(s, k.opts.Now())
	var names []string
	if open := k.opts.SnapshotProfile; open != nil {
		n, err := writeSnapshot(open, stamp, p.Write)
		if err != nil {
			return names, fmt.Errorf("pprof: %w", err)
		}
		names = append(names, n)
	}
	if open := k.opts.SnapshotFolded; open != nil {
		n, err := writeSnapshot(open, stamp, func(w io.Writer) error { return WriteFolded(w, p, k.opts.FoldedType) })
		if err != nil {
			return names, fmt.Errorf("folded: %w", err)
		}
		names = append(names, n)
	}
	return names, nil
}

func writeSnapshot(open sinks.OpenFunc, stamp string, write func(io.Writer) error) (string, error) {
	w, name, err := open(stamp)
	if err != nil {
		return "", err
	}
	err = write(w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return name, nil
}

// Close closes the outputs that are closers.
func (k *Sink) Close() error {
	var err error
	for _, w := range []io.Writer{k.opts.Profile, k.opts.Folded} {
		if c, ok := w.(io.Closer); ok {
			if cerr := c.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	return err
}
