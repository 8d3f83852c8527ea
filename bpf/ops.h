/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * TT-NN ops (issue #31, docs/probes.md "TT-NN ops"): the op frames of each
 * thread and the programs that push them. Included by tttrace.bpf.c before
 * start_record, which asks op_check how many frames are live for the
 * records that carry an op.
 *
 * An op frame is pushed by an entry probe on an op function of a TT-NN
 * library (a top-level ttnn::<op> or op_t::invoke, a device operation's
 * launch<Op>; ttmetal.FindOps finds them), all of a library in one
 * uprobe_multi link whose cookies are the ids user space gave the
 * functions. No uretprobe says when it ends: a C++ exception through a
 * uretprobed frame terminates the process. A frame remembers where its
 * return address is (the stack pointer at the entry, sp) and what it is
 * (ret). The frame has returned, or was unwound by an exception, when
 *  - a later stack pointer of its thread lies above sp (the stack grew back
 *    over it), or
 *  - the slot at sp no longer holds ret: the caller went on and called
 *    something else from the same depth. The stack pointer alone cannot
 *    tell that: an op called from Python and the next non-op call made
 *    from the same binding layer run at the same depth, and what the
 *    latter allocates would be put in the op that returned.
 * A frame found alive means the ones below it are too (their slots lie
 * above it, untouched while it runs). Each check reads the slot of the
 * innermost frame (one 8-byte user read; more only when frames have
 * ended). At the entry of an op at the slot of the innermost frame (same
 * sp), that frame has returned (the slot now holds this call's return
 * address), unless it is a top-level op and this is a device operation's
 * launch with the same return address: the op tail-called its launch,
 * which nests.
 *
 * User space keeps the names (session/ops.go): every record of a kind that
 * carries an op says in its header how many frames are live (op_frames),
 * and an op_enter record which one it pushed. Nothing is read from an op's
 * arguments; no string is read here.
 */
#ifndef TTTRACE_OPS_H
#define TTTRACE_OPS_H

/* Kinds whose records carry the op they were made in (record_header.op_frames). */
#define OP_KINDS ((1ULL << EV_ALLOC) | (1ULL << EV_ALLOC_REQUEST) | (1ULL << EV_ALLOC_OOM) | \
		  (1ULL << EV_CB_LAYOUT) | (1ULL << EV_CB_ALLOC) | (1ULL << EV_PROGRAM_DISPATCH) | \
		  (1ULL << EV_TRACE) | (1ULL << EV_RUNTIME_ID))

struct op_frame {
	__u64 sp;  /* the stack pointer at the op function's entry: its return address's slot */
	__u64 ret; /* the return address in that slot */
};

/* A thread's live op frames, outermost first. */
struct op_stack {
	__u32 n;      /* frames live: f[0..n) */
	__u32 device; /* bit i: frame i is a device operation's launch */
	struct op_frame f[OP_MAX_FRAMES];
};

/* Per thread (pid_tgid): its frames. Made at its first op entry; deleted
 * when the thread exits (process_exit). LRU: a thread whose exit was not
 * seen (the map full when it ran) goes when room is needed; a thread that
 * loses its entry that way has no op for its next records, never a wrong
 * one. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct op_stack);
} op_stacks SEC(".maps");

/* A thread's first frames start from this. */
const struct op_stack op_stack_empty = {};

struct op_pop_ctx {
	struct op_stack *st;
	__u64 sp;     /* the stack pointer of the record */
	__u64 ret;    /* enter: the return address at sp */
	__u8 enter;   /* an op's entry at sp */
	__u8 device;  /* enter: a device operation's launch */
};

/* bpf_loop body: pop the innermost frame if it has ended; stop at the
 * first that has not. */
static long op_pop_one(__u64 i, void *arg)
{
	struct op_pop_ctx *c = arg;
	struct op_stack *st = c->st;
	__u32 n = st->n, top;
	struct op_frame *f;
	__u64 v = 0;

	if (n == 0)
		return 1;
	if (n > OP_MAX_FRAMES) { /* cannot be: start afresh */
		st->n = 0;
		return 1;
	}
	top = (n - 1) & (OP_MAX_FRAMES - 1);
	f = &st->f[top];
	if (f->sp < c->sp)
		goto pop;
	if (c->enter && f->sp == c->sp) {
		if (f->ret == c->ret && c->device && !(st->device & (1U << top)))
			return 1; /* a top-level op tail-called its launch */
		goto pop;
	}
	if (bpf_probe_read_user(&v, sizeof(v), (void *)f->sp) < 0 || v != f->ret)
		goto pop;
	return 1;
pop:
	st->n = n - 1;
	st->device &= ~(1U << top);
	return 0;
}

static __always_inline void op_pop(struct op_pop_ctx *c)
{
	bpf_loop(OP_MAX_FRAMES, op_pop_one, c, 0);
}

/* record_header.op_frames for a record of kind made at sp by thread id
 * (bpf_get_current_pid_tgid, which the caller has: a helper call less per
 * record): the frames of this thread still live there. */
static __always_inline __u8 op_check(enum event_kind kind, __u64 sp, __u64 id)
{
	struct op_pop_ctx c = {};

	if (!ops_on || !((1ULL << (kind & 63)) & OP_KINDS) || !sp)
		return OP_FRAMES_UNCHECKED;
	c.st = bpf_map_lookup_elem(&op_stacks, &id);
	if (!c.st)
		return 0;
	c.sp = sp;
	op_pop(&c);
	return c.st->n;
}

/* The current thread of process tgid exits: its frames go. */
static __always_inline void op_thread_exit(__u32 tgid)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (traced(tgid))
		bpf_map_delete_elem(&op_stacks, &id);
}

/* Any op function of a TT-NN library: its entry. The cookie is the op's id
 * (and OP_COOKIE_DEVICE_BIT). */
SEC("uprobe.multi")
int op_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), cookie, lost_before = 0;
	struct op_pop_ctx c = {};
	struct op_enter_record *r;
	__u8 flags = 0;

	if (!ops_on || !traced(id >> 32))
		return 0;
	cookie = bpf_get_attach_cookie(ctx);
	c.sp = PT_REGS_SP(ctx);
	c.enter = 1;
	c.device = (cookie >> OP_COOKIE_DEVICE_BIT) & 1;
	if (bpf_probe_read_user(&c.ret, sizeof(c.ret), (void *)c.sp) < 0)
		c.ret = 0;
	c.st = bpf_map_lookup_elem(&op_stacks, &id);
	if (!c.st) {
		bpf_map_update_elem(&op_stacks, &id, &op_stack_empty, BPF_NOEXIST);
		c.st = bpf_map_lookup_elem(&op_stacks, &id);
	}
	if (c.st) {
		__u32 n;

		op_pop(&c);
		n = c.st->n;
		if (n < OP_MAX_FRAMES) {
			c.st->f[n & (OP_MAX_FRAMES - 1)].sp = c.sp;
			c.st->f[n & (OP_MAX_FRAMES - 1)].ret = c.ret;
			if (c.device)
				c.st->device |= 1U << (n & (OP_MAX_FRAMES - 1));
			c.st->n = n + 1;
		} else {
			flags = OP_FRAME_DROPPED;
		}
	} else {
		flags = OP_FRAME_DROPPED;
	}
	/* op_check is not asked: the count is the one just made. */
	r = start_record(EV_OP_ENTER, sizeof(*r), &lost_before, 0);
	if (!r)
		return 0;
	r->hdr.op_frames = c.st ? c.st->n : 0;
	r->lost_before = lost_before;
	r->sp = c.sp;
	r->ret = c.ret;
	r->op = (__u32)cookie;
	r->device = c.device;
	r->flags = flags;
	finish(r);
	return 0;
}

/* void Program::set_runtime_id(uint64_t id): this in rdi, id in rsi.
 * impl: the library's Program is the handle of a detail::ProgramImpl
 * (upstream tt_metal/api/tt-metalium/program.hpp, 2025-26: its one data
 * member is std::shared_ptr<detail::ProgramImpl> internal_, whose first
 * word is the pointer): read it. */
static __always_inline int on_runtime_id(struct pt_regs *ctx, int impl)
{
	__u64 lost_before = 0;
	struct runtime_id_record *r;

	r = start_record(EV_RUNTIME_ID, sizeof(*r), &lost_before, PT_REGS_SP(ctx));
	if (!r)
		return 0;
	r->lost_before = lost_before;
	r->program = PT_REGS_PARM1(ctx);
	r->runtime_id = PT_REGS_PARM2(ctx);
	if (impl) {
		if (bpf_probe_read_user(&r->impl, sizeof(r->impl), (void *)r->program) == 0)
			r->flags = RUNTIME_ID_IMPL_KNOWN;
		else
			r->read_error = 1;
	}
	finish(r);
	return 0;
}

/* Program::set_runtime_id in a library with detail::ProgramImpl. */
SEC("uprobe.multi")
int program_set_runtime_id(struct pt_regs *ctx)
{
	return on_runtime_id(ctx, 1);
}

/* Program::set_runtime_id in an older library (Program_, or a Program
 * without a pimpl): the id alone. */
SEC("uprobe.multi")
int program_set_runtime_id_noimpl(struct pt_regs *ctx)
{
	return on_runtime_id(ctx, 0);
}

#endif /* TTTRACE_OPS_H */
