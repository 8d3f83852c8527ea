/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Known Python stacks (docs/python.md, "Known Python stacks"): a thread's
 * Python chain sent once, then named by a token, as bpf/stack.h does for
 * native stacks.
 *
 * A Python stack is still walked at every allocation (the walk is what
 * finds the chain), but only its code objects and instructions are taken:
 * neither code object identities (a py_codes look-up per frame) nor code
 * records nor the stack's record. User space makes a chain known
 * (probes/tables/pyknown.go, PyKnown.Learn) once it has the records of all
 * its code objects, under the token of the stack it interned; a later walk
 * that finds the same chain in py_sites sends the token in the alloc. The
 * walk compares its chain, frame by frame as it goes, with the slot that
 * held its thread's last known chain (py_thread.site): a thread allocates
 * from the same places again and again; only when that is another chain
 * is the set its hash names searched (py_site_token).
 *
 * Exact under code reuse: a frame's code object is named by its address,
 * and the address may be another code object's now. Where a slot's chain
 * was learnt, every code object in it was alive (a frame holds a reference
 * to its code object) and had the incarnation the stack's record gave it.
 * A slot holds the process's count of code objects whose deallocation
 * began (py_proc.code_frees, counted by py_code_freed before the memory is
 * freed) when that stack was captured, and matches only a capture that
 * read the same count before its walk. A code object of the chain freed
 * since would have counted, before another could take its address, before
 * that one could be in a frame of the walking thread: so the same count
 * means the same code objects, and the token's stack (its incarnations) is
 * the stack. Any deallocation of a code object of the process makes its
 * chains unknown until they are sent again; a chain is compared whole
 * (process, code generation, count, every code object and instruction),
 * never by its hash alone. Only stacks with every frame (no flag) of at
 * most PY_KEY_FRAMES frames, and only where the code objects' deallocation
 * is probed (code_gen): elsewhere an identity is a hash of what a code
 * object points to, read at every frame anyway.
 *
 * py_sites is an array user space maps and writes, a key in one of the
 * STACK_WAYS slots of the set py_site_set names (bpf/stack_hash.h),
 * written under a sequence count, as stack_sites (bpf/stack.h).
 *
 * Include after python.h and stack.h.
 */
#ifndef TTTRACE_PYKNOWN_H
#define TTTRACE_PYKNOWN_H

/* py_sites: a chain user space made known, and its token. */
struct py_site_slot {
	__u32 seq;        /* odd while user space writes the slot */
	__u32 tgid;       /* 0: the slot is empty */
	__u32 n;          /* frames in frames[] (the rest are 0) */
	__u32 code_gen;   /* py_proc.code_gen of the capture it was learnt from */
	__u64 code_frees; /* py_stack.code_frees of that capture */
	__u64 token;
	struct py_key_frame frames[PY_KEY_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, STACK_F_MMAPABLE);
	__uint(max_entries, 1 << PY_SITE_BITS);
	__type(key, __u32);
	__type(value, struct py_site_slot);
} py_sites SEC(".maps");

struct py_site_cmp {
	struct py_site_slot *c;
	struct py_stack *st;
	__u64 diff;
	__u32 n;
	__u32 _pad;
};

/* bpf_loop body: frame i of the chain against the slot's. */
static long py_site_cmp_step(__u64 i, void *arg)
{
	struct py_site_cmp *w = arg;

	if (i >= PY_KEY_FRAMES || i >= w->n)
		return 1;
	w->diff |= (w->c->frames[i].code ^ w->st->frames[i].code) |
		   (w->c->frames[i].instr ^ w->st->frames[i].instr);
	return 0;
}

/* The token of the stack py_walk took into *st (h: the hash it gave) if
 * a slot of py_sites holds its chain, else 0. The frames are compared in a
 * bpf_loop whose state the verifier does not know (py_opaque_zero): it
 * checks the body a couple of times, not once per frame. A global
 * function: checked once, not on every path of the programs that call it. */
__noinline __u64 py_site_token(struct py_stack *st, __u32 tgid, __u64 h, __u32 *slot)
{
	struct py_site_cmp w = {};
	struct py_site_slot *c;
	__u32 set, n, seq, k, i;
	__u64 token;

	if (!st || !slot)
		return 0;
	n = st->nframes;
	if (n == 0 || n > PY_KEY_FRAMES || st->flags || !st->code_gen)
		return 0;
	set = py_site_set(h, n);
	for (i = 0; i < STACK_WAYS; i++) {
		k = set + i;
		c = bpf_map_lookup_elem(&py_sites, &k);
		if (!c)
			return 0;
		seq = *(volatile __u32 *)&c->seq;
		stack_barrier();
		w.c = c;
		w.st = st;
		w.n = n;
		w.diff = (c->tgid ^ tgid) | (c->n ^ n) | (c->code_gen ^ st->code_gen) |
			 (c->code_frees ^ st->code_frees);
		bpf_loop(PY_KEY_FRAMES, py_site_cmp_step, &w, 0);
		token = c->token;
		stack_barrier();
		if (w.diff || !token || (seq & 1) || *(volatile __u32 *)&c->seq != seq)
			continue;
		*slot = k;
		return token;
	}
	return 0;
}

/* py_walk and py_resolve for the programs (bpf/python.h), as global
 * functions: the verifier checks each once, on its own, not again on every
 * path of every program that calls them (inlined, with the branches of
 * known stacks, the heaviest program took ~90,000 instructions to verify). */
struct py_walk_io {
	__u64 sent;  /* out: py_resolve's *sent */
	__u64 token; /* out: the token of the chain walked, if known (known set) */
	__u32 tgid;
	__u32 tid;
	__u32 known; /* look the chain up in py_sites */
	__u32 _pad;
};

/* ---- the thread's memo: its last known chain, checked without a walk ----
 *
 * A thread allocates from the same few chains again and again, and at the
 * same depth of its data stack: its frames are at the same addresses each
 * time. When a walk finds its chain known (the hint's slot, or the set's),
 * and every frame it went through was taken from the copy of the data
 * stack and kept (none skipped: py_copy.bad), the thread's py_threads entry
 * keeps each frame's address a_0 (the innermost) .. a_{n-1} and the slot
 * (py_memo_keep). The next capture, when its innermost frame is a_0
 * again, reads each frame's fields at a_i in this capture's copy and
 * compares them with the slot's, branch-free over PY_KEY_FRAMES, frames
 * past n masked off (py_memo_token): no step, no hash.
 *
 * Exact: the walk from a_0 takes a frame from the copy when its window
 * lies in it, at the offset py_read_frame computes, which is what the memo
 * checks for each a_i and where it reads; so, with a_i's fields in this
 * copy being code_i, instr_i and previous_i, the walk would read exactly
 * those. It keeps frame i as (code_i, instr_i), skipping none (the memo
 * is used only where the build has no shim frames); if previous_i is
 * a_{i+1} it goes there next, and where previous_{n-1} is 0 it ends, with
 * n frames and no flag (n is at most PY_KEY_FRAMES, below PY_MAX_FRAMES:
 * not cut). The walk would thus take exactly the chain (code_i, instr_i),
 * i < n, which the memo found equal to the frames of a slot that passes
 * the checks py_walk_once's look-up makes (seq even and unchanged, tgid,
 * n, code_gen, and code_frees against this capture's, read before
 * anything of the stack): a slot that look-up would accept for that
 * chain, whose token names the stack by the code-reuse argument above.
 * Any difference, a frame outside the copy, an odd or moved seq: the walk
 * runs as before and, finding a known chain, renews the memo. The
 * addresses are only where to look: a memo that no longer fits
 * (the thread ran other code, its stack moved) just misses. */

/* Keep the walk's frames (py_copy.addr, py_copy.bad) as the calling
 * thread's memo of the chain of n frames the py_sites slot k holds: all
 * PY_KEY_FRAMES addresses copied, those past n whatever an earlier walk
 * left there (py_memo_token masks them off). A global function: checked
 * once. */
__noinline int py_memo_keep(struct py_copy *c, __u32 k, __u32 n)
{
	struct py_thread *t;

	if (!c)
		return 0;
	t = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);
	if (!t)
		return 0;
	t->memo_n = 0;
	if (c->bad || n == 0 || n > PY_KEY_FRAMES)
		return 0;
	__builtin_memcpy(t->memo, c->addr, sizeof(t->memo));
	t->memo_slot = k;
	t->memo_n = n;
	return 0;
}

/* Where py_memo_frames finds a frame's fields in the copy (py_memo_token
 * works them out once per capture). */
struct py_memo_geo {
	__u64 fw;    /* py_proc.frame_window */
	__u64 lo;    /* py_copy.lo */
	__u64 lim;   /* a window at offset off of the copy lies in it when off <= lim */
	__u64 r_code, r_prev, r_instr; /* py_frame_from's offsets in the window */
	__u64 n;     /* the memo's frames */
};

/* The memo's frames base .. base + PY_MEMO_CHUNK - 1 (those below n)
 * against the slot's: 0 when each is, in this capture's copy, at its
 * remembered address with the slot's code object and instruction, and its
 * previous is the next remembered address (0 after the last). Branch-free
 * over its PY_MEMO_CHUNK frames, frames past n masked off; a global
 * function, checked once whatever base is, so the PY_KEY_FRAMES frames
 * cost the verifier one chunk's instructions, not all of them unrolled
 * (with 64 frames unrolled the heaviest program passed 20,000). */
#define PY_MEMO_CHUNK 8

__noinline __u64 py_memo_frames(struct py_copy *c, struct py_thread *t, struct py_site_slot *s,
				struct py_memo_geo *g, __u32 base)
{
	__u64 diff = 0, d, off, mask, next, a, j, n;
	const __u8 *src;
	int i;

	if (!c || !t || !s || !g)
		return 1;
	base &= PY_KEY_FRAMES - PY_MEMO_CHUNK;
	n = g->n;
#pragma unroll
	for (i = 0; i < PY_MEMO_CHUNK; i++) {
		j = base + i;
		/* All ones for j < n, and for j + 1 < n: shifted in the
		 * program as written, or clang makes a branch of it. */
		mask = j - n;
		asm volatile("%0 s>>= 63" : "+r"(mask));
		next = j + 1 - n;
		asm volatile("%0 s>>= 63" : "+r"(next));
		next &= t->memo[(j + 1) & (PY_KEY_FRAMES - 1)];
		a = t->memo[j & (PY_KEY_FRAMES - 1)];
		off = a + g->fw - g->lo;
		src = c->data + (off & (PY_COPY_BYTES - 8));
		d = ((g->lim - off) | off) >> 63; /* outside the copy */
		d |= *(__u64 *)(src + (g->r_code & (PY_FRAME_WINDOW - 8))) ^
		     s->frames[j & (PY_KEY_FRAMES - 1)].code;
		d |= *(__u64 *)(src + (g->r_instr & (PY_FRAME_WINDOW - 8))) ^
		     s->frames[j & (PY_KEY_FRAMES - 1)].instr;
		d |= *(__u64 *)(src + (g->r_prev & (PY_FRAME_WINDOW - 8))) ^ next;
		diff |= d & mask;
		/* One frame after the other: hoisted, the loads of every frame
		 * would be live at once, more than the stack holds. */
		asm volatile("" : "+r"(diff));
	}
	return diff;
}

/* The token of the thread's memo (see above) if its chain is this
 * capture's (out's header from py_walk_start, frame0 its innermost frame,
 * c its copy, io its process), else 0; out->nframes gets
 * the chain's length on a hit. Branch-free over the frames, as
 * stack_memo_token (bpf/stack.h): a branch per frame is a verifier state
 * per frame. Only where a frame's instruction is a pointer (3.11+: the
 * load below is 8 bytes) and no frame is ever skipped (owner_skip none:
 * 3.11). 3.12+ end every chain at a shim, the entry frame each call of
 * _PyEval_EvalFrameDefault keeps on its own C stack (Python/ceval.c),
 * outside the copy: no memo is ever kept there (py_copy.bad), and the
 * owner byte need not be compared. A global function: checked once. */
__noinline __u64 py_memo_token(struct py_copy *c, struct py_proc *p, struct py_stack *out,
			       struct py_walk_io *io, __u64 frame0)
{
	struct py_memo_geo g;
	struct py_thread *t;
	struct py_site_slot *s;
	__u64 diff, token;
	__u32 k, seq, n, base;

	if (!c || !p || !out || !io || !frame0)
		return 0;
	t = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);
	if (!t)
		return 0;
	n = t->memo_n;
	if (n == 0 || n > PY_KEY_FRAMES || t->memo[0] != frame0 || p->instr_size != 8 ||
	    p->owner_skip != 0xff || p->frame_window < 0 || c->hi < c->lo + PY_FRAME_WINDOW)
		return 0;
	k = t->memo_slot;
	s = bpf_map_lookup_elem(&py_sites, &k);
	if (!s)
		return 0;
	seq = *(volatile __u32 *)&s->seq;
	stack_barrier();
	diff = (s->tgid ^ io->tgid) | (s->n ^ n) | (s->code_gen ^ out->code_gen) |
	       (s->code_frees ^ out->code_frees);
	g.fw = p->frame_window;
	g.lo = c->lo;
	/* Below the copy, off wraps to >= 2^63 (py_read_frame's test). */
	g.lim = c->hi - c->lo - PY_FRAME_WINDOW;
	g.r_code = p->frame_code - g.fw;
	g.r_prev = p->frame_previous - g.fw;
	g.r_instr = p->frame_instr - g.fw;
	g.n = n;
#pragma unroll
	for (base = 0; base < PY_KEY_FRAMES; base += PY_MEMO_CHUNK) {
		if (base >= n)
			break;
		diff |= py_memo_frames(c, t, s, &g, base);
	}
	token = s->token;
	stack_barrier();
	if (diff || !token || (seq & 1) || *(volatile __u32 *)&s->seq != seq)
		return 0;
	out->nframes = n;
	return token;
}

/* Walk the calling thread's Python stack into *out (py_walk, no code
 * object identities taken: py_resolve_once takes them when the stack is
 * sent) and, with io->known, look its chain up: first in the thread's
 * memo (py_memo_token: no walk), then in the slot that held the thread's
 * last known chain (compared frame by frame as the walk goes: a thread
 * allocates from the same places again and again), then in the set its
 * hash names. With check_known_stacks a memo hit still walks, and the
 * walk's frames go out with the memo's token: tttrace checks the one
 * against the other. */
__noinline int py_walk_once(struct py_stack *out, struct py_proc *p, struct py_walk_io *io)
{
	struct py_thread *t, *self;
	struct py_site_slot *c;
	struct py_copy *cp;
	__u32 k, seq, n, zero = 0;
	__u64 h, diff, frame, memo = 0;

	if (!out || !io)
		return 0;
	io->token = 0;
	out->nframes = 0;
	cp = bpf_map_lookup_elem(&py_copy, &zero);
	if (!cp)
		return 0;
	self = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);
	/* Slot 0 when the thread has no hint: a slot all the same, so that
	 * the walk is checked for one kind of candidate only. */
	k = self && self->site ? self->site - 1 : 0;
	c = bpf_map_lookup_elem(&py_sites, &k);
	if (!c)
		return 0;
	seq = *(volatile __u32 *)&c->seq;
	stack_barrier();
	if (!py_walk_start(out, p, cp, io->tgid, io->tid, &t, &frame))
		return 0;
	if (io->known) {
		memo = py_memo_token(cp, p, out, io, frame);
		if (memo) {
			io->token = memo;
			if (!check_known_stacks)
				return out->nframes;
		}
	}
	h = 0;
	diff = 1;
	n = py_walk_frames(out, p, cp, t, io->tgid, frame, &h, c->frames, &diff);
	if (memo || !io->known || n == 0 || n > PY_KEY_FRAMES || out->flags || !out->code_gen)
		return n;
	diff |= (c->tgid ^ io->tgid) | (c->n ^ n) | (c->code_gen ^ out->code_gen) |
		(c->code_frees ^ out->code_frees);
	io->token = c->token;
	stack_barrier();
	if (!diff && io->token && !(seq & 1) && *(volatile __u32 *)&c->seq == seq) {
		py_memo_keep(cp, k, n);
		return n;
	}
	k = 0;
	io->token = py_site_token(out, io->tgid, h, &k);
	/* Taken again, not kept across the walk: with both kinds of self live
	 * there, the verifier would check the walk for each. */
	self = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);
	if (io->token && self) {
		self->site = k + 1;
		py_memo_keep(cp, k, n);
	}
	return n;
}

__noinline int py_resolve_once(struct py_stack *out, struct py_proc *p, struct py_walk_io *io)
{
	if (!out || !p || !io)
		return 0;
	py_resolve(out, p, io->tgid, &io->sent);
	return 0;
}

/* The native first copy the calling thread's last known walk needed
 * (stack_capture_first), from sp: up to the end it read then, so within
 * the stack when sp is below it; 0 when none is known. A Python thread's
 * native stack runs through the interpreter's frames, whose chain
 * STACK_FIRST_COPY rarely holds. Global functions, as above. */
__noinline __u32 py_native_first(__u64 sp)
{
	struct py_thread *t = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);

	if (!t || t->native_top <= sp || t->native_top - sp > STACK_COPY_BYTES)
		return 0;
	return t->native_top - sp;
}

/* Keep what the walk of a native stack from sp needed (stack_need: 0 for
 * a stack that was not known) for the thread's next capture. */
__noinline int py_native_need(__u64 sp, __u32 need)
{
	struct py_thread *t = bpf_task_storage_get(&py_threads, bpf_get_current_task_btf(), 0, 0);

	if (t)
		t->native_top = need ? sp + need : 0;
	return 0;
}

#endif /* TTTRACE_PYKNOWN_H */
