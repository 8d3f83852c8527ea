// Package otlptest reads what an OTLP receiver got from tttrace --otlp
// back into /metrics' terms, for tests: the mapping is taken from
// docs/otlp.md's tables (so the docs are checked too), never from the
// exporter's own code, and each point becomes the key the Prometheus tests
// use, name{label="value",...} with the labels sorted.
package otlptest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Metric is one row of docs/otlp.md's metric table.
type Metric struct {
	Prom, Instrument, Unit string
	Const                  map[string]string // attributes every point carries
}

// Mapping is docs/otlp.md's two tables.
type Mapping struct {
	Metrics map[string]Metric // by OpenTelemetry name
	Attrs   map[string]string // attribute -> /metrics label
	Ints    map[string]bool   // attributes whose values are integers
}

// cells splits a Markdown table row into its cells, backquotes removed.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var out []string
	for _, c := range strings.Split(line, "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

func unquote(s string) string { return strings.Trim(s, "`") }

// ReadDoc reads the tables of docs/otlp.md: under "## Metrics" the rows
// | `/metrics name` | `otel name` | instrument | `unit` | `k`=`v`, ... |,
// under "## Attributes" the rows | `label` | `attribute` | type |.
func ReadDoc(path string) (*Mapping, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &Mapping{Metrics: map[string]Metric{}, Attrs: map[string]string{}, Ints: map[string]bool{}}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimSpace(line[3:])
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		c := cells(line)
		if c[0] == "`/metrics`" {
			continue // the header
		}
		switch section {
		case "Metrics":
			if len(c) != 5 {
				return nil, fmt.Errorf("metric row %q: %d cells, want 5", line, len(c))
			}
			mt := Metric{Prom: unquote(c[0]), Instrument: c[2], Unit: unquote(c[3]), Const: map[string]string{}}
			if c[4] != "" {
				for _, kv := range strings.Split(c[4], ",") {
					k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
					if !ok {
						return nil, fmt.Errorf("metric row %q: attribute %q is not `k`=`v`", line, kv)
					}
					mt.Const[unquote(k)] = unquote(v)
				}
			}
			name := unquote(c[1])
			if _, dup := m.Metrics[name]; dup {
				return nil, fmt.Errorf("%s twice in the metric table", name)
			}
			m.Metrics[name] = mt
		case "Attributes":
			if len(c) != 3 {
				return nil, fmt.Errorf("attribute row %q: %d cells, want 3", line, len(c))
			}
			a := unquote(c[1])
			m.Attrs[a] = unquote(c[0])
			m.Ints[a] = c[2] == "int"
		}
	}
	if len(m.Metrics) == 0 || len(m.Attrs) == 0 {
		return nil, errors.New(path + ": no metric or attribute table")
	}
	return m, nil
}

// Decode reads one OTLP/HTTP protobuf request body (gzip or not).
func Decode(body []byte) (*colmetricspb.ExportMetricsServiceRequest, error) {
	if len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if body, err = io.ReadAll(io.LimitReader(zr, 64<<20)); err != nil {
			return nil, err
		}
	}
	req := &colmetricspb.ExportMetricsServiceRequest{}
	return req, proto.Unmarshal(body, req)
}

// ReadFile reads a collector file exporter's output: one OTLP JSON
// request a line.
func ReadFile(path string) ([]*colmetricspb.ExportMetricsServiceRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*colmetricspb.ExportMetricsServiceRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		req := &colmetricspb.ExportMetricsServiceRequest{}
		if err := protojson.Unmarshal(sc.Bytes(), req); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, req)
	}
	return out, sc.Err()
}

// Resource returns the attributes of a request's (first) resource.
func Resource(req *colmetricspb.ExportMetricsServiceRequest) map[string]string {
	out := map[string]string{}
	for _, rm := range req.GetResourceMetrics() {
		for _, kv := range rm.GetResource().GetAttributes() {
			out[kv.GetKey()] = valueString(kv.GetValue())
		}
		break
	}
	return out
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// Series turns a request's points into /metrics series keys and values
// through the mapping; problems lists what does not follow it (a metric
// or attribute not in the tables, another instrument or unit, a constant
// attribute missing, an integer attribute sent as a string, a series
// twice).
func (m *Mapping) Series(req *colmetricspb.ExportMetricsServiceRequest) (map[string]float64, []string) {
	out := map[string]float64{}
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, met := range sm.GetMetrics() {
				mt, ok := m.Metrics[met.GetName()]
				if !ok {
					bad("metric %s is not in docs/otlp.md", met.GetName())
					continue
				}
				if met.GetUnit() != mt.Unit {
					bad("%s: unit %q, the docs say %q", met.GetName(), met.GetUnit(), mt.Unit)
				}
				var points []*metricspb.NumberDataPoint
				kind := ""
				switch d := met.GetData().(type) {
				case *metricspb.Metric_Gauge:
					kind, points = "Gauge", d.Gauge.GetDataPoints()
				case *metricspb.Metric_Sum:
					kind, points = "UpDownCounter", d.Sum.GetDataPoints()
					if d.Sum.GetIsMonotonic() {
						kind = "Counter"
					}
					if d.Sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
						bad("%s: not cumulative", met.GetName())
					}
				default:
					bad("%s: data %T", met.GetName(), d)
					continue
				}
				if kind != mt.Instrument {
					bad("%s: a %s, the docs say %s", met.GetName(), kind, mt.Instrument)
				}
				for _, p := range points {
					var ls []string
					consts := 0
					for _, kv := range p.GetAttributes() {
						k, v := kv.GetKey(), valueString(kv.GetValue())
						if want, ok := mt.Const[k]; ok {
							if v != want {
								bad("%s: %s=%s, the docs say %s", met.GetName(), k, v, want)
							}
							consts++
							continue
						}
						label, ok := m.Attrs[k]
						if !ok {
							bad("%s: attribute %s is not in docs/otlp.md", met.GetName(), k)
							continue
						}
						_, isInt := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue)
						if isInt != m.Ints[k] {
							bad("%s: attribute %s: integer %v, the docs say %v", met.GetName(), k, isInt, m.Ints[k])
						}
						ls = append(ls, fmt.Sprintf("%s=%q", label, v))
					}
					if consts != len(mt.Const) {
						bad("%s: a point without its constant attributes %v", met.GetName(), mt.Const)
					}
					sort.Strings(ls)
					key := mt.Prom + "{" + strings.Join(ls, ",") + "}"
					if _, dup := out[key]; dup {
						bad("series %s twice", key)
					}
					switch v := p.GetValue().(type) {
					case *metricspb.NumberDataPoint_AsInt:
						out[key] = float64(v.AsInt)
					case *metricspb.NumberDataPoint_AsDouble:
						out[key] = v.AsDouble
					}
				}
			}
		}
	}
	sort.Strings(problems)
	return out, problems
}
