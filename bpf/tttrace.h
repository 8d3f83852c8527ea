/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * tttrace wire format: the one record the BPF programs write to the ring
 * buffer. Go gets this layout from bpf2go (-type event); there is no
 * hand-written mirror. u64 fields first, explicit padding, no holes.
 */
#ifndef TTTRACE_H
#define TTTRACE_H

/*
 * Enums with a fixed one-byte underlying type (a clang extension in C) so
 * the record's fields carry them directly: their names and values reach Go
 * through the object's BTF (events/internal/genwire), never a hand mirror.
 */

/* What happened. One value per probed TT-Metal function or kernel hook;
 * the values from 64 on are records user space synthesizes. The NDJSON
 * "type" of a kind is its name without EV_, in lower case. */
enum event_kind : __u8 {
	EV_ALLOC = 1,             /* GraphTracker::track_allocate(const Buffer*) */
	EV_FREE = 2,              /* GraphTracker::track_deallocate(Buffer*) */
	EV_VIEW = 3,              /* Buffer::create(IDevice*, DeviceAddr address, ...): a pre-allocated view */
	EV_CB_ALLOC = 4,          /* GraphTracker::track_allocate_cb(ranges, addr, size, global, device) */
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
	EV_STACK = 16,            /* a struct stack_record (bpf/stack.h), not a struct event: the
				   * native stack of the alloc with the same seq */
	EV_PY_STACK = 17,         /* a struct py_stack_record: the Python stack of that alloc */
	EV_PY_CODE = 18,          /* a struct py_code_record: a code object the next
				   * EV_PY_STACK names, described once */
	EV_LOST = 64,             /* user space: records the ring buffer could not take */
	EV_EXIT = 65,             /* user space: a traced process has ended */
};

/* What the IDevice* of an event points at, told apart by its vptr. */
enum device_kind : __u8 {
	DEV_NONE = 0,    /* the event has no device */
	DEV_CHIP = 1,    /* tt::tt_metal::Device: chip holds Device::id_ */
	DEV_MESH = 2,    /* distributed::MeshDevice: its id() is NOT a chip id */
	DEV_UNKNOWN = 3, /* a vptr that is neither vtable (or unreadable) */
};

/* The layout values tttrace reads objects with, one per entry of
 * lib_info.off (bpf/tttrace.bpf.c), in the order of probes' field table
 * (probes/fields.go), which also gives each its layout-file key: the name
 * without LF_, in lower case. Byte offsets, -1 when the layout lacks the
 * field; LF_BUFFER_TYPE_WIDTH is a size in bytes. */
enum layout_field : __u8 {
	LF_BUFFER_IMPL_PTR = 0,   /* the BufferImpl pointer in a pimpl Buffer; -1: not pimpl */
	LF_DEVICE = 1,            /* Buffer::device_ (in BufferImpl when pimpl, like all LF_ below but DEVICE_ID) */
	LF_SIZE = 2,              /* Buffer::size_ */
	LF_BUFFER_TYPE = 3,       /* Buffer::buffer_type_ */
	LF_OWNS_DATA = 4,         /* Buffer::owns_data_ */
	LF_ALLOCATION_STATUS = 5, /* Buffer::allocation_status_ */
	LF_HOOKED_ALLOCATION = 6, /* Buffer::hooked_allocation_ */
	LF_ADDRESS = 7,           /* Buffer::address_ */
	LF_PAGE_SIZE = 8,         /* Buffer::page_size_ */
	LF_DEVICE_ID = 9,         /* Device::id_ */
	LF_BUFFER_TYPE_WIDTH = 10, /* bytes of buffer_type_: 4 (int enum), 2 or 1 */
	LF_COUNT = 11,
};

/* event.stack of an alloc. */
enum stack_state : __u8 {
	STACK_NONE = 0,    /* stacks are off, or the kind has none */
	STACK_FOLLOWS = 1, /* an EV_STACK record with this seq is in the ring after this one */
	STACK_LOST = 2,    /* the stack could not be captured or emitted (ring full, scratch busy) */
};

/* Every field has one meaning, whatever the kind; a field a kind does not
 * set is zero (chip and buffer_type: -1). */
struct event {
	__u64 seq;         /* global sequence, taken before the reservation: gaps are losses */
	__u64 ts_ns;       /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 object;      /* the C++ object the call is about: Buffer* (alloc, free,
			    * mark_deallocated) or ProgramImpl* (cb_layout, cb_teardown,
			    * program_destroy) */
	__u64 device;      /* the IDevice* the event names */
	__u64 device_vptr; /* *(u64 *)device, for diagnosis of DEV_UNKNOWN */
	__u64 address;     /* Buffer::address_, view address, CB address */
	__u64 size;        /* Buffer::size_, view size, CB per-core size */
	__u64 page_size;   /* Buffer::page_size_, view page size */
	__u64 lost_before; /* reservations this CPU failed since its previous record */
	__u32 pid;         /* tgid of the traced process */
	__u32 tid;         /* thread that made the call */
	__u32 parent_pid;  /* EV_FORK: tgid of the forking process */
	__u32 wait_status; /* EV_MAIN_EXIT: the main thread's exit_code (a wait status) */
	__s32 chip;        /* Device::id_ when device_kind == DEV_CHIP, else -1 */
	__s32 buffer_type; /* BufferType (DRAM 0, L1 1, SYSTEM_MEMORY 2, L1_SMALL 3, TRACE 4) */
	enum event_kind kind;
	enum device_kind device_kind;
	__u8 hooked;     /* Buffer::hooked_allocation_ */
	__u8 owns_data;  /* Buffer::owns_data_ */
	__u8 status;     /* Buffer::allocation_status_ */
	__u8 global;     /* CB is globally allocated (backed by an L1 Buffer) */
	__u8 read_error; /* a user-memory read failed: fields may be zero */
	enum stack_state stack; /* alloc: whether a stack record follows */
};


#endif /* TTTRACE_H */
