package otlp

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"
)

// The names of the export: each /metrics family (sinks/prometheus) as an
// OpenTelemetry instrument, each label as an attribute, following the
// semantic conventions where they have the thing (hw.gpu.memory.*, hw.id,
// process.*, k8s.*, host.name, error.type) and tttrace.* where they do
// not. docs/otlp.md lists them name by name; the end-to-end test reads
// that table to match what a collector received with a scrape.

// instKind is the OpenTelemetry instrument a family becomes.
type instKind uint8

const (
	// upDown: an amount held now, which sums (bytes, buffers): an
	// asynchronous UpDownCounter, as the hardware conventions'
	// memory.usage and memory.limit are.
	upDown instKind = iota
	// gauge: a value that does not sum (a peak, the largest free block).
	gauge
	// counter: a monotonic total.
	counter
)

type mapping struct {
	name string
	kind instKind
	unit string
	// attrs: attributes every point of the instrument carries (hw.type,
	// which the hw.gpu.* conventions require).
	attrs []attribute.KeyValue
}

var gpu = []attribute.KeyValue{semconv.HwTypeGpu}

// mappings: /metrics family name -> instrument. A family missing here (a
// new one) is exported by the rule of fallbackMapping; TestEveryFamilyMapped
// keeps this table whole.
var mappings = map[string]mapping{
	"tttrace_device_memory_bytes":                 {"tttrace.device.memory.usage", upDown, "By", nil},
	"tttrace_device_memory_peak_bytes":            {"tttrace.device.memory.peak", gauge, "By", nil},
	"tttrace_live_buffers":                        {"tttrace.device.buffers", upDown, "{buffer}", nil},
	"tttrace_chip_memory_bytes":                   {hwconv.GpuMemoryUsage{}.Name(), upDown, hwconv.GpuMemoryUsage{}.Unit(), gpu},
	"tttrace_device_cb_registered_bytes":          {"tttrace.device.cb.registered.usage", upDown, "By", nil},
	"tttrace_device_cb_registered_peak_bytes":     {"tttrace.device.cb.registered.peak", gauge, "By", nil},
	"tttrace_device_cb_resident_total_bytes":      {"tttrace.device.cb.resident_total.usage", upDown, "By", nil},
	"tttrace_device_cb_resident_total_peak_bytes": {"tttrace.device.cb.resident_total.peak", gauge, "By", nil},
	"tttrace_chip_cb_registered_bytes":            {"tttrace.chip.cb.registered.usage", upDown, "By", nil},
	"tttrace_chip_cb_resident_total_bytes":        {"tttrace.chip.cb.resident_total.usage", upDown, "By", nil},
	"tttrace_l1_core_bytes":                       {"tttrace.device.l1_core.usage", gauge, "By", nil},
	"tttrace_l1_core_peak_bytes":                  {"tttrace.device.l1_core.peak", gauge, "By", nil},
	"tttrace_l1_core_size_bytes":                  {"tttrace.device.l1_core.limit", gauge, "By", nil},
	"tttrace_leaked_bytes_total":                  {"tttrace.device.memory.leaked", counter, "By", nil},
	"tttrace_events_total":                        {"tttrace.events.received", counter, "{event}", nil},
	"tttrace_lost_events_total":                   {"tttrace.events.lost", counter, "{event}", nil},
	"tttrace_device_capacity_bytes":               {hwconv.GpuMemoryLimit{}.Name(), upDown, hwconv.GpuMemoryLimit{}.Unit(), gpu},
	"tttrace_device_free_bytes":                   {"tttrace.device.memory.free", upDown, "By", nil},
	"tttrace_device_largest_free_block_bytes":     {"tttrace.device.memory.largest_free_block", gauge, "By", nil},
	"tttrace_alloc_failures_total":                {"tttrace.allocation.failures", counter, "{failure}", nil},
	"tttrace_mesh_capacity_bytes":                 {"tttrace.mesh.memory.limit", upDown, "By", nil},
	"tttrace_mesh_free_bytes":                     {"tttrace.mesh.memory.free", upDown, "By", nil},
	"tttrace_mesh_largest_free_block_bytes":       {"tttrace.mesh.memory.largest_free_block", gauge, "By", nil},
	"tttrace_mesh_chips":                          {"tttrace.mesh.chips", upDown, "{chip}", nil},
	"tttrace_trace_captures_total":                {"tttrace.trace.captures", counter, "{capture}", nil},
	"tttrace_trace_replays_total":                 {"tttrace.trace.replays", counter, "{replay}", nil},
	"tttrace_trace_releases_total":                {"tttrace.trace.releases", counter, "{release}", nil},
	"tttrace_trace_unknown_replays_total":         {"tttrace.trace.unknown_replays", counter, "{replay}", nil},
	"tttrace_trace_checked_buffers_total":         {"tttrace.trace.checked_buffers", counter, "{buffer}", nil},
	"tttrace_trace_records_total":                 {"tttrace.trace.records", counter, "{record}", nil},
	"tttrace_trace_bounds_exceeded_total":         {"tttrace.trace.bounds_exceeded", counter, "{event}", nil},
}

// fallbackMapping names a family the table lacks: tttrace. and its name
// with dots, without the unit or _total, which OTLP carries apart.
func fallbackMapping(name string, isCounter bool) mapping {
	m := mapping{kind: upDown, unit: "1"}
	if isCounter {
		m.kind = counter
		name = strings.TrimSuffix(name, "_total")
	}
	if n, ok := strings.CutSuffix(name, "_bytes"); ok {
		name, m.unit = n, "By"
	}
	m.name = "tttrace." + strings.ReplaceAll(strings.TrimPrefix(name, "tttrace_"), "_", ".")
	return m
}

// attrKey is the attribute of a label; isInt: its values are integers
// (the label's decimal text).
type attrKey struct {
	key   attribute.Key
	isInt bool
}

// attrKeys: label -> attribute. A label missing here is tttrace.LABEL.
var attrKeys = map[string]attrKey{
	"chip":           {"tttrace.chip.id", false}, // "other", "unknown" on counters
	"chip_uid":       {semconv.HwIDKey, false},
	"pci":            {"tttrace.chip.pci", false},
	"tray":           {"tttrace.chip.tray", true},
	"asic_location":  {"tttrace.chip.asic_location", true},
	"type":           {"tttrace.memory.type", false},
	"pid":            {semconv.ProcessPIDKey, true},
	"command":        {semconv.ProcessCommandLineKey, false},
	"host":           {semconv.HostNameKey, false},
	"rank":           {"tttrace.rank", true},
	"mesh_id":        {"tttrace.mesh.id", true},
	"mesh_host_rank": {"tttrace.mesh.host_rank", true},
	"pod":            {semconv.K8SPodNameKey, false},
	"namespace":      {semconv.K8SNamespaceNameKey, false},
	"container":      {semconv.K8SContainerNameKey, false},
	"kind":           {"tttrace.event.kind", false},
	"cause":          {semconv.ErrorTypeKey, false},
	"mesh_device":    {"tttrace.mesh.device", false},
	"record":         {"tttrace.trace.record", false},
	"bound":          {"tttrace.trace.bound", false},
}

func keyOf(label string) attrKey {
	if k, ok := attrKeys[label]; ok {
		return k
	}
	return attrKey{key: attribute.Key("tttrace." + label)}
}
