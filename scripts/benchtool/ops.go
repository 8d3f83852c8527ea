package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tttrace/tttrace/ttmetal"
)

// Rows 9: what naming each record's TT-NN op costs (issue #31). The
// replica built with its TT-NN stand-in (-ttnn: TTNN_ERA=2026, _ttnn.so
// beside ttwork; the other rows' replica has none, so that their tttrace
// runs probe no op) runs ops_loop: N
// ttnn.matmul calls on one thread, program cache hits, each output freed
// (per call: the op's entry, its launch's two frames, set_runtime_id, the
// output's request, allocation and free, the dispatch). Each round runs,
// in rotating order: untraced, tttrace --json --no-events with the op
// probes (the default) and with --no-ops; the figure is the loop's own
// ops/s. The traced runs must see every call (the summary's ops row of
// ttnn.matmul counts N calls with the ops, no row without).
//
// Attach: a TT-NN library generated with opsGenerated ops in the 2026 form
// (ttnn::gen_op_K free functions, each launching its own device op through
// device_operation::detail::launch<GenKDeviceOperation>: 2 x opsGenerated
// op functions) lies beside a copy of that replica's libtt_metal.so, where
// tttrace looks for a command's TT-NN libraries; tttrace --timing --lib
// that copy -- /bin/true reads its op table, loads the op program and
// probes every op function (one uprobe_multi link) before the command
// runs. The figure is that step's time (also with GOGC=100 in place of
// tttrace's own collector target), and start-to-running with and without
// --no-ops.

const (
	opsOn        = "tttrace --json --no-events (ops probed)"
	opsOff       = "tttrace --json --no-events --no-ops"
	opsGenerated = 2000
)

// opsLoopRe is ops_loop's line: "ops_loop: N ops in S s (R ops/s)".
var opsLoopRe = regexp.MustCompile(`(?m)^ops_loop: (\d+) ops in ([0-9.]+) s`)

func runOpsCost(c *config) []costRun {
	dir := c.ttnn
	if _, err := os.Stat(filepath.Join(dir, "_ttnn.so")); err != nil {
		logf("ops: %s has no TT-NN stand-in: %v", dir, err)
		return []costRun{{Mode: "untraced", Err: "no _ttnn.so in " + dir}}
	}
	work := []string{filepath.Join(dir, "ttwork"), "--scenario", "ops_loop", "--events", strconv.Itoa(c.opsEvents)}
	sumPath := filepath.Join(c.work, "ops-summary.ndjson")
	traced := func(flags ...string) costRun {
		_ = os.Remove(sumPath)
		args := append(append([]string{"--json", "--no-events", "-o", sumPath}, flags...),
			append([]string{"--lib", filepath.Join(dir, "libtt_metal.so"), "--"}, work...)...)
		r := runOpsLoop("tttrace: ", c.tttrace, args...)
		if r.Err != "" {
			return r
		}
		calls, err := matmulCalls(sumPath)
		if err != nil {
			r.Err = err.Error()
		}
		r.Counted = calls
		return r
	}
	ms := []mode{
		{"untraced", func(*config, int) costRun { return runOpsLoop("ttwork: ", work[0], work[1:]...) }},
		{opsOn, func(*config, int) costRun {
			r := traced()
			if r.Err == "" && r.Counted != int64(c.opsEvents) {
				r.Err = fmt.Sprintf("the summary counts %d ttnn.matmul calls, the loop made %d", r.Counted, c.opsEvents)
			}
			return r
		}},
		{opsOff, func(*config, int) costRun {
			r := traced("--no-ops")
			if r.Err == "" && r.Counted != 0 {
				r.Err = fmt.Sprintf("--no-ops: the summary counts %d ttnn.matmul calls", r.Counted)
			}
			return r
		}},
	}
	return runRounds(c, "ops", 40, ms)
}

// runOpsLoop runs name to its end; BurstSecs is the loop's own time.
func runOpsLoop(prefix, name string, args ...string) costRun {
	r := costRun{Counted: -1, Lost: -1}
	p, err := startProc(nil, name, args...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	code, d := p.wait()
	r.Exit, r.WallSecs = code, d.Seconds()
	if m := opsLoopRe.FindStringSubmatch(p.stdout.String()); m != nil {
		r.BurstSecs, _ = strconv.ParseFloat(m[2], 64)
	} else {
		r.Err = "no ops_loop line: " + lastLine(p.stderr.String())
	}
	if code != 0 && r.Err == "" {
		r.Err = prefix + lastLine(p.stderr.String())
	}
	return r
}

// matmulCalls reads the calls of the summary's ttnn.matmul row (the op's
// own, without a device op) at path; 0 without one.
func matmulCalls(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"type":"summary"`)) {
			continue
		}
		var s struct {
			Processes []struct {
				Ops []struct {
					Name     string `json:"name"`
					DeviceOp string `json:"device_op"`
					Calls    int64  `json:"calls"`
				} `json:"ops"`
			} `json:"processes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return 0, err
		}
		var n int64
		for _, p := range s.Processes {
			for _, o := range p.Ops {
				if o.Name == "ttnn.matmul" && o.DeviceOp == "" {
					n += o.Calls
				}
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: no summary line", path)
}

// opsAttachRun is one start of tttrace with the generated op library
// beside the library it probes.
type opsAttachRun struct {
	Round int    `json:"round"`
	Mode  string `json:"mode"` // "ops", "ops GOGC=100", "no-ops", "read" (in-process)
	// Probed: op functions probed. OpsMs: from "--lib probed" to "N op
	// functions probed" (--timing): the op table read, the op program
	// loaded, every function checked and the link made; LinkMs: the last
	// part, after the program loaded (where --timing says when it did).
	Probed   int     `json:"probed"`
	OpsMs    float64 `json:"ops_ms"`
	LinkMs   float64 `json:"link_ms"`
	RunsMs   float64 `json:"runs_ms"`   // start to the command running
	WallSecs float64 `json:"wall_secs"` // start to exit (detach included)
	// ReadMs: the op table read in benchtool's own process (OpenLibrary,
	// FindOpRegistrations, FindOpsWith; Go's default GOGC), CheckMs:
	// ttmetal.CheckProbeable of every op function, as probes.AttachOps
	// does before it attaches them.
	ReadMs  float64 `json:"read_ms,omitempty"`
	CheckMs float64 `json:"check_ms,omitempty"`
	Err     string  `json:"err,omitempty"`
}

// timingRe is a --timing line: the time since start and the step.
var timingRe = regexp.MustCompile(`(?m)^tttrace: timing: +([0-9.]+) ms \(\+ *[0-9.]+ ms\) (.*)$`)

// opsAttachModes: the tttrace runs of each round; GOGC=100 replaces
// tttrace's own collector target (internal/gcgoal) by Go's default.
var opsAttachModes = []struct {
	name string
	env  []string
	args []string
}{
	{"ops", nil, nil},
	{"ops GOGC=100", []string{"GOGC=100"}, nil},
	{"no-ops", nil, []string{"--no-ops"}},
}

func runOpsAttach(c *config) []opsAttachRun {
	dir := filepath.Join(c.work, fmt.Sprintf("opslib-%d", opsGenerated))
	if err := genOpsLib(c, dir); err != nil {
		logf("ops attach: %v", err)
		return []opsAttachRun{{Err: err.Error()}}
	}
	lib := filepath.Join(dir, "libtt_metal.so")
	var out []opsAttachRun
	for round := 0; round < c.rounds; round++ {
		for i := range opsAttachModes {
			m := opsAttachModes[(i+round)%len(opsAttachModes)]
			args := append([]string{"--timing", "--json", "--no-events", "-o", os.DevNull, "--lib", lib}, m.args...)
			args = append(args, "--", "/bin/true")
			r := opsAttachRun{Round: round, Mode: m.name}
			p, err := startProc(m.env, c.tttrace, args...)
			if err != nil {
				r.Err = err.Error()
			} else {
				code, d := p.wait()
				r.WallSecs = d.Seconds()
				se := p.stderr.String()
				var libProbed, loaded float64
				for _, t := range timingRe.FindAllStringSubmatch(se, -1) {
					ms, _ := strconv.ParseFloat(t[1], 64)
					switch step := t[2]; {
					case step == "--lib probed":
						libProbed = ms
					case strings.HasSuffix(step, "op_enter verified and loaded"):
						loaded = ms
					case strings.HasSuffix(step, " op functions probed") && strings.Contains(step, "_ttnncpp.so: "):
						f := strings.Fields(step)
						r.Probed, _ = strconv.Atoi(f[len(f)-4])
						r.OpsMs = ms - libProbed
						if loaded > 0 {
							r.LinkMs = ms - loaded
						}
					case step == "set up: the command runs":
						r.RunsMs = ms
					}
				}
				wantProbed := 2 * opsGenerated
				if m.name == "no-ops" {
					wantProbed = 0
				}
				switch {
				case code != 0:
					r.Err = fmt.Sprintf("exit %d: %s", code, lastLine(se))
				case r.RunsMs == 0 || libProbed == 0:
					r.Err = "no --timing lines for --lib probed and the command's start: " + lastLine(se)
				case r.Probed != wantProbed:
					r.Err = fmt.Sprintf("%d op functions probed, want %d", r.Probed, wantProbed)
				}
			}
			logf("ops attach round %d/%d: %-12s op step %.1f ms (after the program loaded: %.1f ms; %d probed), running after %.1f ms%s",
				round+1, c.rounds, m.name, r.OpsMs, r.LinkMs, r.Probed, r.RunsMs, errSuffix(r.Err))
			out = append(out, r)
		}
		r := opsAttachRun{Round: round, Mode: "read"}
		r.ReadMs, r.CheckMs, r.Probed, r.Err = readOpTable(filepath.Join(dir, "_ttnncpp.so"))
		logf("ops attach round %d/%d: op table read in-process in %.1f ms, its %d op functions checked in %.1f ms%s",
			round+1, c.rounds, r.ReadMs, r.Probed, r.CheckMs, errSuffix(r.Err))
		out = append(out, r)
	}
	return out
}

// readOpTable times what tttrace does to a TT-NN library before the
// kernel attaches its probes: the op table read (session/ops.go,
// readOpTables), then each op function checked (probes.AttachOps).
func readOpTable(path string) (readMs, checkMs float64, ops int, errs string) {
	start := time.Now()
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		return 0, 0, 0, err.Error()
	}
	defer lib.Close()
	// As tttrace does: the registrations are read for the other TT-NN
	// libraries of the process (none here).
	_, _ = ttmetal.FindOpRegistrations(lib)
	tab, err := ttmetal.FindOpsWith(lib)
	if err != nil {
		return 0, 0, 0, err.Error()
	}
	readMs = float64(time.Since(start).Microseconds()) / 1000
	start = time.Now()
	for _, op := range tab.Ops {
		if err := ttmetal.CheckProbeable(lib, op.Addr); err != nil {
			return 0, 0, 0, fmt.Sprintf("%#x: %v", op.Addr, err)
		}
	}
	return readMs, float64(time.Since(start).Microseconds()) / 1000, len(tab.Ops), ""
}

// genOpsLib makes dir: a copy of the replica's libtt_metal.so and, once,
// _ttnncpp.so with opsGenerated ops (see the file comment).
func genOpsLib(c *config, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(c.ttnn, "libtt_metal.so"), filepath.Join(dir, "libtt_metal.so")); err != nil {
		return err
	}
	so := filepath.Join(dir, "_ttnncpp.so")
	if _, err := os.Stat(so); err == nil {
		return nil
	}
	var b strings.Builder
	b.WriteString(`// Generated by scripts/benchtool (ops.go): a TT-NN library of the 2026 form.
#define API __attribute__((visibility("default"), noinline))
namespace tt::tt_metal { struct Tensor { int v = 0; }; }
namespace ttnn {
using tt::tt_metal::Tensor;
volatile int sink;
namespace device_operation {
template <typename T>
concept DeviceOperationConcept = requires { typename T::operation_attributes_t; };
namespace detail {
template <DeviceOperationConcept device_operation_t>
API typename device_operation_t::tensor_return_value_t launch(
    const typename device_operation_t::operation_attributes_t& a,
    const typename device_operation_t::tensor_args_t& t) {
    sink = sink + a.k + t.in.v;
    return typename device_operation_t::tensor_return_value_t{a.k};
}
}  // namespace detail
}  // namespace device_operation
namespace operations::gen {
`)
	for k := range opsGenerated {
		fmt.Fprintf(&b, "struct Gen%dDeviceOperation { struct operation_attributes_t { int k; }; struct tensor_args_t { Tensor in; }; using tensor_return_value_t = Tensor; };\n", k)
	}
	b.WriteString("}  // namespace operations::gen\n")
	for k := range opsGenerated {
		fmt.Fprintf(&b, "API Tensor gen_op_%d(const Tensor& a) { using Op = operations::gen::Gen%dDeviceOperation; "+
			"return device_operation::detail::launch<Op>(Op::operation_attributes_t{a.v + %d}, Op::tensor_args_t{a}); }\n", k, k, k)
	}
	b.WriteString("}  // namespace ttnn\n")
	src := filepath.Join(dir, "gen_ops.cpp")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		return err
	}
	logf("ops attach: compiling a TT-NN library of %d ops (%d op functions)", opsGenerated, 2*opsGenerated)
	tmp := so + ".tmp"
	if out, err := exec.Command("g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-o", tmp, src).CombinedOutput(); err != nil {
		return fmt.Errorf("g++: %v: %s", err, lastLine(string(out)))
	}
	return os.Rename(tmp, so)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (r *results) opsRows(c *config) []row {
	var rows []row
	if len(r.Ops) > 0 {
		secs, bad := byModeOf(r.Ops)
		for _, m := range []string{"untraced", opsOn, opsOff} {
			if len(secs[m]) == 0 {
				return []row{{"9", "TT-NN ops: ops/s", "no successful run of " + m + ": " + strings.Join(bad[m], "; "), "", "**no**"}}
			}
		}
		n := float64(c.opsEvents)
		rate := func(m string) float64 { return n / median(values(secs[m])) }
		added := func(m string) float64 { return (median(values(secs[m])) - median(values(secs["untraced"]))) / n * 1e6 }
		u, on, off := rate("untraced"), rate(opsOn), rate(opsOff)
		rows = append(rows, row{"9", fmt.Sprintf("TT-NN ops: `ttwork --scenario ops_loop --events %d` (ttnn.matmul calls on one thread, program cache hits), "+
			"the loop's ops/s untraced / traced with the op probes (default) / traced with `--no-ops`", c.opsEvents),
			fmt.Sprintf("**%.0f / %.0f / %.0f ops/s**: tracing adds %.2f µs per op with the ops named, %.2f µs without; naming them **%.2f µs per op**%s",
				u, on, off, added(opsOn), added(opsOff), added(opsOn)-added(opsOff),
				spreadFlag(values(secs["untraced"]), values(secs[opsOn]), values(secs[opsOff]))),
			"(measured)", ""})
	}
	if len(r.OpsAttach) > 0 {
		by := map[string][]opsAttachRun{}
		var errs []string
		for _, x := range r.OpsAttach {
			if x.Err != "" {
				errs = append(errs, fmt.Sprintf("round %d %s: %s", x.Round+1, x.Mode, x.Err))
				continue
			}
			by[x.Mode] = append(by[x.Mode], x)
		}
		get := func(mode string, f func(opsAttachRun) float64) []float64 {
			var v []float64
			for _, x := range by[mode] {
				v = append(v, f(x))
			}
			return v
		}
		figure := fmt.Sprintf("TT-NN ops: attach to a library of %d op functions (%d `ttnn::` ops of the 2026 form, each with its "+
			"`launch<Op>`), beside the `--lib` of `tttrace --timing --lib LIB -- /bin/true`: its op table read, the op program "+
			"loaded, every function probed (one uprobe_multi link) before the command runs", 2*opsGenerated, opsGenerated)
		if len(by["ops"]) == 0 || len(by["no-ops"]) == 0 || len(by["ops GOGC=100"]) == 0 || len(by["read"]) == 0 {
			rows = append(rows, row{"9", figure, "no successful run: " + strings.Join(errs, "; "), "", "**no**"})
		} else {
			opsMs := get("ops", func(x opsAttachRun) float64 { return x.OpsMs })
			gogc := get("ops GOGC=100", func(x opsAttachRun) float64 { return x.OpsMs })
			lo, hi := minMax(opsMs)
			link := ""
			if l := get("ops", func(x opsAttachRun) float64 { return x.LinkMs }); median(l) > 0 {
				link = fmt.Sprintf(", of which %.1f ms after the op program loaded (checks and link)", median(l))
			}
			rows = append(rows, row{"9", figure,
				fmt.Sprintf("**%.0f ms** (%.0f-%.0f, %d runs)%s; with `GOGC=100` instead of tttrace's collector target %.0f ms; "+
					"in benchtool's process (default GOGC) the op table reads in %.0f ms and its functions check in %.0f ms; "+
					"the command runs %.0f ms after start with the ops, %.0f ms with `--no-ops`%s",
					median(opsMs), lo, hi, len(opsMs), link, median(gogc),
					median(get("read", func(x opsAttachRun) float64 { return x.ReadMs })),
					median(get("read", func(x opsAttachRun) float64 { return x.CheckMs })),
					median(get("ops", func(x opsAttachRun) float64 { return x.RunsMs })),
					median(get("no-ops", func(x opsAttachRun) float64 { return x.RunsMs })), spreadFlag(opsMs, gogc)),
				"(measured)", ""})
		}
	}
	return rows
}
