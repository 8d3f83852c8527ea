// Package otlp is tttrace's OpenTelemetry export (--otlp): the series of
// the Prometheus endpoint (sinks/prometheus), the same values from the same
// published snapshot, pushed every interval over OTLP HTTP/protobuf through
// the OpenTelemetry Go SDK, with the semantic conventions' names and
// attributes where they exist (names.go, docs/otlp.md).
//
// Cost and bounds: the records' path never waits on the export. The sink's
// Event, Tick and ProcessEnded are the Prometheus sink's (an atomic store
// of a snapshot per tick); the SDK's periodic reader, on its own goroutine,
// reads the latest snapshot at each interval (one Walk) and sends it as
// one request, within the timeout, retries included. Nothing queues: the
// values are cumulative, so a failed or late export is dropped and the next
// one carries everything. A failure is said on the log once per interval
// at most, with how many failed since; recovery is said once.
package otlp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	promexport "github.com/tttrace/tttrace/sinks/prometheus"
)

// Defaults and bounds of Options.
const (
	DefaultInterval = 10 * time.Second
	MinInterval     = 100 * time.Millisecond
	DefaultTimeout  = 10 * time.Second
	// MaxHeaders bounds --otlp-header: headers are for a token or a
	// tenant, not a payload.
	MaxHeaders = 32
)

// Options configure an Exporter.
type Options struct {
	// Endpoint: http://HOST:PORT[/PATH] or https://...; without a path
	// (or "/") the OTLP metrics path /v1/metrics.
	Endpoint string
	// Interval between exports (DefaultInterval if 0); Timeout of one
	// export, retries included (DefaultTimeout if 0, at most Interval).
	Interval, Timeout time.Duration
	// Headers sent with every request (besides those of
	// OTEL_EXPORTER_OTLP_HEADERS / OTEL_EXPORTER_OTLP_METRICS_HEADERS,
	// which the SDK reads when Headers is empty).
	Headers map[string]string
	// Compression: "gzip" or "none" ("": the SDK's default or its
	// environment variables).
	Compression string
	// CAFile: PEM certificates to trust for an https endpoint (besides
	// the system's); InsecureSkipVerify: trust any certificate.
	CAFile             string
	InsecureSkipVerify bool
	// Host and Version: the resource's host.name and service.version.
	Host, Version string
	// Log is where export failures are said (nil: nowhere).
	Log io.Writer
}

// Target is a parsed endpoint.
type Target struct {
	HostPort, Path string
	Plain          bool // http: no TLS
}

// ParseEndpoint checks an --otlp endpoint and says where requests go.
func ParseEndpoint(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Target{}, fmt.Errorf("%q is not an http:// or https:// URL (e.g. http://127.0.0.1:4318, the collector's OTLP/HTTP port)", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("%q: no user, query or fragment (headers go in --otlp-header or OTEL_EXPORTER_OTLP_HEADERS)", s)
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return Target{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
		}
	}
	t := Target{HostPort: u.Host, Path: u.EscapedPath(), Plain: u.Scheme == "http"}
	if t.Path == "" || t.Path == "/" {
		t.Path = "/v1/metrics"
	}
	if _, _, err := net.SplitHostPort(t.HostPort); err != nil {
		if t.Plain {
			t.HostPort += ":80"
		} else {
			t.HostPort += ":443"
		}
	}
	return t, nil
}

// ParseHeader parses one --otlp-header KEY=VALUE.
func ParseHeader(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q is not KEY=VALUE", s)
	}
	for _, c := range k {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return "", "", fmt.Errorf("%q: the name is not an HTTP header name", k)
		}
	}
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return "", "", fmt.Errorf("header %s: a control character in its value", k)
		}
	}
	return k, v, nil
}

// Exporter is the --otlp sink.
type Exporter struct {
	src *promexport.Exporter
	own bool // fed by this sink (no --listen sharing it)
	mp  *sdkmetric.MeterProvider
	log *failLog

	inst map[*promexport.Family]*instrument
	buf  []attribute.KeyValue // the callback's, one call at a time
	ctx  context.Context
}

type instrument struct {
	m    mapping
	obs  metric.Int64Observable
	keys []attrKey
}

// Start exports src's series as o says until Close. With own, the
// Exporter feeds src (its Event, Tick, ... are src's); otherwise src is
// fed as a sink of its own (the --listen endpoint) and read here.
func Start(src *promexport.Exporter, own bool, o Options) (*Exporter, error) {
	tg, err := ParseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Interval < MinInterval {
		return nil, fmt.Errorf("interval %v: at least %v", o.Interval, MinInterval)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	o.Timeout = min(o.Timeout, o.Interval)
	if len(o.Headers) > MaxHeaders {
		return nil, fmt.Errorf("%d headers: at most %d", len(o.Headers), MaxHeaders)
	}
	opts := []otlpmetrichttp.Option{
		otlpmetrichttp.WithEndpoint(tg.HostPort),
		otlpmetrichttp.WithURLPath(tg.Path),
		otlpmetrichttp.WithTimeout(o.Timeout),
		// Retries end within the export's timeout: the next interval
		// carries the same totals, newer.
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: true, InitialInterval: min(time.Second, o.Timeout/4),
			MaxInterval: o.Timeout / 2, MaxElapsedTime: o.Timeout}),
	}
	if tg.Plain {
		opts = append(opts, otlpmetrichttp.WithInsecure())
	} else if o.CAFile != "" || o.InsecureSkipVerify {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // the user's choice, --otlp-insecure-skip-verify
		if o.CAFile != "" {
			pem, err := readBounded(o.CAFile, 4<<20)
			if err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s: no PEM certificate in it", o.CAFile)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, otlpmetrichttp.WithTLSClientConfig(cfg))
	}
	if len(o.Headers) > 0 {
		opts = append(opts, otlpmetrichttp.WithHeaders(o.Headers))
	}
	switch o.Compression {
	case "gzip":
		opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	case "none":
		opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.NoCompression))
	case "":
	default:
		return nil, fmt.Errorf("compression %q: gzip or none", o.Compression)
	}
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, o)
	if err != nil {
		return nil, err
	}
	scheme := "https://"
	if tg.Plain {
		scheme = "http://"
	}
	fl := &failLog{w: o.Log, every: o.Interval, target: scheme + tg.HostPort + tg.Path}
	// The SDK's own errors (a callback's, the exporter's outside Export)
	// go to the same log, as rarely.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { fl.result(err) }))
	reader := sdkmetric.NewPeriodicReader(&loggedExporter{Exporter: exp, log: fl},
		sdkmetric.WithInterval(o.Interval), sdkmetric.WithTimeout(o.Timeout))
	x := &Exporter{src: src, own: own, log: fl, inst: map[*promexport.Family]*instrument{}, ctx: ctx}
	x.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader),
		// The series are /metrics' own, bounded there (traced and
		// --keep-ended processes x --max-chips): the SDK's 2000 per
		// instrument would fold a large host's into an overflow series.
		sdkmetric.WithCardinalityLimit(0))
	meter := x.mp.Meter("github.com/tttrace/tttrace/sinks/otlp", metric.WithInstrumentationVersion(o.Version),
		metric.WithSchemaURL(semconv.SchemaURL))
	var obs []metric.Observable
	for _, f := range src.Families() {
		m, ok := mappings[f.Name]
		if !ok {
			m = fallbackMapping(f.Name, f.Kind == promexport.Counter)
		}
		in := &instrument{m: m}
		for _, l := range f.Labels {
			in.keys = append(in.keys, keyOf(l))
		}
		desc, unit := metric.WithDescription(f.Help), metric.WithUnit(m.unit)
		switch m.kind {
		case gauge:
			in.obs, err = meter.Int64ObservableGauge(m.name, desc, unit)
		case counter:
			in.obs, err = meter.Int64ObservableCounter(m.name, desc, unit)
		default:
			in.obs, err = meter.Int64ObservableUpDownCounter(m.name, desc, unit)
		}
		if err != nil {
			_ = x.mp.Shutdown(ctx)
			return nil, fmt.Errorf("instrument %s: %w", m.name, err)
		}
		x.inst[f] = in
		obs = append(obs, in.obs)
	}
	if _, err := meter.RegisterCallback(x.observe, obs...); err != nil {
		_ = x.mp.Shutdown(ctx)
		return nil, err
	}
	return x, nil
}

// newResource is the tttrace instance: service.name tttrace,
// service.version, host.name, and whatever OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME say (they win). The traced processes' pods are their
// points' attributes, not the resource's (docs/otlp.md).
func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	kvs := []attribute.KeyValue{semconv.ServiceName("tttrace")}
	if o.Version != "" {
		kvs = append(kvs, semconv.ServiceVersion(o.Version))
	}
	if o.Host != "" {
		kvs = append(kvs, semconv.HostName(o.Host))
	}
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(kvs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	// A malformed OTEL_RESOURCE_ATTRIBUTES entry is skipped (partial
	// resource), as the SDK does.
	return res, nil
}

// observe is the callback of every instrument: one walk of the latest
// snapshot.
func (x *Exporter) observe(_ context.Context, o metric.Observer) error {
	x.src.Walk(func(f *promexport.Family, v uint64, labels []string) {
		in := x.inst[f]
		if in == nil {
			return
		}
		kvs := append(x.buf[:0], in.m.attrs...)
		for i, l := range labels {
			if l == "" || i >= len(in.keys) {
				continue // an empty label is no label, as to Prometheus
			}
			k := in.keys[i]
			if k.isInt {
				if n, err := strconv.ParseInt(l, 10, 64); err == nil {
					kvs = append(kvs, k.key.Int64(n))
					continue
				}
			}
			kvs = append(kvs, k.key.String(l))
		}
		x.buf = kvs
		// OTLP's integers are signed: a sum saturated at 2^64-1 is
		// exported as 2^63-1.
		o.ObserveInt64(in.obs, int64(min(v, math.MaxInt64)), metric.WithAttributes(kvs...))
	})
	return nil
}

// The sink's methods: the Prometheus sink's when this one feeds it.

func (x *Exporter) Event(ev *events.Event) {
	if x.own {
		x.src.Event(ev)
	}
}

func (x *Exporter) Tick(v *sinks.View) {
	if x.own {
		x.src.Tick(v)
	}
}

func (x *Exporter) ProcessEnded(s *devices.Summary, more bool) {
	if x.own {
		x.src.ProcessEnded(s, more)
	}
}

// Notice counts failed allocations (sinks.NoticeSink).
func (x *Exporter) Notice(n *devices.Notice) {
	if x.own {
		x.src.Notice(n)
	}
}

func (x *Exporter) Summary(s *devices.Summary) error {
	if x.own {
		return x.src.Summary(s)
	}
	return nil
}

// Close exports once more (what tracing ended with) and stops, within
// the export's timeout. Closing again does nothing.
func (x *Exporter) Close() error {
	if x.mp == nil {
		return nil
	}
	mp := x.mp
	x.mp = nil
	err := mp.Shutdown(context.Background())
	if errors.Is(err, sdkmetric.ErrReaderShutdown) {
		err = nil
	}
	if err != nil {
		x.log.result(err)
	}
	if x.own {
		_ = x.src.Close()
	}
	// Export failures were said on the log; tracing itself went well.
	return nil
}

// Exports says how many exports were made and how many of them failed.
func (x *Exporter) Exports() (total, failed uint64) {
	x.log.mu.Lock()
	defer x.log.mu.Unlock()
	return x.log.total, x.log.failedTotal
}

// loggedExporter says the export's failures on the log (failLog) instead
// of the SDK's global handler, which would print every one.
type loggedExporter struct {
	sdkmetric.Exporter
	log *failLog
}

func (l *loggedExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := l.Exporter.Export(ctx, rm)
	l.log.count(err)
	return nil
}

// failLog says failures at most once per interval.
type failLog struct {
	mu          sync.Mutex
	w           io.Writer
	every       time.Duration
	target      string
	last        time.Time // of the last line
	failed      uint64    // failures since the last success
	unsaid      uint64    // failures not said yet
	total       uint64    // exports
	failedTotal uint64
}

// count records an export's result.
func (f *failLog) count(err error) {
	f.mu.Lock()
	f.total++
	f.mu.Unlock()
	f.result(err)
}

func (f *failLog) result(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if err == nil {
		if f.failed > 0 && f.w != nil {
			fmt.Fprintf(f.w, "tttrace: otlp: exporting to %s works again (%d failed)\n", f.target, f.failed)
		}
		f.failed, f.unsaid = 0, 0
		return
	}
	f.failed++
	f.failedTotal++
	f.unsaid++
	if f.w == nil || (!f.last.IsZero() && now.Sub(f.last) < f.every) {
		return
	}
	more := ""
	if f.unsaid > 1 {
		more = fmt.Sprintf(" (%d failures since the last line)", f.unsaid)
	}
	fmt.Fprintf(f.w, "tttrace: otlp: exporting to %s: %s%s\n", f.target, sinks.Printable(err.Error()), more)
	f.last, f.unsaid = now, 0
}

// readBounded reads a regular file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}
