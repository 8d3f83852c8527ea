// Package probes loads tttrace's BPF programs and attaches them to the
// attach points of a probe plan (ttmetal.Plan): it hands each library's
// layout and vtables to BPF in the libs map (picked per probe hit through
// the BPF cookie) and owns the links and the ring buffer. The arrays it
// maps and writes for the programs (the pid filter, the known stacks) are
// probes/tables'. What to attach where is ttmetal's business; nothing here
// knows the ledger.
package probes

//go:generate go tool bpf2go -tags linux -target amd64 -type layout_field tttrace ../bpf/tttrace.bpf.c -- -I../bpf -I../bpf/headers -O2 -g -Wall -Werror -mcpu=v3
