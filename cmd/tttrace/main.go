// Command tttrace shows where Tenstorrent device memory goes in programs
// that use TT-Metal, by tracing libtt_metal.so with eBPF uprobes.
package main

import (
	"os"

	"github.com/tttrace/tttrace/cmd/tttrace/cli"
)

func main() {
	// A "-- CMD" child waits here until the probes are attached.
	cli.ExecGate()
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
