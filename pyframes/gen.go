package pyframes

// procWire, the py_procs value, comes from the BTF of tttrace's own BPF
// object (run after probes' go generate).
//go:generate go run ../events/internal/genwire -pkg pyframes -struct py_proc=procWire ../probes/tttrace_x86_bpfel.o proc_gen.go
