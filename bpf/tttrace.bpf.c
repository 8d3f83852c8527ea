//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tttrace BPF side: entry uprobes on libtt_metal.so that copy what a
 * TT-Metal allocation, free, view, circular-buffer or close call names into
 * one ordered ring buffer. No uretprobes: a C++ exception through a
 * uretprobed frame terminates the traced process (docs/ttmetal.md §2).
 *
 * Contract with user space (probes/):
 *  - every const volatile below is set before load;
 *  - each probed library has an entry in the libs map with its layout
 *    (field offsets from a resolved layout, never from a guess) and vtables;
 *  - each program is attached with a BPF cookie holding the library's
 *    index in the libs map (top 16 bits) and the attach point's static
 *    (link-time) address (low 48 bits): the load bias of the library in the
 *    traced process is ip - address, which places that library's Device and
 *    MeshDevice vtables in the process without a per-process table;
 *  - the uprobe programs are declared uprobe.multi (one link per program
 *    and library, Linux >= 6.6); on older kernels user space loads them as
 *    classic uprobes instead. Their bodies do not depend on which;
 *  - every record has a sequence number taken before its reservation; a
 *    failed reservation bumps this CPU's lost counters and the next record
 *    from the CPU carries the count in lost_before.
 */
#include "types.h"
#include "bpf/bpf_helpers.h"
#include "bpf/bpf_tracing.h"
#include "bpf/bpf_core_read.h"
#include "tttrace.h"
#include "stack.h"
#include "python.h"
#include "pyknown.h"

/* libbpf 1.1 stops at PT_REGS_PARM5; the sixth SysV argument is in r9. */
#ifndef PT_REGS_PARM6
#define PT_REGS_PARM6(x) ((x)->r9)
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keep every record of wire.h in BTF (events/internal/genwire), and what
 * user space writes into maps: enum layout_field (bpf2go -type
 * layout_field) and struct py_proc (pyframes). */
const struct event *unused_event __attribute__((unused));
const struct stack_record *unused_stack_record __attribute__((unused));
const struct py_stack_record *unused_py_stack_record __attribute__((unused));
const struct py_code_record *unused_py_code_record __attribute__((unused));
const struct alloc_capacity_record *unused_alloc_capacity_record __attribute__((unused));
const struct alloc_request_record *unused_alloc_request_record __attribute__((unused));
const struct trace_record *unused_trace_record __attribute__((unused));
const struct cb_alloc_record *unused_cb_alloc_record __attribute__((unused));
const struct link_object_record *unused_link_object_record __attribute__((unused));
const enum link_object_flags *unused_link_object_flags __attribute__((unused));
const enum link_limits *unused_link_limits __attribute__((unused));
const struct op_enter_record *unused_op_enter_record __attribute__((unused));
const struct runtime_id_record *unused_runtime_id_record __attribute__((unused));
const enum runtime_id_flags *unused_runtime_id_flags __attribute__((unused));
const enum op_enter_flags *unused_op_enter_flags __attribute__((unused));
const enum op_limits *unused_op_limits __attribute__((unused));
const enum cb_range_flags *unused_cb_range_flags __attribute__((unused));
const enum trace_flags *unused_trace_flags __attribute__((unused));
const enum stack_flags *unused_stack_flags __attribute__((unused));
const enum py_stack_flags *unused_py_stack_flags __attribute__((unused));
const enum py_code_flags *unused_py_code_flags __attribute__((unused));
const enum layout_field *unused_layout_field __attribute__((unused));
const struct py_proc *unused_py_proc __attribute__((unused));

/* ---- knobs and layout, set from Go ----------------------------------- */

/* Pending bytes in the ring that make a submit wake the reader. */
const volatile __u64 wakeup_bytes = 1;
/* Keep TT-NN op frames per thread and say in each record how many are
 * live (ops.h). A constant to the verifier: with 0 the checks are pruned. */
const volatile __u8 ops_on = 0;
/* Only trace processes listed in traced_pids. */
const volatile __u8 filter_pids = 1;
/* Add the children a traced process forks to traced_pids. */
const volatile __u8 follow_children = 0;
/* Copy the user stack of every allocation (docs/stacks.md). A constant to
 * the verifier: with 0 the capture is pruned from the programs. */
const volatile __u8 capture_stacks = 0;

/* ---- maps ------------------------------------------------------------ */

/* The one ordered stream of records; size set from Go. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

/* What tttrace knows of each probed library, indexed by the library index
 * in the cookie; written by user space before it attaches the library.
 * vtable_*: static addresses of the address points (vtable symbol + 16) of
 * the Device and MeshDevice vtables, 0 when the library has no such class.
 * off: the layout of tt::tt_metal::Buffer and Device, indexed by enum
 * layout_field (bpf/tttrace.h); with a pimpl layout (V2)
 * off[LF_BUFFER_IMPL_PTR] is the offset of the BufferImpl pointer inside
 * Buffer and the Buffer offsets are inside BufferImpl; otherwise it is -1
 * and they are inside Buffer. A field a layout lacks is -1. The index of
 * every read is a constant: this costs what named members cost.
 * span_lo, span_len: the bytes of the Buffer (or BufferImpl) that hold all
 * its fields read, from the lowest offset to the end of the last field; at
 * most SPAN_MAX, 0 when they are further apart (each field is then read on
 * its own). One read of the span costs about what one read of a field
 * costs. */
#define SPAN_MAX 128
struct lib_info {
	__u64 vtable_device;
	__u64 vtable_mesh;
	__s64 off[LF_COUNT];
	__u32 span_lo;
	__u32 span_len;
};

#define MAX_LIBS 256

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_LIBS);
	__type(key, __u32);
	__type(value, struct lib_info);
} libs SEC(".maps");

/* What the programs know of each process, one byte per tgid (enum
 * pid_flag): whether it is traced (with filter_pids) and whether it runs a
 * CPython user space registered in py_procs. A byte per possible pid
 * (PID_MAX_LIMIT, 4M on 64-bit kernels: 4 MiB) instead of a hash map:
 * reading it is one load after an inlined array lookup, where a hash
 * lookup is a helper call (~40 ns on Linux 6.18, per record;
 * docs/bench.md). User space maps the array and changes a pid's byte with
 * atomic operations on its word; the fork hook sets a followed child's
 * byte, the exit hook clears the byte of a process whose last thread
 * exits (user space also clears it once the process is reported). */
#define PID_SPACE (1 << 22)
enum pid_flag {
	PID_TRACED = 1, /* with filter_pids: the process is traced */
	PID_PYTHON = 2, /* it has a py_procs entry (its Python stacks are walked) */
	PID_DEV_CLOSED = 4, /* a device or mesh of it closed: its device pointers are no
			     * longer cached (devcache.h); set by the close probes */
	PID_HEIR = 8, /* forked by a traced process without a py_procs entry: it may take
		       * its parent's once that has one (pyheir.h) */
};
struct pid_table {
	__u8 flags[PID_SPACE];
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, 1U << 10); /* BPF_F_MMAPABLE */
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pid_table);
} traced_pids SEC(".maps");
const enum pid_flag *unused_pid_flag __attribute__((unused));

struct lost_counter {
	__u64 total;   /* struct event records this CPU could not reserve, ever */
	__u64 pending; /* of those, since this CPU's last delivered event */
	/* Records of each kind this CPU could not deliver, ever: the struct
	 * event kinds (their sum is total), and the records that describe an
	 * alloc (EV_STACK, EV_PY_STACK, EV_PY_CODE: the alloc itself is
	 * there). */
	__u64 kinds[EV_RING_KINDS];
};

/* Per-CPU loss counters: no atomics needed, a uprobe program does not
 * migrate while it runs. User space sums them at the end. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lost_counter);
} lost SEC(".maps");

/* Global sequence counter shared by all CPUs. */
__u64 next_seq = 0;

/* Nonzero while the reader is not asleep on the ring, or a wake-up is
 * already on its way to it: no submit needs to wake it. User space maps
 * it at load (probes, shareAwakeFlag), clears it just before it sleeps
 * (probes.Ring.wait) and sets it when it wakes; a reader that never
 * cleared it would be woken once, then only by its own deadline. */
__u32 reader_awake = 0;

/* ---- helpers --------------------------------------------------------- */

/* The flags byte of process tgid (tgid < PID_SPACE: the kernel's own
 * limit). */
static __always_inline __u8 *pid_flags(__u32 tgid)
{
	__u32 zero = 0;
	struct pid_table *t = bpf_map_lookup_elem(&traced_pids, &zero);

	return t ? &t->flags[tgid & (PID_SPACE - 1)] : 0;
}

static __always_inline int traced(__u32 tgid)
{
	__u8 *f;

	if (!filter_pids)
		return 1;
	f = pid_flags(tgid);
	return f && (*f & PID_TRACED);
}

static __always_inline void *start_record(enum event_kind kind, __u32 size, __u64 *lost_before, __u64 sp);
static __always_inline void finish(void *e);

/* The thread's TT-NN op frames, and the op programs. */
#include "ops.h"

/* Reserve a record of size bytes of kind and fill its header (sp: the
 * thread's user stack pointer, PT_REGS_SP at a uprobe, 0 elsewhere: the op
 * frames live at that sp, ops.h); NULL when the process is not traced or
 * the ring is full (then the loss is counted). *lost_before: the
 * reservations this CPU failed since its previous record. */
static __always_inline void *start_record(enum event_kind kind, __u32 size, __u64 *lost_before, __u64 sp)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 zero = 0;
	struct lost_counter *lc;
	struct record_header *h;
	__u64 seq;

	if (!traced(tgid))
		return 0;
	seq = __sync_fetch_and_add(&next_seq, 1);
	lc = bpf_map_lookup_elem(&lost, &zero);
	h = bpf_ringbuf_reserve(&events, size, 0);
	if (!h) {
		if (lc) {
			lc->total++;
			lc->pending++;
			lc->kinds[kind & (EV_RING_KINDS - 1)]++;
		}
		return 0;
	}
	__builtin_memset(h, 0, size);
	h->seq = seq;
	h->ts_ns = bpf_ktime_get_ns();
	h->pid = tgid;
	h->tid = (__u32)id;
	h->kind = kind;
	h->op_frames = op_check(kind, sp, id);
	if (lc) {
		*lost_before = lc->pending;
		lc->pending = 0;
	}
	return h;
}

/* Reserve and pre-fill a struct event (no chip, no buffer type yet); NULL
 * as start_record. */
static __always_inline struct event *start(enum event_kind kind, __u64 sp)
{
	__u64 lost_before = 0;
	struct event *e = start_record(kind, sizeof(*e), &lost_before, sp);

	if (!e)
		return 0;
	e->lost_before = lost_before;
	e->chip = -1;
	e->buffer_type = -1;
	return e;
}

/* Count a record of kind that describes an alloc (a stack, a Python
 * stack, a code object) as not delivered. */
static __always_inline void lost_record(enum event_kind kind)
{
	__u32 zero = 0;
	struct lost_counter *lc = bpf_map_lookup_elem(&lost, &zero);

	if (lc)
		lc->kinds[kind & (EV_RING_KINDS - 1)]++;
}

/* Waking the reader costs an interrupt-work round trip (an IPI to this
 * CPU, a hypervisor exit on most VMs); it is only worth it once a batch has
 * piled up, and only when the reader sleeps: one wake-up per sleep, not one
 * per record while it catches up. User space also polls on a short
 * deadline, so a quiet trickle is still read promptly. */
static __always_inline void finish(void *e)
{
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (!reader_awake && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes) {
		reader_awake = 1;
		flags = BPF_RB_FORCE_WAKEUP;
	}
	bpf_ringbuf_submit(e, flags);
}

/* For records user space must act on at once (a library was mapped, a
 * process forked or ended). */
static __always_inline void finish_now(struct event *e)
{
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* Read a field of at most 8 bytes at base+off into *dst (zeroed first);
 * off < 0 means the layout has no such field. */
static __always_inline void read_field(struct event *e, void *dst, __u32 len,
				       __u64 base, __s64 off)
{
	if (off < 0)
		return;
	if (bpf_probe_read_user(dst, len, (void *)(base + off)) < 0)
		e->read_error = 1;
}

/* Where the probed library is in this process and which it is. */
struct site {
	__u64 bias; /* load bias: ip - static address of the attach point */
	struct lib_info *lib;
};

#define COOKIE_ADDR_MASK ((1ULL << 48) - 1)

static __always_inline struct site locate(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 idx = cookie >> 48;
	struct site s;

	s.bias = PT_REGS_IP(ctx) - (cookie & COOKIE_ADDR_MASK);
	s.lib = bpf_map_lookup_elem(&libs, &idx);
	return s;
}

/* The little-endian value of len bytes at off in the span copied from
 * base + lo. Byte loads: the stack is only read aligned, and off is not
 * known to the verifier. */
static __always_inline __u64 span_field(const __u8 *span, __s64 off, __u32 lo, __u32 len)
{
	__u64 v = 0, rel = (__u64)(off - lo) & (SPAN_MAX - 1);
	int i;

#pragma unroll
	for (i = 7; i >= 0; i--)
		if (i < len)
			v = v << 8 | span[rel + i];
	return v;
}

#include "devcache.h"

/* Say what an IDevice* is, by its vptr (or what the cache kept of it for
 * process e->hdr.pid: devcache.h). */
static __always_inline void classify_device(struct event *e, __u64 dev,
					    struct site *site)
{
	__u64 vptr = 0, vt_device = 0, vt_mesh = 0;
	__s64 id_off = site->lib ? site->lib->off[LF_DEVICE_ID] : -1;
	__u32 tgid = e->hdr.pid, kind = 0;
	__s32 id = -1;
	int have_id = 0;

	e->device = dev;
	if (!dev) {
		e->device_kind = DEV_NONE;
		return;
	}
	if (site->lib && tgid && dev_cache_get(tgid, dev, site->bias, &kind, &id)) {
		e->device_kind = kind;
		if (kind == DEV_CHIP) {
			e->device_vptr = site->bias + site->lib->vtable_device;
			e->chip = id;
		} else {
			e->device_vptr = site->bias + site->lib->vtable_mesh;
		}
		return;
	}
	if (id_off >= 8 && id_off + 4 <= SPAN_MAX) {
		/* The vptr and Device::id_ in one read (the id is used only if
		 * the vptr says the object is a Device). */
		__u8 head[SPAN_MAX + 8];

		__builtin_memset(head, 0, sizeof(head));
		if (bpf_probe_read_user(head, id_off + 4, (void *)dev) == 0) {
			vptr = span_field(head, 0, 0, 8);
			id = (__s32)span_field(head, id_off, 0, 4);
			have_id = 1;
		}
	}
	if (!have_id && bpf_probe_read_user(&vptr, sizeof(vptr), (void *)dev) < 0) {
		e->read_error = 1;
		e->device_kind = DEV_UNKNOWN;
		return;
	}
	e->device_vptr = vptr;
	if (site->lib) {
		vt_device = site->lib->vtable_device;
		vt_mesh = site->lib->vtable_mesh;
	}
	if (vt_device && vptr == site->bias + vt_device) {
		e->device_kind = DEV_CHIP;
		if (!have_id && site->lib->off[LF_DEVICE_ID] >= 0 &&
		    bpf_probe_read_user(&id, sizeof(id), (void *)(dev + site->lib->off[LF_DEVICE_ID])) < 0) {
			e->read_error = 1; /* id zeroed, as read_field leaves it */
		} else if (tgid && site->lib->off[LF_DEVICE_ID] >= 0) {
			dev_cache_put(tgid, dev, site->bias, DEV_CHIP, id);
		}
		e->chip = id;
	} else if (vt_mesh && vptr == site->bias + vt_mesh) {
		e->device_kind = DEV_MESH;
		if (tgid)
			dev_cache_put(tgid, dev, site->bias, DEV_MESH, -1);
	} else {
		e->device_kind = DEV_UNKNOWN;
	}
}

/* classify_device for a record other than struct event with device
 * fields of the same names (device, device_vptr, device_kind, chip,
 * read_error): sets them, read_error only ever raised. */
#define classify_record(r, dev, site)                            \
	do {                                                     \
		struct event probe_;                             \
								 \
		__builtin_memset(&probe_, 0, sizeof(probe_));    \
		probe_.hdr.pid = (r)->hdr.pid;                   \
		probe_.chip = -1;                                \
		classify_device(&probe_, (dev), (site));         \
		(r)->device = probe_.device;                     \
		(r)->device_vptr = probe_.device_vptr;           \
		(r)->device_kind = probe_.device_kind;           \
		(r)->chip = probe_.chip;                         \
		(r)->read_error |= probe_.read_error;            \
	} while (0)

/* Read the Buffer's fields out of its span with one user read; 0 when
 * that read failed. */
static __always_inline int read_span(struct event *e, __u64 base, struct lib_info *l, __u64 *dev)
{
	__u8 span[SPAN_MAX + 8];
	__u32 lo = l->span_lo, len = l->span_len;
	__s64 w = l->off[LF_BUFFER_TYPE_WIDTH];

	if (len > SPAN_MAX)
		return 0;
	__builtin_memset(span, 0, sizeof(span));
	if (bpf_probe_read_user(span, len, (void *)(base + lo)) < 0)
		return 0;
	if (l->off[LF_DEVICE] >= 0)
		*dev = span_field(span, l->off[LF_DEVICE], lo, 8);
	if (l->off[LF_SIZE] >= 0)
		e->size = span_field(span, l->off[LF_SIZE], lo, 8);
	if (l->off[LF_BUFFER_TYPE] >= 0)
		e->buffer_type = (__s32)span_field(span, l->off[LF_BUFFER_TYPE], lo,
						   w == 1 || w == 2 ? w : 4);
	if (l->off[LF_OWNS_DATA] >= 0)
		e->owns_data = span_field(span, l->off[LF_OWNS_DATA], lo, 1);
	if (l->off[LF_ALLOCATION_STATUS] >= 0)
		e->status = span_field(span, l->off[LF_ALLOCATION_STATUS], lo, 1);
	if (l->off[LF_HOOKED_ALLOCATION] >= 0)
		e->hooked = span_field(span, l->off[LF_HOOKED_ALLOCATION], lo, 1);
	if (l->off[LF_ADDRESS] >= 0)
		e->address = span_field(span, l->off[LF_ADDRESS], lo, 8);
	if (l->off[LF_PAGE_SIZE] >= 0)
		e->page_size = span_field(span, l->off[LF_PAGE_SIZE], lo, 8);
	return 1;
}

/* Copy the fields of a tt::tt_metal::Buffer. */
static __always_inline void read_buffer(struct event *e, __u64 buf, struct site *site)
{
	struct lib_info *l = site->lib;
	__u64 base = buf, dev = 0, size = 0, address = 0, page_size = 0;
	__s32 type = -1;
	__u8 owns = 0, status = 0, hooked = 0;

	e->object = buf;
	if (!l) {
		e->read_error = 1;
		return;
	}
	if (l->off[LF_BUFFER_IMPL_PTR] >= 0) {
		base = 0;
		read_field(e, &base, sizeof(base), buf, l->off[LF_BUFFER_IMPL_PTR]);
		if (!base) {
			e->read_error = 1;
			return;
		}
	}
	if (l->span_len) {
		/* Every field lies in the span: if it cannot be read, neither
		 * can they. */
		if (read_span(e, base, l, &dev))
			classify_device(e, dev, site);
		else
			e->read_error = 1;
		return;
	}
	read_field(e, &dev, sizeof(dev), base, l->off[LF_DEVICE]);
	read_field(e, &size, sizeof(size), base, l->off[LF_SIZE]);
	/* At the width the library's own code reads it: the bytes after a
	 * one-byte enum are padding and may hold anything. */
	if (l->off[LF_BUFFER_TYPE_WIDTH] == 1 || l->off[LF_BUFFER_TYPE_WIDTH] == 2) {
		__u16 narrow = 0;

		read_field(e, &narrow, l->off[LF_BUFFER_TYPE_WIDTH] == 1 ? 1 : 2, base, l->off[LF_BUFFER_TYPE]);
		if (l->off[LF_BUFFER_TYPE] >= 0)
			type = narrow;
	} else {
		read_field(e, &type, sizeof(type), base, l->off[LF_BUFFER_TYPE]);
	}
	read_field(e, &owns, sizeof(owns), base, l->off[LF_OWNS_DATA]);
	read_field(e, &status, sizeof(status), base, l->off[LF_ALLOCATION_STATUS]);
	read_field(e, &hooked, sizeof(hooked), base, l->off[LF_HOOKED_ALLOCATION]);
	read_field(e, &address, sizeof(address), base, l->off[LF_ADDRESS]);
	read_field(e, &page_size, sizeof(page_size), base, l->off[LF_PAGE_SIZE]);
	e->size = size;
	e->buffer_type = type;
	e->owns_data = owns;
	e->status = status;
	e->hooked = hooked;
	e->address = address;
	e->page_size = page_size;
	classify_device(e, dev, site);
}

/* ---- allocation stacks ------------------------------------------------ */

struct py_scratch {
	struct py_stack_record rec;
	__u32 busy; /* a capture owns rec until it is emitted (see stack.h) */
	/* What py_attach says to attach_stack, through memory: values the
	 * verifier does not track, so the native capture after it is checked
	 * once, not once per combination of them. */
	__u32 sent;  /* the Python stack's record was sent */
	__u64 token; /* the token of its known Python stack, 0: none */
	__u32 first; /* the native first copy its thread needs (stack_capture_first) */
	__u32 _pad;
};

/* The Python stack under construction, per CPU: its code records go out
 * before it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps");

struct py_code_walk {
	struct py_stack_record *rec;
	struct py_proc *proc;
	__u64 sent; /* py_capture's: the frames whose code objects were described */
};


/* bpf_loop body: describe frame i's code object if not done yet. */
static long py_send_code(__u64 i, void *arg)
{
	struct py_code_walk *w = arg;
	struct py_code_record *c;
	struct py_frame *f;

	if (i >= PY_MAX_FRAMES || i >= w->rec->stack.nframes)
		return 1;
	f = &w->rec->stack.frames[i];
	if (!py_code_new(w->proc, w->rec->hdr.pid, f, w->sent, i))
		return 0;
	c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
	if (!c) {
		lost_record(EV_PY_CODE);
		return 1; /* sent again with the next stack naming it */
	}
	c->hdr = w->rec->hdr;
	c->hdr.kind = EV_PY_CODE;
	py_code_read(&c->code, w->proc, w->rec->hdr.pid, f);
	bpf_ringbuf_submit(c, BPF_RB_NO_WAKEUP);
	py_code_sent(w->proc, w->rec->hdr.pid, f);
	return 0;
}

static __always_inline int stack_room(void);

/* Emit the Python stack of an alloc (its header in s->rec.hdr, kind
 * EV_PY_STACK) whose process runs the supported CPython p (user space put
 * it in py_procs): the code records it needs, then the stack. With known
 * stacks, a chain user space made known (pyknown.h) is not sent: s->token
 * gets its token (0: none, or the stack was sent). s->sent says whether
 * the stack was sent, s->first how long the native first copy of the
 * thread (its stack pointer sp) is to be (py_native_first). 1 when the
 * stack was sent (stack_room said there was room for it), 0 when nothing
 * was, -1 when the stack is to be sent and the ring has no room for
 * stacks: the alloc's stacks are lost. A global function: checked once,
 * whatever the paths of the program that calls it. */
__noinline int py_attach(struct py_scratch *s, struct py_proc *p, __u64 sp)
{
	struct py_code_walk w = { .proc = p };
	struct py_walk_io io = {};
	__u32 known;
	__u64 token = 0;

	if (!s || !p)
		return 0;
	known = known_stacks && p->code_gen;
	io.tgid = s->rec.hdr.pid;
	io.tid = s->rec.hdr.tid;
	io.known = known;
	s->token = 0;
	s->sent = 0;
	s->first = py_native_first(sp);
	w.rec = &s->rec;
	py_walk_once(&s->rec.stack, p, &io);
	token = io.token;
	if (token && !check_known_stacks) {
		s->token = token;
		return 0;
	}
	if (!stack_room())
		return -1;
	/* Sent: the identities (and code records) it needs. */
	py_resolve_once(&s->rec.stack, p, &io);
	w.sent = io.sent;
	s->rec.stack.token = token;
	bpf_loop(PY_MAX_FRAMES, py_send_code, &w, 0);
	if (bpf_ringbuf_output(&events, &s->rec, sizeof(s->rec), BPF_RB_NO_WAKEUP))
		lost_record(EV_PY_STACK);
	s->sent = 1;
	return 1;
}

/* Stacks are 100 times the size of events: they may fill at most half the
 * ring, so a burst the reader cannot keep up with loses stacks (counted,
 * the ledger stays exact) before it loses events. */
static __always_inline int stack_room(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + sizeof(struct stack_record) <=
	       bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2;
}

#include "pyheir.h"

/* Give the alloc e (still reserved, so it stays ahead of its stacks in the
 * ring, and user space reading e knows whether one follows) its stack: the
 * token of a known stack in e itself (STACK_TOKEN) when no Python stack
 * goes with it or that one is known too (py_token), else the records: the
 * Python stack's, if its process runs a CPython and its stack is not known,
 * then the native stack's, which completes the alloc (STACK_FOLLOWS). A
 * stack that cannot be had is lost on its own: e still goes out. */
static __always_inline void attach_stack(struct pt_regs *ctx, struct event *e)
{
	__u8 *f = pid_flags(e->hdr.pid);
	struct py_proc *py = f && (*f & PID_PYTHON) ? py_proc_lookup(e->hdr.pid) : 0;
	struct py_scratch *ps;
	struct stack_record *rec;
	__u64 py_token = 0, sp = PT_REGS_SP(ctx);
	__u32 len = 0, first = 0, zero = 0, py_sent = 0;

	if (!py && f && (*f & PID_HEIR))
		py = py_heir_adopt(e->hdr.pid);
	e->stack = STACK_LOST;
	if (py) {
		int r = 0;

		ps = bpf_map_lookup_elem(&py_scratch, &zero);
		if (!ps)
			return;
		if (__sync_val_compare_and_swap(&ps->busy, 0, 1) != 0) {
			/* Another capture owns it (see stack.h): no Python stack. */
			lost_record(EV_PY_STACK);
			ps->token = 0;
			ps->sent = 0;
			ps->first = 0;
		} else {
			ps->rec.hdr = e->hdr;
			ps->rec.hdr.kind = EV_PY_STACK;
			r = py_attach(ps, py, sp);
			*(volatile __u32 *)&ps->busy = 0;
		}
		if (r < 0) {
			lost_record(EV_STACK);
			return;
		}
		/* Read back through memory: values the verifier does not
		 * track, so the native capture after is checked once, not once
		 * per combination of them. */
		first = *(volatile __u32 *)&ps->first;
		py_sent = *(volatile __u32 *)&ps->sent;
		py_token = *(volatile __u64 *)&ps->token;
	}
	rec = stack_capture_first(ctx, &e->hdr, &len, first);
	if (!rec) {
		lost_record(EV_STACK);
		return;
	}
	if (py)
		py_native_need(sp, stack_need(rec));
	if ((!py || py_token) && len == STACK_HDR_SIZE && (rec->flags & STACK_KNOWN)) {
		/* Both stacks known: the tokens in the alloc, no record. */
		e->stack = STACK_TOKEN;
		e->stack_token = rec->token;
		e->py_token = py_token;
	} else if (!py_sent && !stack_room()) {
		/* No Python record went first, whose sending checked the room. */
		lost_record(EV_STACK);
	} else {
		if (len > sizeof(*rec))
			len = sizeof(*rec);
		if (bpf_ringbuf_output(&events, rec, len, BPF_RB_NO_WAKEUP) == 0) {
			e->stack = STACK_FOLLOWS;
			e->py_token = py_token;
		} else {
			lost_record(EV_STACK);
		}
	}
	stack_release(rec);
}

static __always_inline int on_buffer(struct pt_regs *ctx, enum event_kind kind, __u64 buf)
{
	struct event *e = start(kind, PT_REGS_SP(ctx));
	struct site site;

	if (!e)
		return 0;
	site = locate(ctx);
	read_buffer(e, buf, &site);
	if (kind == EV_ALLOC && capture_stacks)
		attach_stack(ctx, e);
	finish(e);
	return 0;
}

static __always_inline int on_device(struct pt_regs *ctx, enum event_kind kind, __u64 dev,
				     __u64 object)
{
	struct event *e = start(kind, PT_REGS_SP(ctx));
	struct site site;

	if (!e)
		return 0;
	site = locate(ctx);
	e->object = object;
	classify_device(e, dev, &site);
	finish(e);
	return 0;
}

/* A call that names a device and a range in its memory: a view's
 * Buffer::create or a circular buffer. */
static __always_inline int on_range(struct pt_regs *ctx, enum event_kind kind, __u64 dev,
				    __u64 address, __u64 size, __u64 page_size,
				    __s32 type, __u8 global)
{
	struct event *e = start(kind, PT_REGS_SP(ctx));
	struct site site;

	if (!e)
		return 0;
	site = locate(ctx);
	e->address = address;
	e->size = size;
	e->page_size = page_size;
	e->buffer_type = type;
	e->global = global;
	classify_device(e, dev, &site);
	finish(e);
	return 0;
}

/* ---- buffers --------------------------------------------------------- */

/* void GraphTracker::track_allocate(const Buffer* buffer) */
SEC("uprobe.multi")
int track_allocate(struct pt_regs *ctx)
{
	return on_buffer(ctx, EV_ALLOC, PT_REGS_PARM2(ctx));
}

/* void GraphTracker::track_deallocate(Buffer* buffer) */
SEC("uprobe.multi")
int track_deallocate(struct pt_regs *ctx)
{
	return on_buffer(ctx, EV_FREE, PT_REGS_PARM2(ctx));
}

/* void Buffer::mark_as_deallocated() */
SEC("uprobe.multi")
int mark_as_deallocated(struct pt_regs *ctx)
{
	return on_buffer(ctx, EV_MARK_DEALLOCATED, PT_REGS_PARM1(ctx));
}

/* static std::shared_ptr<Buffer> Buffer::create(IDevice* device,
 *     DeviceAddr address, DeviceAddr size, DeviceAddr page_size,
 *     BufferType buffer_type, ...)   (pre-allocated view; rdi is the sret) */
SEC("uprobe.multi")
int buffer_create_view(struct pt_regs *ctx)
{
	return on_range(ctx, EV_VIEW, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx),
			PT_REGS_PARM5(ctx), (__s32)PT_REGS_PARM6(ctx), 0);
}

/* ---- circular buffers ------------------------------------------------ */

#include "cb.h"

/* void GraphTracker::track_allocate_cb(const CoreRangeSet& core_range_set,
 *     uint64_t addr, uint64_t size, bool is_globally_allocated,
 *     const IDevice* device) */
SEC("uprobe.multi")
int track_allocate_cb(struct pt_regs *ctx)
{
	return on_cb_alloc(ctx, PT_REGS_PARM2(ctx), PT_REGS_PARM6(ctx), PT_REGS_PARM3(ctx),
			   PT_REGS_PARM4(ctx), (__u8)PT_REGS_PARM5(ctx));
}

/* void detail::ProgramImpl::generate_dispatch_commands(IDevice* device,
 *     bool use_prefetcher_cache): every enqueue of the program (fast
 * dispatch), its command sequence cached or not (docs/ttmetal.md §12). */
SEC("uprobe.multi")
int generate_dispatch_commands(struct pt_regs *ctx)
{
	return on_device(ctx, EV_PROGRAM_DISPATCH, PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx));
}

/* void GraphTracker::track_deallocate_cb(const IDevice* device) */
SEC("uprobe.multi")
int track_deallocate_cb(struct pt_regs *ctx)
{
	return on_device(ctx, EV_CB_FREE, PT_REGS_PARM2(ctx), 0);
}

/* void detail::ProgramImpl::allocate_circular_buffers(const IDevice* device) */
SEC("uprobe.multi")
int allocate_circular_buffers(struct pt_regs *ctx)
{
	return on_device(ctx, EV_CB_LAYOUT, PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx));
}

/* void detail::ProgramImpl::deallocate_circular_buffers() */
SEC("uprobe.multi")
int deallocate_circular_buffers(struct pt_regs *ctx)
{
	return on_device(ctx, EV_CB_TEARDOWN, 0, PT_REGS_PARM1(ctx));
}

/* detail::ProgramImpl::~ProgramImpl() */
SEC("uprobe.multi")
int program_destroy(struct pt_regs *ctx)
{
	return on_device(ctx, EV_PROGRAM_DESTROY, 0, PT_REGS_PARM1(ctx));
}

/* ---- devices --------------------------------------------------------- */

/* bool Device::close(); its process's device pointers are classified
 * again from now on (devcache.h). */
SEC("uprobe.multi")
int device_close(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (traced(tgid))
		dev_cache_closed(tgid);
	return on_device(ctx, EV_DEVICE_CLOSE, PT_REGS_PARM1(ctx), 0);
}

/* bool distributed::MeshDevice::close() */
SEC("uprobe.multi")
int mesh_device_close(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (traced(tgid))
		dev_cache_closed(tgid);
	return on_device(ctx, EV_MESH_CLOSE, PT_REGS_PARM1(ctx), 0);
}

/* ---- the allocator (docs/ttmetal.md §9) ------------------------------- */

/* The chip whose allocator a thread is building: set at the entry of
 * Device::initialize_allocator, read by the BankManager constructors that
 * follow on that thread, deleted after the last of them (L1_SMALL: upstream
 * makes DRAM, TRACE, L1, L1_SMALL in that order). Keyed by pid_tgid. LRU:
 * the entry of a thread that threw before its L1_SMALL manager goes by
 * itself. */
struct alloc_owner {
	__u64 device;
	__s32 chip;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct alloc_owner);
} alloc_owners SEC(".maps");

/* std::unique_ptr<AllocatorImpl> Device::initialize_allocator(...)
 * rdi: the returned pointer's slot, rsi: this; builds where it returns void
 * have this in rdi. Whichever is a Device (by its vptr) owns the
 * BankManagers this thread makes next. Emits nothing. */
SEC("uprobe.multi")
int initialize_allocator(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct alloc_owner o = {};
	struct site site;
	struct event probe;

	if (!traced(id >> 32))
		return 0;
	site = locate(ctx);
	__builtin_memset(&probe, 0, sizeof(probe));
	classify_device(&probe, PT_REGS_PARM2(ctx), &site);
	if (probe.device_kind != DEV_CHIP) {
		__builtin_memset(&probe, 0, sizeof(probe));
		classify_device(&probe, PT_REGS_PARM1(ctx), &site);
	}
	if (probe.device_kind != DEV_CHIP)
		return 0;
	o.device = probe.device;
	o.chip = probe.chip;
	bpf_map_update_elem(&alloc_owners, &id, &o, BPF_ANY);
	return 0;
}

/* A BankManager being made: its this, its type (read through the const
 * BufferType&, at the width of the layout's BufferType), bank count, size,
 * alignment, base and limit, and the chip whose allocator this thread is
 * building, if any. */
static __always_inline int on_bank_manager(struct pt_regs *ctx, __u64 mgr, __u64 type_ref,
					   __u32 banks, __u8 read_error, __u64 bank_size,
					   __u64 alignment, __u64 base, __u64 limit)
{
	__u64 id = bpf_get_current_pid_tgid(), lost_before = 0;
	struct alloc_capacity_record *r;
	struct alloc_owner *o;
	struct site site;
	__u32 type = 0;
	__s64 w;

	r = start_record(EV_ALLOC_CAPACITY, sizeof(*r), &lost_before, PT_REGS_SP(ctx));
	if (!r)
		return 0;
	site = locate(ctx);
	w = site.lib ? site.lib->off[LF_BUFFER_TYPE_WIDTH] : 4;
	r->lost_before = lost_before;
	r->manager = mgr;
	r->banks = banks;
	r->bank_size = bank_size;
	r->alignment = alignment;
	r->base = base;
	r->limit = limit;
	r->read_error = read_error;
	r->chip = -1;
	r->buffer_type = -1;
	if (bpf_probe_read_user(&type, w == 1 ? 1 : w == 2 ? 2 : 4, (void *)type_ref) < 0)
		r->read_error = 1;
	else
		r->buffer_type = (__s32)type;
	o = bpf_map_lookup_elem(&alloc_owners, &id);
	if (o) {
		r->device = o->device;
		r->chip = o->chip;
		r->device_kind = DEV_CHIP;
		if (r->buffer_type == 3 /* L1_SMALL, the last */)
			bpf_map_delete_elem(&alloc_owners, &id);
	}
	finish(r);
	return 0;
}

/* BankManager::BankManager(const BufferType& buffer_type,
 *     const std::vector<int64_t>& bank_offsets, DeviceAddr size_bytes,
 *     uint32_t alignment_bytes, DeviceAddr alloc_offset, ...)   (DRAM, TRACE)
 * The vector's begin and end are its first two words. */
SEC("uprobe.multi")
int bank_manager_vec(struct pt_regs *ctx)
{
	__u64 v[2] = {};
	__u8 err = bpf_probe_read_user(v, sizeof(v), (void *)PT_REGS_PARM3(ctx)) < 0;

	return on_bank_manager(ctx, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx),
			       err || v[1] < v[0] ? 0 : (__u32)((v[1] - v[0]) / 8), err,
			       PT_REGS_PARM4(ctx), (__u32)PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx), 0);
}

/* BankManager::BankManager(const BufferType& buffer_type,
 *     const std::unordered_map<uint32_t, int64_t>& bank_id_to_bank_offset,
 *     DeviceAddr size_bytes, DeviceAddr interleaved_address_limit,
 *     uint32_t alignment_bytes, DeviceAddr alloc_offset, ...)   (L1, L1_SMALL)
 * The map's element count is its fourth word (libstdc++ and libc++);
 * alloc_offset is the first stack argument, above the return address. */
SEC("uprobe.multi")
int bank_manager_map(struct pt_regs *ctx)
{
	__u64 count = 0, base = 0;
	__u8 err = bpf_probe_read_user(&count, sizeof(count), (void *)(PT_REGS_PARM3(ctx) + 24)) < 0;

	if (bpf_probe_read_user(&base, sizeof(base), (void *)(PT_REGS_SP(ctx) + 8)) < 0)
		err = 1;
	return on_bank_manager(ctx, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), (__u32)count, err,
			       PT_REGS_PARM4(ctx), (__u32)PT_REGS_PARM6(ctx), base, PT_REGS_PARM5(ctx));
}

/* DeviceAddr BankManager::allocate_buffer(DeviceAddr size, DeviceAddr
 *     page_size, bool bottom_up, const CoreRangeSet& compute_grid,
 *     std::optional<uint32_t> num_shards[, AllocatorID allocator_id])
 * The optional arrives in r9 (value in bits 0-31, engaged flag in bit 32);
 * the AllocatorID (a uint32_t) is the first stack argument where the build
 * has it. */
static __always_inline int on_alloc_request(struct pt_regs *ctx, int has_id)
{
	__u64 lost_before = 0, shards = PT_REGS_PARM6(ctx);
	struct alloc_request_record *r;
	__u32 aid = 0;

	r = start_record(EV_ALLOC_REQUEST, sizeof(*r), &lost_before, PT_REGS_SP(ctx));
	if (!r)
		return 0;
	r->lost_before = lost_before;
	r->manager = PT_REGS_PARM1(ctx);
	r->size = PT_REGS_PARM2(ctx);
	r->page_size = PT_REGS_PARM3(ctx);
	r->bottom_up = (__u8)PT_REGS_PARM4(ctx) != 0;
	if ((shards >> 32) & 0xff)
		r->num_shards = (__u32)shards;
	if (has_id && bpf_probe_read_user(&aid, sizeof(aid), (void *)(PT_REGS_SP(ctx) + 8)) < 0)
		r->read_error = 1;
	r->allocator_id = aid;
	finish(r);
	return 0;
}

SEC("uprobe.multi")
int bank_manager_allocate(struct pt_regs *ctx)
{
	return on_alloc_request(ctx, 1);
}

/* The same, in builds whose allocate_buffer has no AllocatorID. */
SEC("uprobe.multi")
int bank_manager_allocate_noid(struct pt_regs *ctx)
{
	return on_alloc_request(ctx, 0);
}

/* The Out of Memory path of BankManager::allocate_buffer: an instruction
 * that loads the address of its "Out of Memory: Not enough space" message,
 * found from the library's code (ttmetal/oom.go), reached only when the
 * free list has no block for the request. Mid-function, so no argument is
 * read: the thread's alloc_request says what was asked; this record says it
 * failed, and where from (the stack, when stacks are on). */
SEC("uprobe.multi")
int bank_manager_oom(struct pt_regs *ctx)
{
	struct event *e = start(EV_ALLOC_OOM, PT_REGS_SP(ctx));

	if (!e)
		return 0;
	if (capture_stacks)
		attach_stack(ctx, e);
	finish(e);
	return 0;
}

/* ---- Metal trace (docs/ttmetal.md §10) --------------------------------- */

/* A trace call's entry: the device (classified by its vptr, as any), the
 * command queue, the id (by value for a Device, through the MeshTraceId&
 * for a MeshDevice: id_ref) and, for a replay, whether it blocks. */
static __always_inline int on_trace(struct pt_regs *ctx, enum trace_op op, __u64 dev,
				    __u8 flags, __u8 cq, __u32 id, __u64 id_ref)
{
	__u64 lost_before = 0;
	struct trace_record *r;
	struct site site;

	r = start_record(EV_TRACE, sizeof(*r), &lost_before, PT_REGS_SP(ctx));
	if (!r)
		return 0;
	site = locate(ctx);
	r->lost_before = lost_before;
	r->op = op;
	r->cq = cq;
	r->flags = flags;
	r->trace_id = id;
	if (id_ref) {
		if (bpf_probe_read_user(&r->trace_id, sizeof(r->trace_id), (void *)id_ref) < 0) {
			r->read_error = 1;
			r->flags &= ~TRACE_ID_KNOWN;
		}
	}
	classify_record(r, dev, &site);
	finish(r);
	return 0;
}

/* void Device::begin_trace(uint8_t cq_id, uint32_t tid) */
SEC("uprobe.multi")
int device_begin_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_BEGIN, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN,
			(__u8)PT_REGS_PARM2(ctx), (__u32)PT_REGS_PARM3(ctx), 0);
}

/* void Device::end_trace(uint8_t cq_id, uint32_t tid) */
SEC("uprobe.multi")
int device_end_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_END, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN,
			(__u8)PT_REGS_PARM2(ctx), (__u32)PT_REGS_PARM3(ctx), 0);
}

/* void Device::replay_trace(uint8_t cq_id, uint32_t tid, bool block_on_device,
 *     bool block_on_worker_thread) */
SEC("uprobe.multi")
int device_replay_trace(struct pt_regs *ctx)
{
	__u8 blocking = (__u8)PT_REGS_PARM4(ctx) ? TRACE_BLOCKING : 0;

	return on_trace(ctx, TRACE_REPLAY, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN | blocking,
			(__u8)PT_REGS_PARM2(ctx), (__u32)PT_REGS_PARM3(ctx), 0);
}

/* void Device::release_trace(uint32_t tid) */
SEC("uprobe.multi")
int device_release_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_RELEASE, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN, 0,
			(__u32)PT_REGS_PARM2(ctx), 0);
}

/* void MeshDevice::begin_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id) */
SEC("uprobe.multi")
int mesh_begin_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_BEGIN, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN,
			(__u8)PT_REGS_PARM2(ctx), 0, PT_REGS_PARM3(ctx));
}

/* MeshTraceId MeshDevice::begin_mesh_trace(uint8_t cq_id): the id is taken
 * inside (the MeshTraceId, a u32, comes back in eax). */
SEC("uprobe.multi")
int mesh_begin_trace_noid(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_BEGIN, PT_REGS_PARM1(ctx), TRACE_CQ_KNOWN,
			(__u8)PT_REGS_PARM2(ctx), 0, 0);
}

/* void MeshDevice::end_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id) */
SEC("uprobe.multi")
int mesh_end_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_END, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN,
			(__u8)PT_REGS_PARM2(ctx), 0, PT_REGS_PARM3(ctx));
}

/* void MeshDevice::replay_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id,
 *     bool blocking) */
SEC("uprobe.multi")
int mesh_replay_trace(struct pt_regs *ctx)
{
	__u8 blocking = (__u8)PT_REGS_PARM4(ctx) ? TRACE_BLOCKING : 0;

	return on_trace(ctx, TRACE_REPLAY, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN | blocking,
			(__u8)PT_REGS_PARM2(ctx), 0, PT_REGS_PARM3(ctx));
}

/* void MeshDevice::release_mesh_trace(const MeshTraceId& trace_id) */
SEC("uprobe.multi")
int mesh_release_trace(struct pt_regs *ctx)
{
	return on_trace(ctx, TRACE_RELEASE, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN, 0, 0, PT_REGS_PARM2(ctx));
}

/* The older one-bool Device::replay_trace and the MeshCommandQueue& forms (2026). */
#include "trace.h"

/* ---- Python ------------------------------------------------------------ */

/* void code_dealloc(PyCodeObject *co): PyCode_Type's tp_dealloc in the
 * CPython of a traced process (pyframes finds it, session attaches it when
 * it registers the interpreter): the code object's description no longer
 * holds for its address (bpf/python.h, py_codes). */
SEC("uprobe.multi")
int py_code_dealloc(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 *f = pid_flags(tgid);

	if (f && (*f & PID_PYTHON))
		py_code_freed(tgid, PT_REGS_PARM1(ctx));
	return 0;
}

/* ---- processes --------------------------------------------------------- */

/* A process may call _dl_debug_state as fast as it can (dlopen/dlclose
 * in a loop), and each record makes user space read its maps: each process
 * has a budget of link-map records, a token bucket of DL_BURST records
 * refilled one every DL_REFILL_NS. A call over the budget is dropped and
 * counted (per process in dl_drops, in all in dl_dropped); user space
 * reads the maps of such a process again at its next record or at its
 * next look at the counters, whichever comes first, so no load is missed
 * for long. */
#define DL_BURST 256
#define DL_REFILL_NS 10000000ULL /* 100 records a second */

struct dl_budget {
	__u64 last_ns; /* when the tokens were last counted */
	__u32 tokens;
	__u32 _pad;
};

/* Per process (tgid): its budget. LRU: a process that ended is forgotten
 * when room is needed (a new entry starts with a full budget). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct dl_budget);
} dl_budgets SEC(".maps");

/* Per process (tgid): calls dropped over its budget, a count that only
 * grows while the process lives. User space keeps what it last read and
 * deletes an entry only once its process has ended: an entry deleted while
 * its process still ran could take an increment made through a pointer
 * looked up just before the delete with it. A process whose entry cannot
 * be made (the map full) is still counted in dl_dropped: user space then
 * looks at every process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} dl_drops SEC(".maps");

/* Calls dropped over the budget, in all. */
__u64 dl_dropped = 0;

/* Whether process tgid may send one more link-map record now. Threads of a
 * process racing here may let a few more through: the budget bounds the
 * rate, it is not exact. */
static __always_inline int dl_allow(__u32 tgid)
{
	struct dl_budget *b = bpf_map_lookup_elem(&dl_budgets, &tgid);
	__u64 now = bpf_ktime_get_ns(), n, one = 1, *d;

	if (!b) {
		struct dl_budget fresh = { .last_ns = now, .tokens = DL_BURST - 1 };

		bpf_map_update_elem(&dl_budgets, &tgid, &fresh, BPF_NOEXIST);
		return 1;
	}
	if (now > b->last_ns) {
		n = (now - b->last_ns) / DL_REFILL_NS;
		if (n >= DL_BURST - b->tokens) {
			b->tokens = DL_BURST;
			b->last_ns = now;
		} else if (n) {
			b->tokens += n;
			b->last_ns += n * DL_REFILL_NS;
		}
	}
	if (b->tokens) {
		b->tokens--;
		return 1;
	}
	__sync_fetch_and_add(&dl_dropped, 1);
	d = bpf_map_lookup_elem(&dl_drops, &tgid);
	if (!d && bpf_map_update_elem(&dl_drops, &tgid, &one, BPF_NOEXIST) == 0)
		return 0;
	if (!d) /* another thread of the process made the entry first */
		d = bpf_map_lookup_elem(&dl_drops, &tgid);
	if (d)
		__sync_fetch_and_add(d, 1);
	return 0;
}

/* The link map's objects, sent at RT_CONSISTENT (stacks only). */
#include "linkmap.h"

/* void _dl_debug_state(void) in ld.so: called before and after each change
 * of the link map (dlopen/dlclose and the start-up load). User space looks
 * for a newly mapped TT-Metal library and attaches to it; with stacks, the
 * objects of a consistent link map come first (linkmap.h). */
SEC("uprobe.multi")
int dl_debug_state(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct event *e;

	if (!traced(tgid))
		return 0;
	dev_cache_drop(tgid); /* an exec, or a library gone (devcache.h) */
	if (!dl_allow(tgid))
		return 0;
	if (capture_stacks)
		link_map_send(ctx);
	e = start(EV_LINK_MAP, PT_REGS_SP(ctx));
	if (!e)
		return 0;
	finish_now(e);
	return 0;
}

/* The fields of task_struct read here, relocated against the running
 * kernel's BTF (CO-RE): no vmlinux.h needed. */
struct signal_struct {
	struct {
		int counter;
	} live; /* threads of the group not yet exiting */
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	int exit_code;
	struct signal_struct *signal;
} __attribute__((preserve_access_index));

/* sched_process_fork(struct task_struct *parent, struct task_struct *child) */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	struct event *e;
	__u8 *f = pid_flags(ptgid), python;

	if (!follow_children || ptgid == ctgid)
		return 0; /* not following, or a new thread */
	/* The parent's own flag, whatever filter_pids says: under --all the
	 * table traces no one, and forks are not followed. */
	if (!f || !(*f & PID_TRACED))
		return 0;
	python = *f & PID_PYTHON;
	if (!(f = pid_flags(ctgid)))
		return 0;
	/* The child is traced from its first instruction: it is added before
	 * it can run. A registered parent's interpreter is its own until user
	 * space registers it (python.h, py_fork). */
	*f = PID_TRACED;
	if (python && py_fork(ptgid, ctgid))
		*f = PID_TRACED | PID_PYTHON;
	else if (py_heir_note((void *)parent, ptgid, (void *)child, ctgid))
		*f = PID_TRACED | PID_HEIR; /* its parent may be registered later (pyheir.h) */
	e = start(EV_FORK, 0);
	if (!e)
		return 0;
	e->hdr.pid = ctgid;
	e->hdr.tid = BPF_CORE_READ(child, pid);
	e->parent_pid = ptgid;
	finish_now(e);
	return 0;
}

/* sched_process_exit(struct task_struct *p, ...): a thread of a traced
 * process exits. The main thread's exit code says how the process ended;
 * the last thread's exit (signal->live already decremented to 0) ends the
 * process, and every record of it is in the ring before that one: user
 * space learns of the end in stream order, at the time it happened. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct event *e;
	__u8 *f;

	if (ops_on)
		op_thread_exit(tgid); /* p is the current task */
	if (BPF_CORE_READ(p, pid) == tgid) {
		e = start(EV_MAIN_EXIT, 0);
		if (e) {
			e->wait_status = BPF_CORE_READ(p, exit_code);
			finish_now(e);
		}
	}
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (traced(tgid))
		dev_cache_drop(tgid); /* its pid may be reused (devcache.h) */
	e = start(EV_GROUP_EXIT, 0);
	if (e)
		finish_now(e);
	/* Gone even if that record was lost: user space checks the map. A
	 * later process given the same pid is not traced (nor its Python
	 * walked) by mistake. */
	f = pid_flags(tgid);
	if (f) {
		if (*f & PID_PYTHON) /* a child's copy user space may never clear */
			bpf_map_delete_elem(&py_procs, &tgid);
		if (*f & PID_HEIR)
			bpf_map_delete_elem(&py_heirs, &tgid);
		*f = 0;
	}
	return 0;
}

/* ==== lifecycle plan ===================================================
 *
 * For builds where GraphTracker::track_allocate / track_deallocate are not
 * called (inlined, e.g. by LTO), allocations and frees are taken from
 * Buffer's own lifecycle functions instead (probes/plan.go chooses the
 * plan and the attach points from the library's code):
 *
 *  - allocation: Buffer::allocate_impl() (or, where the compiler inlined it,
 *    the owning Buffer::create(...)) is probed at its entry and at each of
 *    its exits: every ret instruction and every jump that leaves it, never
 *    with a uretprobe (an exception through a uretprobed frame terminates
 *    the process). The entry records, per thread, the object and the stack
 *    pointer; an exit emits the allocation only if the stack pointer is the
 *    one recorded (that frame is returning: the probe on a jump that stays
 *    inside the function, or a record left by a call that threw, never
 *    matches) and the status is ALLOCATED. allocate_impl throws on
 *    out-of-memory before it sets ALLOCATED; its record is overwritten by the
 *    thread's next entry.
 *  - free: the entry of Buffer::deallocate_impl() (or of deallocate() or
 *    ~Buffer() where it was inlined there) emits a free when the buffer is
 *    ALLOCATED and not empty: what deallocate_impl frees. Whether the device
 *    is still initialized cannot be read (a virtual call), so a buffer whose
 *    device was closed first also gets a free here, which the tracker would
 *    not see; the ledger has released such a buffer at the close already and
 *    only counts the free (frees_after_release). Where even ~Buffer() was
 *    inlined, into the destruction of the shared_ptr control block that
 *    holds the Buffer (make_shared), that control block's _M_dispose() is
 *    probed instead.
 */

/* Per library (same index as libs): what the lifecycle programs need
 * besides the layout. Written by user space before it attaches. */
struct lc_info {
	__u64 dispose_offset; /* where std::_Sp_counted_ptr_inplace<Buffer> holds its Buffer */
	__u8 allocated;       /* the value of AllocationStatus::ALLOCATED (1; 2 in V0) */
	__u8 _pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_LIBS);
	__type(key, __u32);
	__type(value, struct lc_info);
} lc_libs SEC(".maps");

/* Which function a pending record belongs to. */
enum lc_kind {
	LC_ALLOC = 0,  /* Buffer::allocate_impl(): object is the Buffer* */
	LC_CREATE = 1, /* owning Buffer::create(): object is the sret shared_ptr* */
};

struct lc_key {
	__u32 tid;
	__u32 kind; /* enum lc_kind */
};

struct lc_pending {
	__u64 object; /* Buffer*, or where create returns its shared_ptr<Buffer> */
	__u64 sp;     /* stack pointer at the entry */
};

/* Calls entered and not yet returned, per thread and function. An entry
 * overwrites, a matching exit deletes; a call that threw leaves its record
 * until the thread's next call of the function. LRU: records of threads
 * that ended are dropped when the map fills. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lc_key);
	__type(value, struct lc_pending);
} lc_calls SEC(".maps");

/* The status, size and ownership of a Buffer, read before a record is
 * reserved; 0 when unreadable (the caller then emits nothing). */
struct lc_peek {
	__u64 size;
	__u8 status;
	__u8 owns;
	__u8 ok;
};

static __always_inline struct lc_peek lc_peek_buffer(__u64 buf, struct lib_info *l)
{
	struct lc_peek p = {};
	__u64 base = buf;

	if (!l || l->off[LF_ALLOCATION_STATUS] < 0 || l->off[LF_SIZE] < 0)
		return p;
	if (l->off[LF_BUFFER_IMPL_PTR] >= 0) {
		base = 0;
		if (bpf_probe_read_user(&base, sizeof(base), (void *)(buf + l->off[LF_BUFFER_IMPL_PTR])) < 0 || !base)
			return p;
	}
	if (bpf_probe_read_user(&p.status, 1, (void *)(base + l->off[LF_ALLOCATION_STATUS])) < 0)
		return p;
	if (bpf_probe_read_user(&p.size, sizeof(p.size), (void *)(base + l->off[LF_SIZE])) < 0)
		return p;
	if (l->off[LF_OWNS_DATA] >= 0 &&
	    bpf_probe_read_user(&p.owns, 1, (void *)(base + l->off[LF_OWNS_DATA])) < 0)
		return p;
	p.ok = 1;
	return p;
}

/* ALLOCATED for the library of this attach point (0xff: unknown). */
static __always_inline __u8 lc_allocated(struct pt_regs *ctx)
{
	__u32 idx = bpf_get_attach_cookie(ctx) >> 48;
	struct lc_info *li = bpf_map_lookup_elem(&lc_libs, &idx);

	return li ? li->allocated : 0xff;
}

static __always_inline int lc_enter(struct pt_regs *ctx, __u32 kind, __u64 object)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct lc_key k = { .tid = (__u32)id, .kind = kind };
	struct lc_pending v = { .object = object, .sp = PT_REGS_SP(ctx) };

	if (!traced(id >> 32))
		return 0;
	bpf_map_update_elem(&lc_calls, &k, &v, BPF_ANY);
	return 0;
}

/* The object recorded by this frame's entry, or 0. */
static __always_inline __u64 lc_leave(struct pt_regs *ctx, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct lc_key k = { .tid = (__u32)id, .kind = kind };
	struct lc_pending *v;
	__u64 object;

	if (!traced(id >> 32))
		return 0;
	v = bpf_map_lookup_elem(&lc_calls, &k);
	if (!v || v->sp != PT_REGS_SP(ctx))
		return 0;
	object = v->object;
	bpf_map_delete_elem(&lc_calls, &k);
	return object;
}

/* Emit the allocation of buf if it is ALLOCATED (and, for create, not
 * empty: an empty buffer is ALLOCATED without allocate_impl). */
static __always_inline int lc_emit_alloc(struct pt_regs *ctx, __u64 buf, int need_size)
{
	struct site site = locate(ctx);
	struct lc_peek p;

	if (!buf)
		return 0;
	p = lc_peek_buffer(buf, site.lib);
	if (!p.ok || p.status != lc_allocated(ctx) || (need_size && !p.size))
		return 0;
	return on_buffer(ctx, EV_ALLOC, buf);
}

/* Emit the free deallocate_impl makes of buf: ALLOCATED, not empty (and,
 * entered through deallocate() or ~Buffer(), owning its memory). */
static __always_inline int lc_emit_free(struct pt_regs *ctx, __u64 buf, int need_owns)
{
	struct site site;
	struct lc_peek p;

	if (!traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	site = locate(ctx);
	p = lc_peek_buffer(buf, site.lib);
	if (!p.ok || p.status != lc_allocated(ctx) || !p.size || (need_owns && !p.owns))
		return 0;
	return on_buffer(ctx, EV_FREE, buf);
}

/* void Buffer::allocate_impl(): entry */
SEC("uprobe.multi")
int lc_alloc_enter(struct pt_regs *ctx)
{
	return lc_enter(ctx, LC_ALLOC, PT_REGS_PARM1(ctx));
}

/* void Buffer::allocate_impl(): each ret, and each jump leaving it */
SEC("uprobe.multi")
int lc_alloc_exit(struct pt_regs *ctx)
{
	return lc_emit_alloc(ctx, lc_leave(ctx, LC_ALLOC), 0);
}

/* static std::shared_ptr<Buffer> Buffer::create(IDevice* device,
 *     DeviceAddr size, DeviceAddr page_size, BufferType, ...) (owning, with
 *     allocate_impl inlined): entry; rdi is where the shared_ptr goes */
SEC("uprobe.multi")
int lc_create_enter(struct pt_regs *ctx)
{
	return lc_enter(ctx, LC_CREATE, PT_REGS_PARM1(ctx));
}

/* Buffer::create (owning): each exit; the shared_ptr's first word is the
 * Buffer* */
SEC("uprobe.multi")
int lc_create_exit(struct pt_regs *ctx)
{
	__u64 ret = lc_leave(ctx, LC_CREATE), buf = 0;

	if (!ret || bpf_probe_read_user(&buf, sizeof(buf), (void *)ret) < 0)
		return 0;
	return lc_emit_alloc(ctx, buf, 1);
}

/* void Buffer::deallocate_impl(): entry */
SEC("uprobe.multi")
int lc_free(struct pt_regs *ctx)
{
	return lc_emit_free(ctx, PT_REGS_PARM1(ctx), 0);
}

/* void Buffer::deallocate() / Buffer::~Buffer() with deallocate_impl
 * inlined: entry */
SEC("uprobe.multi")
int lc_free_owned(struct pt_regs *ctx)
{
	return lc_emit_free(ctx, PT_REGS_PARM1(ctx), 1);
}

/* void std::_Sp_counted_ptr_inplace<Buffer, ...>::_M_dispose() with
 * ~Buffer() inlined into it: entry; the Buffer lives in the control block,
 * lc_info.dispose_offset bytes in */
SEC("uprobe.multi")
int lc_free_dispose(struct pt_regs *ctx)
{
	__u32 idx = bpf_get_attach_cookie(ctx) >> 48;
	struct lc_info *li = bpf_map_lookup_elem(&lc_libs, &idx);

	if (!li || !li->dispose_offset)
		return 0;
	return lc_emit_free(ctx, PT_REGS_PARM1(ctx) + li->dispose_offset, 1);
}

/* detail::ProgramImpl::~ProgramImpl() where the compiler inlined
 * deallocate_circular_buffers() into it (clang -O3): the teardown's entry,
 * which says whose CBs the track_deallocate_cb calls that follow free, then
 * the destruction. */
SEC("uprobe.multi")
int program_destroy_teardown(struct pt_regs *ctx)
{
	on_device(ctx, EV_CB_TEARDOWN, 0, PT_REGS_PARM1(ctx));
	return on_device(ctx, EV_PROGRAM_DESTROY, 0, PT_REGS_PARM1(ctx));
}
