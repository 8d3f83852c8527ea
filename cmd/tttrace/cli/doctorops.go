package cli

// tttrace doctor's TT-NN part: the op table the TT-NN libraries beside the
// TT-Metal one give (issue #31): which forms name the ops, how many op
// functions and device-op launches, whether the table was cut.

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// maxTTNNLibraries bounds the TT-NN libraries doctor looks at.
const maxTTNNLibraries = 8

// DoctorOps is the op table of one TT-NN library.
type DoctorOps struct {
	Path string `json:"path"`
	// Forms: the naming forms found (ttmetal.OpTable.Forms).
	Forms []string `json:"forms,omitempty"`
	// Ops: functions of ops as Python calls them; DeviceOps: device-op
	// launches.
	Ops       int `json:"ops"`
	DeviceOps int `json:"device_ops"`
	// Registrations: the registered_operation_t its typeinfo names (2024-25).
	Registrations int `json:"registrations,omitempty"`
	// Truncated: more op functions than tttrace probes; Unread: names of
	// an op's form that could not be read.
	Truncated bool   `json:"truncated"`
	Unread    int    `json:"unread,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ttnnLibraries lists the TT-NN libraries beside the TT-Metal library at
// path (its directory) and, with a pid, those the process maps.
func ttnnLibraries(path string, pid int) []string {
	var out []string
	add := func(p string) {
		if ttmetal.IsTTNNName(p) && !slices.Contains(out, p) && len(out) < maxTTNNLibraries {
			out = append(out, p)
		}
	}
	if pid != 0 {
		if objs, _, err := procfs.MappedObjects(pid); err == nil {
			for _, o := range objs {
				add(procfs.Path(pid, o))
			}
		}
	}
	if path != "" {
		if m, err := filepath.Glob(filepath.Join(filepath.Dir(path), "_ttnn*.so*")); err == nil {
			slices.Sort(m)
			for _, p := range m {
				add(p)
			}
		}
	}
	return out
}

// checkOps reads the op table of each TT-NN library, with the registrations
// of all of them (the Python module's typeinfo names the ops another
// library defines).
func checkOps(paths []string) []DoctorOps {
	var libs []*ttmetal.Library
	var regs []*ttmetal.OpRegistrations
	out := make([]DoctorOps, len(paths))
	for i, p := range paths {
		out[i].Path = p
		lib, err := ttmetal.OpenLibrary(p)
		if err != nil {
			out[i].Error = err.Error()
			libs = append(libs, nil)
			continue
		}
		defer lib.Close()
		libs = append(libs, lib)
		r, err := ttmetal.FindOpRegistrations(lib)
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Registrations = r.Len()
		regs = append(regs, r)
	}
	for i, lib := range libs {
		if lib == nil || out[i].Error != "" {
			continue
		}
		tab, err := ttmetal.FindOpsWith(lib, regs...)
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Forms, out[i].Truncated, out[i].Unread = tab.Forms, tab.Truncated, tab.Unread
		out[i].Ops, out[i].DeviceOps = tab.Count(ttmetal.OpTop), tab.Count(ttmetal.OpDevice)
	}
	return out
}

// writeOps writes the TT-NN part of the report.
func writeOps(p func(string, ...any), ops []DoctorOps) {
	if len(ops) == 0 {
		return
	}
	p("\nTT-NN ops\n")
	for _, o := range ops {
		switch {
		case o.Error != "":
			p("  %s: %s\n", o.Path, o.Error)
		case o.Ops+o.DeviceOps == 0:
			p("  %s: no op functions (records carry no op from it)\n", o.Path)
		default:
			p("  %s: %d op functions, %d device-op launches (%s)\n", o.Path, o.Ops, o.DeviceOps, strings.Join(o.Forms, ", "))
		}
		if o.Registrations > 0 {
			p("    registered operations named by its typeinfo: %d\n", o.Registrations)
		}
		if o.Truncated {
			p("    TRUNCATED  more than %d op functions: the rest are not probed\n", ttmetal.MaxOps)
		}
		if o.Unread > 0 {
			p("    unread     %d names of an op's form could not be read (too long or not demangled)\n", o.Unread)
		}
	}
}
