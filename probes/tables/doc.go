// Package tables holds the BPF arrays the tracer maps into its own memory
// and writes itself, which the programs read with inlined array look-ups
// instead of hash-map helper calls: the per-process flags (pids.go,
// traced_pids) and the known-stack tables (known.go, stack_steps and
// stack_sites). Each is an array made BPF_F_MMAPABLE, handed over by
// probes.Tracer once loaded. The Go structs here mirror bpf/'s value
// layouts (bpf2go's are unexported in probes); layout_test.go checks them
// field by field against the BTF of the committed BPF object.
package tables
