package devices

// What the runtime tells the ledger of a process besides its events, and
// the bound on its chips.

// ProcessInfo is what the tracer knows about a process besides its events.
type ProcessInfo struct {
	Command string // command line, for people
	Parent  uint32 // parent pid (0: unknown)
	NsPid   uint32 // pid inside its pid namespace (0: unknown or the same)
	// AttachedMidRun: the tracer attached after the library was already in
	// use, so buffers allocated before that are unknown (their frees are
	// counted as unknown_frees) and peaks are lower bounds.
	AttachedMidRun bool
	// Placement: the host and the ranks of the process.
	Placement Placement
	// Chips: the physical chips behind its chip ids.
	Chips ChipMap
	// LateLibrary: the process's TT-Metal library was probed only after it
	// had mapped it (--all: no process had mapped it before; -p: not a
	// candidate): its calls before are missed, the ledger is incomplete.
	LateLibrary bool
}

// SiteSource describes the allocation sites of one process (one
// incarnation of its pid): the runtime holds the stacks behind the site ids
// of its events. A summary of the process describes with it the sites its
// leaks and l1_clashes name.
type SiteSource interface {
	// Site describes site id; false for one it does not know.
	Site(id uint32) (Site, bool)
	// Python is the process's CPython interpreter, nil when it has none.
	Python() *PythonInfo
}

// DefaultMaxChips is how many distinct chips a process may touch unless
// Options.MaxChips says otherwise: far more than any host has (a Galaxy is
// 32), few enough that a process making up chip ids cannot blow up the
// ledger or the series of an exporter.
const DefaultMaxChips = 256

// Site is an allocation site: one distinct allocation stack of a process
// (native and Python frames), innermost frame first. The ledger keeps only
// its id per buffer; the runtime, which holds the stacks, describes it
// (SiteSource).
type Site struct {
	Site   uint32        `json:"site"`
	Native []NativeFrame `json:"native"`
	Python []PyFrame     `json:"python"`
	// Truncated: the stack was cut (depth limit, end of the copied stack,
	// a frame that could not be unwound).
	Truncated bool `json:"truncated"`
}

// NativeFrame is a machine-code frame.
type NativeFrame struct {
	PC     uint64 `json:"pc"`     // run-time address (a return address for callers)
	Module string `json:"module"` // the ELF file it is in, "" when in none
	// Function is the demangled symbol holding PC, "" when none does;
	// Offset is PC's offset in it, or PC's ELF address in Module then.
	Function string `json:"function"`
	Offset   uint64 `json:"offset"`
	File     string `json:"file,omitempty"` // from DWARF, when present
	Line     int    `json:"line,omitempty"`
}

// PyFrame is a Python frame.
type PyFrame struct {
	Function string `json:"function"` // qualname where the interpreter has it
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// PythonInfo is the CPython interpreter of a process, for its Python
// frames: an unsupported one gives none (never a wrong line).
type PythonInfo struct {
	Version   string `json:"version"`         // "3.12.1", "" when unknown
	Supported bool   `json:"supported"`       // Python frames are captured
	Error     string `json:"error,omitempty"` // why not
}
