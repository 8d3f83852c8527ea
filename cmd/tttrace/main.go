// Command tttrace shows where Tenstorrent device memory goes in programs
// that use TT-Metal, by tracing libtt_metal.so with eBPF uprobes.
package main

import (
	"os"
	"runtime/debug"

	"github.com/tttrace/tttrace/cmd/tttrace/cli"
)

func main() {
	// A "-- CMD" child waits here until the probes are attached.
	cli.ExecGate()
	// The heap is mostly the ledger's long-lived records, one per live
	// buffer; the consumer allocates nothing per event. A collection at
	// +25% instead of +100% of the live heap costs a few more
	// collections while the ledger grows and takes ~40% off the peak RSS
	// with a million live buffers (docs/bench.md, rows 5). GOGC overrides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
