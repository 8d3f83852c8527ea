package pyprobe

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// Proc is struct py_proc of bpf/python.h: one value of the py_procs map.
type Proc = pyprobePyProc

// Stack is struct py_stack of bpf/python.h: a captured stack.
type Stack = pyprobePyStack

// Code is struct py_code of bpf/python.h: what a code object says.
type Code = pyprobePyCode

// Record is a stack record of the test program (type 1).
type Record = pyprobePyRecord

// CodeRecord is a code record of the test program (type 2).
type CodeRecord = pyprobePyCodeRecord

// Objects are the loaded program and maps.
type Objects struct {
	pyprobeObjects
}

// Program is the uprobe program that captures a stack.
func (o *Objects) Program() *ebpf.Program { return o.PyStackProbe }

// Procs is the py_procs map (tgid -> Proc).
func (o *Objects) Procs() *ebpf.Map { return o.PyProcs }

// Records is the ring buffer of Records.
func (o *Objects) Records() *ebpf.Map { return o.pyprobeObjects.Records }

// Load loads the test program through the verifier.
func Load() (*Objects, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	var o Objects
	if err := loadPyprobeObjects(&o.pyprobeObjects, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogSizeStart: 1 << 26}}); err != nil {
		return nil, fmt.Errorf("load pyprobe: %+v", err)
	}
	return &o, nil
}
