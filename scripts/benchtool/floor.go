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
//
// With -floor-record the program also does, per hit, the least any tracer
// that hands the same facts to user space must do (recordInstructions):
// one 128-byte ring-buffer record with the time, pid and tid, and the
// user-memory reads tttrace makes there (a Buffer's 96 bytes and its
// device's first 16 where track_allocate / track_deallocate name one, 8
// bytes of the stack at the allocator's request), which benchtool reads
// and throws away ("@records: N"). The recording floor.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

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

// The floor's one-operation variants (-floor-op): what one operation a
// uprobe program makes costs, the count-only program's time subtracted.
// Each reads or writes 8 bytes, so the figure is the operation's own cost,
// not that of the bytes moved.
const (
	opRead  = "read"  // one bpf_probe_read_user of the hit's stack (its return address)
	opRead2 = "read2" // two of them (the return address and the slot above it)
	opRing  = "ring"  // one 8-byte ring record, reserved and submitted without waking the reader
)

// opInstructions is the count-only program followed by op.
func opInstructions(counters, ring *ebpf.Map, op string) asm.Instructions {
	count := floorInstructions(counters)
	ins := append(asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}, count[:len(count)-2]...)
	read := func(fp, at int16) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, int32(fp)),
			asm.Mov.Imm(asm.R2, 8),
			asm.LoadMem(asm.R3, asm.R6, regsSP, asm.DWord),
			asm.Add.Imm(asm.R3, int32(at)),
			asm.FnProbeReadUser.Call(),
		}
	}
	// The count's "out" label moves to after the operation: a site
	// whose counter is missing still does it.
	ins = append(ins, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"))
	switch op {
	case opRead:
		ins = append(ins, read(-16, 0)...)
	case opRead2:
		ins = append(ins, read(-16, 0)...)
		ins = append(ins, read(-24, 8)...)
	case opRing:
		ins = append(ins,
			asm.LoadMapPtr(asm.R1, ring.FD()),
			asm.Mov.Imm(asm.R2, 8),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "done"),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.R0),
			asm.Mov.Imm(asm.R2, 1), // BPF_RB_NO_WAKEUP
			asm.FnRingbufSubmit.Call(),
		)
	}
	return append(ins, asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return())
}

// floor is the floor's probes in one library.
type floor struct {
	plan     *ttmetal.Plan
	counters *ebpf.Map
	ring     *ebpf.Map // -floor-record: the records
	prog     *ebpf.Program
	links    []link.Link
	multi    bool
}

// The recording floor's record and what it reads.
const (
	recordSize  = 128
	recordRing  = 64 << 20 // tttrace's default ring
	regsSI      = 104      // offsetof(struct pt_regs, si) on x86-64: the second argument
	regsSP      = 152      // offsetof(struct pt_regs, sp)
	bufferSite  = 1 << 32  // cookie bit: the site's second argument is a Buffer*
	bufferBytes = 96       // the span tttrace reads of a V1 Buffer
	deviceBytes = 16       // the vptr and id tttrace reads of its device
)

// recordInstructions is the recording floor's program: the floor's count,
// then one record with what tttrace reads at the site (see the file's
// comment). It never wakes the reader (BPF_RB_NO_WAKEUP), which polls:
// a wake-up whenever the reader has caught up, the kernel's default,
// costs an interrupt-work round trip per record on a VM, and tttrace
// too wakes its reader only once per sleep.
func recordInstructions(counters, ring *ebpf.Map) asm.Instructions {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetAttachCookie.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counters.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "record"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, ring.FD()).WithSymbol("record"),
		asm.Mov.Imm(asm.R2, recordSize),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R8, asm.R0),
	}
	ins = append(ins, asm.Mov.Imm(asm.R1, 0))
	for off := int16(0); off < recordSize; off += 8 {
		ins = append(ins, asm.StoreMem(asm.R8, off, asm.R1, asm.DWord))
	}
	return append(ins,
		asm.StoreMem(asm.R8, 0, asm.R7, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.R8, 16, asm.R0, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R8, 8, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.RSh.Imm(asm.R1, 32),
		asm.JEq.Imm(asm.R1, 0, "stack"),
		// A Buffer*: its span, then the first bytes of its device_.
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, 32),
		asm.Mov.Imm(asm.R2, bufferBytes),
		asm.LoadMem(asm.R3, asm.R6, regsSI, asm.DWord),
		asm.FnProbeReadUser.Call(),
		asm.LoadMem(asm.R3, asm.R8, 32+16, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -24),
		asm.Mov.Imm(asm.R2, deviceBytes),
		asm.FnProbeReadUser.Call(),
		asm.Ja.Label("submit"),
		// Elsewhere: 8 bytes above the return address.
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("stack"),
		asm.Add.Imm(asm.R1, 32),
		asm.Mov.Imm(asm.R2, 8),
		asm.LoadMem(asm.R3, asm.R6, regsSP, asm.DWord),
		asm.Add.Imm(asm.R3, 8),
		asm.FnProbeReadUser.Call(),
		asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("submit"),
		asm.Mov.Imm(asm.R2, 1), // BPF_RB_NO_WAKEUP
		asm.FnRingbufSubmit.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// attachFloor loads the counting program (with record, the recording one)
// and attaches it at every site of plan in lib: one uprobe_multi link, or
// one classic uprobe per site where the kernel has no such links.
func attachFloor(lib string, plan *ttmetal.Plan, record bool, op string) (*floor, error) {
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
	ins := floorInstructions(f.counters)
	if record || op == opRing {
		f.ring, err = ebpf.NewMap(&ebpf.MapSpec{Name: "floor_records", Type: ebpf.RingBuf, MaxEntries: recordRing})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("create the ring: %w", err)
		}
		ins = recordInstructions(f.counters, f.ring)
	}
	switch op {
	case "":
	case opRead, opRead2, opRing:
		ins = opInstructions(f.counters, f.ring, op)
	default:
		f.close()
		return nil, fmt.Errorf("unknown -floor-op %q (read, read2, ring)", op)
	}
	spec := &ebpf.ProgramSpec{
		Name:         floorProgName,
		Type:         ebpf.Kprobe,
		Instructions: ins,
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
			o.Cookies = append(o.Cookies, siteCookie(i, s))
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
		l, err := exe.Uprobe("", f.prog, &link.UprobeOptions{Address: s.Offset, Cookie: siteCookie(i, s)})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("attach uprobe to %s (%s at %#x): %w", s.Function, s.Symbol, s.Addr, err)
		}
		f.links = append(f.links, l)
	}
	return f, nil
}

// siteCookie is site i's cookie: its index, and bufferSite where tttrace
// reads a Buffer* from its second argument.
func siteCookie(i int, s ttmetal.AttachPoint) uint64 {
	c := uint64(i)
	if s.Program == "track_allocate" || s.Program == "track_deallocate" {
		c |= bufferSite
	}
	return c
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
	if f.ring != nil {
		errs = append(errs, f.ring.Close())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
	}
}

// floorMain is benchtool's floor mode; it returns the exit status.
func floorMain(lib string, atEntry, noAllocator, record bool, op string, argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "floor: usage: benchtool -floor-lib LIB [-floor-at-entry] [-floor-no-allocator] [-floor-record | -floor-op OP] -- CMD ARGS...")
		return 2
	}
	plan, err := floorPlan(lib, atEntry, noAllocator)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 1
	}
	f, err := attachFloor(lib, plan, record, op)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		return 1
	}
	defer f.close()
	how := "one uprobe_multi link"
	if !f.multi {
		how = "classic uprobes"
	}
	what := "counting"
	var records func() uint64
	if op != "" {
		what = "counting and one operation (" + op + ")"
	}
	if f.ring != nil {
		if record {
			what = "recording"
		}
		if records, err = f.readRecords(); err != nil {
			fmt.Fprintf(os.Stderr, "floor: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "floor: %s at %d sites of %s (%s plan), %s\n", what, len(plan.AttachPoints), lib, plan.Kind, how)

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
	if records != nil {
		// Every record is in the ring once CMD has ended: the reader
		// drains it and stops.
		for _, l := range f.links {
			_ = l.Close()
		}
		f.links = nil
		fmt.Printf("@records: %d\n", records())
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

// readRecords reads the ring's records and throws them away; stop ends
// the reading once the ring is empty (call it with the probes gone) and
// returns how many were read.
func (f *floor) readRecords() (stop func() uint64, err error) {
	rd, err := ringbuf.NewReader(f.ring)
	if err != nil {
		return nil, fmt.Errorf("read the ring: %w", err)
	}
	var stopping atomic.Bool
	done := make(chan uint64, 1)
	go func() {
		defer rd.Close()
		var rec ringbuf.Record
		var n uint64
		// Nothing wakes the reader: it looks at the ring every
		// millisecond (and at stopping); records are read as they come.
		rd.SetDeadline(time.Now().Add(time.Millisecond))
		for {
			err := rd.ReadInto(&rec)
			switch {
			case err == nil:
				n++
			case errors.Is(err, os.ErrDeadlineExceeded) && !stopping.Load():
				rd.SetDeadline(time.Now().Add(time.Millisecond))
			default:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					fmt.Fprintf(os.Stderr, "floor: read the ring: %v\n", err)
				}
				done <- n
				return
			}
		}
	}()
	return func() uint64 {
		stopping.Store(true)
		return <-done
	}, nil
}
