package events

// The wire records of bpf/wire.h and their enums come from the BTF of the
// BPF object probes/ generates (run after probes' go generate).
//go:generate go run ./internal/genwire ../probes/tttrace_x86_bpfel.o wire_gen.go
