// Command tttrace shows where Tenstorrent device memory goes in programs
// that use TT-Metal, by tracing libtt_metal.so with eBPF uprobes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tttrace/tttrace/cmd/tttrace/cli"
)

func main() {
	// A "-- CMD" child waits here until the probes are attached.
	cli.ExecGate()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
