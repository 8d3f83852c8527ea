// Package ttmetal is tttrace's knowledge of TT-Metal's ABI, in pure Go: it
// opens a library (Library), finds the functions tttrace probes and the
// callers that inline them (symbols, callers), learns the Buffer/Device
// layout (DWARF, built-in profiles, the code of accessors, layout files),
// analyses machine code to place probes safely, and chooses the probe plan:
// which program goes on which attach point. It loads nothing into the
// kernel: probes/ attaches what the plan says.
package ttmetal

// enum layout_field comes from the BTF of the BPF object that probes/
// generates from bpf/tttrace.h (run after probes' go generate).
//go:generate go run ./internal/genfield ../probes/tttrace_x86_bpfel.o field_gen.go
