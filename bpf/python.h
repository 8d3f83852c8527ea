/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The Python stack of the calling thread, captured from BPF at the entry of
 * a probe, for CPython 3.10 to 3.13 with no interpreter flag or variable.
 *
 * Contract with user space (package pyframes):
 *  - py_procs holds, per traced process (tgid), where the interpreter's
 *    _PyRuntime is and the offsets of the few fields the walk reads; an
 *    entry is written only for an interpreter whose offsets were read from
 *    its own _Py_DebugOffsets or checked against the binary (docs/python.md);
 *  - py_capture() finds the thread state of the calling thread by walking
 *    every interpreter's thread list (it does not need the GIL: a ctypes
 *    call releases it) and matching the thread (native_thread_id == tid, or
 *    for 3.10, which has no native_thread_id, thread_id == pthread_self(),
 *    which is the thread's fs base on x86-64: read from the task_struct at
 *    an offset user space takes from the kernel's BTF, so that the object
 *    has no CO-RE relocation and loads on a kernel without BTF);
 *  - it then copies, innermost first, each Python frame's code object
 *    pointer, raw instruction field and an identity of the code object
 *    (a hash of the pointers it holds: an address reused by another code
 *    object gets another identity);
 *  - what a code object says (file, qualname, first line, line table) is
 *    copied at event time, once per (process, code object, identity), into
 *    a struct py_code record the caller sends before the stack (the
 *    records are in wire.h): the process may be gone when user space
 *    reads the stack. py_code_new()
 *    says whether a frame's code object needs one, py_code_read() fills
 *    it, py_code_sent() marks it sent once it is submitted (a lost record
 *    is sent again with the next stack that names it);
 *  - the thread state found is kept in the thread's task storage
 *    (py_threads) and checked, not trusted, at the next capture; the walk
 *    hashes the chain (code objects and instructions) as it goes, for
 *    bpf/pyknown.h's known Python stacks, and can leave the identities to
 *    py_resolve (a known chain needs none);
 *  - a read that fails ends the stack there (PY_READ_ERROR): a partial
 *    stack, never a fault in the traced process (reads are probe reads).
 *
 * Include it after the libbpf headers; define PY_MAX_FRAMES first to keep
 * more frames.
 */
#ifndef TTTRACE_PYTHON_H
#define TTTRACE_PYTHON_H

#include "wire.h"
#include "stack_hash.h"

/* Thread states examined per capture, over all interpreters: a process with
 * more Python threads than this may report PY_NO_THREAD for some. */
#ifndef PY_MAX_THREADS
#define PY_MAX_THREADS 1024
#endif
#define PY_MAX_INTERPS 8

/* How a thread state names its OS thread (py_proc.thread_match). */
enum py_thread_match {
	PY_MATCH_TID = 0,    /* native_thread_id (3.11+) == the kernel tid */
	PY_MATCH_FSBASE = 1, /* thread_id == pthread_self() == fs base (3.10) */
};

/* Where the interpreter of one process keeps what the walk reads. All
 * offsets are in bytes; -1 where the version has no such field. */
struct py_proc {
	__u64 runtime;             /* address of _PyRuntime in the process */
	__s64 runtime_interp_head; /* _PyRuntime.interpreters.head */
	__s64 interp_next;         /* PyInterpreterState.next */
	__s64 interp_threads_head; /* PyInterpreterState.threads.head (3.10: tstate_head) */
	__s64 ts_next;             /* PyThreadState.next */
	__s64 ts_prev;             /* PyThreadState.prev */
	__s64 ts_window;           /* 8-aligned start of PY_TS_WINDOW bytes of a thread state holding
				    * prev, the thread and the frame, read at once to check a thread's
				    * cached thread state (py_threads); -1: not cached */
	__s64 ts_thread;           /* native_thread_id, or thread_id (PY_MATCH_FSBASE) */
	__s64 ts_frame;            /* 3.10 frame, 3.11/3.12 cframe, 3.13 current_frame */
	__s64 cframe_current;      /* _PyCFrame.current_frame (3.11/3.12), else -1 */
	__s64 frame_previous;      /* f_back (3.10) or previous */
	__s64 frame_code;          /* f_code, or f_executable (3.13) */
	__s64 frame_instr;         /* f_lasti (int, 3.10), prev_instr or instr_ptr */
	__s64 frame_owner;         /* owner (char), -1 for 3.10 */
	__s64 task_fsbase;         /* offsetof(struct task_struct, thread.fsbase) in the running
				    * kernel, from its BTF (PY_MATCH_FSBASE only) */
	__s64 frame_window;        /* 8-aligned start of PY_FRAME_WINDOW bytes holding all four
				    * frame fields, read at once; -1: read them one by one */
	__s64 code_id;             /* start of the 32 bytes of a code object hashed as its identity */
	__s64 code_filename;       /* co_filename */
	__s64 code_name;           /* co_qualname (3.11+), co_name (3.10) */
	__s64 code_firstlineno;    /* co_firstlineno (int) */
	__s64 code_linetable;      /* co_linetable */
	__s64 code_code;           /* co_code (3.10: a bytes object), -1 when the bytecode is inline */
	__s64 var_size;            /* PyVarObject.ob_size */
	__s64 bytes_data;          /* PyBytesObject.ob_sval */
	__s64 str_length;          /* PyASCIIObject.length */
	__s64 str_state;           /* PyASCIIObject.state */
	__s64 str_ascii_size;      /* sizeof(PyASCIIObject): ASCII data */
	__s64 str_compact_size;    /* sizeof(PyCompactUnicodeObject): other compact data */
	__s64 ob_type;             /* PyObject.ob_type */
	__u32 version;             /* PY_VERSION_HEX of the interpreter */
	__u8 thread_match;         /* enum py_thread_match */
	__u8 instr_size;           /* 4 (f_lasti) or 8 (pointer) */
	__u8 owner_skip;           /* owner of frames that are not Python code (C stack shims), 0xff none */
	__u8 _pad;
	__u32 code_gen;            /* nonzero: the code objects' deallocation is probed in this process
				    * (py_code_freed), under this number, unique to the registration:
				    * a code object's identity is then read once, not at every frame */
	__u32 _pad2;
	__u64 code_frees;          /* written by BPF (user space writes 0): code objects of the process
				    * whose deallocation began under code_gen (py_code_freed) */
};

/* Per traced process, keyed by tgid; user space writes an entry when it
 * finds a supported interpreter in the process and deletes it when the
 * process is gone; the fork hook copies a registered parent's to its child
 * (py_fork), the exit hook deletes the entry of a process that ended. Not
 * LRU: an entry must not vanish while it is in use. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* A code object of a process, as py_codes keys it: gen is the process's
 * code_gen where its code objects' deallocation is probed, else 0. */
struct py_code_ref {
	__u64 code;
	__u32 pid;
	__u32 gen;
};

/* The code objects whose struct py_code was sent, per process, with the
 * identity they were described under (struct py_frame's code_id). Where
 * code_gen is 0, the identity is the hash of what the code object points
 * to, read at every frame, and an entry holds for a code object that still
 * hashes so. Where it is not, user space probes the deallocation of code
 * objects (tp_dealloc of PyCode_Type): py_code_freed deletes a code
 * object's entry before its memory is freed, so an entry of that
 * generation names the object living at that address, under an
 * incarnation (PY_CODE_INCARNATION), and nothing of it is read again (a
 * read of user memory is ~100 ns on Linux 6.18, per frame of every
 * allocation's stack). A new process given the same pid has another
 * generation. LRU: an entry that falls out costs one more py_code record.
 * 16k entries: an LRU map is made whole, and 64k took the kernel ~17 ms of
 * every run's start (docs/bench.md, fixed costs). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_code_ref);
	__type(value, __u64);
} py_codes SEC(".maps");

/* The calling thread's fs base (pthread_self() on x86-64), for 3.10. */
static __always_inline __u64 py_fsbase(struct py_proc *p)
{
	__u64 task = bpf_get_current_task(), fs = 0;

	if (p->task_fsbase < 0 ||
	    bpf_probe_read_kernel(&fs, sizeof(fs), (void *)(task + p->task_fsbase)) < 0)
		return 0;
	return fs;
}

static __always_inline int py_read_ptr(__u64 *dst, __u64 base, __s64 off)
{
	*dst = 0;
	if (off < 0 || !base)
		return -1;
	return bpf_probe_read_user(dst, sizeof(*dst), (void *)(base + off));
}

/* Where a process's code objects' deallocation is probed, a code object's
 * identity is not the hash of what it points to (two code objects made one
 * after the other at one address can point to the same file name, name and
 * line table addresses: those were freed and made again too) but an
 * incarnation: a number taken from this counter the first time the code
 * object is seen at its address after the previous one there was freed
 * (py_code_known), with this bit set, so that no hash is one. */
#define PY_CODE_INCARNATION (1ULL << 63)
__u64 py_code_next = 0;

/* The identity of a code object: a hash of the 32 bytes at code_id, which
 * hold the pointers to its file name, name and line table. 0 when
 * unreadable. */
static __always_inline __u64 py_code_id(struct py_proc *p, __u64 code, __u32 *flags)
{
	__u64 w[4];

	if (p->code_id < 0 || !code ||
	    bpf_probe_read_user(w, sizeof(w), (void *)(code + p->code_id)) < 0) {
		*flags |= PY_NO_ID;
		return 0;
	}
	return (w[0] ^ (w[1] << 13 | w[1] >> 51) ^ (w[2] << 29 | w[2] >> 35) ^
		(w[3] << 43 | w[3] >> 21)) & ~PY_CODE_INCARNATION;
}


/* What the walk reads of a frame. */
#define PY_FRAME_WINDOW 128

struct py_frame_fields {
	__u64 code;
	__u64 instr;
	__u64 previous;
	__u8 owner;
};

/* The frame's fields out of the window of PY_FRAME_WINDOW bytes at win
 * (its frame_window offset): loads at offsets masked to the window, the
 * pointers' 8-aligned. */
static __always_inline void py_frame_from(struct py_proc *p, const __u8 *win,
					  struct py_frame_fields *f)
{
	__u64 r;

	r = (p->frame_code - p->frame_window) & (PY_FRAME_WINDOW - 8);
	f->code = *(__u64 *)(win + r);
	r = (p->frame_previous - p->frame_window) & (PY_FRAME_WINDOW - 8);
	f->previous = *(__u64 *)(win + r);
	if (p->instr_size == 4) {
		r = (p->frame_instr - p->frame_window) & (PY_FRAME_WINDOW - 4);
		f->instr = *(__u32 *)(win + r);
	} else {
		r = (p->frame_instr - p->frame_window) & (PY_FRAME_WINDOW - 8);
		f->instr = *(__u64 *)(win + r);
	}
	if (p->frame_owner >= 0) {
		r = (p->frame_owner - p->frame_window) & (PY_FRAME_WINDOW - 1);
		f->owner = win[r];
	}
}

/* v &= mask, done in the program as written: clang drops a mask it can
 * prove useless, and the verifier then sees an unbounded size. */
#define PY_BOUND(v, mask) asm volatile("%0 &= %1" : "+r"(v) : "i"(mask))

/* Frames a known Python stack may have (bpf/pyknown.h): deeper ones are
 * always sent. */
#ifndef PY_KEY_FRAMES
#define PY_KEY_FRAMES 64
#endif

/* A frame of a known Python stack's chain. */
struct py_key_frame {
	__u64 code;  /* the frame's code object */
	__u64 instr; /* its instruction field, as struct py_frame's */
};

/* The memory below the innermost frame, copied in one read (py_copy_frames):
 * CPython 3.11+ pushes a thread's frames one above the other on its data
 * stack, so most of a stack's frames are in it, and a frame found there
 * costs no read of its own (a read of user memory costs ~100 ns on Linux
 * 6.18 in a VM, whatever its size up to a few KiB: docs/bench.md). A
 * frame outside it (3.10's heap frames, a generator's, one in an older
 * chunk of the data stack) is read on its own. */
#define PY_COPY_BYTES 8192

/* What is read of a thread state to check its cached address (py_threads). */
#define PY_TS_WINDOW 256

struct py_copy {
	__u64 lo, hi; /* user addresses [lo, hi) of data[0, hi - lo) */
	__u8 data[PY_COPY_BYTES + PY_FRAME_WINDOW];
	__u8 win[PY_FRAME_WINDOW]; /* a frame read on its own */
	__u8 ts[PY_TS_WINDOW];     /* a cached thread state's fields */
	/* Never written: the chain a walk that has no known one to compare
	 * with compares with (py_capture), so that it never has to check
	 * for none. */
	struct py_key_frame no_cand[PY_KEY_FRAMES];
	/* The last walk's frames: addr[i] the address of frame i (its first
	 * PY_KEY_FRAMES), bad 0 when every frame it went through was taken
	 * from the copy and kept (no shim): what a thread's memo of its
	 * chain is made of (py_thread.memo, bpf/pyknown.h). */
	__u64 addr[PY_KEY_FRAMES];
	__u64 bad;
	__u32 recopied; /* copies made past the first (py_recopy) */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_copy);
} py_copy SEC(".maps");

/* Copy the PY_COPY_BYTES below the end of the innermost frame's window
 * (frame0 + frame_window + PY_FRAME_WINDOW), or from want_lo's 64-byte
 * line when that is less (what the thread's last walk needed:
 * py_thread.copy_lo), never from below that line's page: a data stack
 * chunk is a mapping of its own, whose frames can start a few bytes into
 * its first page, and a read that runs into an unmapped page below fails
 * after a fault (~1 us here, ~5x the copy: docs/python.md) and is made
 * again from the window's page. When the range is not all mapped (no hint
 * yet, or a stale one): from the next page up, then from the window's
 * own page, so that the copy holds all of the chunk below the window it
 * can (the frames the walk then finds in it make the next hint); an empty
 * copy when even that cannot be read. */
#ifndef PY_COPY_MISSED
/* A test's count of first copies that could not be read (pyprobe). */
#define PY_COPY_MISSED() do {} while (0)
#endif

static __always_inline struct py_copy *py_copy_frames(struct py_copy *c, struct py_proc *p,
						    __u64 frame0, __u64 want_lo)
{
	__u64 hi, lo, n, page;

	if (!c)
		return 0;
	c->lo = c->hi = 0;
	c->recopied = 0;
	if (p->frame_window < 0 || !frame0)
		return c;
	hi = frame0 + p->frame_window + PY_FRAME_WINDOW;
	n = PY_COPY_BYTES;
	if (want_lo && want_lo < hi - PY_FRAME_WINDOW && hi - want_lo <= PY_COPY_BYTES - 64)
		n = hi - (want_lo & ~63ULL);
	PY_BOUND(n, PY_COPY_BYTES * 2 - 1);
	if (n > PY_COPY_BYTES)
		n = PY_COPY_BYTES;
	if (n < PY_FRAME_WINDOW)
		n = PY_FRAME_WINDOW;
	lo = hi - n;
	if (bpf_probe_read_user(c->data, n, (void *)lo) == 0) {
		c->lo = lo;
		c->hi = hi;
		return c;
	}
	PY_COPY_MISSED();
	page = (frame0 + p->frame_window) & ~4095ULL;
	lo = (lo & ~4095ULL) + 4096;
	if (lo < page) {
		n = hi - lo;
		if (n <= PY_COPY_BYTES && bpf_probe_read_user(c->data, n, (void *)lo) == 0) {
			c->lo = lo;
			c->hi = hi;
			return c;
		}
	}
	n = hi - page;
	if (n > PY_COPY_BYTES)
		return c;
	if (bpf_probe_read_user(c->data, n, (void *)page) == 0) {
		c->lo = page;
		c->hi = hi;
	}
	return c;
}

/* Copies of the data stack a walk may make past its first (py_recopy). */
#define PY_RECOPIES 6

/* Copy the memory from the start of the page of the frame window at up to
 * the window's end, in place of the copy: the window is of a frame the
 * copy does not hold (in another chunk of the data stack, which grows in
 * chunks of 16 KiB and more: a deep Python stack, as under pytest, spans
 * two), and the frames it calls lie below it, as in the first copy
 * (py_copy_frames); the next frame below that page costs another such
 * copy. A page, not more: the pages below the window may not be in memory
 * (a read that meets one fails whole, after a fault of ~1 us), its own is.
 * 24 of a pytest test's 34 frames were read one by one, ~3.2 us per
 * allocation. 1 when the copy now holds the window. A global function:
 * the frame walk's callback, where it is called, is checked for each
 * state of its context, and a call of a global function leaves one. */
__noinline int py_recopy(struct py_copy *c, __u64 at)
{
	__u64 hi, lo, n;

	if (!c || c->recopied >= PY_RECOPIES)
		return 0;
	c->recopied++;
	hi = at + PY_FRAME_WINDOW;
	lo = at & ~4095ULL;
	n = hi - lo;
	if (hi < at || n > PY_COPY_BYTES)
		return 0;
	if (bpf_probe_read_user(c->data, n, (void *)lo) != 0)
		return 0;
	c->lo = lo;
	c->hi = hi;
	return 1;
}

/* Read a frame's fields: from the copy when its window is in it, else one
 * read of the window that holds them (into the copy's win), else (no
 * window, or it crosses into unmapped memory) one read each. *low: the
 * window of the last frame taken from the copy (the outermost there: a
 * thread's frames are pushed one above the other), a hint for its next
 * copy (py_thread.copy_lo). */
static __always_inline int py_read_frame(struct py_proc *p, struct py_copy *c, __u64 frame,
					 struct py_frame_fields *f, __u64 *low)
{
	__u64 at = frame + p->frame_window;
	const __u8 *src = 0;

	f->instr = 0;
	f->owner = 0;
	if (c && p->frame_window >= 0) {
		if (at >= c->lo && at + PY_FRAME_WINDOW <= c->hi) {
			src = c->data + ((at - c->lo) & (PY_COPY_BYTES - 8));
			/* low: the first copy's only (a memo is of frames in
			 * the first copy: py_copy.bad). */
			if (!c->recopied)
				*low = at;
		} else if (py_recopy(c, at) && at >= c->lo && at + PY_FRAME_WINDOW <= c->hi) {
			src = c->data + ((at - c->lo) & (PY_COPY_BYTES - 8));
		} else if (bpf_probe_read_user(c->win, PY_FRAME_WINDOW, (void *)at) == 0)
			src = c->win;
	}
	if (src) {
		py_frame_from(p, src, f);
		return 0;
	}
	if (p->frame_owner >= 0 &&
	    bpf_probe_read_user(&f->owner, 1, (void *)(frame + p->frame_owner)) < 0)
		return -1;
	if (py_read_ptr(&f->code, frame, p->frame_code) < 0 ||
	    py_read_ptr(&f->previous, frame, p->frame_previous) < 0)
		return -1;
	if (p->instr_size == 4)
		return bpf_probe_read_user(&f->instr, 4, (void *)(frame + p->frame_instr));
	return py_read_ptr(&f->instr, frame, p->frame_instr);
}

/* The walks run under bpf_loop (Linux 5.17+): a bounded loop over
 * thousands of thread states or frames is too much for the verifier to
 * explore path by path.
 *
 * The verifier checks a bpf_loop callback again for every new state of its
 * context, until a state it has seen contains the new one (Linux 6.7+). A
 * counter that starts as the constant 0 is a new state at every step (0,
 * 1, 2, ...): the frame walk was checked 128 times over, some 70,000
 * instructions and 0.1 s per program at load. The walks' counters and
 * flags therefore start from py_opaque_zero(): 0 at run time, but a value
 * the verifier does not know, whose range contains every later one, so
 * the callback is checked a couple of times. */

/* 0, written to and read back from memory the verifier does not track (a
 * map value word the caller is free to clear): an unknown scalar to it. */
static __always_inline __u32 py_opaque_zero(__u32 *scratch)
{
	*(volatile __u32 *)scratch = 0;
	return *(volatile __u32 *)scratch;
}

struct py_thread_walk {
	struct py_proc *p;
	__u64 want;   /* tid or fs base */
	__u64 interp; /* interpreter whose list is walked */
	__u64 ts;     /* next thread state to look at, 0 at a list's end */
	__u64 found;
	__u32 interps; /* interpreters entered */
	__u32 flags;
};

static long py_thread_step(__u64 i, void *arg)
{
	struct py_thread_walk *w = arg;
	struct py_proc *p = w->p;
	__u64 id = 0;

	if (!w->ts) {
		/* The end of this interpreter's list: on to the next one. */
		if (w->interps && py_read_ptr(&w->interp, w->interp, p->interp_next) < 0)
			goto fault;
		if (!w->interp || w->interps >= PY_MAX_INTERPS)
			return 1;
		w->interps++;
		if (py_read_ptr(&w->ts, w->interp, p->interp_threads_head) < 0)
			goto fault;
		return 0;
	}
	if (py_read_ptr(&id, w->ts, p->ts_thread) < 0)
		goto fault;
	if (p->thread_match == PY_MATCH_TID)
		id &= 0xffffffff; /* an unsigned long holding a 32-bit tid */
	if (id == w->want) {
		w->found = w->ts;
		return 1;
	}
	if (py_read_ptr(&w->ts, w->ts, p->ts_next) < 0)
		goto fault;
	return 0;
fault:
	w->flags |= PY_READ_ERROR;
	return 1;
}

/* The thread state each thread was last found to have (py_find_tstate),
 * in the thread's task storage (a look-up of a few ns, no hash): found
 * again with two reads instead of a walk over the process's thread states
 * (two reads per thread state, and two to reach the list). Never taken on
 * trust: the thread state may have been deleted since (a thread that
 * called into Python from C through PyGILState_Ensure, and returned) and
 * its memory freed, still holding the thread's id, or reused. So each use
 * reads it again (py_tstate_check): it must name the calling thread and be
 * linked in its interpreter's list (its prev's next is it, or with no prev
 * it is the list's head), which CPython undoes (tstate_delete_common)
 * before it frees one. Only for the registration it was found under
 * (runtime, code_gen). The kernel frees it with the thread. */
struct py_thread {
	__u64 tstate;
	__u64 interp;  /* the interpreter whose list held it */
	__u64 runtime; /* py_proc.runtime it was found under */
	/* How much the last capture of the thread needed: the lowest frame
	 * address its walk took from the copy of its data stack (the next
	 * copy starts there, not PY_COPY_BYTES below the innermost frame),
	 * and the caller's (tttrace: the end of the native stack its known
	 * walk read). Hints only: a copy too short costs reads, never a
	 * frame. */
	__u64 copy_lo;
	__u64 native_top;
	__u32 code_gen;
	__u32 site; /* 1 + the py_sites slot of its last known Python stack
		     * (bpf/pyknown.h), 0: none. A hint: the slot is compared */
	/* The memo of the thread's last known chain (bpf/pyknown.h,
	 * py_memo_token): memo_n frames (0: none) at memo[0..memo_n) (the
	 * rest is not used), whose chain the py_sites slot memo_slot held. Checked
	 * against the copy and the slot at each use, never trusted. */
	__u32 memo_n;
	__u32 memo_slot;
	__u64 memo[PY_KEY_FRAMES];
};

#define PY_F_NO_PREALLOC 1  /* BPF_F_NO_PREALLOC: task storage wants it */
#define PY_STORAGE_CREATE 1 /* BPF_LOCAL_STORAGE_GET_F_CREATE */

struct task_struct;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, PY_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* Whether ts is a thread state of the calling thread (want: its tid, or
 * fs base) linked in interp's list; *frame gets its ts_frame field. */
static __always_inline int py_tstate_check(struct py_proc *p, struct py_copy *c, __u64 ts,
					   __u64 interp, __u64 want, __u64 *frame)
{
	__u64 id, prev, link = 0, r;

	if (!c || p->ts_window < 0 || !ts ||
	    bpf_probe_read_user(c->ts, PY_TS_WINDOW, (void *)(ts + p->ts_window)) < 0)
		return 0;
	r = (p->ts_thread - p->ts_window) & (PY_TS_WINDOW - 8);
	id = *(__u64 *)(c->ts + r);
	if (p->thread_match == PY_MATCH_TID)
		id &= 0xffffffff;
	if (id != want)
		return 0;
	r = (p->ts_prev - p->ts_window) & (PY_TS_WINDOW - 8);
	prev = *(__u64 *)(c->ts + r);
	if ((prev ? py_read_ptr(&link, prev, p->ts_next) :
		    py_read_ptr(&link, interp, p->interp_threads_head)) < 0 ||
	    link != ts)
		return 0;
	r = (p->ts_frame - p->ts_window) & (PY_TS_WINDOW - 8);
	*frame = *(__u64 *)(c->ts + r);
	return 1;
}

/* The thread state of the calling thread tid of process tgid, 0 when none
 * was found; *frame gets its ts_frame field, *tp the thread's py_threads
 * entry when it was found there (else NULL). */
static __always_inline __u64 py_find_tstate(struct py_proc *p, struct py_copy *c,
					    struct py_stack *out, __u32 tgid, __u32 tid,
					    __u64 *frame, struct py_thread **tp)
{
	struct py_thread_walk w = { .p = p, .want = tid };
	struct task_struct *task = bpf_get_current_task_btf();
	struct py_thread *t;
	long n;

	w.interps = py_opaque_zero(&out->nframes);
	w.flags = py_opaque_zero(&out->nframes);

	if (p->thread_match == PY_MATCH_FSBASE) {
		w.want = py_fsbase(p);
		if (!w.want) {
			out->flags |= PY_NO_THREAD;
			return 0;
		}
	}
	*tp = 0;
	t = bpf_task_storage_get(&py_threads, task, 0, 0);
	if (t && t->runtime == p->runtime && t->code_gen == p->code_gen &&
	    py_tstate_check(p, c, t->tstate, t->interp, w.want, frame)) {
		*tp = t;
		return t->tstate;
	}
	if (py_read_ptr(&w.interp, p->runtime, p->runtime_interp_head) < 0) {
		out->flags |= PY_READ_ERROR;
		return 0;
	}
	/* One step per thread state plus one per interpreter. */
	n = bpf_loop(PY_MAX_THREADS + PY_MAX_INTERPS, py_thread_step, &w, 0);
	out->flags |= w.flags;
	if (!w.found && !w.flags && n >= PY_MAX_THREADS + PY_MAX_INTERPS)
		out->flags |= PY_THREADS_CUT;
	if (!w.found)
		return 0;
	if (py_read_ptr(frame, w.found, p->ts_frame) < 0) {
		out->flags |= PY_READ_ERROR;
		return 0;
	}
	if (p->ts_window >= 0 &&
	    (t = bpf_task_storage_get(&py_threads, task, 0, PY_STORAGE_CREATE))) {
		t->tstate = w.found;
		t->interp = w.interp;
		t->runtime = p->runtime;
		t->code_gen = p->code_gen;
		t->copy_lo = 0;
		t->native_top = 0;
		*tp = t;
	}
	return w.found;
}

struct py_frame_walk {
	struct py_proc *p;
	/* A known chain to compare the walk's with as it goes (the frames
	 * of a py_sites slot), or NULL; diff: 0 while frame n equals the
	 * n-th of cand (frames past PY_KEY_FRAMES wrap: such a stack is
	 * never known). */
	const struct py_key_frame *cand;
	__u64 diff;
	struct py_copy *copy; /* the memory below the innermost frame */
	struct py_stack *out;
	__u64 frame; /* next frame to read, 0 at the end */
	__u64 h;     /* the chain's hash so far (py_site_frame) */
	__u64 low;   /* py_read_frame's */
	__u64 bad;   /* py_copy.bad */
	__u32 n;     /* frames kept */
	__u32 flags;
	__u32 tgid;
};

/* The identity of the code object of frame n. Where its deallocation is
 * probed: the incarnation it was described under in this generation (and
 * bit n of *sent), or a new one, whose description py_code_new then says
 * is to be sent; nothing of the code object is read. Elsewhere: the hash
 * of what it points to, read now. */
static __always_inline __u64 py_code_known(struct py_proc *p, __u32 tgid, __u64 code,
					   __u64 *sent, __u32 n, __u32 *flags)
{
	struct py_code_ref r = { .code = code, .pid = tgid, .gen = p->code_gen };
	__u64 *id;

	if (!r.gen || !code)
		return py_code_id(p, code, flags);
	id = bpf_map_lookup_elem(&py_codes, &r);
	if (id) {
		*sent |= 1ULL << (n & 63);
		return *id;
	}
	return PY_CODE_INCARNATION | __sync_fetch_and_add(&py_code_next, 1);
}

static long py_frame_step(__u64 i, void *arg)
{
	struct py_frame_walk *w = arg;
	struct py_proc *p = w->p;
	struct py_stack *out = w->out;
	struct py_frame_fields f;
	__u32 n = w->n;

	if (!w->frame)
		return 1;
	if (py_read_frame(p, w->copy, w->frame, &f, &w->low) < 0)
		goto fault;
	/* Not 0 unless the frame came from the copy (low is its window). */
	w->bad |= w->low ^ (w->frame + p->frame_window);
	if (p->owner_skip == 0xff || f.owner != p->owner_skip) {
		if (n >= PY_MAX_FRAMES) {
			w->flags |= PY_TRUNCATED;
			return 1;
		}
		w->copy->addr[n & (PY_KEY_FRAMES - 1)] = w->frame;
		out->frames[n].code = f.code;
		out->frames[n].instr = f.instr;
		w->diff |= (w->cand[n & (PY_KEY_FRAMES - 1)].code ^ f.code) |
			   (w->cand[n & (PY_KEY_FRAMES - 1)].instr ^ f.instr);
		w->h = py_site_frame(w->h, f.code, f.instr);
		w->n = n + 1;
	} else {
		w->bad |= 1;
	}
	w->frame = f.previous;
	return 0;
fault:
	w->flags |= PY_READ_ERROR;
	return 1;
}

/* A child forked by process parent, a registered interpreter, runs the
 * same interpreter at the same addresses (until it execs): give it a copy
 * of its parent's entry, so that its Python stacks are walked from its
 * first instruction, not from when user space reads its fork record (a
 * worker may allocate and end before that). The copy does not take the
 * parent's code generation (code_gen 0): the deallocation of the child's
 * code objects is not counted on, each frame's code object is identified
 * again. 1 when the child has one. */
static __always_inline int py_fork(__u32 parent, __u32 child)
{
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &parent);
	struct py_proc c;

	if (!p)
		return 0;
	__builtin_memcpy(&c, p, sizeof(c));
	c.code_gen = 0;
	return bpf_map_update_elem(&py_procs, &child, &c, BPF_ANY) == 0;
}

/* The py_procs entry of a process, NULL when it has none. */
static __always_inline struct py_proc *py_proc_lookup(__u32 tgid)
{
	return bpf_map_lookup_elem(&py_procs, &tgid);
}

/* The start of py_walk (see there): *out's header reset, the thread state
 * found, the innermost frame's address in *frame (0: the thread runs no
 * Python code) and the memory below it copied into c, this CPU's py_copy.
 * Returns the thread state, 0 when there is none (out->flags say why):
 * then the walk ends there, with no frame. */
static __always_inline __u64 py_walk_start(struct py_stack *out, struct py_proc *p,
					   struct py_copy *c, __u32 tgid, __u32 tid,
					   struct py_thread **tp, __u64 *frame)
{
	struct py_thread *t = 0;
	__u64 ts;

	out->tstate = 0;
	out->code_frees = 0;
	out->token = 0;
	out->nframes = 0;
	out->flags = 0;
	out->code_gen = 0;
	out->_pad = 0;
	*tp = 0;
	*frame = 0;
	if (!p) {
		out->flags = PY_NO_PROC;
		return 0;
	}
	/* Before anything of the stack is read: a code object freed after
	 * this is counted in a later value (bpf/pyknown.h). */
	out->code_frees = *(volatile __u64 *)&p->code_frees;
	out->code_gen = p->code_gen;
	ts = py_find_tstate(p, c, out, tgid, tid, frame, &t);
	*tp = t;
	if (!ts) {
		if (!out->flags)
			out->flags = PY_NO_THREAD;
		return 0;
	}
	out->tstate = ts;
	if (p->cframe_current >= 0 && *frame &&
	    py_read_ptr(frame, *frame, p->cframe_current) < 0) {
		out->flags |= PY_READ_ERROR;
		return 0;
	}
	py_copy_frames(c, p, *frame, t ? t->copy_lo : 0);
	return ts;
}

/* The rest of py_walk: the frames from frame (py_walk_start's), t the
 * thread's py_threads entry or NULL. */
static __always_inline __u32 py_walk_frames(struct py_stack *out, struct py_proc *p,
					    struct py_copy *c, struct py_thread *t, __u32 tgid,
					    __u64 frame, __u64 *h,
					    const struct py_key_frame *cand, __u64 *diff)
{
	struct py_frame_walk w = { .out = out, .tgid = tgid, .cand = cand, .copy = c };

	w.p = p;
	w.frame = frame;
	w.h = py_site_start(tgid, p->code_gen);
	w.n = py_opaque_zero(&out->nframes);
	w.flags = py_opaque_zero(&out->nframes);
	/* ~0 and 0, as u64s the verifier knows nothing of: what the steps
	 * store in them stays in the range they start with. */
	*(volatile __u64 *)&out->token = ~0ULL;
	w.low = *(volatile __u64 *)&out->token;
	*(volatile __u64 *)&out->token = 0;
	w.diff = *(volatile __u64 *)&out->token;
	w.bad = *(volatile __u64 *)&out->token;
	/* Twice the frames kept: room for the C-stack shims (3.12+) between
	 * them; a stack still going after that is reported cut. */
	bpf_loop(PY_MAX_FRAMES * 2, py_frame_step, &w, 0);
	if (w.frame && !w.flags)
		w.flags |= PY_TRUNCATED;
	out->flags |= w.flags;
	out->nframes = w.n;
	*h = w.h;
	*diff = w.diff;
	c->bad = w.bad;
	if (t)
		t->copy_lo = w.low == ~0ULL ? 0 : w.low;
	return w.n;
}

/* Walk the Python stack of the calling thread tid of process tgid into
 * *out (its header and frames[0..nframes) overwritten, their code_id
 * left for py_resolve: a chain py_sites knows needs none); p is its
 * process's py_procs entry (py_proc_lookup), NULL when it has none. The
 * walk compares its chain with cand, never NULL (a py_sites slot's frames):
 * *diff gets 0 when its first frames are cand's. *h gets the chain's hash
 * (py_site_set with nframes, bpf/stack_hash.h), *tp the thread's
 * py_threads entry (NULL when it has none). Returns the number of frames.
 * It uses this CPU's py_copy: the caller must keep another capture on this
 * CPU from running meanwhile (a thread preempted in its probe: tttrace's
 * attach_stack holds its scratch's busy flag around it). */
static __always_inline __u32 py_walk(struct py_stack *out, struct py_proc *p, __u32 tgid,
				     __u32 tid, __u64 *h, struct py_thread **tp,
				     const struct py_key_frame *cand, __u64 *diff)
{
	struct py_copy *c;
	__u32 zero = 0;
	__u64 frame;

	*h = 0;
	*tp = 0;
	*diff = 1;
	c = bpf_map_lookup_elem(&py_copy, &zero);
	if (!c) {
		out->nframes = 0;
		out->flags = PY_READ_ERROR;
		return 0;
	}
	if (!py_walk_start(out, p, c, tgid, tid, tp, &frame))
		return 0;
	return py_walk_frames(out, p, c, *tp, tgid, frame, h, cand, diff);
}

struct py_resolve_walk {
	struct py_proc *p;
	struct py_stack *out;
	__u64 sent;
	__u32 tgid;
	__u32 flags;
};

static long py_resolve_step(__u64 i, void *arg)
{
	struct py_resolve_walk *w = arg;
	struct py_frame *f;

	if (i >= PY_MAX_FRAMES || i >= w->out->nframes)
		return 1;
	f = &w->out->frames[i];
	f->code_id = py_code_known(w->p, w->tgid, f->code, &w->sent, i, &w->flags);
	return 0;
}

/* Take the code_id of every frame of a stack py_walk took without
 * (resolve 0), as it would have; *sent as py_capture's. */
static __always_inline void py_resolve(struct py_stack *out, struct py_proc *p, __u32 tgid,
				       __u64 *sent)
{
	struct py_resolve_walk w = { .p = p, .out = out, .tgid = tgid };

	w.flags = py_opaque_zero(&out->_pad);
	w.sent = py_opaque_zero(&out->_pad);
	bpf_loop(PY_MAX_FRAMES, py_resolve_step, &w, 0);
	out->flags |= w.flags;
	*sent = w.sent;
}

/* Copy the Python stack of the calling thread tid of process tgid into
 * *out (fully overwritten), every frame's code_id taken (py_walk, then
 * py_resolve); p is its process's py_procs entry, NULL when it has none.
 * *sent gets bit n set for each frame n whose code object is known to have
 * been described (pass it to py_code_new). Returns the number of frames.
 * The same contract as py_walk's on this CPU's py_copy. */
static __always_inline __u32 py_capture(struct py_stack *out, struct py_proc *p, __u32 tgid,
					__u32 tid, __u64 *sent)
{
	struct py_thread *t;
	struct py_copy *c;
	__u32 zero = 0, n;
	__u64 h, diff;

	*sent = 0;
	c = bpf_map_lookup_elem(&py_copy, &zero);
	if (!c)
		return 0;
	n = py_walk(out, p, tgid, tid, &h, &t, c->no_cand, &diff);
	if (p)
		py_resolve(out, p, tgid, sent);
	return n;
}

/* Whether the code object of frame n of a stack py_capture took (sent: its
 * mask) still needs a py_code record in process tgid. */
static __always_inline int py_code_new(struct py_proc *p, __u32 tgid, struct py_frame *f,
				       __u64 sent, __u32 n)
{
	struct py_code_ref r = { .code = f->code, .pid = tgid, .gen = p->code_gen };
	__u64 *id;

	if (!f->code || (sent >> (n & 63)) & 1)
		return 0;
	id = bpf_map_lookup_elem(&py_codes, &r);
	return !id || *id != f->code_id;
}

/* Mark a frame's code object as described, once its record is submitted. */
static __always_inline void py_code_sent(struct py_proc *p, __u32 tgid, struct py_frame *f)
{
	struct py_code_ref r = { .code = f->code, .pid = tgid, .gen = p->code_gen };

	bpf_map_update_elem(&py_codes, &r, &f->code_id, BPF_ANY);
}

/* The code object at code in process tgid is being deallocated (the entry
 * of PyCode_Type's tp_dealloc): its description no longer holds for the
 * address. */
static __always_inline void py_code_freed(__u32 tgid, __u64 code)
{
	struct py_proc *p = py_proc_lookup(tgid);
	struct py_code_ref r = { .code = code, .pid = tgid };

	if (!p || !p->code_gen)
		return;
	/* Counted first, at the entry of the deallocation: before the address
	 * can be given to another code object, and whether the object was
	 * described or not (py_codes is LRU: its entry may have gone). */
	__sync_fetch_and_add(&p->code_frees, 1);
	r.gen = p->code_gen;
	bpf_map_delete_elem(&py_codes, &r);
}


/* Copy a compact str's data (its end when it does not fit). */
static __always_inline int py_read_str(struct py_proc *p, __u64 str, __u8 *dst,
				       __u32 *len, __u32 *chars, __u32 *state,
				       __u64 *type)
{
	__u64 length = 0, size;
	__u32 st = 0, kind;
	__s64 data;

	*len = 0;
	if (py_read_ptr(type, str, p->ob_type) < 0 ||
	    py_read_ptr(&length, str, p->str_length) < 0 ||
	    bpf_probe_read_user(&st, sizeof(st), (void *)(str + p->str_state)) < 0)
		return -1;
	*state = st;
	*chars = length;
	kind = (st >> 2) & 7;
	data = (st >> 6) & 1 ? p->str_ascii_size : p->str_compact_size;
	size = length * kind;
	/* A long string keeps its end (a path's file name, a qualname's
	 * function), PY_STR_MAX - 4 bytes: whole characters of any width. */
	if (size >= PY_STR_MAX) {
		data += size - (PY_STR_MAX - 4);
		size = PY_STR_MAX - 4;
	}
	PY_BOUND(size, PY_STR_MAX - 1);
	if (bpf_probe_read_user(dst, size, (void *)(str + data)) < 0)
		return -1;
	*len = size;
	return 0;
}

/* Fill *c (all of it) with what the code object of frame f says. */
static __always_inline void py_code_read(struct py_code *c, struct py_proc *p,
					 __u32 tgid, struct py_frame *f)
{
	__u64 code = f->code, str = 0, table = 0, units = 0, size = 0, len;

	__builtin_memset(c, 0, sizeof(*c) - PY_STR_MAX * 2 - PY_LINETABLE_MAX);
	c->code = code;
	c->code_id = f->code_id;
	c->pid = tgid;
	if (py_read_ptr(&c->code_type, code, p->ob_type) < 0 ||
	    bpf_probe_read_user(&c->firstlineno, sizeof(c->firstlineno),
				(void *)(code + p->code_firstlineno)) < 0)
		goto fault;
	if (py_read_ptr(&str, code, p->code_filename) < 0 ||
	    py_read_str(p, str, c->filename, &c->filename_len, &c->filename_chars,
			&c->filename_state, &c->filename_type) < 0)
		goto fault;
	if (py_read_ptr(&str, code, p->code_name) < 0 ||
	    py_read_str(p, str, c->name, &c->name_len, &c->name_chars,
			&c->name_state, &c->name_type) < 0)
		goto fault;
	if (py_read_ptr(&table, code, p->code_linetable) < 0 ||
	    py_read_ptr(&c->linetable_type, table, p->ob_type) < 0 ||
	    py_read_ptr(&size, table, p->var_size) < 0)
		goto fault;
	c->linetable_size = size;
	len = size >= PY_LINETABLE_MAX ? PY_LINETABLE_MAX - 1 : size;
	PY_BOUND(len, PY_LINETABLE_MAX - 1);
	if (bpf_probe_read_user(c->linetable, len, (void *)(table + p->bytes_data)) < 0)
		goto fault;
	c->linetable_len = len;
	/* The bytecode's length: the code object's own ob_size (3.11+), or its
	 * co_code bytes object's (3.10, in bytes). */
	if (p->code_code >= 0) {
		if (py_read_ptr(&str, code, p->code_code) < 0 ||
		    py_read_ptr(&c->units_type, str, p->ob_type) < 0 ||
		    py_read_ptr(&units, str, p->var_size) < 0)
			goto fault;
		c->units = units / 2;
	} else {
		if (py_read_ptr(&units, code, p->var_size) < 0)
			goto fault;
		c->units = units;
		c->units_type = c->code_type;
	}
	return;
fault:
	c->flags |= PY_CODE_READ_ERROR;
}

#endif /* TTTRACE_PYTHON_H */
