package tables

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPySetsMatchC: the sets pyknown.go computes are the ones the BPF
// programs compute (bpf/stack_hash.h, built with the host's C compiler),
// and py_sites is as large as the header says.
func TestPySetsMatchC(t *testing.T) {
	cc, hdr := stackHashC(t)
	type chain struct {
		tgid, gen uint32
		frames    []PyKeyFrame
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var chains []chain
	for range 200 {
		f := make([]PyKeyFrame, 1+rng.IntN(KnownPyStackFrames))
		for j := range f {
			f[j] = PyKeyFrame{Code: rng.Uint64(), Instr: rng.Uint64()}
		}
		chains = append(chains, chain{rng.Uint32(), rng.Uint32(), f})
	}
	var src strings.Builder
	fmt.Fprintf(&src, "#include <stdio.h>\n#include <linux/types.h>\n#include %q\nint main(void) {\n", hdr)
	src.WriteString("printf(\"%d\\n\", PY_SITE_BITS);\n")
	for _, c := range chains {
		fmt.Fprintf(&src, "{ __u64 h = py_site_start(%du, %du);\n", c.tgid, c.gen)
		for _, f := range c.frames {
			fmt.Fprintf(&src, "h = py_site_frame(h, %dull, %dull);\n", f.Code, f.Instr)
		}
		fmt.Fprintf(&src, "printf(\"%%u\\n\", py_site_set(h, %d)); }\n", len(c.frames))
	}
	src.WriteString("return 0; }\n")
	got := runHashC(t, cc, src.String())
	if len(got) != 1+len(chains) {
		t.Fatalf("%d numbers from C, want %d", len(got), 1+len(chains))
	}
	bits := int(got[0])
	for i, c := range chains {
		if want := pySiteSet(c.tgid, c.gen, c.frames, bits); got[1+i] != want {
			t.Errorf("chain %d: C set %d, Go %d", i, got[1+i], want)
		}
	}
	spec, err := bpfObject()
	if err != nil {
		t.Fatal(err)
	}
	if n := spec.Maps["py_sites"].MaxEntries; n != 1<<bits {
		t.Errorf("py_sites has %d slots, the header says 1<<%d", n, bits)
	}
	checkLayout(t, spec.Types, "py_site_slot", pySiteSlot{})
	checkLayout(t, spec.Types, "py_key_frame", PyKeyFrame{})
	if m := spec.Maps["py_sites"]; m.ValueSize != uint32(len(pySiteSlot{}.Frames))*16+32 {
		t.Errorf("py_sites values are %d bytes", m.ValueSize)
	}
}

// TestPyLearn: a chain learnt is in a slot of its set, whole, under its
// token; learnt again it takes the same slot; Forget empties the
// process's slots only.
func TestPyLearn(t *testing.T) {
	k := &PyKnown{slots: make([]pySiteSlot, 1<<4), bits: 4}
	a := []PyKeyFrame{{Code: 0x1000, Instr: 0x1010}, {Code: 0x2000, Instr: 0x2040}}
	b := []PyKeyFrame{{Code: 0x1000, Instr: 0x1010}, {Code: 0x2000, Instr: 0x2042}}
	find := func(pid, gen uint32, frees uint64, f []PyKeyFrame) uint64 {
		set := pySiteSet(pid, gen, f, k.bits)
		for i := set; i < set+stackWays; i++ {
			s := &k.slots[i]
			if s.Seq%2 == 0 && s.Tgid == pid && s.CodeGen == gen && s.CodeFrees == frees && int(s.N) == len(f) {
				var want [KnownPyStackFrames]PyKeyFrame
				copy(want[:], f)
				if s.Frames == want {
					return s.Token
				}
			}
		}
		return 0
	}
	if err := k.Learn(7, 3, 0, a, 11); err != nil {
		t.Fatal(err)
	}
	if err := k.Learn(7, 3, 0, b, 12); err != nil {
		t.Fatal(err)
	}
	if err := k.Learn(8, 4, 5, a, 13); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pid, gen uint32
		frees    uint64
		f        []PyKeyFrame
		want     uint64
	}{{7, 3, 0, a, 11}, {7, 3, 0, b, 12}, {8, 4, 5, a, 13}, {8, 4, 6, a, 0}, {7, 4, 0, a, 0}, {7, 3, 0, a[:1], 0}} {
		if got := find(c.pid, c.gen, c.frees, c.f); got != c.want {
			t.Errorf("pid %d gen %d frees %d %v: token %d, want %d", c.pid, c.gen, c.frees, c.f, got, c.want)
		}
	}
	// The same chain under a later count of freed code objects takes
	// its slot over.
	if err := k.Learn(7, 3, 2, a, 11); err != nil {
		t.Fatal(err)
	}
	if find(7, 3, 0, a) != 0 || find(7, 3, 2, a) != 11 {
		t.Error("a chain learnt again under a later count did not replace its slot")
	}
	k.Forget(7)
	if find(7, 3, 2, a) != 0 || find(7, 3, 0, b) != 0 || find(8, 4, 5, a) != 13 {
		t.Error("Forget(7) left a slot of 7 or took one of 8")
	}
	for _, bad := range []struct {
		pid, gen uint32
		f        []PyKeyFrame
		token    uint64
	}{{0, 1, a, 1}, {1, 0, a, 1}, {1, 1, nil, 1}, {1, 1, a, 0}, {1, 1, make([]PyKeyFrame, KnownPyStackFrames+1), 1}} {
		if err := k.Learn(bad.pid, bad.gen, 0, bad.f, bad.token); err == nil {
			t.Errorf("Learn(%d, %d, %d frames, token %d) accepted", bad.pid, bad.gen, len(bad.f), bad.token)
		}
	}
}
