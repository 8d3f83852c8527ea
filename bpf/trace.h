/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Metal trace forms tttrace.bpf.c's programs do not cover (docs/ttmetal.md
 * §10): the older one-bool Device::replay_trace, and the calls through a
 * MeshCommandQueue&, the 2026 public MeshDevice overloads that ttnn's
 * trace.cpp and BeginTraceCapture call. Each checks cq.device() == this and forwards
 * cq.id() to the implementation, never through the cq-id forms
 * tttrace.bpf.c probes. The mesh is this (rdi); the command queue's id is
 * the uint32_t MeshCommandQueue::id_ at lib_info.off[LF_MESH_CQ_ID] (from
 * DWARF, a profile or a layout file; the plan attaches these programs only
 * where it is known). Included by tttrace.bpf.c after on_trace.
 */
#ifndef TTTRACE_TRACE_H
#define TTTRACE_TRACE_H

/* The id of the MeshCommandQueue at mcq; ok is cleared when it cannot be
 * read (no offset, or user memory that does not read). */
static __always_inline __u8 mesh_cq_id(struct pt_regs *ctx, __u64 mcq, __u8 *ok)
{
	struct site site = locate(ctx);
	__u32 id = 0;
	__s64 off;

	*ok = 0;
	if (!site.lib || !mcq)
		return 0;
	off = site.lib->off[LF_MESH_CQ_ID];
	if (off < 0 || off > 4096)
		return 0;
	if (bpf_probe_read_user(&id, sizeof(id), (void *)(mcq + off)) < 0)
		return 0;
	*ok = 1;
	return (__u8)id;
}

/* A trace call through a MeshCommandQueue&: as on_trace, the cq read from
 * the queue (its flag cleared when it could not be). */
static __always_inline int on_trace_mcq(struct pt_regs *ctx, enum trace_op op, __u8 flags, __u64 mcq,
					__u64 id_ref)
{
	__u8 ok;
	__u8 cq = mesh_cq_id(ctx, mcq, &ok);

	if (!ok)
		flags &= ~TRACE_CQ_KNOWN;
	return on_trace(ctx, op, PT_REGS_PARM1(ctx), flags, cq, 0, id_ref);
}

/* void Device::replay_trace(uint8_t cq_id, uint32_t tid, bool blocking): the
 * older form, in some builds beside the two-bool one (its own symbol, the
 * same registers: rdi Device*, sil cq, edx tid, cl blocking). */
SEC("uprobe.multi")
int device_replay_trace_blocking(struct pt_regs *ctx)
{
	__u8 blocking = (__u8)PT_REGS_PARM4(ctx) ? TRACE_BLOCKING : 0;

	return on_trace(ctx, TRACE_REPLAY, PT_REGS_PARM1(ctx), TRACE_ID_KNOWN | TRACE_CQ_KNOWN | blocking,
			(__u8)PT_REGS_PARM2(ctx), (__u32)PT_REGS_PARM3(ctx), 0);
}

/* MeshTraceId MeshDevice::begin_mesh_trace(MeshCommandQueue& cq): the id is
 * taken inside (it comes back in eax). */
SEC("uprobe.multi")
int mesh_begin_trace_mcq(struct pt_regs *ctx)
{
	return on_trace_mcq(ctx, TRACE_BEGIN, TRACE_CQ_KNOWN, PT_REGS_PARM2(ctx), 0);
}

/* void MeshDevice::begin_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id) */
SEC("uprobe.multi")
int mesh_begin_trace_mcq_id(struct pt_regs *ctx)
{
	return on_trace_mcq(ctx, TRACE_BEGIN, TRACE_ID_KNOWN | TRACE_CQ_KNOWN, PT_REGS_PARM2(ctx),
			    PT_REGS_PARM3(ctx));
}

/* void MeshDevice::end_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id) */
SEC("uprobe.multi")
int mesh_end_trace_mcq(struct pt_regs *ctx)
{
	return on_trace_mcq(ctx, TRACE_END, TRACE_ID_KNOWN | TRACE_CQ_KNOWN, PT_REGS_PARM2(ctx),
			    PT_REGS_PARM3(ctx));
}

/* void MeshDevice::replay_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id,
 *     bool blocking) */
SEC("uprobe.multi")
int mesh_replay_trace_mcq(struct pt_regs *ctx)
{
	__u8 blocking = (__u8)PT_REGS_PARM4(ctx) ? TRACE_BLOCKING : 0;

	return on_trace_mcq(ctx, TRACE_REPLAY, TRACE_ID_KNOWN | TRACE_CQ_KNOWN | blocking, PT_REGS_PARM2(ctx),
			    PT_REGS_PARM3(ctx));
}

#endif /* TTTRACE_TRACE_H */
