//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test-only program for package pyframes: a uprobe that captures the
 * calling thread's Python stack with bpf/python.h and sends, through one
 * ring buffer, a py_code_record for each code object of the stack not yet
 * described, then the stack itself as a py_stack_record: the records of
 * bpf/wire.h that tttrace sends, decoded by package events. It proves
 * python.h passes the verifier and reads the right fields, and shows the
 * order tttrace's probes follow: capture into per-CPU scratch, send the
 * code records, then the stack. The records' seq is the probed function's
 * argument (the test script numbers its calls).
 */
#include "types.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_tracing.h"
#include "bpf/bpf_core_read.h"

/* First copies of the data stack that could not be read (python.h): each
 * cost a fault and a second read. */
__u64 copy_missed = 0;
#define PY_COPY_MISSED() __sync_fetch_and_add(&copy_missed, 1)

#include "python.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} records SEC(".maps");

/* The stack is built here before it is sent: code records go first. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_stack_record);
} scratch SEC(".maps");

/* For the cost measurement: 0 sends an empty stack record, the rest of
 * the program's cost (the floor); 2 submits without waking the reader. */
const volatile __u8 capture = 1;
const volatile __u8 no_wakeup = 0;
/* 0: no code records (the stack alone). */
const volatile __u8 send_codes = 1;

/* Records that could not be reserved. */
__u64 lost = 0;

struct code_walk {
	struct py_stack_record *rec;
	struct py_proc *proc;
	__u64 sent;
};

static long send_code(__u64 i, void *arg)
{
	struct code_walk *w = arg;
	struct py_frame *f;
	struct py_code_record *c;

	if (i >= PY_MAX_FRAMES || i >= w->rec->stack.nframes)
		return 1;
	f = &w->rec->stack.frames[i];
	if (!py_code_new(w->proc, w->rec->hdr.pid, f, w->sent, i))
		return 0;
	c = bpf_ringbuf_reserve(&records, sizeof(*c), 0);
	if (!c) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	c->hdr = w->rec->hdr;
	c->hdr.kind = EV_PY_CODE;
	py_code_read(&c->code, w->proc, w->rec->hdr.pid, f);
	bpf_ringbuf_submit(c, no_wakeup ? BPF_RB_NO_WAKEUP : 0);
	py_code_sent(w->proc, w->rec->hdr.pid, f);
	return 0;
}

/* void code_dealloc(PyCodeObject *co): PyCode_Type's tp_dealloc, where a
 * test attaches it (tttrace.bpf.c's py_code_dealloc, without pid flags). */
SEC("uprobe")
int py_code_dealloc(struct pt_regs *ctx)
{
	py_code_freed(bpf_get_current_pid_tgid() >> 32, PT_REGS_PARM1(ctx));
	return 0;
}

/* void probe_target(long tag) in the test's shared object. */
SEC("uprobe")
int py_stack_probe(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct code_walk w;
	struct py_stack_record *s, *r;
	__u32 zero = 0;

	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	__builtin_memset(&s->hdr, 0, sizeof(s->hdr));
	s->hdr.seq = PT_REGS_PARM1(ctx);
	s->hdr.ts_ns = bpf_ktime_get_ns();
	s->hdr.pid = id >> 32;
	s->hdr.tid = (__u32)id;
	s->hdr.kind = EV_PY_STACK;
	s->stack.nframes = 0;
	s->stack.flags = 0;
	if (capture) {
		w.rec = s;
		w.proc = py_proc_lookup(s->hdr.pid);
		py_capture(&s->stack, w.proc, s->hdr.pid, s->hdr.tid, &w.sent);
		if (w.proc && send_codes)
			bpf_loop(PY_MAX_FRAMES, send_code, &w, 0);
	}
	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	bpf_probe_read_kernel(r, sizeof(*r), s);
	bpf_ringbuf_submit(r, no_wakeup ? BPF_RB_NO_WAKEUP : 0);
	return 0;
}
