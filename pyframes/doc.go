// Package pyframes gives allocations their Python stack: for a process
// running CPython 3.10 to 3.13 it finds the interpreter, the load address of
// its _PyRuntime and the offsets of the fields bpf/python.h walks (from the
// interpreter's own _Py_DebugOffsets, or a per-version table checked against
// the binary's DWARF or accessor code: an interpreter that cannot be checked
// is unsupported, never guessed); it fills the BPF side's per-process map
// value, takes the code-object records BPF copies at event time, and turns
// captured stacks into (function, file, line) frames, decoding the
// interpreter's line tables. docs/python.md has the design and the figures.
package pyframes
