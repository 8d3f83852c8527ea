// A known call chain for the unwinder tests (stacks/unwind_test.go):
// main -> chain::lib_entry -> chain::Holder<int>::f1 -> chain::f2 ->
// chain::capture, the last four in libchain.so. Built at -O2 without frame
// pointers; every function is noinline and does work after its call, so
// no frame is inlined or turned into a tail call.
#pragma once
#if defined(__clang__)
#define KEEP __attribute__((noinline, used))
#else
#define KEEP __attribute__((noinline, noclone, used))
#endif

namespace chain {
template <typename T> struct Holder {
	KEEP static int f1(T depth, const char *out);
};
KEEP int f2(long n, const char *out);
KEEP int capture(const char *out);
KEEP int lib_entry(int n, const char *out);
// A function to probe in a loop (the cost measurement of stacktest).
KEEP int probe_target(int i);
} // namespace chain
