// Command benchtool runs tttrace's benchmarks and prints one table of every
// figure with its goal (issue #6). scripts/bench.sh builds what it needs and
// calls it; see docs/bench.md for what each figure means.
//
// Every measurement is a real run: the replica's burst workload untraced,
// under tttrace, under a count-only floor (floor.go) and with an in-process
// socket reporter, interleaved in rounds (the order rotates) and summarized
// by medians; loss against the replica's ground truth; the consumer's
// per-record path as a Go benchmark on one CPU; attach time and memory on a
// small and a 200+ MB library; memory with 1,000,000 live buffers. Nothing
// is hard-coded: a figure that could not be measured says so.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/ttmetal"
)

type config struct {
	tttrace string
	replica string // build dir of the replica (ttwork, libtt_metal.so)
	socket  string // build dir of the REPORTER=socket replica (ttwork, ttreportd)
	cet     string // build dir of the replica built with -fcf-protection=full
	big     string // dir of the generated big library (ttwork, libtt_metal.so)
	self    string // this benchtool, run in floor mode
	work    string
	rounds  int
	events  int
	threads int // the burst's threads (0: ttwork's default, two)
	hold    int // live buffers for the memory figure
	only    map[string]bool
	out     string // results JSON

	// ttnn: build dir of the replica with the TT-NN stand-in
	// (TTNN_ERA=2026); opsEvents: the op calls of ops_loop (rows 9).
	ttnn      string
	opsEvents int
}

func main() {
	var c config
	var only, floorLib string
	var floorAtEntry, floorNoAllocator, floorRecord bool
	flag.StringVar(&c.tttrace, "tttrace", "bin/tttrace", "tttrace binary")
	flag.StringVar(&c.replica, "replica", "build/bench/replica", "replica build directory")
	flag.StringVar(&c.socket, "socket", "build/bench/replica-socket", "REPORTER=socket replica build directory")
	flag.StringVar(&c.cet, "cet", "build/bench/replica-cet", "replica build directory with -fcf-protection=full")
	flag.StringVar(&c.big, "big", "build/bench/big", "directory of the generated big library")
	flag.StringVar(&c.work, "work", "build/bench/run", "scratch directory")
	flag.IntVar(&c.rounds, "rounds", 5, "interleaved rounds (medians are taken over them)")
	flag.IntVar(&c.events, "events", 1_000_000, "events of the burst (alloc + free)")
	flag.IntVar(&c.threads, "threads", 0, "threads of the burst (0: ttwork's default, two; 1 has no contention on the replica's lock to amplify the probes' cost)")
	flag.IntVar(&c.hold, "hold", 1_000_000, "live buffers for the memory figure")
	flag.StringVar(&c.ttnn, "ttnn", "build/bench/replica-ttnn", "replica build directory with the TT-NN stand-in (TTNN_ERA=2026)")
	flag.IntVar(&c.opsEvents, "ops-events", 50_000, "TT-NN op calls of the ops figure (ttwork --scenario ops_loop)")
	flag.StringVar(&only, "only", "cost,placement,loss,consumer,attach,memory,fixed,allocator,python,ops", "parts to run")
	flag.StringVar(&c.out, "json", "build/bench/results.json", "write every run's raw results here")
	flag.StringVar(&floorLib, "floor-lib", "", "floor mode: count hits at the sites tttrace attaches in this library while running the command after --")
	flag.BoolVar(&floorAtEntry, "floor-at-entry", false, "floor mode: probe each function's first instruction (no placement, as --probe-at-entry)")
	flag.BoolVar(&floorNoAllocator, "floor-no-allocator", false, "floor mode: leave the allocator's sites out (as tttrace --no-allocator-probes)")
	flag.BoolVar(&floorRecord, "floor-record", false, "floor mode: also write one ring record per hit with what tttrace reads there, read and thrown away (the recording floor)")
	var floorOp string
	flag.StringVar(&floorOp, "floor-op", "", "floor mode: also do one operation per hit, to price it: read (one 8-byte user-memory read), read2 (two), ring (one 8-byte ring record)")
	flag.Parse()
	if floorLib != "" {
		os.Exit(floorMain(floorLib, floorAtEntry, floorNoAllocator, floorRecord, floorOp, flag.Args()))
	}
	self, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
	}
	c.self = self
	c.only = map[string]bool{}
	for _, p := range strings.Split(only, ",") {
		c.only[strings.TrimSpace(p)] = true
	}
	for _, p := range []*string{&c.tttrace, &c.replica, &c.socket, &c.cet, &c.big, &c.work, &c.out, &c.ttnn} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fatalf("%v", err)
		}
		*p = abs
	}
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		fatalf("%v", err)
	}
	initSettle()
	r := &results{Machine: machine()}
	// What else runs: a look before, then all along (quiet.go).
	r.Machine.OtherBefore = sampleOther(quietPause)
	var quiet quietMeter
	quiet.begin()
	start := time.Now()
	// The CPU-bound Go benchmark first, before the trap-heavy runs leave
	// the kernel busy cleaning up.
	if c.only["consumer"] {
		r.Consumer = runConsumer(&c)
		r.Consumer = append(r.Consumer, runCBRecords(&c)...)
	}
	if c.only["cost"] {
		r.Cost = runCost(&c)
		r.Profile = runProfile(&c)
	}
	if c.only["placement"] {
		r.Placement = runPlacement(&c)
	}
	if c.only["loss"] {
		r.Loss = runLoss(&c)
	}
	if c.only["attach"] {
		r.Attach = runAttach(&c)
		for i := 0; i < c.rounds; i++ {
			for _, k := range []struct{ which, dir string }{{"small", c.replica}, {"big", c.big}} {
				x := resolveOnce(k.which, filepath.Join(k.dir, "libtt_metal.so"))
				logf("resolve %d/%d: %-5s IsTTMetal %.1f ms, ResolveSymbols %.1f ms, ResolveLayout %.1f ms, ChoosePlan %.1f ms, %.1f MB in %d allocations%s",
					i+1, c.rounds, k.which, x.IsTTMetalMs, x.ResolveMs, x.LayoutMs, x.PlanMs, x.AllocMB, x.Mallocs, errSuffix(x.Err))
				r.Resolve = append(r.Resolve, x)
			}
		}
	}
	if c.only["memory"] {
		r.Memory = runMemory(&c)
	}
	if c.only["fixed"] {
		r.Fixed = runFixed(&c)
	}
	if c.only["allocator"] {
		r.Allocator = runAllocatorCost(&c)
	}
	if c.only["python"] {
		r.Python = runPython(&c)
	}
	if c.only["ops"] {
		r.Ops = runOpsCost(&c)
		r.OpsAttach = runOpsAttach(&c)
	}
	r.Machine.LoadEnd = loadAvg()
	r.Machine.OtherDuring = quiet.end()
	r.Seconds = time.Since(start).Seconds()
	if b, err := json.MarshalIndent(r, "", "  "); err == nil {
		_ = os.WriteFile(c.out, append(b, '\n'), 0o644)
	}
	r.print(os.Stdout, &c)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchtool: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// ---- machine ---------------------------------------------------------

type machineInfo struct {
	CPU        string  `json:"cpu"`
	CPUs       int     `json:"cpus"`
	Hypervisor bool    `json:"hypervisor"`
	Kernel     string  `json:"kernel"`
	Date       string  `json:"date"`
	Go         string  `json:"go"`
	MemGiB     float64 `json:"mem_gib"`
	LoadStart  string  `json:"load_start"`
	LoadEnd    string  `json:"load_end"`
	// OtherBefore, OtherDuring: the share of the CPUs other work used in
	// quietPause before the bench and during it (-1: unknown; quiet.go).
	OtherBefore float64 `json:"other_cpu_before"`
	OtherDuring float64 `json:"other_cpu_during"`
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Go: runtime.Version(), LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k == "model name" && m.CPU == "" {
				m.CPU = v
			}
			if k == "flags" && strings.Contains(" "+v+" ", " hypervisor ") {
				m.Hypervisor = true
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// ---- results ---------------------------------------------------------

type results struct {
	Machine   machineInfo    `json:"machine"`
	Cost      []costRun      `json:"cost,omitempty"`
	Profile   []profileRun   `json:"profile,omitempty"`
	Placement []placementRun `json:"placement,omitempty"`
	Loss      []lossRun      `json:"loss,omitempty"`
	Consumer  []consumerRun  `json:"consumer,omitempty"`
	Attach    []attachRun    `json:"attach,omitempty"`
	Resolve   []resolveRun   `json:"resolve,omitempty"`
	Memory    []memoryRun    `json:"memory,omitempty"`
	Fixed     []fixedRun     `json:"fixed,omitempty"`
	Allocator []costRun      `json:"allocator,omitempty"`
	Python    []costRun      `json:"python,omitempty"`
	Ops       []costRun      `json:"ops,omitempty"`
	OpsAttach []opsAttachRun `json:"ops_attach,omitempty"`
	Seconds   float64        `json:"seconds"`
	Notes     map[string]any `json:"notes,omitempty"`
}

type costRun struct {
	Round     int     `json:"round"`
	Mode      string  `json:"mode"`
	BurstSecs float64 `json:"burst_secs"` // the workload's own timing of its alloc/free loop
	WallSecs  float64 `json:"wall_secs"`
	Exit      int     `json:"exit"`
	Counted   int64   `json:"counted"` // events the tracer/reporter saw (-1: not known)
	Lost      int64   `json:"lost"`    // tttrace lost_events (-1: not known)
	Err       string  `json:"err,omitempty"`
}

// ---- running things --------------------------------------------------

type proc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	start  time.Time
}

func startProc(env []string, name string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(name, args...)}
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.Env = append(os.Environ(), env...)
	p.start = time.Now()
	return p, p.cmd.Start()
}

// wait returns the exit status (128+signal when killed).
func (p *proc) wait() (int, time.Duration) {
	err := p.cmd.Wait()
	d := time.Since(p.start)
	if err == nil {
		return 0, d
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), d
		}
		return ee.ExitCode(), d
	}
	return -1, d
}

// startMeasured starts name under GNU time, which forks it from its own
// small process, to learn its peak RSS. (Go starts processes with vfork:
// the exec records the parent's high-water RSS in the child's rusage, so
// benchtool's own peak would show in tttrace's ru_maxrss.)
func startMeasured(env []string, rssFile, name string, args ...string) (*proc, error) {
	_ = os.Remove(rssFile)
	return startProc(env, "/usr/bin/time", append([]string{"-f", "%M", "-o", rssFile, name}, args...)...)
}

// rssSampler follows the process GNU time started (its child) and keeps
// the largest RssAnon and RssFile seen, sampled every 10 ms: the split of
// the peak between the Go heap and file or BPF-map mappings.
type rssSampler struct {
	done          chan struct{}
	finished      chan struct{}
	anonKiB, file int64
}

func sampleRSS(timePid int) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(s.finished)
		child := ""
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if child == "" {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", timePid, timePid))
				if f := strings.Fields(string(b)); len(f) > 0 {
					child = f[0]
				}
			}
			if child != "" {
				if b, err := os.ReadFile("/proc/" + child + "/status"); err == nil {
					for _, line := range strings.Split(string(b), "\n") {
						f := strings.Fields(line)
						if len(f) < 2 {
							continue
						}
						v, _ := strconv.ParseInt(f[1], 10, 64)
						switch f[0] {
						case "RssAnon:":
							s.anonKiB = max(s.anonKiB, v)
						case "RssFile:":
							s.file = max(s.file, v)
						}
					}
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() {
	close(s.done)
	<-s.finished
}

// maxRSSKiB reads what GNU time wrote: the peak RSS in KiB of the process
// and of the children it reaped (-1 when unknown).
func maxRSSKiB(rssFile string) int64 {
	b, err := os.ReadFile(rssFile)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(lastLine(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

var burstRe = regexp.MustCompile(`burst: (\d+) events on (\d+) threads in ([0-9.]+) s`)

func burstSecs(out string) (float64, bool) {
	m := burstRe.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[3], 64)
	return v, err == nil
}

// summary is what benchtool reads of tttrace's NDJSON summary line.
type summary struct {
	Type       string `json:"type"`
	LostEvents int64  `json:"lost_events"`
	// LostRecords: lost records by kind; the loss rows compare the calls
	// (alloc, free) alone with the truth.
	LostRecords map[string]int64 `json:"lost_records"`
	Complete    bool             `json:"complete"`
	Processes   []struct {
		Leaks   []json.RawMessage `json:"leaks"`
		Devices []struct {
			Peaks struct {
				LiveBuffers struct {
					Value int64 `json:"value"`
				} `json:"live_buffers"`
			} `json:"peaks"`
		} `json:"devices"`
		Stats struct {
			Allocs int64 `json:"allocs"`
			Frees  int64 `json:"frees"`
		} `json:"stats"`
	} `json:"processes"`
}

func readSummary(path string) (*summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The summary is the last line; it can be long (leaks).
	var last []byte
	rd := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			last = line
		}
		if err != nil {
			break
		}
	}
	var s summary
	if err := json.Unmarshal(last, &s); err != nil {
		return nil, fmt.Errorf("%s: last line: %w", path, err)
	}
	if s.Type != "summary" {
		return nil, fmt.Errorf("%s: last line is %q, not the summary", path, s.Type)
	}
	return &s, nil
}

func (s *summary) seen() int64 {
	var n int64
	for _, p := range s.Processes {
		n += p.Stats.Allocs + p.Stats.Frees
	}
	return n
}

// truth is what benchtool reads of the replica's ground truth.
type truth struct {
	Calls map[string]int64 `json:"calls"`
}

func readTruth(path string) (*truth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t truth
	return &t, json.Unmarshal(b, &t)
}

// ---- 1. cost per event -----------------------------------------------

// copyMode: allocation stacks without known stacks (bpf/stack.h): every
// allocation's stack is copied into the ring and unwound (the default
// copies a site's stack until the kernel knows it, then sends a token).
const copyMode = "tttrace --json -o /dev/null --known-stacks=false"

type mode struct {
	name string
	run  func(c *config, round int) costRun
}

func modes(c *config) []mode {
	ms := []mode{
		{"untraced", runUntraced},
		{"tttrace --json -o /dev/null", func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "-o", "/dev/null"}, false)
		}},
		{"tttrace (human report) -o /dev/null", func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"-o", "/dev/null"}, false)
		}},
		{"tttrace --json --no-events", func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "--no-events"}, true)
		}},
		{"tttrace --json -o /dev/null --no-stacks", func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "-o", "/dev/null", "--no-stacks"}, false)
		}},
		{copyMode, func(c *config, r int) costRun {
			return runTttrace(c, r, []string{"--json", "-o", "/dev/null", "--known-stacks=false"}, false)
		}},
		{floorMode, func(c *config, r int) costRun { return runFloor(c, r, false) }},
		{recordMode, func(c *config, r int) costRun { return runFloor(c, r, true) }},
		{"in-process socket reporter", runReporter},
	}
	return ms
}

func (c *config) burstArgs(extra ...string) []string {
	args := []string{"--scenario", "burst", "--events", strconv.Itoa(c.events)}
	if c.threads > 0 {
		args = append(args, "--threads", strconv.Itoa(c.threads))
	}
	return append(args, extra...)
}

func runCost(c *config) []costRun { return runRounds(c, "cost", 32, modes(c)) }

// runRounds runs the modes ms in c.rounds interleaved rounds, the order
// rotating by one each round, and logs each run as part's.
func runRounds(c *config, part string, width int, ms []mode) []costRun {
	var out []costRun
	for round := 0; round < c.rounds; round++ {
		for i := range ms {
			m := ms[(i+round)%len(ms)]
			settleBefore(part + " " + m.name)
			r := m.run(c, round)
			r.Round, r.Mode = round, m.name
			logf("%s round %d/%d: %-*s burst %.3f s (exit %d)%s", part, round+1, c.rounds, width, m.name, r.BurstSecs, r.Exit, errSuffix(r.Err))
			out = append(out, r)
		}
	}
	return out
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return ": " + e
}

func runUntraced(c *config, _ int) costRun {
	r, _ := runBurst("ttwork: ", filepath.Join(c.replica, "ttwork"), c.burstArgs()...)
	return r
}

// runBurst runs name with args to its end: the burst's own time, the exit
// status, and when it failed, why (prefix and the last line it wrote on
// stderr). p is nil when it did not start.
func runBurst(prefix, name string, args ...string) (r costRun, p *proc) {
	return runBurstEnv(nil, prefix, name, args...)
}

// runBurstEnv is runBurst with env added to the environment.
func runBurstEnv(env []string, prefix, name string, args ...string) (r costRun, p *proc) {
	r = costRun{Counted: -1, Lost: -1}
	p, err := startProc(env, name, args...)
	if err != nil {
		r.Err = err.Error()
		return r, nil
	}
	code, d := p.wait()
	r.Exit, r.WallSecs = code, d.Seconds()
	finishBurst(&r, p)
	if code != 0 && r.Err == "" {
		r.Err = prefix + lastLine(p.stderr.String())
	}
	return r, p
}

func finishBurst(r *costRun, p *proc) {
	secs, ok := burstSecs(p.stdout.String())
	if !ok {
		r.Err = strings.TrimSpace("no burst line: " + lastLine(p.stderr.String()))
		return
	}
	r.BurstSecs = secs
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func runTttrace(c *config, _ int, flags []string, summaryOut bool) costRun {
	sumPath := filepath.Join(c.work, "cost-summary.ndjson")
	_ = os.Remove(sumPath)
	args := append([]string{}, flags...)
	if summaryOut {
		args = append(args, "-o", sumPath)
	}
	args = append(args, "--lib", filepath.Join(c.replica, "libtt_metal.so"), "--", filepath.Join(c.replica, "ttwork"))
	args = append(args, c.burstArgs()...)
	r, p := runBurst("tttrace: ", c.tttrace, args...)
	if p == nil {
		return r
	}
	if summaryOut {
		s, err := readSummary(sumPath)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		r.Counted, r.Lost = s.seen(), s.LostEvents
	}
	return r
}

// floorMode is the cost mode of the floor (floor.go); recordMode the
// recording floor's (-floor-record).
const (
	floorMode  = "floor: count-only uprobes"
	recordMode = "recording floor: one ring record per hit"
)

// floorArgs runs this benchtool in floor mode around the burst (with
// record, the recording floor).
func (c *config) floorArgs(record bool) []string {
	args := []string{"-floor-lib", filepath.Join(c.replica, "libtt_metal.so")}
	if record {
		args = append(args, "-floor-record")
	}
	return append(append(args, "--", filepath.Join(c.replica, "ttwork")), c.burstArgs()...)
}

// opMode is the profile mode of the floor with one operation per hit
// (floor.go's -floor-op).
func opMode(op string) string {
	switch op {
	case opRead:
		return "floor + one 8-byte user-memory read per hit"
	case opRead2:
		return "floor + two 8-byte user-memory reads per hit"
	}
	return "floor + one 8-byte ring record per hit"
}

// floorOpArgs runs this benchtool in floor mode with one operation per hit.
func (c *config) floorOpArgs(op string) []string {
	args := []string{"-floor-lib", filepath.Join(c.replica, "libtt_metal.so"), "-floor-op", op}
	return append(append(args, "--", filepath.Join(c.replica, "ttwork")), c.burstArgs()...)
}

var countRe = regexp.MustCompile(`(?m)^@(\w+): (\d+)$`)

func runFloor(c *config, _ int, record bool) costRun {
	r, p := runBurst("floor: ", c.self, c.floorArgs(record)...)
	if p == nil {
		return r
	}
	var n, hits, records int64
	for _, m := range countRe.FindAllStringSubmatch(p.stdout.String(), -1) {
		v, _ := strconv.ParseInt(m[2], 10, 64)
		switch m[1] {
		case "records":
			records = v
			continue
		case "track_allocate", "track_deallocate":
			n += v
		}
		hits += v
	}
	r.Counted = n
	if record && records != hits && r.Err == "" {
		// A record the ring could not take was not paid for.
		r.Err = fmt.Sprintf("floor: %d records for %d hits", records, hits)
	}
	return r
}

func runReporter(c *config, _ int) costRun {
	r := costRun{Counted: -1, Lost: -1}
	sock := filepath.Join(c.work, "report.sock")
	_ = os.Remove(sock)
	srv, err := startProc(nil, filepath.Join(c.socket, "ttreportd"), sock)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	for i := 0; i < 2000; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p, err := startProc([]string{"TT_ALLOC_SERVER_SOCKET=" + sock}, filepath.Join(c.socket, "ttwork"), c.burstArgs()...)
	if err != nil {
		_ = srv.cmd.Process.Kill()
		srv.wait()
		r.Err = err.Error()
		return r
	}
	code, d := p.wait()
	r.Exit, r.WallSecs = code, d.Seconds()
	finishBurst(&r, p)
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.wait()
	var n int64
	if _, err := fmt.Sscanf(srv.stdout.String(), "reportd: %d messages", &n); err != nil {
		r.Err = "ttreportd: " + lastLine(srv.stdout.String()+srv.stderr.String())
	}
	r.Counted = n
	if strings.Contains(p.stderr.String(), "not reporting") {
		r.Err = lastLine(p.stderr.String())
	}
	return r
}

// ---- 1b. where the time goes: BPF program run time, tracer CPU --------

type profileRun struct {
	Mode          string  `json:"mode"`
	BurstSecs     float64 `json:"burst_secs"`
	ProgRuns      uint64  `json:"prog_runs"`
	ProgNs        uint64  `json:"prog_ns"`
	ProgNsPerRun  float64 `json:"prog_ns_per_run"`
	TracerCPUSecs float64 `json:"tracer_cpu_secs"`
	Err           string  `json:"err,omitempty"`
}

// runProfile runs tttrace and the floor once more each with the kernel's
// BPF run-time statistics on (they cost a little, so the timed rounds run
// without): how long the uprobe programs themselves take per event, and the
// tracer process's own CPU time.
func runProfile(c *config) []profileRun {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		logf("profile: BPF statistics unavailable: %v", err)
		return []profileRun{{Mode: "profile", Err: err.Error()}}
	}
	defer stats.Close()
	runs := []struct {
		mode string
		name string
		args []string
	}{
		{"tttrace --json -o /dev/null", c.tttrace, append([]string{"--json", "-o", "/dev/null", "--lib",
			filepath.Join(c.replica, "libtt_metal.so"), "--", filepath.Join(c.replica, "ttwork")}, c.burstArgs()...)},
		{"tttrace --json -o /dev/null --no-stacks", c.tttrace, append([]string{"--json", "-o", "/dev/null", "--no-stacks", "--lib",
			filepath.Join(c.replica, "libtt_metal.so"), "--", filepath.Join(c.replica, "ttwork")}, c.burstArgs()...)},
		{copyMode, c.tttrace, append([]string{"--json", "-o", "/dev/null", "--known-stacks=false", "--lib",
			filepath.Join(c.replica, "libtt_metal.so"), "--", filepath.Join(c.replica, "ttwork")}, c.burstArgs()...)},
		{floorMode, c.self, c.floorArgs(false)},
		{recordMode, c.self, c.floorArgs(true)},
		{opMode(opRead), c.self, c.floorOpArgs(opRead)},
		{opMode(opRead2), c.self, c.floorOpArgs(opRead2)},
		{opMode(opRing), c.self, c.floorOpArgs(opRing)},
	}
	var out []profileRun
	for _, rr := range runs {
		pr := profileRun{Mode: rr.mode}
		p, err := startProc(nil, rr.name, rr.args...)
		if err != nil {
			pr.Err = err.Error()
			out = append(out, pr)
			continue
		}
		done := make(chan struct{})
		var last progSample
		go func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if s, ok := sampleProgs(p.cmd.Process.Pid); ok && s.runs >= last.runs {
						last = s
					}
				}
			}
		}()
		code, _ := p.wait()
		close(done)
		if secs, ok := burstSecs(p.stdout.String()); ok {
			pr.BurstSecs = secs
		}
		pr.ProgRuns, pr.ProgNs, pr.TracerCPUSecs = last.runs, last.ns, last.cpu
		if last.runs > 0 {
			pr.ProgNsPerRun = float64(last.ns) / float64(last.runs)
		}
		if code != 0 {
			pr.Err = fmt.Sprintf("exit %d", code)
		}
		logf("profile: %-28s %d program runs, %.0f ns each, tracer CPU %.2f s", rr.mode, pr.ProgRuns, pr.ProgNsPerRun, pr.TracerCPUSecs)
		out = append(out, pr)
	}
	return out
}

type progSample struct {
	runs, ns uint64
	cpu      float64
}

// sampleProgs sums run_cnt and run_time_ns of the uprobe (kprobe-type)
// programs pid holds, and reads its own CPU time.
func sampleProgs(pid int) (progSample, bool) {
	var s progSample
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return s, false
	}
	seen := map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || target != "anon_inode:bpf-prog" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		if kv["prog_type"] != "2" || seen[kv["prog_id"]] { // BPF_PROG_TYPE_KPROBE: uprobes
			continue
		}
		seen[kv["prog_id"]] = true
		runs, _ := strconv.ParseUint(kv["run_cnt"], 10, 64)
		ns, _ := strconv.ParseUint(kv["run_time_ns"], 10, 64)
		s.runs += runs
		s.ns += ns
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 13 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				s.cpu = (ut + st) / 100 // USER_HZ
			}
		}
	}
	return s, true
}

// ---- 2. loss ----------------------------------------------------------

type lossRun struct {
	RingSize  string  `json:"ring_size"`
	BurstSecs float64 `json:"burst_secs"`
	Exit      int     `json:"exit"`
	Lost      int64   `json:"lost_calls"`  // lost_records' alloc + free: the calls tttrace knows it missed
	LostAll   int64   `json:"lost_events"` // every lost event record (the allocator's requests too)
	Complete  bool    `json:"complete"`
	Calls     int64   `json:"calls"`   // track_allocate + track_deallocate, from the replica's truth
	Seen      int64   `json:"seen"`    // allocs + frees the ledger applied
	Missing   int64   `json:"missing"` // calls - seen
	Err       string  `json:"err,omitempty"`
}

func runLoss(c *config) []lossRun {
	var out []lossRun
	for i := 0; i < 3; i++ {
		for _, rs := range []string{"4096", "16K"} {
			out = append(out, lossOnce(c, rs))
			l := out[len(out)-1]
			logf("loss: --ring-size %-5s exit %d lost calls %d (lost_events %d) missing %d complete %v%s", rs, l.Exit, l.Lost, l.LostAll, l.Missing, l.Complete, errSuffix(l.Err))
		}
	}
	return out
}

func lossOnce(c *config, ring string) lossRun {
	r := lossRun{RingSize: ring}
	sumPath := filepath.Join(c.work, "loss-summary.ndjson")
	truthPath := filepath.Join(c.work, "loss-truth.json")
	_ = os.Remove(sumPath)
	_ = os.Remove(truthPath)
	args := []string{"--ring-size", ring, "--json", "--no-events", "-o", sumPath,
		"--lib", filepath.Join(c.replica, "libtt_metal.so"), "--", filepath.Join(c.replica, "ttwork")}
	args = append(args, c.burstArgs("--truth", truthPath)...)
	p, err := startProc(nil, c.tttrace, args...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Exit, _ = p.wait()
	r.BurstSecs, _ = burstSecs(p.stdout.String())
	s, err := readSummary(sumPath)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	t, err := readTruth(truthPath)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Lost, r.LostAll, r.Complete = s.LostRecords["alloc"]+s.LostRecords["free"], s.LostEvents, s.Complete
	r.Calls = t.Calls["track_allocate"] + t.Calls["track_deallocate"]
	r.Seen = s.seen()
	r.Missing = r.Calls - r.Seen
	return r
}

// ---- 3. consumer throughput --------------------------------------------

type consumerRun struct {
	Name        string  `json:"name"`
	NsPerEvent  float64 `json:"ns_per_event"`
	EventsPerS  float64 `json:"events_per_s"`
	AllocsEvent float64 `json:"allocs_per_event"`
	BytesOp     float64 `json:"bytes_per_op"`
}

var benchLineRe = regexp.MustCompile(`^(BenchmarkConsume/\S+)\s+\d+\s+(.*)$`)

func runConsumer(c *config) []consumerRun {
	bin := filepath.Join(c.work, "events.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./events")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		logf("consumer: build: %v", err)
		return nil
	}
	cpu := strconv.Itoa(runtime.NumCPU() - 1)
	cmd := exec.Command("taskset", "-c", cpu, bin, "-test.run", "^$", "-test.bench", "^BenchmarkConsume$",
		"-test.benchtime", "500ms", "-test.count", "9", "-test.benchmem")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Dir = filepath.Join(filepath.Dir(c.tttrace), "..", "events")
	out, err := cmd.Output()
	if err != nil {
		logf("consumer: %v", err)
	}
	var runs []consumerRun
	for _, line := range strings.Split(string(out), "\n") {
		m := benchLineRe.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := consumerRun{Name: strings.TrimPrefix(m[1], "BenchmarkConsume/")}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch f[i+1] {
			case "ns/op":
				r.NsPerEvent = v
			case "events/s":
				r.EventsPerS = v
			case "allocs/event":
				r.AllocsEvent = v
			case "B/op":
				r.BytesOp = v
			}
		}
		logf("consumer: %-18s %.0f ns/event %.2fM events/s %.4f allocs/event", r.Name, r.NsPerEvent, r.EventsPerS/1e6, r.AllocsEvent)
		runs = append(runs, r)
	}
	return runs
}

// runCBRecords measures the ledger's cost per CB record
// (devices.BenchmarkApplyCBRecords: a program cache's cb_layout, cb_alloc
// with core ranges and program_dispatch records, an L1 buffer between
// programs), as runConsumer runs its benchmark: one CPU, nine runs.
func runCBRecords(c *config) []consumerRun {
	bin := filepath.Join(c.work, "devices.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./devices")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		logf("cb records: build: %v", err)
		return nil
	}
	cmd := exec.Command("taskset", "-c", strconv.Itoa(runtime.NumCPU()-1), bin, "-test.run", "^$",
		"-test.bench", "^BenchmarkApplyCBRecords$", "-test.benchtime", "300000x", "-test.count", "9", "-test.benchmem")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := cmd.Output()
	if err != nil {
		logf("cb records: %v", err)
	}
	var runs []consumerRun
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkApplyCBRecords") {
			continue
		}
		r := consumerRun{Name: "CBRecords"}
		for i := 2; i+1 < len(f); i += 2 {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch f[i+1] {
			case "ns/op":
				r.NsPerEvent = v
			case "allocs/op":
				r.AllocsEvent = v
			case "B/op":
				r.BytesOp = v
			}
		}
		if r.NsPerEvent > 0 {
			r.EventsPerS = 1e9 / r.NsPerEvent
		}
		logf("cb records: %.0f ns/record %.0f allocs/record", r.NsPerEvent, r.AllocsEvent)
		runs = append(runs, r)
	}
	return runs
}

// ---- 4. attach time and memory -----------------------------------------

type attachRun struct {
	Lib       string  `json:"lib"` // small | big
	Mode      string  `json:"mode"`
	Cold      bool    `json:"cold"`
	ReadySecs float64 `json:"ready_secs"` // tttrace start -> --ready-file
	MaxRSSKiB int64   `json:"max_rss_kib"`
	AnonKiB   int64   `json:"rss_anon_peak_kib"` // sampled
	FileKiB   int64   `json:"rss_file_peak_kib"` // sampled
	HeapMB    int64   `json:"go_heap_peak_mb"`   // largest heap at a GC start (gctrace), -1: no GC ran
	Seen      int64   `json:"seen"`
	Err       string  `json:"err,omitempty"`
}

type libInfo struct {
	SizeMB  float64 `json:"size_mb"`
	Dynsym  int     `json:"dynsym"`
	Symtab  int     `json:"symtab"`
	Matched int     `json:"-"`
}

// startHeld starts ttwork in dir waiting at its go point; it returns once
// ttwork said "ready".
func startHeld(dir string, args ...string) (*exec.Cmd, string, error) {
	gofile := filepath.Join(os.TempDir(), fmt.Sprintf("tttrace-bench-go-%d-%d", os.Getpid(), time.Now().UnixNano()))
	cmd := exec.Command(filepath.Join(dir, "ttwork"), append(args, "--go-file", gofile)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("ttwork did not get ready: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	return cmd, gofile, nil
}

// evict drops the file's pages from the page cache (those no process maps).
func evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

var gcRe = regexp.MustCompile(`(?m)^gc \d+ .*?, (\d+)->(\d+)->(\d+) MB`)

func heapPeak(stderr string) int64 {
	peak := int64(-1)
	for _, m := range gcRe.FindAllStringSubmatch(stderr, -1) {
		for _, s := range m[1:3] {
			if v, _ := strconv.ParseInt(s, 10, 64); v > peak {
				peak = v
			}
		}
	}
	return peak
}

func waitFile(path string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return false
}

func attachOnce(c *config, which, mode string, cold bool) attachRun {
	r := attachRun{Lib: which, Mode: mode, Cold: cold, HeapMB: -1, Seen: -1}
	dir := c.replica
	if which == "big" {
		dir = c.big
	}
	lib := filepath.Join(dir, "libtt_metal.so")
	ready := filepath.Join(c.work, "ready")
	sumPath := filepath.Join(c.work, "attach-summary.ndjson")
	_ = os.Remove(ready)
	_ = os.Remove(sumPath)
	const n = 20000
	work := []string{"--scenario", "burst", "--events", strconv.Itoa(n)}
	var held *exec.Cmd
	var gofile string
	args := []string{"--json", "--no-events", "-o", sumPath, "--ready-file", ready}
	if mode == "-p PID" {
		var err error
		held, gofile, err = startHeld(dir, work...)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		args = append(args, "-p", strconv.Itoa(held.Process.Pid))
	} else {
		args = append(args, "--lib", lib, "--", filepath.Join(dir, "ttwork"))
		args = append(args, work...)
	}
	if cold {
		if err := evict(lib); err != nil {
			r.Err = err.Error()
		}
	}
	rssFile := filepath.Join(c.work, "attach-rss")
	p, err := startMeasured([]string{"GODEBUG=gctrace=1"}, rssFile, c.tttrace, args...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	sampler := sampleRSS(p.cmd.Process.Pid)
	if waitFile(ready, 60*time.Second) {
		r.ReadySecs = time.Since(p.start).Seconds()
	} else {
		r.Err = "no ready file"
	}
	if held != nil {
		_ = os.WriteFile(gofile, nil, 0o644)
		_ = held.Wait()
		_ = os.Remove(gofile)
	}
	code, _ := p.wait()
	sampler.stop()
	r.AnonKiB, r.FileKiB = sampler.anonKiB, sampler.file
	if code != 0 {
		r.Err = fmt.Sprintf("tttrace exit %d: %s", code, lastLine(p.stderr.String()))
	}
	if mode == "-p PID" {
		// In "-- CMD" mode tttrace reaps the command, whose peak would
		// count in tttrace's rusage: only -p runs give tttrace's own.
		r.MaxRSSKiB = maxRSSKiB(rssFile)
	}
	r.HeapMB = heapPeak(p.stderr.String())
	if s, err := readSummary(sumPath); err == nil {
		r.Seen = s.seen()
		if r.Seen != n && r.Err == "" {
			r.Err = fmt.Sprintf("ledger saw %d of %d events", r.Seen, n)
		}
	} else if r.Err == "" {
		r.Err = err.Error()
	}
	return r
}

func runAttach(c *config) []attachRun {
	type cfg struct {
		lib, mode string
		cold      bool
	}
	cfgs := []cfg{
		{"small", "-p PID", false}, {"big", "-p PID", false}, {"big", "-p PID", true},
		{"small", "--lib -- CMD", false}, {"big", "--lib -- CMD", false},
	}
	var out []attachRun
	for round := 0; round < c.rounds; round++ {
		for _, k := range cfgs {
			r := attachOnce(c, k.lib, k.mode, k.cold)
			logf("attach round %d/%d: %-5s %-13s cold=%-5v ready %.3f s, maxrss %d KiB, heap peak %d MB%s",
				round+1, c.rounds, k.lib, k.mode, k.cold, r.ReadySecs, r.MaxRSSKiB, r.HeapMB, errSuffix(r.Err))
			out = append(out, r)
		}
	}
	return out
}

// resolveRun times tttrace's work on a library before attaching, inside
// benchtool: ttmetal.IsTTMetal (how -p recognises the library among those
// mapped; the first look-up, so the one scan of the symbol tables),
// ttmetal.ResolveSymbols (the attach points), ttmetal.ResolveLayout and
// ttmetal.ChoosePlan (which sweeps the code for call sites), with what they
// allocate.
type resolveRun struct {
	Lib         string  `json:"lib"`
	IsTTMetalMs float64 `json:"is_tt_metal_ms"`
	ResolveMs   float64 `json:"resolve_symbols_ms"`
	LayoutMs    float64 `json:"resolve_layout_ms"`
	PlanMs      float64 `json:"choose_plan_ms"`
	AllocMB     float64 `json:"alloc_mb"`
	Mallocs     uint64  `json:"mallocs"`
	Err         string  `json:"err,omitempty"`
}

func resolveOnce(which, path string) resolveRun {
	r := resolveRun{Lib: which}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer lib.Close()
	t0 := time.Now()
	if !ttmetal.IsTTMetal(lib) {
		r.Err = "not recognised as TT-Metal"
	}
	t1 := time.Now()
	syms, err := ttmetal.ResolveSymbols(lib)
	t2 := time.Now()
	var layout *ttmetal.LayoutSource
	if err == nil {
		layout, err = ttmetal.ResolveLayout(lib, syms, ttmetal.DefaultOptions())
	}
	t3 := time.Now()
	if err == nil {
		_, err = ttmetal.ChoosePlan(lib, syms, layout.Layout, ttmetal.DefaultOptions())
	}
	t4 := time.Now()
	if err != nil {
		r.Err = err.Error()
	}
	runtime.ReadMemStats(&m1)
	r.IsTTMetalMs = t1.Sub(t0).Seconds() * 1e3
	r.ResolveMs = t2.Sub(t1).Seconds() * 1e3
	r.LayoutMs = t3.Sub(t2).Seconds() * 1e3
	r.PlanMs = t4.Sub(t3).Seconds() * 1e3
	r.AllocMB = float64(m1.TotalAlloc-m0.TotalAlloc) / (1 << 20)
	r.Mallocs = m1.Mallocs - m0.Mallocs
	return r
}

func symbolCounts(path string) (libInfo, error) {
	var li libInfo
	st, err := os.Stat(path)
	if err != nil {
		return li, err
	}
	li.SizeMB = float64(st.Size()) / 1e6
	l, err := ttmetal.OpenLibrary(path)
	if err != nil {
		return li, err
	}
	defer l.Close()
	for _, name := range []string{".dynsym", ".symtab"} {
		if s := l.ELF().Section(name); s != nil && s.Entsize > 0 {
			n := int(s.Size/s.Entsize) - 1 // entry 0 is the null symbol
			if name == ".dynsym" {
				li.Dynsym = n
			} else {
				li.Symtab = n
			}
		}
	}
	return li, nil
}

// ---- 5. memory with many live buffers --------------------------------

type memoryRun struct {
	Mode      string `json:"mode"`
	Live      int64  `json:"live_buffers"` // peak live buffers the ledger reports
	MaxRSSKiB int64  `json:"max_rss_kib"`
	AnonKiB   int64  `json:"rss_anon_peak_kib"` // sampled
	FileKiB   int64  `json:"rss_file_peak_kib"` // sampled
	HeapMB    int64  `json:"go_heap_peak_mb"`
	Exit      int    `json:"exit"`
	Err       string `json:"err,omitempty"`
}

// runMemory runs the hold scenario under tttrace -p: the default three
// times (peak RSS varies with when the Go runtime grows and returns
// memory), the variants once.
func runMemory(c *config) []memoryRun {
	var out []memoryRun
	type variant struct {
		mode  string
		leak  bool
		flags []string
	}
	freed := variant{"--json --no-events, buffers freed before exit", false, nil}
	for _, v := range []variant{
		freed,
		{"--json --no-events, buffers leaked at exit", true, nil},
		freed,
		{"--json --no-events --ring-size 8M, freed", false, []string{"--ring-size", "8M"}},
		freed,
	} {
		r := memoryRun{Mode: v.mode, HeapMB: -1}
		sumPath := filepath.Join(c.work, "memory-summary.ndjson")
		_ = os.Remove(sumPath)
		work := []string{"--scenario", "hold", "--events", strconv.Itoa(2 * c.hold)}
		if v.leak {
			work = append(work, "--leak")
		}
		held, gofile, err := startHeld(c.replica, work...)
		if err != nil {
			r.Err = err.Error()
			out = append(out, r)
			continue
		}
		ready := filepath.Join(c.work, "ready")
		_ = os.Remove(ready)
		args := append([]string{"--json", "--no-events", "-o", sumPath, "--ready-file", ready, "-p", strconv.Itoa(held.Process.Pid)}, v.flags...)
		rssFile := filepath.Join(c.work, "memory-rss")
		p, err := startMeasured([]string{"GODEBUG=gctrace=1"}, rssFile, c.tttrace, args...)
		if err != nil {
			r.Err = err.Error()
			_ = held.Process.Kill()
			_ = held.Wait()
			out = append(out, r)
			continue
		}
		sampler := sampleRSS(p.cmd.Process.Pid)
		if !waitFile(ready, 60*time.Second) {
			r.Err = "no ready file"
		}
		_ = os.WriteFile(gofile, nil, 0o644)
		_ = held.Wait()
		_ = os.Remove(gofile)
		r.Exit, _ = p.wait()
		sampler.stop()
		r.AnonKiB, r.FileKiB = sampler.anonKiB, sampler.file
		r.MaxRSSKiB = maxRSSKiB(rssFile)
		r.HeapMB = heapPeak(p.stderr.String())
		if s, err := readSummary(sumPath); err == nil {
			for _, pr := range s.Processes {
				for _, d := range pr.Devices {
					r.Live += d.Peaks.LiveBuffers.Value
				}
			}
			if s.LostEvents != 0 {
				r.Err = fmt.Sprintf("%d events lost", s.LostEvents)
			}
		} else {
			r.Err = err.Error()
		}
		logf("memory: %-48s peak live %d, maxrss %d KiB, heap peak %d MB%s", v.mode, r.Live, r.MaxRSSKiB, r.HeapMB, errSuffix(r.Err))
		out = append(out, r)
	}
	return out
}

// ---- statistics ------------------------------------------------------

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minMax(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}
