package tables

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKnownSetsMatchC: the sets known.go computes are the ones the BPF
// programs compute, by bpf/stack_hash.h itself, built with the host's C
// compiler (the same source the programs include).
func TestKnownSetsMatchC(t *testing.T) {
	cc, hdr := stackHashC(t)
	rng := rand.New(rand.NewPCG(1, 2))
	type stepIn struct {
		tgid  uint32
		first bool
		pc    uint64
	}
	type siteIn struct {
		tgid  uint32
		ip    uint64
		chain []uint64
	}
	var steps []stepIn
	var sites []siteIn
	for i := range 200 {
		steps = append(steps, stepIn{rng.Uint32(), i%2 == 0, rng.Uint64()})
		c := make([]uint64, rng.IntN(KnownStackFrames+1))
		for j := range c {
			c[j] = rng.Uint64()
		}
		sites = append(sites, siteIn{rng.Uint32(), rng.Uint64(), c})
	}
	steps = append(steps, stepIn{1, true, 0}, stepIn{0xffffffff, false, ^uint64(0)})
	sites = append(sites, siteIn{1, 0, nil})

	var src strings.Builder
	fmt.Fprintf(&src, "#include <stdio.h>\n#include <linux/types.h>\n#include %q\nint main(void) {\n", hdr)
	src.WriteString("printf(\"%d\\n%d\\n\", STACK_STEP_BITS, STACK_SITE_BITS);\n")
	for _, s := range steps {
		f := 0
		if s.first {
			f = 1
		}
		fmt.Fprintf(&src, "printf(\"%%u\\n\", stack_step_set(%du, %d, %dull));\n", s.tgid, f, s.pc)
	}
	for _, s := range sites {
		fmt.Fprintf(&src, "{ __u64 h = stack_site_start(%du, %dull);\n", s.tgid, s.ip)
		for _, pc := range s.chain {
			fmt.Fprintf(&src, "h = stack_mix(h, %dull);\n", pc)
		}
		fmt.Fprintf(&src, "printf(\"%%u\\n\", stack_site_set(h, %d)); }\n", len(s.chain))
	}
	src.WriteString("return 0; }\n")
	got := runHashC(t, cc, src.String())
	if len(got) != 2+len(steps)+len(sites) {
		t.Fatalf("%d numbers from C, want %d", len(got), 2+len(steps)+len(sites))
	}
	stepBits, siteBits := int(got[0]), int(got[1])
	got = got[2:]
	for i, s := range steps {
		if want := stepSet(s.tgid, s.first, s.pc, stepBits); got[i] != want {
			t.Errorf("step %+v: C set %d, Go %d", s, got[i], want)
		}
	}
	for i, s := range sites {
		if want := siteSet(s.tgid, s.ip, s.chain, siteBits); got[len(steps)+i] != want {
			t.Errorf("site %+v: C set %d, Go %d", s, got[len(steps)+i], want)
		}
	}
	// The maps' sizes are the header's (the Go side takes them from the
	// maps).
	spec, err := bpfObject()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["stack_steps"].MaxEntries; n != 1<<stepBits {
		t.Errorf("stack_steps has %d slots, the header says 1<<%d", n, stepBits)
	}
	if n := spec.Maps["stack_sites"].MaxEntries; n != 1<<siteBits {
		t.Errorf("stack_sites has %d slots, the header says 1<<%d", n, siteBits)
	}
}

// testTables are tables of 1<<bits slots each in Go memory, as mapped.
func testTables(bits int) *Known {
	return &Known{
		steps: make([]stepSlot, 1<<bits), sites: make([]siteSlot, 1<<bits),
		stepBits: bits, siteBits: bits,
	}
}

// findStep is the program's lookup (stack_step_get) of a step.
func (k *Known) findStep(tgid uint32, first bool, pc uint64) *stepSlot {
	f := uint8(0)
	if first {
		f = 1
	}
	set := stepSet(tgid, first, pc, k.stepBits)
	for i := set; i < set+stackWays; i++ {
		if s := &k.steps[i]; s.Seq%2 == 0 && s.Tgid == tgid && s.Pc == pc && s.First == f {
			return s
		}
	}
	return nil
}

// findSite is the program's lookup (stack_site_token) of a chain.
func (k *Known) findSite(tgid uint32, ip uint64, chain []uint64) uint64 {
	var pcs [KnownStackFrames]uint64
	copy(pcs[:], chain)
	set := siteSet(tgid, ip, chain, k.siteBits)
	for i := set; i < set+stackWays; i++ {
		if s := &k.sites[i]; s.Seq%2 == 0 && s.Tgid == tgid && s.Ip == ip && int(s.N) == len(chain) && s.Pcs == pcs {
			return s.Token
		}
	}
	return 0
}

func TestKnownTables(t *testing.T) {
	k := testTables(4) // 8 sets of 2: collisions are certain
	steps := []StackStep{
		{PC: 0x1000, First: true, CFA: 8, RA: -8},
		{PC: 0x2000, CFA: 16, RA: -8, BPSaved: true, BP: -16},
		{PC: 0x3000, End: true},
	}
	chain := []uint64{0x2000, 0x3000}
	if err := k.Learn(7, 0x1000, steps, chain, 42); err != nil {
		t.Fatal(err)
	}
	if s := k.findStep(7, true, 0x1000); s == nil || s.Cfa != 8 || s.Ra != -8 {
		t.Errorf("first step: %+v", s)
	}
	if s := k.findStep(7, false, 0x2000); s == nil || s.BpSaved != 1 || s.Bp != -16 || s.Cfa != 16 {
		t.Errorf("middle step: %+v", s)
	}
	if s := k.findStep(7, false, 0x3000); s == nil || s.Ra != stackStepEnd {
		t.Errorf("outermost step: %+v", s)
	}
	if s := k.findStep(7, false, 0x1000); s != nil {
		t.Errorf("the probe's step found as a caller's: %+v", s)
	}
	if got := k.findSite(7, 0x1000, chain); got != 42 {
		t.Errorf("chain: token %d, want 42", got)
	}
	if got := k.findSite(8, 0x1000, chain); got != 0 {
		t.Errorf("chain of another process: token %d", got)
	}
	if got := k.findSite(7, 0x1000, chain[:1]); got != 0 {
		t.Errorf("a shorter chain: token %d", got)
	}

	// Learnt again: nothing is written (a writer's seq would move).
	seqs := func() (n uint64) {
		for i := range k.steps {
			n += uint64(k.steps[i].Seq)
		}
		for i := range k.sites {
			n += uint64(k.sites[i].Seq)
		}
		return n
	}
	before := seqs()
	if err := k.Learn(7, 0x1000, steps, chain, 42); err != nil {
		t.Fatal(err)
	}
	if after := seqs(); after != before {
		t.Errorf("learning the same stack again wrote slots (seq sum %d -> %d)", before, after)
	}

	// Many processes: every slot write leaves an even seq, and the last
	// stack learnt is always found (a full set gives up another way).
	for pid := uint32(100); pid < 300; pid++ {
		c := []uint64{uint64(pid) << 12, 0x3000}
		st := []StackStep{{PC: 0x1000, First: true, CFA: 8, RA: -8}, {PC: c[0], CFA: 8, RA: -8}, {PC: 0x3000, End: true}}
		if err := k.Learn(pid, 0x1000, st, c, uint64(pid)); err != nil {
			t.Fatal(err)
		}
		if got := k.findSite(pid, 0x1000, c); got != uint64(pid) {
			t.Fatalf("pid %d: the stack just learnt has token %d", pid, got)
		}
		// Its steps are all there, unless more of them share a set than
		// it has slots.
		perSet := map[uint32]int{}
		for _, s := range st {
			perSet[stepSet(pid, s.First, s.PC, k.stepBits)]++
		}
		crowded := false
		for _, n := range perSet {
			crowded = crowded || n > stackWays
		}
		for _, s := range st {
			if !crowded && k.findStep(pid, s.First, s.PC) == nil {
				t.Fatalf("pid %d: step %#x not found just after learning", pid, s.PC)
			}
		}
	}
	for i := range k.steps {
		if k.steps[i].Seq%2 != 0 {
			t.Fatalf("step slot %d left odd", i)
		}
	}

	// Forget clears one process's slots, and only those.
	var kept int
	for i := range k.sites {
		if k.sites[i].Tgid != 0 && k.sites[i].Tgid != 299 {
			kept++
		}
	}
	k.Forget(299)
	var left int
	for i := range k.steps {
		if k.steps[i].Tgid == 299 {
			t.Errorf("step slot %d of the forgotten process left", i)
		}
	}
	for i := range k.sites {
		switch k.sites[i].Tgid {
		case 299:
			t.Errorf("site slot %d of the forgotten process left", i)
		case 0:
		default:
			left++
		}
	}
	if left != kept {
		t.Errorf("forget(299) cleared %d slots of other processes", kept-left)
	}

	if err := k.Learn(7, 0x1000, steps, make([]uint64, KnownStackFrames+1), 1); err == nil {
		t.Error("a chain longer than the tables hold was learnt")
	}
	if err := k.Learn(7, 0x1000, steps, chain, 0); err == nil {
		t.Error("token 0 (no token) was learnt")
	}
}

// stackHashC is the host's C compiler and the path of bpf/stack_hash.h,
// for the tests that compute the sets by the BPF programs' own source.
func stackHashC(t *testing.T) (cc, hdr string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no gcc")
		}
		t.Skip("no gcc")
	}
	hdr, err = filepath.Abs("../../bpf/stack_hash.h")
	if err != nil {
		t.Fatal(err)
	}
	return cc, hdr
}

// runHashC builds the C program src with cc, runs it and returns the
// numbers it printed, one a line.
func runHashC(t *testing.T, cc, src string) []uint32 {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sets.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-o", filepath.Join(dir, "sets"), filepath.Join(dir, "sets.c")).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "sets")).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		v, err := strconv.ParseUint(sc.Text(), 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, uint32(v))
	}
	return got
}
