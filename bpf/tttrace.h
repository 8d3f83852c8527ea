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
	LF_COUNT = 12,
};

#endif /* TTTRACE_H */
