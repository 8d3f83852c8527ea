/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What user space hands the BPF programs besides the ring's records (those
 * are in wire.h): the layout values of a probed library.
 */
#ifndef TTTRACE_H
#define TTTRACE_H

#include "wire.h"

/* The layout values tttrace reads objects with, one per entry of
 * lib_info.off (bpf/tttrace.bpf.c), in the order of ttmetal's field table
 * (ttmetal/fields.go), which also gives each its layout-file key: the name
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
	LF_MESH_CQ_ID = 11,       /* distributed::MeshCommandQueue::id_ (a uint32_t) */
	/* CoreRangeSet, read by the CB probe (bpf/cb.h): */
	LF_CORE_RANGES = 12,      /* CoreRangeSet::ranges_ (a std::vector<CoreRange>) */
	LF_CORE_RANGE_SIZE = 13,  /* sizeof(CoreRange): the vector's stride (a size, not an offset) */
	LF_CORE_RANGE_START = 14, /* CoreRange::start_coord */
	LF_CORE_RANGE_END = 15,   /* CoreRange::end_coord */
	LF_CORE_COORD_X = 16,     /* CoreCoord::x */
	LF_CORE_COORD_Y = 17,     /* CoreCoord::y */
	LF_CORE_COORD_WIDTH = 18, /* bytes of CoreCoord::x and y: 8 (size_t) or 4 */
	LF_COUNT = 19,
};

#endif /* TTTRACE_H */
