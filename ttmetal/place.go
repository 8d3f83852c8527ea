package ttmetal

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Probe placement. A uprobe costs far less on an instruction the kernel
// emulates (push of a register, a relative jmp, jcc or call, a nop) than
// on one it must single-step out of line (endbr64, test, mov, ...): about
// 5 against 19 µs per hit on this project's test VM (docs/bench.md). Every
// function of a -fcf-protection build starts with endbr64, and many start
// with a test of their first argument. Where a function's entry is such an
// instruction, the entry probe moves down its straight-line prologue to the
// first emulated instruction, when that changes nothing the probe sees:
//   - every skipped instruction only sets flags or is endbr64 (no register,
//     no memory and no stack pointer changes: the probe reads the argument
//     registers and, in the lifecycle plan, the stack pointer);
//   - none of them branches;
//   - no branch of the function lands inside the skipped range or on the
//     new point (a loop back to it would fire the probe without a call).
// The kernel fires the probe before the instruction it sits on runs, so the
// registers are those of the entry.

// maxSkipped bounds how far an entry probe may move.
const maxSkipped = 3

// placement is where an entry probe goes and why.
type placement struct {
	addr uint64
	why  string // "" when it stays at the entry
}

// emulated reports whether the kernel emulates in under a uprobe instead of
// single-stepping it (arch/x86/kernel/uprobes.c: branches, push of a
// register, nops).
func emulated(in *insn) bool {
	if in.endbr {
		return false
	}
	switch {
	case in.Op == x86asm.NOP:
		return true
	case in.Op == x86asm.PUSH:
		_, reg := in.Args[0].(x86asm.Reg)
		return reg
	case in.Op == x86asm.JMP || in.Op == x86asm.CALL || condJumps[in.Op]:
		_, rel := in.Args[0].(x86asm.Rel)
		return rel && in.Op != x86asm.JRCXZ && in.Op != x86asm.LOOP && in.Op != x86asm.LOOPE && in.Op != x86asm.LOOPNE
	}
	return false
}

// flagsOnly reports whether in changes nothing but the flags.
func flagsOnly(in *insn) bool {
	return in.endbr || in.Op == x86asm.TEST || in.Op == x86asm.CMP
}

// placeEntry chooses where the entry probe of the function at entry goes
// (Options.AtEntry keeps every entry probe on the first instruction).
func (l *Library) placeEntry(entry uint64, atEntry bool) placement {
	stay := placement{addr: entry}
	if atEntry {
		return stay
	}
	first, err := l.decodeAt(entry)
	if err != nil || emulated(&first) || !flagsOnly(&first) {
		return stay
	}
	c, err := l.code()
	if err != nil {
		return stay
	}
	fn, ok := c.fdeStarting(entry)
	if !ok {
		return stay
	}
	var skipped []string
	at := entry
	for i := 0; ; i++ {
		in, err := l.decodeAt(at)
		if err != nil || in.next() > fn.End {
			return stay
		}
		if emulated(&in) {
			break
		}
		if !flagsOnly(&in) || i == maxSkipped {
			return stay
		}
		skipped = append(skipped, in.String())
		at = in.next()
	}
	// No branch of the function may land in (entry, at].
	landed := false
	err = c.decodeRange(fn, func(in *insn) bool {
		if b := c.classify(in); b.kind != brNone && b.target > entry && b.target <= at {
			landed = true
			return false
		}
		return true
	})
	if err != nil || landed {
		return stay
	}
	next, _ := l.decodeAt(at)
	return placement{addr: at, why: fmt.Sprintf("entry+%#x: the kernel emulates %q, it would single-step %q",
		at-entry, next.String(), skipped)}
}
