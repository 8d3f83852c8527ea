package pyprobe

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// Objects are the loaded program and maps.
type Objects struct {
	pyprobeObjects
}

// Program is the uprobe program that captures a stack.
func (o *Objects) Program() *ebpf.Program { return o.PyStackProbe }

// CodeDealloc is the uprobe program for PyCode_Type's tp_dealloc: it
// forgets the code object's description (bpf/python.h, py_code_freed).
func (o *Objects) CodeDealloc() *ebpf.Program { return o.PyCodeDealloc }

// CopyMissed is how many first copies of a data stack could not be read
// (bpf/python.h, py_copy_frames: a fault, and a second read).
func (o *Objects) CopyMissed() (uint64, error) {
	var n uint64
	err := o.pyprobeVariables.CopyMissed.Get(&n)
	return n, err
}

// Procs is the py_procs map (tgid -> struct py_proc).
func (o *Objects) Procs() *ebpf.Map { return o.PyProcs }

// Records is the ring buffer: struct py_code_record and py_stack_record
// of bpf/wire.h (package events decodes them).
func (o *Objects) Records() *ebpf.Map { return o.pyprobeObjects.Records }

// Options are the test program's knobs.
type Options struct {
	// NoCapture sends empty stacks: the cost of everything but the capture.
	NoCapture bool
	// NoCodes sends no code records: the cost of the stack alone.
	NoCodes bool
	// NoWakeup submits records without waking the reader, as tttrace
	// does while records pile up.
	NoWakeup bool
}

// Load loads the test program through the verifier.
func Load() (*Objects, error) { return LoadWith(Options{}) }

// LoadWith loads the test program with knobs set.
func LoadWith(opts Options) (*Objects, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	spec, err := loadPyprobe()
	if err != nil {
		return nil, err
	}
	set := func(name string, v uint8) error {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("no variable %s in the program", name)
		}
		return vs.Set(v)
	}
	if err := set("capture", b2u(!opts.NoCapture)); err != nil {
		return nil, err
	}
	if err := set("send_codes", b2u(!opts.NoCodes)); err != nil {
		return nil, err
	}
	if err := set("no_wakeup", b2u(opts.NoWakeup)); err != nil {
		return nil, err
	}
	var o Objects
	if err := spec.LoadAndAssign(&o.pyprobeObjects, nil); err != nil {
		return nil, fmt.Errorf("load pyprobe: %+v", err)
	}
	return &o, nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
