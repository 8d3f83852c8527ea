package cli

import (
	"strings"
	"testing"
	"time"
)

// A malformed --otlp, or an --otlp-* flag that cannot be followed, is a
// usage error reported before anything is traced.
func TestOTLPRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--otlp", "127.0.0.1:4318"}, "is not an http:// or https:// URL"},
		{[]string{"--otlp", "http://127.0.0.1:70000"}, "the port must be a number"},
		{[]string{"--otlp", ""}, "--otlp: an empty URL"},
		{[]string{"--otlp-interval", "5s"}, "--otlp-interval goes with --otlp"},
		{[]string{"--otlp-header", "a=b"}, "--otlp-header goes with --otlp"},
		{[]string{"--otlp", "http://c:4318", "--otlp-interval", "10ms"}, "--otlp-interval 10ms: at least 100ms"},
		{[]string{"--otlp", "http://c:4318", "--otlp-interval", "1s", "--otlp-timeout", "2s"}, "at most --otlp-interval"},
		{[]string{"--otlp", "http://c:4318", "--otlp-header", "X-Bad Name=1"}, "not an HTTP header name"},
		{[]string{"--otlp", "http://c:4318", "--otlp-header", "novalue"}, "is not KEY=VALUE"},
		{[]string{"--otlp", "http://c:4318", "--otlp-compression", "zstd"}, `--otlp-compression "zstd": gzip or none`},
		{[]string{"--otlp", "http://c:4318", "--otlp-ca", "/etc/ca.pem"}, "go with an https --otlp"},
		{[]string{"--otlp", "https://c:4318", "--otlp-ca", "/nonexistent/ca.pem"}, "CA file"},
	} {
		var stdout, stderr strings.Builder
		code := Main(append(c.args, "--", "true"), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%q: exit %d, stderr %q; want %d saying %q", c.args, code, stderr.String(), ExitUsage, c.says)
		}
		if strings.Contains(stderr.String(), "tracing (") {
			t.Errorf("%q: tracing started", c.args)
		}
	}
}

func TestOTLPParsed(t *testing.T) {
	f, err := Parse([]string{"--otlp", "https://otlp.example.com", "--otlp-header", "Authorization=Bearer a=b", "--otlp-header", "X-Tenant=t",
		"--otlp-interval", "2s", "--otlp-compression", "gzip", "--metrics-labels", "pid,pod", "--all"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if f.OTLP != "https://otlp.example.com" || f.OTLPInterval != 2*time.Second || f.OTLPTimeout != 2*time.Second ||
		strings.Join(f.OTLPHeaders, "|") != "Authorization=Bearer a=b|X-Tenant=t" || f.OTLPCompression != "gzip" ||
		strings.Join(f.MetricsLabels, ",") != "pid,pod" {
		t.Errorf("%+v", f)
	}
	f, err = Parse([]string{"--otlp", "http://127.0.0.1:4318", "--all"}, &strings.Builder{})
	if err != nil || f.OTLPInterval != 10*time.Second || f.OTLPTimeout != 10*time.Second {
		t.Errorf("defaults: %+v %v", f, err)
	}
}
