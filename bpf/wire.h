/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * tttrace wire format: every record the BPF programs write to the ring
 * buffer. This header is the one definition; Go gets every type below from
 * the BTF of the compiled object (events/internal/genwire writes
 * events/wire_gen.go), never from a hand-written mirror.
 *
 * Rules:
 *  - every record starts with struct record_header: its kind says which
 *    struct the rest of the record is (never its length);
 *  - the record of kind EV_NAME is struct name_record (EV_STACK: struct
 *    stack_record) when there is one, else struct event;
 *  - u64 fields first, explicit padding, no holes: the Go view is the C
 *    layout byte for byte;
 *  - a record may end in `__u8 data[N]` after a `__u32 size` member: a
 *    variable-length tail of size bytes (the record is emitted only that
 *    long).
 *
 * A new record kind: one EV_ value, one struct name_record starting with
 * struct record_header, kept in BTF (a `const struct name_record *unused_...`
 * in tttrace.bpf.c), `make generate`; then its consumer in session
 * (docs/architecture.md, "Where to add things").
 */
#ifndef TTTRACE_WIRE_H
#define TTTRACE_WIRE_H

/*
 * Enums with a fixed one-byte underlying type (a clang extension in C) so
 * the records' fields carry them directly: their names and values reach Go
 * through the object's BTF, never a hand mirror.
 */

/* What happened. One value per probed TT-Metal function or kernel hook;
 * the values from 64 on are records user space synthesizes (never in the
 * ring). The NDJSON "type" of a kind is its name without EV_, in lower
 * case. */
enum event_kind : __u8 {
	EV_ALLOC = 1,             /* GraphTracker::track_allocate(const Buffer*) */
	EV_FREE = 2,              /* GraphTracker::track_deallocate(Buffer*) */
	EV_VIEW = 3,              /* Buffer::create(IDevice*, DeviceAddr address, ...): a pre-allocated view */
	EV_CB_ALLOC = 4,          /* struct cb_alloc_record: GraphTracker::track_allocate_cb(ranges,
				   * addr, size, global, device) */
	EV_CB_FREE = 5,           /* GraphTracker::track_deallocate_cb(const IDevice*) */
	EV_CB_LAYOUT = 6,         /* ProgramImpl::allocate_circular_buffers(const IDevice*) */
	EV_CB_TEARDOWN = 7,       /* ProgramImpl::deallocate_circular_buffers() */
	EV_PROGRAM_DESTROY = 8,   /* ProgramImpl::~ProgramImpl() */
	EV_DEVICE_CLOSE = 9,      /* Device::close() */
	EV_MESH_CLOSE = 10,       /* distributed::MeshDevice::close() */
	EV_MARK_DEALLOCATED = 11, /* Buffer::mark_as_deallocated() */
	EV_LINK_MAP = 12,         /* ld.so _dl_debug_state(): the link map changed (dlopen) */
	EV_FORK = 13,             /* a traced process forked: pid is the child, parent_pid its parent */
	EV_MAIN_EXIT = 14,        /* a traced process's main thread exited: wait_status says how */
	EV_GROUP_EXIT = 15,       /* the last thread of a traced process exited: the process ended */
	EV_STACK = 16,            /* struct stack_record: the native stack of the alloc with the same seq */
	EV_PY_STACK = 17,         /* struct py_stack_record: the Python stack of that alloc */
	EV_PY_CODE = 18,          /* struct py_code_record: a code object the next
				   * EV_PY_STACK names, described once */
	EV_ALLOC_CAPACITY = 19,   /* struct alloc_capacity_record: a BankManager constructor */
	EV_ALLOC_REQUEST = 20,    /* struct alloc_request_record: BankManager::allocate_buffer */
	EV_ALLOC_OOM = 21,        /* the Out of Memory path of BankManager::allocate_buffer (an
				   * instruction found from the library's code): the request of
				   * this thread threw; its stack is the failure's site */
	EV_PROGRAM_DISPATCH = 22, /* ProgramImpl::generate_dispatch_commands(IDevice*, bool): a
				   * program enqueued on a device (every run, cached or not) */
	EV_OP_ENTER = 23,         /* struct op_enter_record: a TT-NN op function entered (bpf/ops.h) */
	EV_RUNTIME_ID = 24,       /* struct runtime_id_record: Program::set_runtime_id(id), the
				   * device operation's id given to the program of a launch */
	EV_LINK_OBJECT = 30,      /* struct link_object_record: one object of ld.so's link map,
				   * sent before the EV_LINK_MAP of a consistent link map */
	EV_TRACE = 40,            /* struct trace_record: Metal trace begin/end/replay/release
				   * (Device and MeshDevice forms) */
	EV_LOST = 64,             /* user space: records the ring buffer could not take */
	EV_EXIT = 65,             /* user space: a traced process has ended */
};

/* Kinds BPF writes are below this: the per-kind loss counters are indexed
 * by kind. */
#define EV_RING_KINDS 64

/* What the IDevice* of an event points at, told apart by its vptr. */
enum device_kind : __u8 {
	DEV_NONE = 0,    /* the event has no device */
	DEV_CHIP = 1,    /* tt::tt_metal::Device: chip holds Device::id_ */
	DEV_MESH = 2,    /* distributed::MeshDevice: its id() is NOT a chip id */
	DEV_UNKNOWN = 3, /* a vptr that is neither vtable (or unreadable) */
};

/* event.stack of an alloc. */
enum stack_state : __u8 {
	STACK_NONE = 0,    /* stacks are off, or the kind has none */
	STACK_FOLLOWS = 1, /* an EV_STACK record with this seq is in the ring after this one */
	STACK_LOST = 2,    /* the stack could not be captured or emitted (ring full, scratch busy) */
	STACK_TOKEN = 3,   /* a stack user space made known (bpf/stack.h): stack_token names
			    * it; no EV_STACK record follows (nor an EV_PY_STACK: with a
			    * Python stack, py_token names it) */
};

/* The first bytes of every record. */
struct record_header {
	__u64 seq;   /* global sequence, taken before the reservation: gaps are
		      * losses. A record that describes another (stack, Python
		      * stack, code object) carries the seq of that one */
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC; a describing record:
		      * that of the record it describes */
	__u32 pid;   /* tgid of the traced process */
	__u32 tid;   /* thread that made the call */
	enum event_kind kind;
	/* How many TT-NN op frames are live on the thread (bpf/ops.h), after
	 * this record's probe checked them: 0 to OP_MAX_FRAMES, the
	 * innermost last; for an op_enter, its own frame included.
	 * OP_FRAMES_UNCHECKED: a kind that carries no op (or ops are off). A
	 * describing record: that of the record it describes. */
	__u8 op_frames;
	__u8 _pad[6];
};

/* TT-NN op frames (bpf/ops.h). */
enum op_limits {
	OP_MAX_FRAMES = 32,        /* frames kept per thread; deeper ones are not kept */
	OP_FRAMES_UNCHECKED = 255, /* record_header.op_frames of a record that did not look */
	OP_COOKIE_DEVICE_BIT = 63, /* an op probe's cookie: this bit set for a device
				    * operation's launch; the op's id in the low 32 bits */
};

/* ---- calls and process records: struct event ---------------------------- */

/* Every field has one meaning, whatever the kind; a field a kind does not
 * set is zero (chip and buffer_type: -1). */
struct event {
	struct record_header hdr;
	__u64 object;      /* the C++ object the call is about: Buffer* (alloc, free,
			    * mark_deallocated) or ProgramImpl* (cb_layout, cb_teardown,
			    * program_destroy, program_dispatch) */
	__u64 device;      /* the IDevice* the event names */
	__u64 device_vptr; /* *(u64 *)device, for diagnosis of DEV_UNKNOWN */
	__u64 address;     /* Buffer::address_, view address, CB address */
	__u64 size;        /* Buffer::size_, view size, CB per-core size */
	__u64 page_size;   /* Buffer::page_size_, view page size */
	__u64 lost_before; /* records this CPU failed to reserve since its previous event */
	__u64 stack_token; /* stack == STACK_TOKEN: the token of its known native stack */
	__u64 py_token;    /* alloc, stack STACK_TOKEN or STACK_FOLLOWS: nonzero names its known
			    * Python stack (bpf/pyknown.h), and no EV_PY_STACK goes with it */
	__u32 parent_pid;  /* EV_FORK: tgid of the forking process */
	__u32 wait_status; /* EV_MAIN_EXIT: the main thread's exit_code (a wait status) */
	__s32 chip;        /* Device::id_ when device_kind == DEV_CHIP, else -1 */
	__s32 buffer_type; /* BufferType (DRAM 0, L1 1, SYSTEM_MEMORY 2, L1_SMALL 3, TRACE 4) */
	enum device_kind device_kind;
	__u8 hooked;     /* Buffer::hooked_allocation_ */
	__u8 owns_data;  /* Buffer::owns_data_ */
	__u8 status;     /* Buffer::allocation_status_ */
	__u8 global;     /* CB is globally allocated (backed by an L1 Buffer) */
	__u8 read_error; /* a user-memory read failed: fields may be zero */
	enum stack_state stack; /* alloc: whether a stack record follows */
	__u8 _pad[1];
};

/* ---- native stacks: struct stack_record (bpf/stack.h fills it) ---------- */

/* Bytes of user stack copied from rsp up. A power of two, at most 16 KiB so
 * the per-CPU scratch stays within the kernel's per-CPU allocation limit
 * (32 KiB a value). 16 KiB holds 64 frames of TT-Metal/TT-NN/CPython
 * code in the measurements of docs/stacks.md. */
#ifndef STACK_COPY_BYTES
#define STACK_COPY_BYTES 16384
#endif

/* stack_record.flags */
enum stack_flags : __u8 {
	STACK_PARTIAL = 1,  /* the copy stopped before STACK_COPY_BYTES: at the end
			     * of the stack's mapping, or at a page that could not
			     * be read (not present) */
	STACK_NO_STACK = 2, /* not even the first page could be read: size 0 */
	STACK_KNOWN = 4,    /* a stack user space described before (stack_sites):
			     * token names it, no data follows (size 0) */
};

/* Return addresses a known stack may have (stack_site_key.pcs): deeper
 * stacks are always copied. A power of two. */
#ifndef STACK_KEY_FRAMES
#define STACK_KEY_FRAMES 32
#endif

/* The registers of the thread at the probe and the top of its user stack:
 * user space unwinds it (package stacks). */
struct stack_record {
	struct record_header hdr; /* seq, ts_ns: those of the alloc it belongs to */
	__u64 ip;   /* user rip at the probe */
	__u64 sp;   /* user rsp at the probe: data[0] is the byte at sp */
	__u64 bp;   /* user rbp at the probe */
	__u64 token; /* with STACK_KNOWN: the token user space gave the stack */
	__u32 size; /* bytes of data that follow; the record is
		     * offsetof(struct stack_record, data) + size bytes long */
	__u8 flags; /* enum stack_flags */
	__u8 _pad[3];
	__u8 data[STACK_COPY_BYTES];
};

/* ---- Python stacks: struct py_stack_record, py_code_record -------------- */

#ifndef PY_MAX_FRAMES
#define PY_MAX_FRAMES 64
#endif
/* Room for a file name or qualname, and for a line table: at most one
 * byte less is copied. Powers of two. */
#ifndef PY_STR_MAX
#define PY_STR_MAX 256
#endif
#ifndef PY_LINETABLE_MAX
#define PY_LINETABLE_MAX 4096
#endif

/* py_stack.flags */
enum py_stack_flags {
	PY_TRUNCATED = 1,    /* more frames than PY_MAX_FRAMES: the outermost were cut */
	PY_NO_PROC = 2,      /* the process has no py_procs entry */
	PY_NO_THREAD = 4,    /* no thread state of this thread found */
	PY_READ_ERROR = 8,   /* a read failed: the stack stops there */
	PY_THREADS_CUT = 16, /* more thread states than PY_MAX_THREADS: not all were seen */
	PY_NO_ID = 32,       /* a code object's identity could not be read: code_id 0 */
};

/* py_code.flags */
enum py_code_flags {
	PY_CODE_READ_ERROR = 1, /* a read failed: some fields are empty */
};

/* One frame: the code object (described by a struct py_code) and where
 * in it the frame is; user space computes the line. */
struct py_frame {
	__u64 code;    /* PyCodeObject* */
	__u64 instr;   /* f_lasti (3.10, code units) or the instruction pointer */
	__u64 code_id; /* identity of the code object at that address */
};

/* A captured stack, innermost frame first. */
struct py_stack {
	__u64 tstate;     /* the PyThreadState* found, 0 if none */
	__u64 code_frees; /* the process's code objects deallocated before the capture
			   * (py_proc.code_frees): with code_gen, the incarnations below
			   * hold for as long as it has not grown (bpf/pyknown.h) */
	__u64 token;      /* check_known_stacks: the token of the known Python stack the
			   * capture found (the frames are sent all the same), else 0 */
	__u32 nframes;    /* frames[0..nframes) are valid */
	__u32 flags;      /* enum py_stack_flags */
	__u32 code_gen;   /* py_proc.code_gen at the capture: nonzero, code_id is an
			   * incarnation (PY_CODE_INCARNATION) */
	__u32 _pad;
	struct py_frame frames[PY_MAX_FRAMES];
};

/* What a code object says, copied at event time. The ob_type of each
 * object is copied too: user space checks every one against the
 * interpreter's PyCode_Type, PyUnicode_Type and PyBytes_Type. */
struct py_code {
	__u64 code;           /* PyCodeObject* */
	__u64 code_id;        /* identity, as in struct py_frame */
	__u64 code_type;      /* ob_type of the code object */
	__u64 filename_type;  /* ob_type of co_filename */
	__u64 name_type;      /* ob_type of co_qualname / co_name */
	__u64 linetable_type; /* ob_type of co_linetable */
	__u64 units;          /* bytecode length in code units */
	__u64 units_type;     /* 3.10: ob_type of co_code; else the code's own type */
	__u32 pid;
	__s32 firstlineno;
	__u32 filename_len;   /* bytes copied into filename: the str's last bytes */
	__u32 filename_chars; /* the str's length in characters */
	__u32 name_len;
	__u32 name_chars;
	__u32 linetable_len;  /* bytes copied into linetable */
	__u32 linetable_size; /* the table's full size: more than copied when cut */
	__u32 filename_state; /* PyASCIIObject.state: kind, compact, ascii bits */
	__u32 name_state;
	__u32 flags;          /* enum py_code_flags */
	__u32 _pad;
	__u8 filename[PY_STR_MAX];
	__u8 name[PY_STR_MAX];
	__u8 linetable[PY_LINETABLE_MAX];
};

/* The Python stack of an alloc, sent before its native stack. */
struct py_stack_record {
	struct record_header hdr; /* seq, ts_ns: those of the alloc */
	struct py_stack stack;
};

/* A code object a following py_stack_record names, described once per
 * process (bpf/python.h). */
struct py_code_record {
	struct record_header hdr; /* seq, ts_ns: those of the alloc whose stack names it */
	struct py_code code;
};

/* ---- the allocator (docs/ttmetal.md §9) --------------------------------- */

/* A BankManager being made: one buffer type of one allocator. */
struct alloc_capacity_record {
	struct record_header hdr;
	__u64 manager;     /* the BankManager* (this) */
	__u64 device;      /* the Device* whose Device::initialize_allocator this thread
			    * is in, 0 if none */
	__u64 bank_size;   /* size_bytes: allocatable bytes per bank */
	__u64 alignment;   /* alignment_bytes */
	__u64 base;        /* alloc_offset: the address of a bank's first allocatable byte */
	__u64 limit;       /* interleaved_address_limit (bank-map constructor), else 0 */
	__u64 lost_before; /* records this CPU failed to reserve since its previous record */
	__u32 banks;       /* bank offsets, or entries of the bank map */
	__s32 chip;        /* Device::id_ of device, -1 if none */
	__s32 buffer_type; /* BufferType, -1 if unreadable */
	enum device_kind device_kind; /* DEV_CHIP with a device, else DEV_NONE */
	__u8 read_error;   /* a user-memory read failed: fields may be zero */
	__u8 _pad[2];
};

/* BankManager::allocate_buffer: an allocation asked of a bank manager. */
struct alloc_request_record {
	struct record_header hdr;
	__u64 manager;      /* the BankManager* (this) */
	__u64 size;         /* the buffer's aligned size */
	__u64 page_size;    /* its aligned page size */
	__u64 lost_before;  /* as in struct alloc_capacity_record */
	__u32 num_shards;   /* a sharded buffer's cores; 0: interleaved */
	__u32 allocator_id; /* 0: the lockstep free list; else one core's own (HYBRID) */
	__u8 bottom_up;
	__u8 read_error;
	__u8 _pad[6];
};

/* ---- circular buffers (docs/ttmetal.md §5, §12) ------------------------ */

/* Core ranges a cb_alloc_record copies; a CoreRangeSet with more says so
 * (CB_RANGES_TRUNCATED). */
#ifndef CB_MAX_RANGES
#define CB_MAX_RANGES 8
#endif

/* cb_alloc_record.flags */
enum cb_range_flags : __u8 {
	CB_RANGES_KNOWN = 1,     /* the layout gives CoreRangeSet's and the set was read:
				  * nranges and ranges hold */
	CB_RANGES_TRUNCATED = 2, /* nranges > CB_MAX_RANGES: only the first were copied */
};

/* One CoreRange: logical core coordinates, inclusive. */
struct core_range {
	__u16 x0;
	__u16 y0;
	__u16 x1;
	__u16 y1;
};

/* GraphTracker::track_allocate_cb: one CB of a program on a device, with
 * the ranges of cores it occupies (size is per core). */
struct cb_alloc_record {
	struct record_header hdr;
	__u64 device;      /* the IDevice* */
	__u64 device_vptr; /* *(u64 *)device, for diagnosis of DEV_UNKNOWN */
	__u64 address;     /* the CB's L1 address */
	__u64 size;        /* bytes per core */
	__u64 lost_before; /* records this CPU failed to reserve since its previous record */
	__u32 nranges;     /* ranges in the CoreRangeSet (flags: CB_RANGES_KNOWN) */
	__s32 chip;        /* Device::id_ when device_kind == DEV_CHIP, else -1 */
	enum device_kind device_kind;
	__u8 global;       /* globally allocated (backed by an L1 Buffer) */
	__u8 read_error;   /* a user-memory read failed, or a coordinate above 65535: fields
			    * may be zero, and the ranges are not given (flags 0) */
	__u8 flags;        /* enum cb_range_flags */
	__u8 _pad[4];
	struct core_range ranges[CB_MAX_RANGES]; /* the first min(nranges, CB_MAX_RANGES) */
};

/* ---- Metal trace (docs/ttmetal.md §10) --------------------------------- */

/* trace_record.op: which call. */
enum trace_op : __u8 {
	TRACE_BEGIN = 1,   /* Device::begin_trace, MeshDevice::begin_mesh_trace */
	TRACE_END = 2,     /* Device::end_trace, MeshDevice::end_mesh_trace */
	TRACE_REPLAY = 3,  /* Device::replay_trace, MeshDevice::replay_mesh_trace */
	TRACE_RELEASE = 4, /* Device::release_trace, MeshDevice::release_mesh_trace */
};

/* trace_record.flags */
enum trace_flags : __u8 {
	TRACE_ID_KNOWN = 1, /* trace_id holds the id: the one-argument
			     * begin_mesh_trace(cq) takes its id inside */
	TRACE_CQ_KNOWN = 2, /* cq holds the command queue (release has none) */
	TRACE_BLOCKING = 4, /* replay: blocking (block_on_device for a Device) */
};

/* The entry of a trace call on a Device or a MeshDevice. */
struct trace_record {
	struct record_header hdr;
	__u64 device;      /* the Device* or MeshDevice* (this) */
	__u64 device_vptr; /* *(u64 *)device, for diagnosis of DEV_UNKNOWN */
	__u64 lost_before; /* records this CPU failed to reserve since its previous record */
	__u32 trace_id;    /* tid, or the MeshTraceId's value (flags: TRACE_ID_KNOWN) */
	__s32 chip;        /* Device::id_ when device_kind == DEV_CHIP, else -1 */
	enum trace_op op;
	enum device_kind device_kind;
	__u8 cq;           /* command queue id (flags: TRACE_CQ_KNOWN) */
	__u8 flags;        /* enum trace_flags */
	__u8 read_error;   /* a user-memory read failed: fields may be zero */
	__u8 _pad[3];
};

/* ---- TT-NN ops (bpf/ops.h, docs/probes.md "TT-NN ops") ------------------ */

/* op_enter_record.flags */
enum op_enter_flags : __u8 {
	OP_FRAME_DROPPED = 1, /* the thread had OP_MAX_FRAMES live frames: this one is not
			       * kept (records inside it belong to its caller's frame) */
};

/* The entry of a TT-NN op function: a frame pushed on its thread
 * (hdr.op_frames counts it). No uretprobe: an op that throws must unwind
 * as untraced; bpf/ops.h says how frames end. */
struct op_enter_record {
	struct record_header hdr;
	__u64 lost_before; /* records this CPU failed to reserve since its previous record */
	__u64 sp;          /* the stack pointer at the entry (the return address's slot) */
	__u64 ret;         /* the return address there */
	__u32 op;          /* the op's id (the cookie's low 32 bits): what it names is
			    * user space's */
	__u8 device;       /* the cookie's OP_COOKIE_DEVICE_BIT: a device operation's launch */
	__u8 flags;        /* enum op_enter_flags */
	__u8 _pad[2];
};

/* runtime_id_record.flags */
enum runtime_id_flags : __u8 {
	RUNTIME_ID_IMPL_KNOWN = 1, /* impl holds the ProgramImpl* (the library's Program is the
				    * handle of a detail::ProgramImpl, its one member a
				    * std::shared_ptr<ProgramImpl> whose first word is the pointer) */
};

/* Program::set_runtime_id(uint64_t id): the id of the device operation
 * launching the program, set at every launch (program cache hit or miss)
 * after its outputs are allocated: it belongs to the innermost device-op
 * frame of the hdr.op_frames live. */
struct runtime_id_record {
	struct record_header hdr;
	__u64 lost_before; /* as in struct op_enter_record */
	__u64 program;     /* the Program* (this) */
	__u64 impl;        /* the ProgramImpl* it holds (flags: RUNTIME_ID_IMPL_KNOWN): the
			    * object of that program's cb_layout and program_dispatch */
	__u64 runtime_id;  /* the id */
	__u8 flags;        /* enum runtime_id_flags */
	__u8 read_error;   /* the ProgramImpl* could not be read */
	__u8 _pad[6];
};

/* ---- the dynamic loader's link map (bpf/linkmap.h, docs/stacks.md) ------ */

/* The bounds of a walk of a link map. */
enum link_limits {
	LINK_OBJECTS_MAX = 512, /* objects one walk sends at most: a longer list is cut
				 * (LINK_OBJECTS_CUT) */
	LINK_NAME_MAX = 512,    /* room for an object's name (l_name): at most one byte less
				 * is copied. A power of two */
};

/* link_object_record.flags */
enum link_object_flags : __u8 {
	LINK_OBJECT_LAST = 1,      /* the walk's last record: the records of the walk with
				    * indexes 0..index are the whole list (unless LINK_OBJECTS_CUT) */
	LINK_OBJECTS_CUT = 2,      /* with LAST: the list is not whole (longer than
				    * LINK_OBJECTS_MAX, or a read of it failed) */
	LINK_OBJECT_NONE = 4,      /* the record names no object (a walk whose next node
				    * could not be read ends with one) */
	LINK_OBJECT_NO_FILE = 8,   /* ld is in no file's mapping (the vDSO): dev, ino 0 */
	LINK_OBJECT_VMA_BUSY = 16, /* the mapping at ld could not be looked up (the mmap
				    * lock was taken): dev, ino 0 */
	LINK_OBJECT_NAME_CUT = 32, /* the name did not fit (LINK_NAME_MAX - 1 bytes kept), or
				    * could not be read (size 0) */
	LINK_OBJECT_EXECFN = 64,   /* the main program's name, which ld.so leaves empty, is the
				    * path the process was executed by (AT_EXECFN): relative
				    * to its working directory then if not absolute */
};

/* One object of the dynamic loader's link map (struct link_map of
 * <link.h>: l_addr, l_name, l_ld), with the identity of its file, as it
 * stands when ld.so calls _dl_debug_state() with r_debug.r_state ==
 * RT_CONSISTENT. The records of one walk come, in list order, before the
 * EV_LINK_MAP record of that call; user space places the stacks of the
 * process in these objects when its /proc/PID/maps can no longer be read
 * (it ended). The process writes the list: addr and the name are its word,
 * dev and ino the kernel's. */
struct link_object_record {
	struct record_header hdr; /* seq: one taken for the walk, shared by its records */
	__u64 addr;  /* l_addr: the object's load bias (run-time address - ELF address) */
	__u64 ld;    /* l_ld: the run-time address of its dynamic section */
	__u64 dev;   /* the device of the file mapped at ld, as the kernel encodes a
		      * dev_t (major << 20 | minor) */
	__u64 ino;   /* its inode */
	__u32 index; /* position in the list: 0 is the main program (its name "", or
		      * with LINK_OBJECT_EXECFN the path it was executed by) */
	__u32 size;  /* bytes of the name in data (no NUL); the record is at least
		      * offsetof(struct link_object_record, data) + size bytes long */
	__u8 flags;  /* enum link_object_flags */
	__u8 _pad[7];
	__u8 data[LINK_NAME_MAX]; /* l_name: the path ld.so opened, in the process's mount
				   * namespace (relative to its working directory when
				   * dlopen was given a relative path) */
};

#endif /* TTTRACE_WIRE_H */
