package ttmetal

// TT-NN ops (issue #31): the op functions of a TT-NN library (`_ttnn*.so`,
// `_ttnncpp.so`), found from its symbol tables (also stripped: `.dynsym`
// and the exported RTTI), so that one entry probe per op function tells
// which op a thread is in. docs/ttmetal.md ("TT-NN ops") says which
// upstream files each form rests on.

// OpKind says what an op function is to a thread's op frames.
type OpKind uint8

const (
	// OpTop is an op as Python calls it: a 2026 `ttnn::<op>` free function
	// or a 2024-25 `op_t::invoke` named by its registered_operation_t. It
	// makes a frame that counts in the op's depth.
	OpTop OpKind = iota + 1
	// OpDevice is a device operation's launch (`launch<Op>` and the older
	// `invoke<Op>`, `launch_on_single_device<Op>`, the mesh adapter's
	// launch): it names the device op inside the innermost OpTop frame and
	// does not count in the depth.
	OpDevice
)

func (k OpKind) String() string {
	switch k {
	case OpTop:
		return "op"
	case OpDevice:
		return "device_op"
	}
	return "unknown"
}

// Op is one op function of a library.
type Op struct {
	// Name is what the records show: the Python name of an OpTop
	// ("ttnn.matmul"), the short type name of an OpDevice's device
	// operation ("MatmulDeviceOperation").
	Name string
	Kind OpKind
	// Addr is the function's entry (link-time virtual address); Offset its
	// file offset, where the uprobe goes.
	Addr, Offset uint64
	// Symbol is the symbol it was found by (mangled), for doctor and tests.
	Symbol string
}

// OpTable is the op functions of one library, at most MaxOps, sorted by
// Addr, one entry per function (a function found by two names keeps the
// first rule's).
type OpTable struct {
	Ops []Op
	// Forms says which naming forms were found ("launch", "invoke",
	// "free_function", "registered_operation_rtti", ...), for doctor.
	Forms []string
	// Truncated is true when the library had more than MaxOps op
	// functions: the rest are not probed (doctor says so).
	Truncated bool
}

// MaxOps bounds the op functions probed in one library.
const MaxOps = 16384
