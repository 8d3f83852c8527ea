package probes

import (
	"encoding/json"
	"fmt"
	"os"
)

// Layout gives the byte offsets tttrace reads in TT-Metal objects. Offsets
// of fields a layout lacks are -1. Wrong numbers are worse than none: a
// Layout is only ever taken from a source that matched the library.
type Layout struct {
	// Name of the layout ("V1", ...) or a description of its source.
	Name string `json:"name"`
	// BufferImplPtr is the offset of the BufferImpl pointer in a pimpl
	// Buffer; when >= 0 the Buffer* offsets below are inside BufferImpl.
	BufferImplPtr int64 `json:"buffer_impl_ptr"`
	Device        int64 `json:"device"`
	Size          int64 `json:"size"`
	Type          int64 `json:"buffer_type"`
	OwnsData      int64 `json:"owns_data"`
	Status        int64 `json:"allocation_status"`
	Hooked        int64 `json:"hooked_allocation"`
	Address       int64 `json:"address"`
	PageSize      int64 `json:"page_size"`
	// DeviceID is the offset of Device::id_.
	DeviceID int64 `json:"device_id"`
}

// LayoutV1 is tt::tt_metal::Buffer as 2025 to early-2026 mainline lays it
// out (ttmetal-facts.md §3).
var LayoutV1 = Layout{
	Name:          "V1",
	BufferImplPtr: -1,
	Device:        16,
	Size:          24,
	Type:          32,
	OwnsData:      43,
	Status:        72,
	Hooked:        73,
	Address:       80,
	PageSize:      88,
	DeviceID:      8,
}

// LayoutSource says where a layout came from, for the user.
type LayoutSource struct {
	Layout Layout
	From   string // "profile V1 (symbol fingerprint)", "file x.json", ...
}

// ResolveLayout chooses the layout for lib. A layout file, when given,
// wins; otherwise the built-in profile whose symbol fingerprint matches the
// library is used, and a library matching none is refused.
func ResolveLayout(lib *Library, syms *Symbols, layoutFile string) (*LayoutSource, error) {
	if layoutFile != "" {
		l, err := ReadLayoutFile(layoutFile)
		if err != nil {
			return nil, err
		}
		return &LayoutSource{Layout: *l, From: "file " + layoutFile}, nil
	}
	switch {
	case syms.HasV0Namespace:
		return nil, fmt.Errorf("%s looks like a late-2024 TT-Metal build (symbols in namespace tt::tt_metal::v0): "+
			"its layout (V0) is not supported by this version of tttrace; give the offsets with --layout FILE", lib.Path)
	case syms.HasPimplAccessors:
		return nil, fmt.Errorf("%s looks like a 2026 pimpl TT-Metal build (out-of-line Buffer::size()/device()): "+
			"its layout (V2) is not supported by this version of tttrace; give the offsets with --layout FILE", lib.Path)
	}
	return &LayoutSource{Layout: LayoutV1, From: "built-in profile V1 (symbol fingerprint: no v0 namespace, no pimpl accessors)"}, nil
}

// ReadLayoutFile reads a layout written as JSON with the field names of
// Layout. Every field must be present: a missing offset is an error, not 0.
func ReadLayoutFile(path string) (*Layout, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("layout file: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	for _, k := range []string{"buffer_impl_ptr", "device", "size", "buffer_type", "owns_data",
		"allocation_status", "hooked_allocation", "address", "page_size", "device_id"} {
		if _, ok := raw[k]; !ok {
			return nil, fmt.Errorf("layout file %s: no %q (use -1 for a field the layout lacks)", path, k)
		}
	}
	l := &Layout{}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("layout file %s: %w", path, err)
	}
	if l.Name == "" {
		l.Name = "file " + path
	}
	for name, v := range map[string]int64{"device": l.Device, "size": l.Size, "address": l.Address, "device_id": l.DeviceID} {
		if v < 0 {
			return nil, fmt.Errorf("layout file %s: %q must be given (>= 0): tttrace cannot count without it", path, name)
		}
	}
	return l, nil
}
