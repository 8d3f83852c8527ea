/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Native stack capture for allocation sites (docs/stacks.md).
 *
 * BPF does not unwind: it copies the thread's user registers (rip, rsp,
 * rbp) and the top of its user stack, from rsp up, and user space unwinds
 * that copy with the modules' DWARF CFI (stacks/), as perf --call-graph
 * dwarf does. Code built without frame pointers (every release build of
 * TT-Metal, CPython and libc) unwinds exactly; nothing is loaded per
 * process into the kernel.
 *
 * Contract with the including program:
 *  - include after types.h, bpf_helpers.h and bpf_tracing.h (uprobe ctx is
 *    the user pt_regs);
 *  - call stack_capture() from a uprobe body with the header of the record
 *    the stack belongs to, then emit the record it
 *    returns with bpf_ringbuf_output(&ring, rec, size, flags) right after
 *    the record it belongs to, then stack_release(rec); a NULL record or a
 *    failed output is a lost stack (count it: the record it belongs to is
 *    still there, without a site);
 *  - struct stack_record is in wire.h (the ring's records): user space
 *    decodes its header, then `size` bytes of stack starting at `sp`.
 * The record is built in a per-CPU scratch map: the 512-byte BPF stack
 * cannot hold it, and a ring-buffer reservation would have to be of the
 * largest size every time.
 */
#ifndef TTTRACE_STACK_H
#define TTTRACE_STACK_H

#include "wire.h"

#define STACK_PAGE 4096

/* The scratch value: the record and one page of slack after it, so the
 * verifier can bound a page-sized read at any offset below the copy size
 * without proving offset + length <= STACK_COPY_BYTES. */
struct stack_scratch {
	struct stack_record rec;
	__u8 slack[STACK_PAGE];
	__u32 busy; /* a capture owns rec until stack_release() */
	__u32 _pad;
};

/* One record under construction per CPU. A uprobe program runs with
 * migration disabled but, on a preemptible kernel (preempt=full, lazy),
 * not necessarily with preemption disabled: another thread's uprobe may
 * run on this CPU between stack_capture() and the output. busy makes that
 * second capture fail (the caller counts a lost stack) instead of
 * overwriting a record being emitted. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_scratch);
} stack_scratch SEC(".maps");

#define STACK_HDR_SIZE ((__u32)__builtin_offsetof(struct stack_record, data))

/* The kernel's VMA, reduced to the field read here (CO-RE: its offset is
 * relocated to the running kernel's at load). */
struct vm_area_struct {
	unsigned long vm_end;
} __attribute__((preserve_access_index));
struct task_struct;

/* bpf_find_vma callback: the end of the mapping that holds the stack
 * pointer. Runs under the mmap lock the helper took; reads one field. */
static long stack_vma_end(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	*(__u64 *)data = vma->vm_end;
	return 0;
}

/* Fill the per-CPU record with the current thread's registers and stack,
 * under the header of the record *of it belongs to (its seq, ts_ns, pid
 * and tid; kind EV_STACK); *len receives the record's length to emit. NULL
 * when this CPU's record is owned by a preempted capture (count it as a
 * lost stack). A non-NULL record must be handed back with stack_release()
 * once emitted.
 *
 * The copy is STACK_COPY_BYTES from rsp, or up to the end of the stack's
 * mapping when that is nearer (bpf_find_vma): a read that runs past the
 * mapping would fail as a whole, and a user-memory fault inside BPF costs
 * several microseconds. When the VMA cannot be had (mmap lock contended)
 * or the read still fails (a page swapped out), the copy is retried page
 * by page up to the first unreadable page. */
static __always_inline struct stack_record *stack_capture(struct pt_regs *ctx,
							  const struct record_header *of,
							  __u32 *len)
{
	struct stack_scratch *s;
	struct stack_record *rec;
	__u32 zero = 0, n = 0, chunk, want = STACK_COPY_BYTES;
	__u64 sp, end = 0;
	int i;

	s = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!s || __sync_val_compare_and_swap(&s->busy, 0, 1) != 0)
		return 0;
	rec = &s->rec;
	sp = PT_REGS_SP(ctx);
	rec->hdr = *of;
	rec->hdr.kind = EV_STACK;
	rec->ip = PT_REGS_IP(ctx);
	rec->sp = sp;
	rec->bp = PT_REGS_FP(ctx);
	rec->flags = 0;
	rec->_pad[0] = 0;
	rec->_pad[1] = 0;
	rec->_pad[2] = 0;
	if (bpf_find_vma(bpf_get_current_task_btf(), sp, stack_vma_end, &end, 0) == 0 && end > sp &&
	    end - sp < STACK_COPY_BYTES) {
		want = end - sp;
		rec->flags = STACK_PARTIAL;
	}
	if (want > STACK_COPY_BYTES)
		want = STACK_COPY_BYTES;
	if (bpf_probe_read_user(rec->data, want, (void *)sp) == 0) {
		n = want;
	} else {
		rec->flags = STACK_PARTIAL;
		chunk = STACK_PAGE - (sp & (STACK_PAGE - 1));
		for (i = 0; i <= STACK_COPY_BYTES / STACK_PAGE; i++) {
			if (n >= want)
				break;
			if (chunk > want - n)
				chunk = want - n;
			if (chunk > STACK_PAGE)
				chunk = STACK_PAGE;
			if (bpf_probe_read_user(rec->data + (n & (STACK_COPY_BYTES - 1)), chunk,
						(void *)(sp + n)))
				break;
			n += chunk;
			chunk = STACK_PAGE;
		}
		if (n == 0)
			rec->flags |= STACK_NO_STACK;
	}
	if (n > STACK_COPY_BYTES)
		n = STACK_COPY_BYTES;
	rec->size = n;
	*len = STACK_HDR_SIZE + n;
	return rec;
}

/* Hand the record back after bpf_ringbuf_output() (success or not). */
static __always_inline void stack_release(struct stack_record *rec)
{
	struct stack_scratch *s = (struct stack_scratch *)rec;

	/* Only programs on this CPU touch busy (migration is disabled): a
	 * plain store, after the output call, is enough. */
	*(volatile __u32 *)&s->busy = 0;
}

#endif /* TTTRACE_STACK_H */
