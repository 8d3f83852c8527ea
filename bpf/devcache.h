/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What classify_device found of a device pointer, kept per process (issue
 * #33): a Device's vptr and id_, and a MeshDevice's vptr, do not change
 * while the object lives, so a pointer classified once need not be read
 * again. Every allocation and free names its buffer's device; the read of
 * the device (its vptr and id, 16+ bytes) cost ~50 ns of a hit on Linux
 * 6.18 in a VM (docs/bench.md). A hit here costs a few loads.
 *
 * A direct-mapped table of DEV_CACHE_SLOTS slots in .bss (no map lookup,
 * no helper): a slot holds the process, the pointer, the load bias of the
 * library whose vtables classified it (another library's probe, or the
 * library mapped again elsewhere, misses), the kind and the chip. Only
 * DEV_CHIP and DEV_MESH are kept: an unknown vptr is read again each time.
 * A slot is written under its sequence count (odd while written; a writer
 * that finds it odd leaves it), and a reader takes it only if the count
 * was even and the same before and after it read the fields: a torn slot
 * is never used (x86's stores and loads are not reordered with their own
 * kind; the accesses are volatile).
 *
 * A pointer can name another device once its object is freed. Once one
 * of a process's devices or meshes closes, its Device and MeshDevice
 * objects can be freed and others made at their addresses with no further
 * close seen, and a slot written while it closed (its classification read
 * before) could outlive the drop: the process's pointers are then never
 * taken from the cache again (PID_DEV_CLOSED in its pid flags, which go
 * with the process: the exit hook clears them). Every slot of a process is
 * also dropped when its link map changes (an exec starts with the loader's
 * first call; a library unloaded: the library's bias then differs) and
 * when it ends (its pid can be reused).
 */
#ifndef TTTRACE_DEVCACHE_H
#define TTTRACE_DEVCACHE_H

#define DEV_CACHE_SLOTS 256

struct dev_slot {
	__u32 seq;
	__u32 tgid;
	__u64 dev;
	__u64 bias;
	__s32 chip;
	__u32 kind;
};

struct dev_slot dev_cache[DEV_CACHE_SLOTS] = {};

static __always_inline struct dev_slot *dev_slot_of(__u32 tgid, __u64 dev)
{
	__u64 h = ((dev >> 3) ^ ((__u64)tgid << 20)) * 0x9e3779b97f4a7c15ULL;

	return &dev_cache[(h >> 56) & (DEV_CACHE_SLOTS - 1)];
}

/* Whether process tgid's device pointers may be cached: none of its
 * devices or meshes has closed. */
static __always_inline int dev_cache_on(__u32 tgid)
{
	__u8 *f = pid_flags(tgid);

	return f && !(*f & PID_DEV_CLOSED);
}

/* The kind and chip of dev in process tgid, classified against a library
 * at bias: 1 if the cache has them. */
static __always_inline int dev_cache_get(__u32 tgid, __u64 dev, __u64 bias, __u32 *kind, __s32 *chip)
{
	struct dev_slot *s = dev_slot_of(tgid, dev);
	__u32 seq = *(volatile __u32 *)&s->seq;
	__u32 k;
	__s32 c;

	if ((seq & 1) || !dev_cache_on(tgid))
		return 0;
	if (*(volatile __u64 *)&s->dev != dev || *(volatile __u32 *)&s->tgid != tgid ||
	    *(volatile __u64 *)&s->bias != bias)
		return 0;
	k = *(volatile __u32 *)&s->kind;
	c = *(volatile __s32 *)&s->chip;
	if (*(volatile __u32 *)&s->seq != seq)
		return 0;
	*kind = k;
	*chip = c;
	return 1;
}

static __always_inline void dev_cache_put(__u32 tgid, __u64 dev, __u64 bias, __u32 kind, __s32 chip)
{
	struct dev_slot *s = dev_slot_of(tgid, dev);
	__u32 seq = *(volatile __u32 *)&s->seq;

	if ((seq & 1) || !dev_cache_on(tgid) || __sync_val_compare_and_swap(&s->seq, seq, seq + 1) != seq)
		return; /* another CPU writes it: this one is read again next time */
	*(volatile __u32 *)&s->tgid = tgid;
	*(volatile __u64 *)&s->dev = dev;
	*(volatile __u64 *)&s->bias = bias;
	*(volatile __u32 *)&s->kind = kind;
	*(volatile __s32 *)&s->chip = chip;
	__sync_fetch_and_add(&s->seq, 1);
}

/* bpf_loop body: drop slot i if it is process *arg's. */
static long dev_cache_drop_one(__u64 i, void *arg)
{
	__u32 tgid = *(__u32 *)arg, seq;
	struct dev_slot *s;

	if (i >= DEV_CACHE_SLOTS)
		return 1;
	s = &dev_cache[i];
	if (*(volatile __u32 *)&s->tgid != tgid || *(volatile __u64 *)&s->dev == 0)
		return 0;
	seq = *(volatile __u32 *)&s->seq;
	if (seq & 1) {
		/* Being written (left: a slot written at a close's moment). */
		return 0;
	}
	if (__sync_val_compare_and_swap(&s->seq, seq, seq + 1) != seq)
		return 0;
	*(volatile __u64 *)&s->dev = 0;
	__sync_fetch_and_add(&s->seq, 1);
	return 0;
}

/* Forget every device pointer of process tgid. */
static __always_inline void dev_cache_drop(__u32 tgid)
{
	bpf_loop(DEV_CACHE_SLOTS, dev_cache_drop_one, &tgid, 0);
}

/* A device or mesh of process tgid closes: never cache its pointers again
 * (the flag set with an atomic OR on the byte's word, as user space
 * changes the table), and forget those cached. */
static __always_inline void dev_cache_closed(__u32 tgid)
{
	__u32 zero = 0, i = tgid & (PID_SPACE - 1);
	struct pid_table *t = bpf_map_lookup_elem(&traced_pids, &zero);

	if (t)
		__sync_fetch_and_or((__u32 *)&t->flags[i & ~3U], (__u32)PID_DEV_CLOSED << ((i & 3) * 8));
	dev_cache_drop(tgid);
}

#endif /* TTTRACE_DEVCACHE_H */
