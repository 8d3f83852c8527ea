#!/usr/bin/env bash
# make demo: trace the bundled replica workload and print the per-chip
# report. Usage: scripts/demo.sh BIN REPLICA_DIR
set -euo pipefail
bin=$1 replica=$2
run() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
echo "== tttrace -- ttwork --scenario all --leak (replica of libtt_metal.so: meshes, CBs, closes, capture, leaks)"
run "$bin" --lib "$replica/libtt_metal.so" -- "$replica/ttwork" --scenario all --leak
