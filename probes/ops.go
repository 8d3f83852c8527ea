package probes

// The op probes of a TT-NN library (bpf/ops.h, docs/probes.md "TT-NN
// ops"): one entry probe per op function, all of a library in one
// uprobe_multi link, each with the id the caller gave the op as its
// cookie. What an id names stays with the caller (session/ops.go).

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/ttmetal"
)

// OpPoint is one op function to probe.
type OpPoint struct {
	// Addr is the function's entry (link-time address), Offset the file
	// offset the probe goes at (ttmetal.Op).
	Addr, Offset uint64
	// ID is what the op_enter records of this function carry; Device says
	// it is a device operation's launch (the BPF side tells a top-level op
	// tail-calling its launch from a new call by it).
	ID     uint32
	Device bool
}

// opCookie is the BPF cookie of p (bpf/wire.h, enum op_limits).
func opCookie(p OpPoint) uint64 {
	c := uint64(p.ID)
	if p.Device {
		c |= 1 << events.OpCookieDeviceBit
	}
	return c
}

// OpsAttached is what AttachOps did with a library's op functions.
type OpsAttached struct {
	// Probed is how many op functions have a probe; Unprobeable lists the
	// ones whose first instruction the kernel cannot probe (left out, the
	// rest attached), at most a few, and how many in all.
	Probed          int
	Unprobeable     []string
	UnprobeableMore int
}

// maxClassicOps bounds the op functions probed with classic uprobes
// (kernels before 6.6): each is a link of its own, ~2 ms to attach and
// far more to close (4,000: 8.5 s and 7 minutes on Linux 6.18), against
// 60 ms for one uprobe_multi link of 4,000.
const maxClassicOps = 512

// maxUnprobeableListed bounds OpsAttached.Unprobeable.
const maxUnprobeableListed = 8

// AttachOps puts the op_enter program on every point of the TT-NN library
// lib (probes.Options.Ops must be on): one uprobe_multi link for them all,
// or one classic uprobe each where the kernel has no such links. The
// probes are on the file's inode: they fire in every process that maps
// it (the BPF side keeps only traced processes). A point whose instruction
// cannot be probed is left out and listed; on any other failure nothing
// stays attached. Attaching a file already attached does nothing.
func (t *Tracer) AttachOps(lib *ttmetal.Library, points []OpPoint) (OpsAttached, error) {
	var res OpsAttached
	st, err := lib.Stat()
	if err != nil {
		return res, err
	}
	t.opsMu.Lock()
	defer t.opsMu.Unlock()
	for _, f := range t.opsFiles {
		if os.SameFile(f, st) {
			return res, nil
		}
	}
	if len(t.opsFiles) >= maxLibs {
		return res, fmt.Errorf("%s: already probing the ops of %d libraries, the most tttrace can", lib.Path, maxLibs)
	}
	progs, err := t.programsFor([]ttmetal.Program{ttmetal.ProgOpEnter})
	if err != nil {
		return res, err
	}
	prog := progs[ttmetal.ProgOpEnter]
	if prog == nil {
		return res, fmt.Errorf("BPF object has no program %s: bpf/ and probes/ disagree, run make generate", ttmetal.ProgOpEnter)
	}
	opts := &link.UprobeMultiOptions{}
	for _, p := range points {
		if err := ttmetal.CheckProbeable(lib, p.Addr); err != nil {
			if len(res.Unprobeable) < maxUnprobeableListed {
				res.Unprobeable = append(res.Unprobeable, fmt.Sprintf("%#x: %v", p.Addr, err))
			} else {
				res.UnprobeableMore++
			}
			continue
		}
		opts.Addresses = append(opts.Addresses, p.Offset)
		opts.Cookies = append(opts.Cookies, opCookie(p))
	}
	res.Probed = len(opts.Addresses)
	if !t.multi && res.Probed > maxClassicOps {
		return OpsAttached{}, fmt.Errorf("%s: %d op functions: probing them needs uprobe_multi links (Linux 6.6); "+
			"as classic uprobes they would take minutes to attach and detach (at most %d are)", lib.Path, res.Probed, maxClassicOps)
	}
	if res.Probed == 0 {
		t.opsFiles = append(t.opsFiles, st)
		return res, nil
	}
	// As AttachPlan: the library's own path while it still names the file
	// that was read, its descriptor's once it does not.
	path := lib.Pinned()
	if now, err := os.Stat(lib.Path); err == nil && os.SameFile(now, st) {
		path = lib.Path
	}
	links, err := t.attachOpsAt(path, prog, opts)
	if err != nil && path != lib.Pinned() && errors.Is(err, os.ErrNotExist) {
		links, err = t.attachOpsAt(lib.Pinned(), prog, opts)
	}
	if err != nil {
		return OpsAttached{}, fmt.Errorf("attach the op probes of %s (%d functions): %w", lib.Path, res.Probed, err)
	}
	t.links = append(t.links, links...)
	t.opsFiles = append(t.opsFiles, st)
	return res, nil
}

// attachOpsAt attaches prog at every address of opts in the file at path.
func (t *Tracer) attachOpsAt(path string, p *ebpf.Program, opts *link.UprobeMultiOptions) ([]link.Link, error) {
	exe, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	if t.multi {
		l, err := exe.UprobeMulti(nil, p, opts)
		if err != nil {
			return nil, err
		}
		return []link.Link{l}, nil
	}
	var links []link.Link
	for i, off := range opts.Addresses {
		l, err := exe.Uprobe("", p, &link.UprobeOptions{Address: off, Cookie: opts.Cookies[i]})
		if err != nil {
			closeLinks(links)
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}
