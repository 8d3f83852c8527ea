// Package stacktest holds test-only BPF programs that exercise
// bpf/stack.h: the verifier accepts its capture helper, what it captures
// unwinds (stacks/) to a known call chain, and what it costs per call.
package stacktest

//go:generate go tool bpf2go -tags linux -target amd64 -type stack_record stacktest stacktest.bpf.c -- -I../../../bpf -I../../../bpf/headers -O2 -g -Wall -Werror -mcpu=v3
