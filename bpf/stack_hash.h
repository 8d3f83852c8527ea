/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Where a key goes in the known-stack tables (bpf/stack.h): the slot sets
 * of stack_steps and stack_sites. Plain C on fixed-width types, so that a
 * host compiler builds it too: probes/tables/known.go computes the same
 * sets, and its test compares the two.
 */
#ifndef TTTRACE_STACK_HASH_H
#define TTTRACE_STACK_HASH_H

/* The tables' sizes (powers of two) and the slots of a set. */
#define STACK_STEP_BITS 15
#define STACK_SITE_BITS 12
#define PY_SITE_BITS 11
#define STACK_WAYS 2

/* The tables' hash: a multiply-xor chain; a set is named by the top bits
 * (the best mixed), its first slot index a multiple of STACK_WAYS. */
#define STACK_HASH_MUL 0x9e3779b97f4a7c15ULL

static inline __attribute__((always_inline)) __u64 stack_mix(__u64 h, __u64 v)
{
	return (h ^ v) * STACK_HASH_MUL;
}

static inline __attribute__((always_inline)) __u32 stack_step_set(__u32 tgid, __u32 first, __u64 pc)
{
	__u64 h = stack_mix(stack_mix(STACK_HASH_MUL, (__u64)tgid << 1 | first), pc);

	return (__u32)(h >> (64 - STACK_STEP_BITS)) & ~(STACK_WAYS - 1);
}

/* A chain's hash starts from its process and probe pc, takes each return
 * address in turn, and ends with their number (stack_site_set). */
static inline __attribute__((always_inline)) __u64 stack_site_start(__u32 tgid, __u64 ip)
{
	return stack_mix(stack_mix(STACK_HASH_MUL, tgid), ip);
}

static inline __attribute__((always_inline)) __u32 stack_site_set(__u64 h, __u32 n)
{
	return (__u32)(stack_mix(h, n) >> (64 - STACK_SITE_BITS)) & ~(STACK_WAYS - 1);
}

/* A Python chain's hash (py_sites, bpf/pyknown.h) starts from its process
 * and code generation, takes each frame's code object and instruction in
 * turn (bpf/python.h's walk, innermost first), and ends with their number
 * (py_site_set). */
static inline __attribute__((always_inline)) __u64 py_site_start(__u32 tgid, __u32 gen)
{
	return stack_mix(stack_mix(STACK_HASH_MUL, (__u64)gen << 32 | tgid), 1);
}

static inline __attribute__((always_inline)) __u64 py_site_frame(__u64 h, __u64 code, __u64 instr)
{
	return stack_mix(stack_mix(h, code), instr);
}

static inline __attribute__((always_inline)) __u32 py_site_set(__u64 h, __u32 n)
{
	return (__u32)(stack_mix(h, n) >> (64 - PY_SITE_BITS)) & ~(STACK_WAYS - 1);
}

#endif /* TTTRACE_STACK_HASH_H */
