package cli

import (
	"net"
	"strings"
	"testing"
)

// A malformed or busy --listen address is a usage error, reported before
// anything is traced (no root needed to see it).
func TestListenRefused(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct{ addr, says string }{
		{"9464", `--listen: "9464" is not HOST:PORT`},
		{"127.0.0.1:", "the port must be a number from 1 to 65535"},
		{"127.0.0.1:65536", "the port must be a number from 1 to 65535"},
		{busy.Addr().String(), "address already in use"},
	} {
		var stdout, stderr strings.Builder
		code := Main([]string{"--listen", c.addr, "--", "true"}, &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("--listen %s: exit %d, stderr %q; want %d saying %q", c.addr, code, stderr.String(), ExitUsage, c.says)
		}
		if strings.Contains(stderr.String(), "tracing (") {
			t.Errorf("--listen %s: tracing started", c.addr)
		}
	}
}

func TestListenParsed(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:9464", "--all"},
		{"--listen", ":9464", "-p", "1", "--json"},
		{"--listen", "[::1]:9464", "--", "true"},
	} {
		f, err := Parse(args, &strings.Builder{})
		if err != nil || f.Listen != args[1] {
			t.Errorf("Parse(%q) = %+v, %v", args, f, err)
		}
	}
}

// --metrics-labels chooses the process labels; pid must stay, and it goes
// with --listen only.
func TestMetricsLabelsParsed(t *testing.T) {
	f, err := Parse([]string{"--listen", ":9464", "--all"}, &strings.Builder{})
	if err != nil || strings.Join(f.MetricsLabels, ",") != "pid,command,host,rank,mesh_id,mesh_host_rank,pod,namespace,container" {
		t.Errorf("default labels %q, %v", f.MetricsLabels, err)
	}
	f, err = Parse([]string{"--listen", ":9464", "--metrics-labels", "pid", "--all"}, &strings.Builder{})
	if err != nil || strings.Join(f.MetricsLabels, ",") != "pid" {
		t.Errorf("--metrics-labels pid: %q, %v", f.MetricsLabels, err)
	}
	for _, args := range [][]string{
		{"--listen", ":9464", "--metrics-labels", "command", "--all"},
		{"--listen", ":9464", "--metrics-labels", "pid,argv", "--all"},
		{"--metrics-labels", "pid", "--all"},
		{"--max-chips", "0", "--all"},
	} {
		if _, err := Parse(args, &strings.Builder{}); err == nil {
			t.Errorf("Parse(%q) accepted", args)
		}
	}
}
