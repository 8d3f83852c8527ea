package cli

// tttrace doctor: what tttrace would do with a TT-Metal library, without
// tracing anything: which library, its build-id, where the layout comes
// from and the offsets, the probe plan and every attach point, the kernel
// features tracing needs, and whether tracing would be exact.

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/pflag"

	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/pyframes"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/ttmetal"
)

const doctorUsage = `Usage: tttrace doctor [LIB | -p PID] [--json] [--layout FILE] [--probes PLAN]

Checks what tttrace would do with a TT-Metal library, traces nothing:
the library and its build-id, where the Buffer/Device layout comes from
(--layout, DWARF, the library's code, built-in profiles) and the offsets,
the probe plan and each attach point (attached, inlined, not needed,
unprobeable, missing), the kernel features tracing needs, and whether
tracing would be exact. Without LIB or -p, the libtt_metal.so the current
environment would load (LD_LIBRARY_PATH, TT_METAL_HOME, ...) is checked.

Exit status: 0 tracing would work, 5 no library found, 6 the library cannot
be traced, 2 usage.

Flags:
`

// DoctorReport is doctor's finding (the --json output).
type DoctorReport struct {
	Library *DoctorLibrary        `json:"library,omitempty"`
	Layout  *ttmetal.LayoutSource `json:"layout,omitempty"`
	Plan    *ttmetal.Plan         `json:"plan,omitempty"`
	Kernel  []DoctorFeature       `json:"kernel"`
	// Python: the CPython interpreter of -p PID, else python3 on PATH:
	// whether allocation sites get Python lines.
	Python    *DoctorPython `json:"python,omitempty"`
	Traceable bool          `json:"traceable"`
	Exact     bool          `json:"exact"`
	Error     string        `json:"error,omitempty"`
	Verdict   string        `json:"verdict"`
	// Ops: the op table of each TT-NN library beside the library (its
	// directory) or mapped by -p PID (doctorops.go).
	Ops []DoctorOps `json:"ttnn_ops,omitempty"`
}

// DoctorPython is a CPython interpreter, for the Python lines of
// allocation sites.
type DoctorPython struct {
	Path      string `json:"path"`
	Version   string `json:"version,omitempty"`
	Supported bool   `json:"supported"`
	Offsets   string `json:"offsets,omitempty"` // where the offsets come from
	Error     string `json:"error,omitempty"`   // why not supported
}

// checkPython finds the interpreter of pid (0: python3 on PATH) and says
// whether tttrace reads its stacks. Nil when there is none.
func checkPython(pid int) *DoctorPython {
	var in *pyframes.Interpreter
	var err error
	if pid != 0 {
		var p *pyframes.Process
		p, err = pyframes.ForProcess(pid)
		if errors.Is(err, pyframes.ErrNoInterpreter) {
			return nil
		}
		if p != nil {
			in = p.Interp
			p.Close()
		}
	} else {
		exe, lerr := exec.LookPath("python3")
		if lerr != nil {
			return nil
		}
		if exe, lerr = filepath.EvalSymlinks(exe); lerr != nil {
			return nil
		}
		in, err = pyframes.Detect(exe)
		if err != nil && !errors.Is(err, pyframes.ErrNotPython) {
			// Not ELF: a launcher script (a pyenv shim). The interpreter
			// it runs says where it is.
			out, xerr := exec.Command(exe, "-c", "import sys; print(sys.executable)").Output()
			if real := strings.TrimSpace(string(out)); xerr == nil && real != "" {
				if real, xerr = filepath.EvalSymlinks(real); xerr == nil {
					exe = real
					in, err = pyframes.Detect(exe)
				}
			}
		}
		if errors.Is(err, pyframes.ErrNotPython) {
			// A launcher (a pyenv shim) or a python3 with its libpython
			// beside it: look there.
			libs, _ := filepath.Glob(filepath.Join(filepath.Dir(exe), "..", "lib", "libpython3*.so*"))
			if len(libs) == 0 {
				return &DoctorPython{Path: exe, Error: err.Error()}
			}
			in, err = pyframes.Detect(libs[0])
		}
	}
	d := &DoctorPython{}
	if in != nil {
		d.Path, d.Version, d.Offsets = in.Path, in.Version(), in.Source
		if in.Err != nil && err == nil {
			err = in.Err
		}
	}
	if err != nil {
		d.Error = err.Error()
	} else {
		d.Supported = true
	}
	return d
}

// DoctorLibrary describes the library checked.
type DoctorLibrary struct {
	Path       string `json:"path"`
	BuildID    string `json:"build_id"`
	Size       int64  `json:"size"`
	Symtab     bool   `json:"symtab"`       // .symtab present (not stripped)
	DWARF      bool   `json:"dwarf"`        // .debug_info in the file itself
	Compressed bool   `json:"compressed"`   // its debug sections are compressed
	TTMetal    bool   `json:"tt_metal"`     // defines GraphTracker::track_allocate
	V0         bool   `json:"v0_namespace"` // symbols in tt::tt_metal::v0
	Pimpl      bool   `json:"pimpl_accessors"`
	// Fingerprint: every predicate of the built-in layout profiles
	// (ttmetal/profiles/*.json) and whether it holds.
	Fingerprint map[string]bool `json:"fingerprint,omitempty"`
}

// DoctorFeature is one kernel feature and whether this kernel has it.
type DoctorFeature struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Needed bool   `json:"needed"`
	Detail string `json:"detail"`
}

// Doctor runs "tttrace doctor" and returns its exit status.
func Doctor(args []string, stdout, stderr io.Writer) int {
	stderr = sinks.PrintableWriter(stderr)
	fs := pflag.NewFlagSet("tttrace doctor", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.IntP("pid", "p", 0, "check the TT-Metal library process `PID` has mapped")
	asJSON := fs.Bool("json", false, "write the report as one JSON object")
	layoutFile := fs.String("layout", "", "as for tracing: read the layout from `FILE`")
	var mode ttmetal.ProbeMode
	fs.Var(&mode, "probes", "as for tracing: `PLAN` tracker, lifecycle or auto")
	fs.Usage = func() {
		fmt.Fprint(stderr, doctorUsage)
		fmt.Fprint(stderr, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 1 || fs.NArg() == 1 && *pid != 0 {
		fmt.Fprintln(stderr, "tttrace doctor: give one library or -p PID")
		return ExitUsage
	}
	rep := &DoctorReport{Kernel: kernelFeatures()}
	status := ExitOK
	path := fs.Arg(0)
	switch {
	case *pid != 0:
		p, err := ttmetal.FindMappedLibrary(*pid)
		if err != nil {
			rep.Error = err.Error()
			status = ExitNoLibrary
		}
		path = p
	case path == "":
		for _, c := range ttmetal.CandidateLibraries(0, nil) {
			if lib, err := ttmetal.OpenLibrary(c); err == nil {
				ok := ttmetal.IsTTMetal(lib)
				lib.Close()
				if ok {
					path = c
					break
				}
			}
		}
		if path == "" {
			rep.Error = "no libtt_metal.so found from this directory and environment: give LIB or -p PID"
			status = ExitNoLibrary
		}
	}
	if path != "" {
		opts := ttmetal.DefaultOptions()
		opts.LayoutFile, opts.Mode = *layoutFile, mode
		status = rep.checkLibrary(path, opts)
	}
	rep.Ops = checkOps(ttnnLibraries(path, *pid))
	rep.Python = checkPython(*pid)
	rep.verdict()
	if *asJSON {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "tttrace doctor: %v\n", err)
			return ExitError
		}
		sinks.C1Escaped(stdout).Write(append(b, '\n'))
	} else {
		// Paths, versions and errors come from the files looked at.
		rep.write(sinks.PrintableWriter(stdout))
	}
	return status
}

// checkLibrary fills the library, layout and plan parts, from the same
// analysis tracing runs (ttmetal.Prepare), reported as far as it got.
func (r *DoctorReport) checkLibrary(path string, opts ttmetal.Options) int {
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		r.Error = err.Error()
		return ExitNoLibrary
	}
	defer lib.Close()
	dl := &DoctorLibrary{Path: path, BuildID: lib.BuildID, Symtab: lib.HasSymtab, DWARF: lib.HasDWARF, TTMetal: ttmetal.IsTTMetal(lib)}
	if st, err := os.Stat(path); err == nil {
		dl.Size = st.Size()
	}
	if s := lib.ELF().Section(".debug_info"); s != nil && s.Flags&elf.SHF_COMPRESSED != 0 {
		dl.Compressed = true
	}
	r.Library = dl
	prep, err := ttmetal.Prepare(lib, opts)
	if prep.Symbols != nil {
		dl.Fingerprint = prep.Symbols.Fingerprint()
		dl.V0, dl.Pimpl = dl.Fingerprint["v0_namespace"], dl.Fingerprint["pimpl_accessors"]
	}
	r.Layout, r.Plan = prep.Layout, prep.Plan
	if err != nil {
		r.Error = err.Error()
		var le *ttmetal.LayoutError
		if errors.As(err, &le) {
			r.Layout = &ttmetal.LayoutSource{Checked: le.Checked}
		}
		return ExitUnsupported
	}
	r.Traceable = true
	return ExitOK
}

// verdict says in one line whether tracing would work and be exact.
func (r *DoctorReport) verdict() {
	var missing []string
	for _, f := range r.Kernel {
		if f.Needed && !f.OK {
			missing = append(missing, f.Name)
		}
	}
	switch {
	case !r.Traceable:
		r.Verdict = "tttrace cannot trace this library: " + r.Error
	case len(missing) > 0:
		r.Traceable = false
		r.Verdict = "the library is traceable, but this kernel lacks " + strings.Join(missing, ", ")
	default:
		r.Exact = r.Plan.Exact && len(r.Layout.Warnings) == 0
		if r.Exact {
			r.Verdict = fmt.Sprintf("tracing would be exact (%s probe plan, layout from %s)", r.Plan.Kind, r.Layout.From)
		} else {
			why := append(append([]string(nil), r.Plan.Caveats...), r.Layout.Warnings...)
			r.Verdict = "tracing would work but not be exact: " + strings.Join(why, "; ")
		}
	}
}

func (r *DoctorReport) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if l := r.Library; l != nil {
		p("Library      %s\n", l.Path)
		p("  build-id   %s\n", orNone(l.BuildID))
		p("  symbols    TT-Metal tracker: %s; .symtab: %s\n", yes(l.TTMetal), yes(l.Symtab))
		var fp []string
		for _, k := range sortedKeys(l.Fingerprint) {
			fp = append(fp, k+": "+yes(l.Fingerprint[k]))
		}
		if len(fp) > 0 {
			p("  profiles   fingerprint %s\n", strings.Join(fp, "; "))
		}
		dw := yes(l.DWARF)
		if l.Compressed {
			dw += " (compressed)"
		}
		p("  DWARF      %s\n", dw)
	}
	if s := r.Layout; s != nil {
		p("\nLayout\n")
		if s.From != "" {
			p("  from       %s\n", s.From)
			for i, line := range s.Layout.Describe() {
				head := "offsets"
				if i > 0 {
					head = ""
				}
				p("  %-10s %s\n", head, line)
			}
		}
		for _, c := range s.Fields {
			mark := "unverified"
			if c.Verified {
				mark = "verified"
			}
			p("  %-10s %s %d: %s\n", mark, c.Field, c.Value, c.How)
		}
		for _, c := range s.Checked {
			p("  checked    %s\n", c)
		}
		for _, wn := range s.Warnings {
			p("  WARNING    %s\n", wn)
		}
		for _, c := range s.Corrections {
			p("  corrected  %s\n", c)
		}
		for _, u := range s.Unknown {
			p("  unknown    %s\n", u)
		}
	}
	if pl := r.Plan; pl != nil {
		p("\nProbe plan   %s: %s\n", pl.Kind, pl.Why)
		p("  call sites ")
		first := true
		for _, k := range sortedKeys(pl.CallSites) {
			if !first {
				p(", ")
			}
			first = false
			p("%s %d", k, pl.CallSites[k])
		}
		p("\n\nAttach points\n")
		for _, pt := range pl.Points {
			addr := ""
			if pt.Addr != 0 {
				addr = fmt.Sprintf("%#x", pt.Addr)
			}
			p("  %-12s %-27s %-44s %9s  %-26s %s\n", pt.Status, pt.Program, trunc(pt.Function, 44), addr, pt.Insn, pt.Detail)
		}
		for _, c := range pl.Caveats {
			p("  NOT EXACT  %s\n", c)
		}
		for _, n := range pl.Notes {
			p("  note       %s\n", n)
		}
	}
	writeOps(p, r.Ops)
	p("\nKernel\n")
	for _, f := range r.Kernel {
		need := "needed"
		if !f.Needed {
			need = "optional"
		}
		p("  %-4s %-28s %-9s %s\n", yes(f.OK), f.Name, need, f.Detail)
	}
	if py := r.Python; py != nil {
		p("\nPython       %s", py.Path)
		if py.Version != "" {
			p(" (CPython %s)", py.Version)
		}
		if py.Supported {
			p(": allocation sites get Python lines (offsets: %s)\n", py.Offsets)
		} else {
			p(": no Python lines: %s\n", py.Error)
		}
	}
	p("\n%s\n", r.Verdict)
}

// kernelFeatures probes what tracing needs of the kernel.
func kernelFeatures() []DoctorFeature {
	var out []DoctorFeature
	root := os.Geteuid() == 0
	if root {
		_ = rlimit.RemoveMemlock()
	}
	probe := func(name string, needed bool, err error, okDetail string) {
		f := DoctorFeature{Name: name, Needed: needed, OK: err == nil, Detail: okDetail}
		if err != nil {
			f.Detail = err.Error()
			if !root {
				f.Detail = "unknown: probing needs root (" + err.Error() + ")"
			}
		}
		out = append(out, f)
	}
	_, err := os.Stat("/sys/bus/event_source/devices/uprobe/type")
	probe("uprobes", true, err, "/sys/bus/event_source/devices/uprobe")
	probe("BPF ring buffer", true, features.HaveMapType(ebpf.RingBuf), "BPF_MAP_TYPE_RINGBUF")
	probe("BPF cookie", true, features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie),
		"bpf_get_attach_cookie in uprobe programs")
	_, err = os.Stat("/sys/kernel/btf/vmlinux")
	probe("BTF", true, err, "/sys/kernel/btf/vmlinux (fork/exit tracepoints, CO-RE)")
	if err = probes.HaveUprobeMulti(); err != nil {
		err = fmt.Errorf("%w; tttrace falls back to one classic uprobe per probe point (slower to detach)", err)
	}
	probe("uprobe multi-link", false, err, "used: one uprobe_multi link per program and library")
	return out
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func off(v int64) string {
	if v < 0 {
		return "?"
	}
	return fmt.Sprint(v)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
