//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test-only program for package pyframes: a uprobe that captures the
 * calling thread's Python stack with bpf/python.h and sends it, with the
 * pid and tid, through a ring buffer. It proves python.h passes the verifier
 * and reads the right fields; tttrace's own probes include the same header.
 */
#include "types.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_tracing.h"
#include "bpf/bpf_core_read.h"
#include "python.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct py_record {
	__u32 pid;
	__u32 tid;
	__u64 arg; /* the probed function's first argument */
	struct py_stack stack;
};

/* Keep the records' types in BTF for bpf2go -type. */
const struct py_record *unused_py_record __attribute__((unused));
const struct py_proc *unused_py_proc __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} records SEC(".maps");

/* void probe_target(long tag) in the test's shared object. */
SEC("uprobe")
int py_stack_probe(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct py_record *r;

	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r)
		return 0;
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->arg = PT_REGS_PARM1(ctx);
	py_capture(&r->stack, id >> 32, (__u32)id);
	bpf_ringbuf_submit(r, 0);
	return 0;
}
