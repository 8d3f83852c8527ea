/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A child forked by a traced interpreter before user space registered it
 * (included by tttrace.bpf.c, after python.h and pid_flags).
 *
 * The fork hook gives a child its parent's py_procs entry when the parent
 * has one (python.h, py_fork). A parent registered only after the fork (a
 * worker forked in the interpreter's first milliseconds, while user space
 * still reads its files) leaves the child without one, and the child may
 * allocate and end before user space reads its fork record: its Python
 * stacks would be lost. So the fork hook notes such a child as an heir of
 * its parent (PID_HEIR in its pid flags, its parent in py_heirs), and the
 * child's first capture after the parent's registration takes a copy of
 * it (py_heir_adopt), as py_fork would have.
 *
 * The copy is exact only while the child and its parent both still run
 * the image of the fork: each has exec'ed no more since (the kernel's
 * self_exec_id, which every exec increments and a fork or a new thread
 * inherits, is still the one seen at the fork), and the child's parent is
 * still that process (real_parent: a parent that ended leaves the child
 * to a reaper, so a new process given the parent's pid is never taken for
 * it). An heir whose own checks fail is no heir any more. A child forked
 * by an heir not yet adopted is its heir in turn: the walk goes up to
 * PY_HEIR_DEPTH generations to the nearest registered ancestor.
 */
#ifndef TTTRACE_PYHEIR_H
#define TTTRACE_PYHEIR_H

#define PY_HEIR_DEPTH 3

/* The fields of task_struct read here (CO-RE, against the running
 * kernel's BTF; the ___heir flavour keeps it apart from tttrace.bpf.c's
 * own view of the struct). */
struct task_struct___heir {
	int tgid;
	struct task_struct___heir *real_parent;
	__u64 self_exec_id;
} __attribute__((preserve_access_index));

/* An heir's parent, and both exec counts at the fork. */
struct py_heir {
	__u32 parent;      /* the parent's tgid */
	__u32 _pad;
	__u64 parent_exec; /* the forking thread's self_exec_id */
	__u64 self_exec;   /* the child's self_exec_id (inherited: the same) */
};

/* Keyed by the heir's tgid; the fork hook writes an entry, adoption or a
 * failed check deletes it, the exit hook deletes an heir's. LRU: a full
 * map drops the oldest heir (its allocations then lack their Python
 * frames, which user space says: python_not_registered), never a fork. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct py_heir);
} py_heirs SEC(".maps");

/* Note child, just forked by the thread parent of process ptgid, which
 * has no py_procs entry, as its heir. 1 when it is one. */
static __always_inline int py_heir_note(struct task_struct___heir *parent, __u32 ptgid,
					struct task_struct___heir *child, __u32 ctgid)
{
	struct py_heir h = {
		.parent = ptgid,
		.parent_exec = BPF_CORE_READ(parent, self_exec_id),
		.self_exec = BPF_CORE_READ(child, self_exec_id),
	};

	return bpf_map_update_elem(&py_heirs, &ctgid, &h, BPF_ANY) == 0;
}

/* Change the pid flags of tgid: set on, clear off, on the byte's word as
 * user space does (probes/tables, pids.go). */
static __always_inline void py_heir_flags(__u32 tgid, __u8 on, __u8 off)
{
	__u32 zero = 0, i = tgid & (PID_SPACE - 1), sh = (i & 3) * 8;
	struct pid_table *t = bpf_map_lookup_elem(&traced_pids, &zero);

	if (!t)
		return;
	if (on)
		__sync_fetch_and_or((__u32 *)&t->flags[i & ~3U], (__u32)on << sh);
	if (off)
		__sync_fetch_and_and((__u32 *)&t->flags[i & ~3U], ~((__u32)off << sh));
}

/* The calling thread is of process tgid, an heir (PID_HEIR): its py_procs
 * entry, copied now from its nearest registered ancestor (code_gen 0, as
 * py_fork's copy), or NULL while none is registered. */
static __always_inline struct py_proc *py_heir_adopt(__u32 tgid)
{
	struct task_struct___heir *t = (void *)bpf_get_current_task(), *p;
	struct py_proc *anc, c;
	struct py_heir *h;
	__u32 id = tgid;

#pragma unroll
	for (int i = 0; i < PY_HEIR_DEPTH; i++) {
		h = bpf_map_lookup_elem(&py_heirs, &id);
		if (!h)
			return 0;
		p = BPF_CORE_READ(t, real_parent);
		if (BPF_CORE_READ(t, self_exec_id) != h->self_exec || BPF_CORE_READ(p, tgid) != h->parent ||
		    BPF_CORE_READ(p, self_exec_id) != h->parent_exec) {
			if (i == 0) { /* it exec'ed, or its parent is gone */
				bpf_map_delete_elem(&py_heirs, &tgid);
				py_heir_flags(tgid, 0, PID_HEIR);
			}
			return 0;
		}
		id = h->parent;
		anc = bpf_map_lookup_elem(&py_procs, &id);
		if (anc) {
			__builtin_memcpy(&c, anc, sizeof(c));
			c.code_gen = 0;
			/* User space may have registered it meanwhile: its own stays. */
			bpf_map_update_elem(&py_procs, &tgid, &c, BPF_NOEXIST);
			bpf_map_delete_elem(&py_heirs, &tgid);
			py_heir_flags(tgid, PID_PYTHON, PID_HEIR);
			return bpf_map_lookup_elem(&py_procs, &tgid);
		}
		t = p;
	}
	return 0;
}

#endif /* TTTRACE_PYHEIR_H */
