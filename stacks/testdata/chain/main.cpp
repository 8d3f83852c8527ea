// The executable of the chain: main calls into libchain.so.
//   chain OUTDIR          run the chain; capture() writes into OUTDIR
//   chain OUTDIR thread   the same from a second thread
//   chain bench N DEPTH   call probe_target N times from DEPTH frames of
//                         256 bytes down, print the nanoseconds per call
#include "chain.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

static volatile int keep;

KEEP static double deep(int depth, long n)
{
	volatile char frame[256];
	frame[depth & 255] = (char)depth;
	if (depth > 0) {
		double r = deep(depth - 1, n);
		keep = frame[depth & 255];
		return r;
	}
	timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		keep = chain::probe_target((int)i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "bench") == 0) {
		printf("%.1f\n", deep(atoi(argv[3]), atol(argv[2])));
		return 0;
	}
	int r = 0;
	if (argc == 3 && strcmp(argv[2], "thread") == 0) {
		std::thread t([&] { r = chain::lib_entry(5, argv[1]); });
		t.join();
		printf("%d\n", r);
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTDIR [thread] | bench N DEPTH\n", argv[0]);
		return 2;
	}
	r = chain::lib_entry(argc + 3, argv[1]);
	printf("%d\n", r);
	return 0;
}
