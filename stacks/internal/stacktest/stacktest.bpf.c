//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test-only BPF programs around bpf/stack.h: they prove that the capture
 * helper passes the verifier, that what it captures unwinds to the known
 * chain (stacktest_test.go), and measure its cost against a probe that
 * emits a plain record (a struct event) and one that does nothing.
 */
#include "types.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_tracing.h"
#include "stack.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keep struct stack_record (bpf/wire.h) in BTF for bpf2go -type stack_record. */
const struct stack_record *unused_stack_record __attribute__((unused));

/* Only this process is captured (0: every process). */
const volatile __u32 target_tgid = 0;
/* Pending bytes that make a record wake the reader (tttrace's policy: a
 * wakeup per record costs more than the record; the reader also polls). */
const volatile __u64 wakeup_bytes = 1 << 20;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

/* Records the ring could not take, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

__u64 next_seq;

/* A struct event of bpf/wire.h with its header filled, as tttrace's alloc. */
static __always_inline struct event *plain_record(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct event *p = bpf_ringbuf_reserve(&events, sizeof(*p), 0);

	if (!p)
		return 0;
	__builtin_memset(p, 0, sizeof(*p));
	p->hdr.seq = __sync_fetch_and_add(&next_seq, 1);
	p->hdr.ts_ns = bpf_ktime_get_ns();
	p->hdr.pid = id >> 32;
	p->hdr.tid = (__u32)id;
	p->hdr.kind = EV_ALLOC;
	return p;
}

static __always_inline int mine(void)
{
	return !target_tgid || (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

static __always_inline __u64 wakeup(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									     : BPF_RB_NO_WAKEUP;
}

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);

	if (n)
		(*n)++;
}

/* The alloc record then its stack, as tttrace emits them. */
SEC("uprobe")
int record_with_stack(struct pt_regs *ctx)
{
	struct record_header hdr;
	struct stack_record *rec;
	struct event *p;
	__u32 len;

	if (!mine())
		return 0;
	p = plain_record();
	if (!p) {
		count_lost();
		return 0;
	}
	hdr = p->hdr;
	bpf_ringbuf_submit(p, wakeup());
	rec = stack_capture(ctx, &hdr, &len);
	if (!rec) {
		count_lost();
		return 0;
	}
	if (bpf_ringbuf_output(&events, rec, len, wakeup()))
		count_lost();
	stack_release(rec);
	return 0;
}

/* The alloc record alone: the cost stacks add to. */
SEC("uprobe")
int record_only(struct pt_regs *ctx)
{
	struct event *p;

	if (!mine())
		return 0;
	p = plain_record();
	if (!p) {
		count_lost();
		return 0;
	}
	bpf_ringbuf_submit(p, wakeup());
	return 0;
}

/* Nothing: the uprobe's own cost. */
SEC("uprobe")
int empty(struct pt_regs *ctx)
{
	return 0;
}

/* The busy guard: a capture while this CPU's record is owned gets nothing,
 * and one after the release gets the record again. 7 when all three hold. */
__u32 guard_result;

SEC("uprobe")
int capture_guard(struct pt_regs *ctx)
{
	struct record_header hdr = {};
	struct stack_record *a, *b;
	__u32 len, r = 0;

	a = stack_capture(ctx, &hdr, &len);
	if (a)
		r |= 1;
	b = stack_capture(ctx, &hdr, &len);
	if (!b)
		r |= 2;
	else
		stack_release(b);
	if (a)
		stack_release(a);
	b = stack_capture(ctx, &hdr, &len);
	if (b) {
		r |= 4;
		stack_release(b);
	}
	guard_result = r;
	return 0;
}
