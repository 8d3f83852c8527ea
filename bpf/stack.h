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
#include "stack_hash.h"

#define STACK_PAGE 4096

/* ---- known stacks: a stack is sent once per site ----------------------
 *
 * User space unwinds every stack it gets with the CFI. Where each frame's
 * canonical frame address is the stack pointer plus a constant and its
 * return address is saved at a constant offset from it (the rule of
 * nearly every frame of compiled code), the positions of the return
 * addresses in the copy depend only on the pcs: user space then tells
 * stack_steps the two constants of each pc and stack_sites the whole
 * chain (the probe's pc and every return address up to the outermost
 * frame) with a token naming the stack it unwound. A later capture walks
 * its copy with stack_steps; a chain found in stack_sites is the same
 * stack, exactly (the same pcs, so the same frames), and only its token
 * is sent. Any pc without a step, a chain deeper than STACK_KEY_FRAMES or
 * not found, and the copy goes out as before. Entries are per process
 * (tgid): user space clears a process's when it ends or its mappings
 * change.
 *
 * Both tables are arrays that user space maps and writes itself
 * (probes/tables/known.go), not hash maps: a lookup in an array is an index
 * the verifier inlines, where a hash map's lookup is a helper call of ~40 ns
 * on Linux 6.18 (docs/bench.md), once per frame. A key's slot is one of
 * the STACK_WAYS slots of the set its hash names (stack_step_set,
 * stack_site_set: user space computes the same); when all are taken, user
 * space overwrites one, and the stack it described is copied again (and
 * made known again) the next time. A slot is written under a sequence
 * count: seq is odd while user space writes the slot, and a walk that sees
 * an odd seq, or another seq after reading the slot than before, takes the
 * slot as absent. On x86-64 loads are not reordered with loads nor stores
 * with stores, so the programs need only keep the compiler from moving the
 * reads (stack_barrier). */

/* Walk each capture for a stack user space made known (below). On by
 * default (tttrace --known-stacks=false turns it off); the walk is a
 * global function, verified once per program whatever the paths that
 * reach it. A constant: with 0 the walk is pruned. */
const volatile __u8 known_stacks = 0;
/* Send the copy of a known stack too: user space checks that it unwinds
 * to the stack its token names (tests, measurements). Set before load. */
const volatile __u8 check_known_stacks = 0;

/* The first copy, walked before the rest is copied: the whole chain of
 * most sites fits in it (a chain it cannot hold costs a second walk). A
 * power of two, at most STACK_COPY_BYTES. */
#ifndef STACK_FIRST_COPY
#define STACK_FIRST_COPY 2048
#endif

/* The saved rbps a thread's memo compares (stack_memos, below): those a
 * frame took its CFA from, i.e. frames with a frame pointer, few in
 * release builds (the replica's native burst: Buffer::create; a call
 * through ctypes: also libffi's ffi_call_unix64); more and there is no
 * memo. */
#define STACK_MEMO_BPS 8

/* The walk's key of a stack: its whole chain. */
struct stack_site_key {
	__u32 tgid;
	__u32 n;  /* return addresses in pcs (the rest are 0) */
	__u64 ip; /* the probe's pc */
	__u64 pcs[STACK_KEY_FRAMES];
};

#define STACK_STEP_END 0x7fffffff /* ra of the outermost frame's step */

/* stack_steps: how to go from the frame at pc of process tgid to its
 * caller: the rule user space's unwinder applies at pc, when it is one the
 * walk below does the same way (the CFA from rsp or rbp plus a constant,
 * the return address and rbp saved at constant offsets from it). */
struct stack_step_slot {
	__u32 seq;  /* odd while user space writes the slot */
	__u32 tgid; /* 0: the slot is empty */
	__u64 pc;
	__s32 cfa;  /* the CFA (the caller's stack pointer) is this frame's
		     * stack pointer, or with cfa_bp its rbp, plus cfa */
	__s32 ra;   /* the return address is at the CFA plus ra;
		     * STACK_STEP_END: pc is the outermost frame */
	__s32 bp;   /* with bp_saved: the caller's rbp is at the CFA plus bp
		     * (else this frame did not change rbp) */
	__u8 first; /* 1: pc is the probe's (the innermost frame) */
	__u8 cfa_bp;
	__u8 bp_saved;
	__u8 _pad;
};

/* stack_sites: a chain user space described, and its token. */
struct stack_site_slot {
	__u32 seq;  /* odd while user space writes the slot */
	__u32 tgid; /* 0: the slot is empty */
	__u32 n;    /* return addresses in pcs */
	__u32 _pad;
	__u64 ip;   /* the probe's pc */
	__u64 token;
	__u64 pcs[STACK_KEY_FRAMES];
};

/* BPF_F_MMAPABLE: user space maps the array and writes its slots. */
#define STACK_F_MMAPABLE (1U << 10)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, STACK_F_MMAPABLE);
	__uint(max_entries, 1 << STACK_STEP_BITS);
	__type(key, __u32);
	__type(value, struct stack_step_slot);
} stack_steps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, STACK_F_MMAPABLE);
	__uint(max_entries, 1 << STACK_SITE_BITS);
	__type(key, __u32);
	__type(value, struct stack_site_slot);
} stack_sites SEC(".maps");

#define stack_barrier() asm volatile("" ::: "memory")

/* The step of (tgid, first, pc) into *out; -1 when no slot holds it. */
static __always_inline int stack_step_get(__u32 tgid, __u32 first, __u64 pc,
					  struct stack_step_slot *out)
{
	__u32 set = stack_step_set(tgid, first, pc);
	struct stack_step_slot *s;
	__u32 seq;
	int i;

#pragma unroll
	for (i = 0; i < STACK_WAYS; i++) {
		__u32 k = set + i;

		s = bpf_map_lookup_elem(&stack_steps, &k);
		if (!s)
			return -1;
		seq = *(volatile __u32 *)&s->seq;
		stack_barrier();
		*out = *s;
		stack_barrier();
		/* One branch a slot: each is a state more for the verifier. */
		if (((seq & 1) | (*(volatile __u32 *)&s->seq ^ seq) | (out->tgid ^ tgid) |
		     (out->pc ^ pc) | (out->first ^ first)) == 0)
			return 0;
	}
	return -1;
}

/* The scratch value: the record and one page of slack after it, so the
 * verifier can bound a page-sized read at any offset below the copy size
 * without proving offset + length <= STACK_COPY_BYTES. */
struct stack_scratch {
	struct stack_record rec;
	__u8 slack[STACK_PAGE];
	__u32 busy; /* a capture owns rec until stack_release() */
	__u32 _pad;
	struct stack_site_key key; /* the walk's key (stack_known) */
	__u32 short_copy; /* the last walk needed bytes past rec.size */
	__u32 need;       /* the bytes from sp the last walk read (stack_need) */
	/* The walk's, for the thread's memo (stack_memos): where in the copy
	 * each return address was (offsets from sp), whether every frame's
	 * CFA came from the stack pointer, and the stack_sites slot (and its
	 * seq) that held the chain. */
	__u16 offs[STACK_KEY_FRAMES];
	__u16 bp_offs[STACK_MEMO_BPS]; /* the saved rbps a CFA was taken from: */
	__u64 bp_vals[STACK_MEMO_BPS]; /* where they were and what they held */
	__u64 bp_val;   /* the walk's rbp, when read (bp_src) */
	__u32 bp_off;   /* and where */
	__u32 bp_src;   /* where the walk's rbp came from: 0 the register, 1 a read */
	__u32 nbp;      /* bp_offs and bp_vals taken */
	__u32 reg_used; /* a CFA was taken from the rbp register */
	__u32 memo_ok;  /* the walk can be remembered */
	__u32 sp_only;  /* no CFA came from rbp */
	__u32 hit_slot;
	__u32 hit_seq;
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

/* ---- the thread's memo: its last known chain, checked without a walk ----
 *
 * A thread that allocates in a loop captures the same stack again and
 * again. Its memo (task storage) keeps what its last walk that found a
 * known chain read: the offset from sp of each return address, and of each
 * saved rbp it read with the value there, which of those values (or the
 * rbp register itself) some frame took its CFA from, and the stack_sites
 * slot that held the chain with that slot's seq. The next capture at the
 * same probe pc compares the values at those offsets with the slot's chain
 * and the remembered rbps: no step is looked up.
 *
 * Exact: the walk is a function of the steps of the pcs it meets, the
 * registers and the values it reads. From the same probe pc it takes the
 * same first step, so it reads at the same offsets from sp, or, for a
 * frame whose CFA is rbp plus a constant, at the same addresses when that
 * rbp is the same value; where every value it reads is what it was, it
 * reads the same next addresses and so on, to the same chain, ending where
 * it ended (the outermost frame's step says so). A chain none of whose
 * CFAs came from rbp depends on sp only through the offsets, so its memo
 * holds at any sp; one with such a frame holds at the same sp only (its
 * rbp is an address), with the same rbp register where a CFA was taken
 * from it, and the same values in the saved rbp slots some CFA was taken
 * from (a saved rbp no CFA used does not change the walk). The steps are
 * user space's for the process's current mappings; when those change,
 * user space empties every slot of the process (probes/tables,
 * Known.Forget), which bumps the chain slot's seq, and the memo no longer
 * matches; a slot rewritten for another chain changes its seq too. So a
 * memo hit is the chain the walk would have found, or, where the walk
 * would have found a step missing (evicted), the same stack all the same. */
struct stack_memo {
	__u32 tgid;
	__u32 n;    /* return addresses in the chain */
	__u64 ip;   /* the probe's pc */
	__u64 sp;   /* the stack pointer it holds at; 0: any */
	__u64 bp;   /* the rbp register, when reg_used */
	__u32 slot; /* the stack_sites slot that held the chain */
	__u32 seq;  /* that slot's seq then (even) */
	__u32 need; /* the bytes from sp the walk read (stack_need) */
	__u32 reg_used;
	__u32 nbp; /* bp_vals[j] at sp + bp_offs[j], j < nbp, are compared */
	__u16 off[STACK_KEY_FRAMES]; /* return address i at sp + off[i] */
	__u16 bp_offs[STACK_MEMO_BPS];
	__u64 bp_vals[STACK_MEMO_BPS];
};

#define STACK_F_NO_PREALLOC 1  /* BPF_F_NO_PREALLOC: task storage wants it */
#define STACK_STORAGE_CREATE 1 /* BPF_LOCAL_STORAGE_GET_F_CREATE */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, STACK_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stack_memo);
} stack_memos SEC(".maps");

/* The token of the calling thread's memo if the copy in s holds its chain
 * (see above), else 0. Branch-free over the frames, as stack_site_token: a
 * branch per frame would be a verifier state per frame. A global function:
 * each of its ways out would otherwise be a state in which the verifier
 * checks the whole walk after it again (~14,000 instructions more per
 * program). */
__noinline __u64 stack_memo_token(struct stack_scratch *s)
{
	struct stack_site_slot *c;
	struct stack_memo *m;
	__u64 token, diff, v, mask, off;
	__u32 k, seq, n, nbp;
	int j;

	if (!s)
		return 0;
	m = bpf_task_storage_get(&stack_memos, bpf_get_current_task_btf(), 0, 0);
	if (!m)
		return 0;
	if (m->tgid != s->rec.hdr.pid || m->ip != s->rec.ip || m->need > s->rec.size ||
	    m->n > STACK_KEY_FRAMES || (m->sp && m->sp != s->rec.sp) ||
	    (m->reg_used && m->bp != s->rec.bp))
		return 0;
	k = m->slot;
	c = bpf_map_lookup_elem(&stack_sites, &k);
	if (!c)
		return 0;
	seq = *(volatile __u32 *)&c->seq;
	stack_barrier();
	n = m->n;
	nbp = m->nbp;
	diff = (seq ^ m->seq) | (seq & 1) | (c->tgid ^ m->tgid) | (c->ip ^ m->ip) | (c->n ^ n);
#pragma unroll
	for (j = 0; j < STACK_KEY_FRAMES; j++) {
		off = m->off[j] & (STACK_COPY_BYTES - 1);
		v = *(__u64 *)(s->rec.data + off);
		/* All ones for j < n; in asm, or the compiler makes it a branch. */
		mask = (__u64)j - (__u64)n;
		asm volatile("%0 s>>= 63" : "+r"(mask));
		diff |= (v ^ c->pcs[j]) & mask;
		/* One frame after the other: unrolled and scheduled at once,
		 * the loads spill past the 512-byte stack. */
		asm volatile("" : "+r"(diff));
	}
#pragma unroll
	for (j = 0; j < STACK_MEMO_BPS; j++) {
		off = m->bp_offs[j] & (STACK_COPY_BYTES - 1);
		v = *(__u64 *)(s->rec.data + off);
		mask = (__u64)j - (__u64)nbp;
		asm volatile("%0 s>>= 63" : "+r"(mask));
		diff |= (v ^ m->bp_vals[j]) & mask;
		asm volatile("" : "+r"(diff));
	}
	token = c->token;
	stack_barrier();
	if (diff || *(volatile __u32 *)&c->seq != seq)
		return 0;
	s->need = m->need;
	return token;
}

struct stack_walk {
	struct stack_scratch *s;
	__u64 pc; /* the frame being left, its stack pointer and rbp */
	__u64 sp;
	__u64 bp;
	__u64 h;  /* the chain's hash so far (stack_site_start) */
	__u32 done;
};

/* The u64 at user address addr, from the copy: -1 past its end (short_copy
 * says so) or outside it. A plain load: the scratch's slack bounds it. */
static __always_inline int stack_read8(struct stack_scratch *s, __u64 addr, __u64 *v)
{
	__u64 off = addr - s->rec.sp;

	if (addr < s->rec.sp || off + 8 > STACK_COPY_BYTES)
		return -1;
	if (off + 8 > s->rec.size) {
		s->short_copy = 1;
		return -1;
	}
	s->need = off + 8; /* the walk reads upwards: the last read is the highest */
	*v = *(__u64 *)(s->rec.data + (off & (STACK_COPY_BYTES - 1)));
	return 0;
}

/* bpf_loop body: from frame i to its caller, as stacks.Unwind does with
 * the same rule (the same checks: a CFA above the stack pointer, a saved
 * rbp below it is the one in the register). Stops (1) at the outermost
 * frame (done) or where the walk cannot go on. */
static long stack_walk_step(__u64 i, void *arg)
{
	struct stack_walk *w = arg;
	struct stack_scratch *s = w->s;
	struct stack_step_slot st;
	__u64 cfa, ra = 0, bp;
	__u32 k, j;

	if (stack_step_get(s->key.tgid, i == 0, w->pc, &st))
		return 1;
	if (st.ra == STACK_STEP_END) {
		s->key.n = i;
		w->done = 1;
		return 1;
	}
	if (i >= STACK_KEY_FRAMES)
		return 1;
	/* Branch-free (a branch here is verifier states at every step):
	 * a CFA taken from rbp notes where that rbp came from, the register
	 * or the saved rbp last read (kept as entry nbp, taken when used). */
	k = st.cfa_bp & 1;
	s->sp_only &= k ^ 1;
	s->reg_used |= k & (s->bp_src ^ 1);
	j = s->nbp;
	s->bp_offs[j & (STACK_MEMO_BPS - 1)] = (__u16)s->bp_off;
	s->bp_vals[j & (STACK_MEMO_BPS - 1)] = s->bp_val;
	j += k & s->bp_src;
	s->nbp = j;
	s->memo_ok &= (((j + 7) >> 4) ^ 1) & 1; /* j <= STACK_MEMO_BPS */
	cfa = (st.cfa_bp ? w->bp : w->sp) + (__s64)st.cfa;
	if (cfa <= w->sp)
		return 1;
	/* rbp's slot first: it is below the return address, and the last
	 * read is the highest (stack_read8's need). */
	if (st.bp_saved && cfa + (__s64)st.bp >= w->sp) {
		if (stack_read8(s, cfa + (__s64)st.bp, &bp))
			return 1;
		w->bp = bp;
		s->bp_off = (__u32)(cfa + (__s64)st.bp - s->rec.sp);
		s->bp_val = bp;
		s->bp_src = 1;
	}
	if (stack_read8(s, cfa + (__s64)st.ra, &ra))
		return 1;
	s->key.pcs[i & (STACK_KEY_FRAMES - 1)] = ra;
	s->offs[i & (STACK_KEY_FRAMES - 1)] = (__u16)(cfa + (__s64)st.ra - s->rec.sp);
	w->h = stack_mix(w->h, ra);
	w->sp = cfa;
	w->pc = ra;
	return 0;
}

/* The token of the chain in s->key, whose hash is h, if a slot of
 * stack_sites holds it; else 0. The chains are compared whole, pcs past n
 * included (0 in both: the walk clears them, user space writes them so),
 * without a branch per frame: a loop that could stop at any frame is a
 * new state for the verifier at every frame. */
static __always_inline __u64 stack_site_token(struct stack_scratch *s, __u64 h)
{
	__u32 set = stack_site_set(h, s->key.n), n = s->key.n, seq, k;
	struct stack_site_slot *c;
	__u64 token, diff;
	int i, j;

#pragma unroll
	for (i = 0; i < STACK_WAYS; i++) {
		k = set + i;
		c = bpf_map_lookup_elem(&stack_sites, &k);
		if (!c)
			return 0;
		seq = *(volatile __u32 *)&c->seq;
		stack_barrier();
		diff = (c->tgid ^ s->key.tgid) | (c->ip ^ s->key.ip) | (c->n ^ n);
#pragma unroll
		for (j = 0; j < STACK_KEY_FRAMES; j++)
			diff |= c->pcs[j] ^ s->key.pcs[j];
		token = c->token;
		stack_barrier();
		if (diff || (seq & 1) || *(volatile __u32 *)&c->seq != seq)
			continue;
		s->hit_slot = k;
		s->hit_seq = seq;
		return token;
	}
	return 0;
}

/* The token of the stack in s->rec (its first rec.size bytes) if user
 * space described it before (see stack_sites), else 0, with short_copy set
 * when the walk stopped at the end of the copy. A global function: the
 * verifier checks it once, on its own, not again on every path of the
 * program that reaches a call (inlined, it cost ~17,000 instructions per
 * program on Linux 6.18). */
__noinline __u64 stack_known(struct stack_scratch *s)
{
	struct stack_walk w = {};
	struct stack_memo *m;
	__u64 token;

	if (!s)
		return 0;
	s->short_copy = 0;
	s->need = 0;
	token = stack_memo_token(s);
	if (token)
		return token;
	s->sp_only = 1;
	s->memo_ok = 1;
	s->nbp = 0;
	s->bp_src = 0;
	s->bp_off = 0;
	s->bp_val = 0;
	s->reg_used = 0;
	__builtin_memset(&s->key, 0, sizeof(s->key));
	s->key.tgid = s->rec.hdr.pid;
	s->key.ip = s->rec.ip;
	w.s = s;
	w.pc = s->rec.ip;
	w.sp = s->rec.sp;
	w.bp = s->rec.bp;
	w.h = stack_site_start(s->key.tgid, s->key.ip);
	/* 0 at run time, unknown to the verifier (see py_opaque_zero in
	 * python.h): with a constant here it would check the step again. */
	*(volatile __u32 *)&s->_pad = 0;
	w.done = *(volatile __u32 *)&s->_pad;
	bpf_loop(STACK_KEY_FRAMES + 1, stack_walk_step, &w, 0);
	if (!w.done)
		return 0;
	token = stack_site_token(s, w.h);
	if (!token || !s->memo_ok || s->key.n > STACK_KEY_FRAMES)
		return token;
	m = bpf_task_storage_get(&stack_memos, bpf_get_current_task_btf(), 0, STACK_STORAGE_CREATE);
	if (m) {
		m->tgid = s->key.tgid;
		m->n = s->key.n;
		m->ip = s->key.ip;
		m->slot = s->hit_slot;
		m->seq = s->hit_seq;
		m->need = s->need;
		m->sp = s->sp_only ? 0 : s->rec.sp;
		m->bp = s->rec.bp;
		m->reg_used = s->reg_used;
		m->nbp = s->nbp;
		__builtin_memcpy(m->off, s->offs, sizeof(m->off));
		__builtin_memcpy(m->bp_offs, s->bp_offs, sizeof(m->bp_offs));
		__builtin_memcpy(m->bp_vals, s->bp_vals, sizeof(m->bp_vals));
	}
	return token;
}

/* Fill the per-CPU record with the current thread's registers and stack,
 * under the header of the record *of it belongs to (its seq, ts_ns, pid
 * and tid; kind EV_STACK); *len receives the record's length to emit. NULL
 * when this CPU's record is owned by a preempted capture (count it as a
 * lost stack). A non-NULL record must be handed back with stack_release()
 * once emitted.
 *
 * With known_stacks, STACK_FIRST_COPY bytes from rsp (or first, when it is
 * more and at most STACK_COPY_BYTES: what the caller knows this thread's
 * walk needs, stack_need) are copied and walked first: a known stack goes
 * out as its token, with nothing more copied.
 * Else (or when that read fails) the copy is STACK_COPY_BYTES from rsp, or
 * up to the end of the stack's mapping when that is nearer (bpf_find_vma):
 * a read that runs past the mapping would fail as a whole, and a
 * user-memory fault inside BPF costs several microseconds. When the VMA
 * cannot be had (mmap lock contended) or the read still fails (a page
 * swapped out), the copy is retried page by page up to the first
 * unreadable page. A walk of the first copy that stopped at its end is
 * made again over the whole copy. */
static __always_inline struct stack_record *stack_capture_first(struct pt_regs *ctx,
								const struct record_header *of,
								__u32 *len, __u32 first)
{
	struct stack_scratch *s;
	struct stack_record *rec;
	__u32 zero = 0, n = 0, chunk, want = STACK_COPY_BYTES, walk_again = 0;
	__u64 sp, end = 0, token = 0;
	int i;

	if (first <= STACK_FIRST_COPY || first > STACK_COPY_BYTES)
		first = STACK_FIRST_COPY;

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
	rec->token = 0;
	rec->flags = 0;
	rec->size = 0;
	rec->_pad[0] = 0;
	rec->_pad[1] = 0;
	rec->_pad[2] = 0;
	if (known_stacks) {
		if (bpf_probe_read_user(rec->data, first, (void *)sp) == 0) {
			rec->size = first;
			token = stack_known(s);
			walk_again = !token && s->short_copy;
			if (token && !check_known_stacks) {
				rec->token = token;
				rec->flags = STACK_KNOWN;
				rec->size = 0;
				*len = STACK_HDR_SIZE;
				return rec;
			}
		} else {
			walk_again = 1;
		}
	}
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
	if (walk_again)
		token = stack_known(s);
	if (token) {
		rec->token = token;
		rec->flags |= STACK_KNOWN;
		if (!check_known_stacks)
			n = 0;
		rec->size = n;
	}
	*len = STACK_HDR_SIZE + n;
	return rec;
}

static __always_inline struct stack_record *stack_capture(struct pt_regs *ctx,
							  const struct record_header *of,
							  __u32 *len)
{
	return stack_capture_first(ctx, of, len, 0);
}

/* The bytes from sp the walk of rec (a known stack's, STACK_KNOWN) read:
 * a later capture of the same chain finds it in a first copy of that
 * size. 0 when rec is no known stack's. */
static __always_inline __u32 stack_need(struct stack_record *rec)
{
	struct stack_scratch *s = (struct stack_scratch *)rec;

	return rec->flags & STACK_KNOWN ? s->need : 0;
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
