//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test-only BPF programs around bpf/stack.h: they prove that the capture
 * helper passes the verifier, that what it captures unwinds to the known
 * chain (stacktest_test.go), and measure its cost against a probe that
 * emits a plain record and one that does nothing.
 */
#include "types.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_tracing.h"
#include "stack.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keep struct stack_record in BTF for bpf2go -type stack_record. */
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

/* A plain record the size of tttrace's struct event (96 bytes). */
struct plain {
	__u64 seq;
	__u64 words[11];
};

__u64 next_seq;

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
	struct stack_record *rec;
	struct plain *p;
	__u32 len;
	__u64 seq;

	if (!mine())
		return 0;
	seq = __sync_fetch_and_add(&next_seq, 1);
	p = bpf_ringbuf_reserve(&events, sizeof(*p), 0);
	if (!p) {
		count_lost();
		return 0;
	}
	__builtin_memset(p, 0, sizeof(*p));
	p->seq = seq;
	bpf_ringbuf_submit(p, wakeup());
	rec = stack_capture(ctx, seq, 1, &len);
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
	struct plain *p;

	if (!mine())
		return 0;
	p = bpf_ringbuf_reserve(&events, sizeof(*p), 0);
	if (!p) {
		count_lost();
		return 0;
	}
	__builtin_memset(p, 0, sizeof(*p));
	p->seq = __sync_fetch_and_add(&next_seq, 1);
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
	struct stack_record *a, *b;
	__u32 len, r = 0;

	a = stack_capture(ctx, 0, 1, &len);
	if (a)
		r |= 1;
	b = stack_capture(ctx, 0, 1, &len);
	if (!b)
		r |= 2;
	else
		stack_release(b);
	if (a)
		stack_release(a);
	b = stack_capture(ctx, 0, 1, &len);
	if (b) {
		r |= 4;
		stack_release(b);
	}
	guard_result = r;
	return 0;
}
