// Package probes loads tttrace's BPF programs and attaches them to
// libtt_metal.so: it resolves symbols and the Buffer/Device layout of the
// library, hands each library's layout and vtables to BPF in the libs map
// (picked per probe hit through the BPF cookie), and owns the attach table
// and the ring buffer. It knows TT-Metal's ABI and nothing of the ledger.
package probes

//go:generate go tool bpf2go -tags linux -target amd64 -type layout_field tttrace ../bpf/tttrace.bpf.c -- -I../bpf -I../bpf/headers -O2 -g -Wall -Werror -mcpu=v3
