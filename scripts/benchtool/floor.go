package main

// The floor of the cost figures: the cheapest a uprobe tracer can be on the
// replica's workload. benchtool runs itself in floor mode,
//
//	benchtool -floor-lib LIB [-floor-at-entry] -- CMD ARGS...
//
// which resolves the probe plan tttrace would use on LIB (the same calls as
// ttmetal.Prepare, --probes auto, placement on), puts an entry
// uprobe at every one of the plan's addresses that only counts its hits,
// runs CMD, and prints the hits per BPF program of tttrace's attach table
// ("@track_allocate: N", one line each) once CMD has ended. It exits with
// CMD's status. The program is written with cilium/ebpf's assembler, no C:
// one program for every site, the site's index in the BPF cookie, a per-CPU
// array of counters indexed by it.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/ttmetal"
)

// floorProgName is the floor's BPF program name (what bpftool shows).
const floorProgName = "floor_count"

// floorPlan resolves the sites tttrace attaches in lib, as ttmetal.Prepare
// does with --probes auto, and checks that each can be probed, as
// Tracer.AttachPlan does.
func floorPlan(lib string, atEntry, noAllocator bool) (*ttmetal.Plan, error) {
	l, err := ttmetal.OpenLibrary(lib)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	opts := ttmetal.DefaultOptions()
	opts.AtEntry, opts.NoAllocator = atEntry, noAllocator
	prep, err := ttmetal.Prepare(l, opts)
	if err != nil {
		return nil, err
	}
	plan := prep.Plan
	if len(plan.AttachPoints) == 0 {
		return nil, fmt.Errorf("%s: the plan has no sites", lib)
	}
	for _, s := range plan.AttachPoints {
		if err := ttmetal.CheckProbeable(l, s.Addr); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", s.Function, s.Symbol, err)
		}
	}
	return plan, nil
}

// floorInstructions is the program: counters[cookie] += 1 on this CPU.
func floorInstructions(counters *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		// r1 is the context: the cookie is the site's index.
		asm.FnGetAttachCookie.Call(),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counters.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		// Atomic even on this CPU's own counter: a uprobe program runs
		// with migration, not preemption, disabled.
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}

// floor is the floor's probes in one library.
type floor struct {
	plan     *ttmetal.Plan
	counters *ebpf.Map
	prog     *ebpf.Program
	links    []link.Link
	multi    bool
}

// attachFloor loads the counting program and attaches it at every site of
// plan in lib: one uprobe_multi link, or one classic uprobe per site where
// the kernel has no such links.
func attachFloor(lib string, plan *ttmetal.Plan) (*floor, error) {
	f := &floor{plan: plan, multi: probes.HaveUprobeMulti() == nil}
	var err error
	f.counters, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "floor_counts",
		Type:       ebpf.PerCPUArray,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: uint32(len(plan.AttachPoints)),
	})
	if err != nil {
		return nil, fmt.Errorf("create the counters: %w", err)
	}
	spec := &ebpf.ProgramSpec{
		Name:         floorProgName,
		Type:         ebpf.Kprobe,
		Instructions: floorInstructions(f.counters),
		License:      "Dual BSD/GPL",
	}
	if f.multi {
		spec.AttachType = ebpf.AttachTraceUprobeMulti
	}
	f.prog, err = ebpf.NewProgram(spec)
	if err != nil {
		f.close()
		return nil, fmt.Errorf("load the counting program: %w", err)
	}
	exe, err := link.OpenExecutable(lib)
	if err != nil {
		f.close()
		return nil, err
	}
	if f.multi {
		o := &link.UprobeMultiOptions{}
		for i, s := range plan.AttachPoints {
			o.Addresses = append(o.Addresses, s.Offset)
			o.Cookies = append(o.Cookies, uint64(i))
		}
		l, err := exe.UprobeMulti(nil, f.prog, o)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("attach a uprobe_multi link to %d sites: %w", len(plan.AttachPoints), err)
		}
		f.links = append(f.links, l)
		return f, nil
	}
	for i, s := range plan.AttachPoints {
		l, err := exe.Uprobe("", f.prog, &link.UprobeOptions{Address: s.Offset, Cookie: uint64(i)})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("attach uprobe to %s (%s at %#x): %w", s.Function, s.Symbol, s.Addr, err)
		}
		f.links = append(f.links, l)
	}
	return f, nil
}

// counts sums each site's hits over the CPUs, by program name.
func (f *floor) counts() (map[ttmetal.Program]uint64, error) {
	by := map[ttmetal.Program]uint64{}
	for i, s := range f.plan.AttachPoints {
		var perCPU []uint64
		if err := f.counters.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read the counter of %s: %w", s.Symbol, err)
		}
		n := by[s.Program]
		for _, v := range perCPU {
			n += v
		}
		by[s.Program] = n
	}
	return by, nil
}

func (f *floor) close() {
	var errs []error
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	if f.prog != nil {
		errs = append(errs, f.prog.Close())
	}
	if f.counters != nil {
		errs = append(errs, f.counters.Close())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
	}
}

// floorMain is benchtool's floor mode; it returns the exit status.
func floorMain(lib string, atEntry, noAllocator bool, argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "floor: usage: benchtool -floor-lib LIB [-floor-at-entry] -- CMD ARGS...")
		return 2
	}
	plan, err := floorPlan(lib, atEntry, noAllocator)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 1
	}
	f, err := attachFloor(lib, plan)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 1
	}
	defer f.close()
	how := "one uprobe_multi link"
	if !f.multi {
		how = "classic uprobes"
	}
	fmt.Fprintf(os.Stderr, "floor: counting at %d sites of %s (%s plan), %s\n", len(plan.AttachPoints), lib, plan.Kind, how)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 127
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	status := 0
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "floor: %v\n", err)
			return 1
		}
		status = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
	}
	signal.Stop(sigs)

	by, err := f.counts()
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 1
	}
	names := make([]string, 0, len(by))
	for p := range by {
		names = append(names, string(p))
	}
	sort.Strings(names)
	for _, p := range names {
		fmt.Printf("@%s: %d\n", p, by[ttmetal.Program(p)])
	}
	return status
}
