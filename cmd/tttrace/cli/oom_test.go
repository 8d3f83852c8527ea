package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/session"
)

// TestFailOnOOM: --fail-on-oom exits 9 when any traced process had a
// failed allocation, caught (the command succeeded) or not (it failed),
// and changes nothing without one or without the flag.
func TestFailOnOOM(t *testing.T) {
	result := func(code int, failures ...uint64) *session.Result {
		r := &session.Result{Command: &session.ExitStatus{Code: code}}
		for i, n := range failures {
			ps := devices.ProcessSummary{Pid: uint32(100 + i)}
			ps.Stats.AllocFailures = n
			r.Summary.Processes = append(r.Summary.Processes, ps)
		}
		return r
	}
	for _, tc := range []struct {
		args []string
		res  *session.Result
		want int
	}{
		{[]string{"--fail-on-oom", "--", "x"}, result(0, 0, 2), ExitOOM},
		{[]string{"--fail-on-oom", "--", "x"}, result(1, 1), ExitOOM},
		{[]string{"--fail-on-oom", "--", "x"}, result(0, 0, 0), ExitOK},
		{[]string{"--fail-on-oom", "--", "x"}, result(3), 3},
		{[]string{"--", "x"}, result(0, 5), ExitOK},
		{[]string{"--", "x"}, result(1, 5), 1},
	} {
		f, err := Parse(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		if got := f.status(tc.res, &stderr); got != tc.want {
			t.Errorf("%v: status %d, want %d (%s)", tc.args, got, tc.want, stderr.String())
		}
		if tc.want == ExitOOM && !strings.Contains(stderr.String(), "failed device allocation") {
			t.Errorf("%v: stderr %q", tc.args, stderr.String())
		}
	}
}
