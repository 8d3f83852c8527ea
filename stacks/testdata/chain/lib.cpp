// libchain.so: the inner frames of the chain, and capture(), which writes
// what bpf/stack.h captures in BPF: its own rip, rsp and rbp, and a copy of
// its stack from rsp up (CAPTURE_BYTES, default 16384, cut at the end of
// the stack's mapping), plus /proc/self/maps to bind the pcs to files.
// With CAPTURE_WAIT set it then prints "ready" and waits for a byte (or
// EOF) on stdin, for a debugger to attach.
#include "chain.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

static unsigned char copy[1 << 20];
volatile int sink;

// stack_end returns the end of the mapping that holds sp.
static uint64_t stack_end(uint64_t sp)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	uint64_t end = 0;
	while (f && fgets(line, sizeof line, f)) {
		unsigned long long s, e;
		if (sscanf(line, "%llx-%llx", &s, &e) == 2 && sp >= s && sp < e)
			end = e;
	}
	if (f)
		fclose(f);
	return end;
}

static void save(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		exit(3);
	}
	fclose(f);
}

namespace chain {

int capture(const char *out)
{
	uint64_t ip, sp, bp;
	asm volatile("lea 0(%%rip), %0\n\t"
		     "mov %%rsp, %1\n\t"
		     "mov %%rbp, %2"
		     : "=r"(ip), "=r"(sp), "=r"(bp));
	uint64_t want = 16384;
	if (const char *s = getenv("CAPTURE_BYTES"))
		want = strtoull(s, nullptr, 0);
	uint64_t end = stack_end(sp);
	uint64_t n = end > sp && end - sp < want ? end - sp : want;
	if (n > sizeof copy)
		n = sizeof copy;
	memcpy(copy, (const void *)sp, n);
	uint64_t hdr[4] = {ip, sp, bp, n};
	char path[4096];
	snprintf(path, sizeof path, "%s/regs", out);
	save(path, hdr, sizeof hdr);
	snprintf(path, sizeof path, "%s/stack", out);
	save(path, copy, n);
	FILE *m = fopen("/proc/self/maps", "r");
	static char maps[1 << 20];
	size_t mn = m ? fread(maps, 1, sizeof maps, m) : 0;
	if (m)
		fclose(m);
	snprintf(path, sizeof path, "%s/maps", out);
	save(path, maps, mn);
	if (getenv("CAPTURE_WAIT")) { // for a debugger to attach: wait here
		puts("ready");
		fflush(stdout);
		char c;
		if (read(0, &c, 1) < 0)
			perror("read");
	}
	return (int)(n & 1) + sink;
}

// Two paths out (remember/restore_state in the CFI) and a call in each.
int f2(long n, const char *out)
{
	if (n < 0) {
		sink = (int)n;
		return capture(out) - 1;
	}
	int r = capture(out);
	sink = r;
	return r + (int)n;
}

// A variable-length array: the frame is addressed from rbp (the CFA is
// rbp-based) even without frame pointers. The early return, said to be the
// likely path, is laid out first: its epilogue and ret come before the call
// to f2, so the CFI says remember_state, CFA rsp+8 at the ret, and
// restore_state (of the rbp-based CFA) for the call after it.
template <typename T> int Holder<T>::f1(T depth, const char *out)
{
	volatile char buf[depth + 16];
	buf[depth] = 1;
	if (__builtin_expect(depth < 0, 1))
		return buf[0];
	int r = f2(depth * 2, out);
	return r + buf[depth];
}
template struct Holder<int>;

int lib_entry(int n, const char *out)
{
	int r = Holder<int>::f1(n, out);
	sink = r;
	return r * 3;
}

int probe_target(int i)
{
	sink = i;
	return i + 1;
}

} // namespace chain
