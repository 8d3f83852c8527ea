// Command tttrace shows where Tenstorrent device memory goes in programs
// that use TT-Metal, by tracing libtt_metal.so with eBPF uprobes.
package main

import (
	"os"

	"github.com/tttrace/tttrace/cmd/tttrace/cli"
	"github.com/tttrace/tttrace/internal/gcgoal"
)

func main() {
	// A "-- CMD" child waits here until the probes are attached.
	cli.ExecGate()
	// The heap is mostly the ledger's long-lived records, one per live
	// buffer; the consumer allocates nothing per event. A collection at
	// +25% of the live heap (+16 MB past 64 MB) instead of +100% costs a
	// few more collections while the ledger grows and takes ~45% off the
	// peak RSS with a million live buffers (docs/bench.md, rows 5). GOGC
	// overrides.
	gcgoal.Start()
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
