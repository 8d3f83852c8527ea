package probes

import "github.com/tttrace/tttrace/ttmetal"

// libInfo is the BPF map value of a library with layout l: each field at
// its enum layout_field index, the Buffer span BPF reads in one go, and the
// vtables that tell a Device from a MeshDevice.
func libInfo(l ttmetal.Layout, syms *ttmetal.Symbols) tttraceLibInfo {
	info := tttraceLibInfo{VtableDevice: syms.VtableDevice, VtableMesh: syms.VtableMesh, Off: l.Offsets()}
	info.SpanLo, info.SpanLen = l.Span()
	return info
}
