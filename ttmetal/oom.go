package ttmetal

import (
	"bytes"
	"fmt"
)

// The site of a failed allocation (docs/ttmetal.md §9, "Out of memory").
// Taking a stack at every BankManager::allocate_buffer entry would double
// the stack cost of every allocation to serve the rare one that fails, and
// no uretprobe may go on a function that throws. So tttrace probes the
// out-of-memory path itself: the instructions of allocate_buffer (its body
// and its split-off parts, GCC's f.cold) that load the address of its
// message, "Out of Memory: Not enough space ..." (both of upstream's forms,
// and older builds', start so). That path runs only when the free list has
// no block for the request, before the exception is made; a probe there
// takes the stack of the failing request and nothing else pays for it.

// ProgBankManagerOOM is the program probed on the out-of-memory path.
const ProgBankManagerOOM Program = "bank_manager_oom"

// oomMessage starts every out-of-memory message of BankManager::allocate_buffer.
var oomMessage = []byte("Out of Memory: Not enough space")

// oomSites puts an attach point on each instruction of the probed
// BankManager::allocate_buffer functions that loads the address of the
// out-of-memory message. Where a function has none (a build that copies the
// message by other means), a note says failures there have no site.
func (p *Plan) oomSites(lib *Library, c *codeIndex, syms *Symbols) error {
	for _, s := range syms.AttachPoints {
		if s.Program != ProgBankManagerAllocate && s.Program != ProgBankManagerAllocateNoID {
			continue
		}
		fn := Symbol{Name: s.Symbol, Value: s.Addr}
		if s.Entry != 0 {
			fn.Value = s.Entry
		}
		at, err := c.messageLoads(fn, oomMessage)
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Path, err)
		}
		if len(at) == 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("no load of the \"%s\" message was found in %s: "+
				"its failed allocations are reported without their site", oomMessage, demangledName(fn.Name)))
			continue
		}
		for _, a := range at {
			ap, err := attachPoint(lib, ProgBankManagerOOM, "BankManager::allocate_buffer: the out-of-memory path", fn, a)
			if err != nil {
				return fmt.Errorf("%s: %w", lib.Path, err)
			}
			// Mid-function: no entry placement; add checks the instruction.
			p.addAt(lib, ap, "loads the out-of-memory message's address")
		}
	}
	return nil
}

// messageLoads returns the instructions of fn (body and split-off parts)
// with a rip-relative operand naming bytes that start with msg.
func (c *codeIndex) messageLoads(fn Symbol, msg []byte) ([]uint64, error) {
	f, err := c.analyze(fn)
	if err != nil {
		return nil, err
	}
	var at []uint64
	for _, part := range f.Parts {
		err := c.decodeRange(part, func(in *insn) bool {
			t, ok := ripTarget(in)
			if !ok {
				return true
			}
			if b, err := c.lib.Bytes(t, len(msg)); err == nil && bytes.Equal(b, msg) {
				at = append(at, in.Addr)
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn.Name, err)
		}
	}
	return at, nil
}
