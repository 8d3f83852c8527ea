// Package pyprobe is a test-only BPF program for package pyframes: a uprobe
// that captures the calling thread's Python stack with bpf/python.h into a
// ring buffer, as the records of bpf/wire.h. Its generated Go and object
// files are committed.
package pyprobe

//go:generate go tool bpf2go -tags linux -target amd64 pyprobe pyprobe.bpf.c -- -I../../../bpf -I../../../bpf/headers -O2 -g -Wall -Werror -mcpu=v3
