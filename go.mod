module github.com/tttrace/tttrace

go 1.26.0

require (
	github.com/cilium/ebpf v0.20.0
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/spf13/pflag v1.0.10
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
	google.golang.org/protobuf v1.36.12
)

tool github.com/cilium/ebpf/cmd/bpf2go
