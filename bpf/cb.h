/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Circular buffers and program dispatch (docs/ttmetal.md §5, §12), included
 * by tttrace.bpf.c after its helpers: the cb_alloc record with the CB's core
 * ranges, read through the CoreRangeSet& at the layout's offsets (never
 * guessed: a layout without them copies none and says so), and the entry of
 * the per-enqueue dispatch function.
 */
#ifndef TTTRACE_CB_H
#define TTTRACE_CB_H

/* Bytes of one CoreRange tttrace copies at most. */
#define CORE_RANGE_MAX 64

/* Copy the ranges of the CoreRangeSet at crs into r, bounded by
 * CB_MAX_RANGES ranges of at most CORE_RANGE_MAX bytes each. Each range is
 * one user read; its coordinates are taken 8 bytes at a time and cut to
 * the layout's width without a branch: few paths for the verifier
 * (TestVerifierWork). A range that cannot be read, or a coordinate above
 * 65535, sets read_error and gives no ranges at all (never wrong ones). */
static __always_inline void cb_read_ranges(struct cb_alloc_record *r, __u64 crs, struct lib_info *l)
{
	__s64 roff, rsz, so, eo, xo, yo, w;
	__u8 buf[SPAN_MAX + 8];
	__u64 vec[2] = {};
	__u64 n, mask, bad = 0;
	int i;

	if (!l || !crs)
		return;
	roff = l->off[LF_CORE_RANGES];
	rsz = l->off[LF_CORE_RANGE_SIZE];
	so = l->off[LF_CORE_RANGE_START];
	eo = l->off[LF_CORE_RANGE_END];
	xo = l->off[LF_CORE_COORD_X];
	yo = l->off[LF_CORE_COORD_Y];
	w = l->off[LF_CORE_COORD_WIDTH];
	if (roff < 0 || rsz <= 0 || rsz > CORE_RANGE_MAX || so < 0 || eo < 0 || xo < 0 || yo < 0 ||
	    (w != 4 && w != 8))
		return;
	/* std::vector: begin and end are its first two words. */
	if (bpf_probe_read_user(vec, sizeof(vec), (void *)(crs + roff)) < 0 || vec[1] < vec[0]) {
		r->read_error = 1;
		return;
	}
	n = (vec[1] - vec[0]) / (__u64)rsz;
	mask = ~0ULL >> ((8 - w) * 8);
	__builtin_memset(buf, 0, sizeof(buf));
#pragma unroll
	for (i = 0; i < CB_MAX_RANGES; i++) {
		__u64 x0, y0, x1, y1;

		if (i >= n)
			break;
		if (bpf_probe_read_user(buf, rsz, (void *)(vec[0] + (__u64)i * rsz)) < 0) {
			bad = 1;
			break;
		}
		x0 = span_field(buf, so + xo, 0, 8) & mask;
		y0 = span_field(buf, so + yo, 0, 8) & mask;
		x1 = span_field(buf, eo + xo, 0, 8) & mask;
		y1 = span_field(buf, eo + yo, 0, 8) & mask;
		bad |= (x0 | y0 | x1 | y1) >> 16;
		r->ranges[i].x0 = x0;
		r->ranges[i].y0 = y0;
		r->ranges[i].x1 = x1;
		r->ranges[i].y1 = y1;
	}
	if (bad) {
		r->read_error = 1;
		return;
	}
	r->flags = CB_RANGES_KNOWN | (n > CB_MAX_RANGES ? CB_RANGES_TRUNCATED : 0);
	r->nranges = n > 0xffffffffULL ? 0xffffffff : (__u32)n;
}

/* A CB laid out for a program: its device, address, per-core size and
 * core ranges. */
static __always_inline int on_cb_alloc(struct pt_regs *ctx, __u64 crs, __u64 dev, __u64 address,
				       __u64 size, __u8 global)
{
	__u64 lost_before = 0;
	struct cb_alloc_record *r;
	struct site site;

	r = start_record(EV_CB_ALLOC, sizeof(*r), &lost_before, PT_REGS_SP(ctx));
	if (!r)
		return 0;
	site = locate(ctx);
	r->lost_before = lost_before;
	r->address = address;
	r->size = size;
	r->global = global;
	classify_record(r, dev, &site);
	cb_read_ranges(r, crs, site.lib);
	finish(r);
	return 0;
}

#endif /* TTTRACE_CB_H */
