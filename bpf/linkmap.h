/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The dynamic loader's link map, read when ld.so says it is consistent
 * (included by tttrace.bpf.c; dl_debug_state calls link_map_send).
 *
 * ld.so calls _dl_debug_state() before and after each change of its link
 * map (the start-up load, dlopen, dlclose), with r_debug.r_state saying
 * which: RT_ADD / RT_DELETE before, RT_CONSISTENT once the list is whole
 * and every object in it mapped. At RT_CONSISTENT this walks the list
 * (struct link_map of <link.h>: l_addr, l_name, l_ld, l_next) and sends
 * one struct link_object_record per object, with the identity (device,
 * inode) of the file mapped at its l_ld, found with bpf_find_vma (the main
 * program, unnamed in the list, named by AT_EXECFN): user
 * space can then place the process's stacks in its objects even when the
 * process has ended before it could read /proc/PID/maps (docs/stacks.md).
 * The objects of other link-map namespaces (dlmopen) follow, from glibc
 * 2.35's r_debug_extended chain (r_version 2): ld.so keeps an r_debug per
 * namespace and changes the state of the one it loads into, so the walk
 * is made only when every namespace is consistent.
 *
 * Bounds: at most LINK_OBJECTS_MAX objects a walk (a bpf_loop), each name
 * read with bpf_probe_read_user_str into LINK_NAME_MAX bytes; one
 * bpf_find_vma an object; a walk starts only when the ring is less than
 * half full. r_debug is found from the probe's address: its
 * cookie is the distance from _dl_debug_state to _r_debug in ld.so (0: not
 * known, no walk). Cost: only at RT_CONSISTENT of traced processes, which
 * the per-process budget of dl_allow already bounds.
 */
#ifndef TTTRACE_LINKMAP_H
#define TTTRACE_LINKMAP_H

#include "wire.h"

/* struct r_debug of <link.h>, up to r_state (x86-64). */
struct ld_r_debug {
	__s32 r_version;
	__s32 _pad;
	__u64 r_map;   /* struct link_map *: the first object (the main program) */
	__u64 r_brk;   /* _dl_debug_state's address */
	__s32 r_state; /* RT_CONSISTENT 0, RT_ADD 1, RT_DELETE 2 */
	__s32 _pad2;
};
#define LD_RT_CONSISTENT 0
/* struct r_debug_extended (glibc 2.35+, r_version 2): after r_debug's
 * r_ldbase, the next link-map namespace's (dlmopen) r_debug_extended. */
#define LD_R_NEXT_OFF 40
/* Namespaces looked at, at most (glibc's DL_NNS). */
#define LINK_NAMESPACES_MAX 16

/* The public head of struct link_map of <link.h>. */
struct ld_link_map {
	__u64 l_addr; /* load bias */
	__u64 l_name; /* char *: the path it was opened by; "" for the main program */
	__u64 l_ld;   /* its dynamic section */
	__u64 l_next;
};

/* The kernel types read, reduced to their fields (CO-RE: relocated to the
 * running kernel's layout at load; the ___lm flavour keeps them apart from
 * stack.h's reduced vm_area_struct). */
struct super_block___lm {
	__u32 s_dev; /* dev_t */
} __attribute__((preserve_access_index));
struct inode___lm {
	unsigned long i_ino;
	struct super_block___lm *i_sb;
} __attribute__((preserve_access_index));
struct file___lm {
	struct inode___lm *f_inode;
} __attribute__((preserve_access_index));
struct vm_area_struct___lm {
	struct file___lm *vm_file;
} __attribute__((preserve_access_index));

/* The main program's name: ld.so leaves its l_name empty; the kernel keeps
 * the path it was executed by (AT_EXECFN, a string on the process's
 * initial stack) in the auxiliary vector it saved in the mm. */
struct mm_struct___lm {
	unsigned long saved_auxv[2]; /* the size is the kernel's (CO-RE: field size) */
} __attribute__((preserve_access_index));
struct task_struct___lm {
	struct mm_struct___lm *mm;
} __attribute__((preserve_access_index));
#define LD_AT_EXECFN 31
#define LINK_AUXV_CHUNK 16 /* longs read at once */
#define LINK_AUXV_MAX 128  /* longs looked at, at most */

/* AT_EXECFN of the current process (a user address), 0 when not found. */
static __always_inline __u64 link_execfn(void)
{
	struct task_struct___lm *task = (void *)bpf_get_current_task_btf();
	struct mm_struct___lm *mm = BPF_CORE_READ(task, mm);
	__u64 off = bpf_core_field_offset(struct mm_struct___lm, saved_auxv);
	__u32 size = bpf_core_field_size(struct mm_struct___lm, saved_auxv) / 8;
	__u64 v[LINK_AUXV_CHUNK];
	int c, j;

	if (!mm)
		return 0;
	for (c = 0; c < LINK_AUXV_MAX / LINK_AUXV_CHUNK; c++) {
		if (c * LINK_AUXV_CHUNK + LINK_AUXV_CHUNK > size)
			return 0;
		if (bpf_probe_read_kernel(v, sizeof(v), (void *)mm + off + c * sizeof(v)))
			return 0;
		for (j = 0; j < LINK_AUXV_CHUNK; j += 2) {
			if (v[j] == 0) /* AT_NULL: the end */
				return 0;
			if (v[j] == LD_AT_EXECFN)
				return v[j + 1];
		}
	}
	return 0;
}

/* The room a walk may take in the ring: it leaves half the ring to the
 * events, as stacks do (stack_room). */
#define LINK_WALK_ROOM (LINK_OBJECTS_MAX * sizeof(struct link_object_record))

/* Each record is reserved in the ring at its full size and filled there:
 * no per-CPU scratch a preempted walk could hold while another process's
 * walk on the same CPU needs it. */
struct link_walk {
	struct record_header hdr; /* the header every record of the walk has */
	__u64 node;               /* the struct link_map to read next */
	__u64 execfn;             /* AT_EXECFN: the main program's name, 0 if unknown */
	__u64 ns_next;            /* the next namespace's r_debug_extended, 0: none */
};

/* The first object of the next link-map namespace that has one (its
 * r_debug_extended at w->ns_next, or after), w->ns_next moved past it; 0
 * when none. A namespace emptied by dlclose keeps its r_debug, r_map 0. */
static __always_inline __u64 link_next_ns(struct link_walk *w)
{
	struct ld_r_debug rd;
	__u64 next;
	int k;

	for (k = 0; k < LINK_NAMESPACES_MAX && w->ns_next; k++) {
		if (bpf_probe_read_user(&rd, sizeof(rd), (void *)w->ns_next) ||
		    bpf_probe_read_user(&next, sizeof(next), (void *)(w->ns_next + LD_R_NEXT_OFF)))
			break;
		w->ns_next = next;
		if (rd.r_map)
			return rd.r_map;
	}
	w->ns_next = 0;
	return 0;
}

/* Whether every namespace after the default one is consistent: ld.so
 * changes the state of the namespace it loads into (dlmopen), the default
 * one's stays RT_CONSISTENT meanwhile. r_next is the chain's first link
 * (from the default namespace's r_debug_extended). */
static __always_inline int link_namespaces_consistent(__u64 r_next)
{
	struct ld_r_debug rd;
	int k;

	for (k = 0; k < LINK_NAMESPACES_MAX && r_next; k++) {
		if (bpf_probe_read_user(&rd, sizeof(rd), (void *)r_next) ||
		    bpf_probe_read_user(&r_next, sizeof(r_next), (void *)(r_next + LD_R_NEXT_OFF)))
			return 0;
		if (rd.r_state != LD_RT_CONSISTENT)
			return 0;
	}
	return r_next == 0;
}

/* What link_file_of finds (on the BPF stack: bpf_find_vma's context). */
struct link_file {
	__u64 dev;
	__u64 ino;
	__u32 file; /* the mapping has a file */
	__u32 _pad;
};

/* bpf_find_vma callback: the identity of the file mapped there. Runs under
 * the mmap lock the helper took. */
static long link_file_of(struct task_struct *task, struct vm_area_struct___lm *vma, void *data)
{
	struct link_file *lf = data;
	struct file___lm *f = BPF_CORE_READ(vma, vm_file);

	if (!f)
		return 0;
	lf->file = 1;
	lf->ino = BPF_CORE_READ(f, f_inode, i_ino);
	lf->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	return 0;
}

/* bpf_loop body: send the object at w->node (index i) and move to the
 * next; 1 ends the walk. */
static long link_step(__u64 i, void *ctx)
{
	struct link_walk *w = ctx;
	struct link_object_record *rec;
	struct ld_link_map lm;
	struct link_file lf = {};
	long n, err;
	__u8 flags = 0;

	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		lost_record(EV_LINK_OBJECT);
		return 1;
	}
	rec->hdr = w->hdr;
	rec->index = i;
	rec->addr = 0;
	rec->ld = 0;
	rec->dev = 0;
	rec->ino = 0;
	rec->size = 0;
	__builtin_memset(rec->_pad, 0, sizeof(rec->_pad));
	if (bpf_probe_read_user(&lm, sizeof(lm), (void *)w->node)) {
		flags = LINK_OBJECT_LAST | LINK_OBJECTS_CUT | LINK_OBJECT_NONE;
	} else {
		rec->addr = lm.l_addr;
		rec->ld = lm.l_ld;
		w->node = lm.l_next ? lm.l_next : link_next_ns(w);
		if (!w->node)
			flags = LINK_OBJECT_LAST;
		else if (i + 1 >= LINK_OBJECTS_MAX)
			flags = LINK_OBJECT_LAST | LINK_OBJECTS_CUT;
		err = bpf_find_vma(bpf_get_current_task_btf(), lm.l_ld, link_file_of, &lf, 0);
		if (err == -16) { /* EBUSY: the mmap lock is taken */
			flags |= LINK_OBJECT_VMA_BUSY;
		} else if (err || !lf.file) {
			flags |= LINK_OBJECT_NO_FILE;
		} else {
			rec->dev = lf.dev;
			rec->ino = lf.ino;
		}
		n = lm.l_name ? bpf_probe_read_user_str(rec->data, LINK_NAME_MAX, (void *)lm.l_name) : 1;
		if (i == 0 && n == 1 && w->execfn) {
			n = bpf_probe_read_user_str(rec->data, LINK_NAME_MAX, (void *)w->execfn);
			flags |= LINK_OBJECT_EXECFN;
		}
		if (n <= 0 || n >= LINK_NAME_MAX)
			flags |= LINK_OBJECT_NAME_CUT;
		if (n > 1)
			rec->size = (n - 1) & (LINK_NAME_MAX - 1);
	}
	rec->flags = flags;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return flags & LINK_OBJECT_LAST ? 1 : 0;
}

/* At _dl_debug_state: if the link map is consistent, send its objects
 * (the records come before the caller's EV_LINK_MAP). Nothing is sent when
 * r_debug cannot be read; when the ring is over half full the walk is
 * counted as a lost EV_LINK_OBJECT. User space then reads /proc/PID/maps
 * as before. */
static __always_inline void link_map_send(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), id = bpf_get_current_pid_tgid();
	struct link_walk w = {};
	struct ld_r_debug rd;
	__u64 at = PT_REGS_IP(ctx) + cookie;

	if (!cookie)
		return;
	if (bpf_probe_read_user(&rd, sizeof(rd), (void *)at) || rd.r_state != LD_RT_CONSISTENT ||
	    rd.r_version < 1 || !rd.r_map)
		return;
	/* Other namespaces (dlmopen) follow the default one's objects, when
	 * they are all consistent too. */
	if (rd.r_version >= 2 &&
	    (bpf_probe_read_user(&w.ns_next, sizeof(w.ns_next), (void *)(at + LD_R_NEXT_OFF)) ||
	     !link_namespaces_consistent(w.ns_next)))
		return;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + LINK_WALK_ROOM >
	    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2) {
		lost_record(EV_LINK_OBJECT);
		return;
	}
	w.hdr.seq = __sync_fetch_and_add(&next_seq, 1);
	w.hdr.ts_ns = bpf_ktime_get_ns();
	w.hdr.pid = id >> 32;
	w.hdr.tid = (__u32)id;
	w.hdr.kind = EV_LINK_OBJECT;
	w.hdr.op_frames = OP_FRAMES_UNCHECKED; /* carries no op */
	w.node = rd.r_map;
	w.execfn = link_execfn();
	bpf_loop(LINK_OBJECTS_MAX, link_step, &w, 0);
}

#endif /* TTTRACE_LINKMAP_H */
