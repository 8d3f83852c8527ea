// The executable of the chain: main calls into libchain.so.
#include "chain.h"

#include <cstdio>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
		return 2;
	}
	int r = chain::lib_entry(argc + 3, argv[1]);
	printf("%d\n", r);
	return 0;
}
