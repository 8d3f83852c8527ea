package events

// The wire record and its enums come from the BTF of the BPF object that
// probes/ generates from bpf/tttrace.h (run after probes' go generate).
//go:generate go run ./internal/genwire ../probes/tttrace_x86_bpfel.o wire_gen.go
