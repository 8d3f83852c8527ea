#!/usr/bin/env bash
# make bench: tttrace's performance and loss figures, measured against the
# floor (count-only uprobes at the addresses tttrace attaches, benchtool
# -floor-lib) and an in-process reporter, in one table with the goals
# (docs/bench.md explains every row). Needs root (BPF).
# Not part of make test. Takes about 10 minutes on 2 CPUs.
#
#   scripts/bench.sh [benchtool flags]     e.g. -rounds 3, -only cost,loss
#   BENCH_ROUNDS=N (default 5)
#
# Builds into build/bench/: a private copy of the replica (its own inode, so
# uprobes another tracer puts on build/replica never fire in these runs), the
# REPORTER=socket replica, the replica with the TT-NN stand-in (the ops
# rows), and once, the 200+ MB generated library. Raw
# results: build/bench/results.json; the table: build/bench/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "bench: needs root (it loads BPF programs)" >&2
	exit 1
fi
start=$SECONDS
scripts/deps.sh build bench
make -s build
B=$PWD/build/bench
mkdir -p "$B"
make -s -C testdata/replica OUT="$B/replica"
make -s -C testdata/replica OUT="$B/replica-socket" REPORTER=socket
make -s -C testdata/replica OUT="$B/replica-cet" CXXFLAGS=-fcf-protection=full
make -s -C testdata/replica OUT="$B/replica-ttnn" TTNN_ERA=2026
python3 scripts/genbiglib.py --replica "$B/replica" --out "$B/big"
go build -o "$B/benchtool" ./scripts/benchtool
"$B/benchtool" -tttrace bin/tttrace -replica "$B/replica" -socket "$B/replica-socket" -cet "$B/replica-cet" -big "$B/big" -ttnn "$B/replica-ttnn" \
	-work "$B/run" -json "$B/results.json" -rounds "${BENCH_ROUNDS:-5}" "$@" | tee "$B/table.md"
echo "bench: done in $((SECONDS - start)) s (table in build/bench/table.md)" >&2
