package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// cbRecordsTruth is the replica's record of the calls per-core CB
// residency is made of: each track_allocate_cb with the CoreRangeSet it
// was given, each generate_dispatch_commands (and each trace replay,
// replay_trace >= 0, which calls none).
type cbRecordsTruth struct {
	CBAllocs []struct {
		Device     int32      `json:"device"`
		MeshDevice *string    `json:"mesh_device"`
		Address    uint64     `json:"address"`
		Size       uint64     `json:"size"`
		Global     bool       `json:"global"`
		CoreRanges [][]uint64 `json:"core_ranges"`
	} `json:"cb_allocs"`
	CBDispatches []struct {
		Program     *string `json:"program"`
		Device      int32   `json:"device"`
		MeshDevice  *string `json:"mesh_device"`
		ReplayTrace int32   `json:"replay_trace"`
	} `json:"cb_dispatches"`
}

// cbLine is what a cb_alloc or program_dispatch line says.
type cbLine struct {
	Type            string     `json:"type"`
	DeviceKind      string     `json:"device_kind"`
	Device          int32      `json:"device"`
	Mesh            string     `json:"mesh"`
	Program         string     `json:"program"`
	Address         uint64     `json:"address"`
	Size            uint64     `json:"size"`
	Global          bool       `json:"global"`
	CoreRanges      [][]uint64 `json:"core_ranges"`
	CoreRangesTotal *uint32    `json:"core_ranges_total"`
	ReadError       bool       `json:"read_error"`
}

// cbOn names the device of a record: "chip N" or "mesh 0x...".
func cbOn(chip int32, mesh *string) string {
	if mesh != nil {
		return "mesh " + *mesh
	}
	return fmt.Sprintf("chip %d", chip)
}

func cbAllocKey(dev string, addr, size uint64, global bool, ranges [][]uint64) string {
	return fmt.Sprintf("%s address %d size %d global %v core_ranges %v", dev, addr, size, global, ranges)
}

// sameInOrder reports where got and want, two single-threaded call
// sequences, first differ, and a difference in length.
func sameInOrder(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s %d of %d: got %s, want %s", what, i, len(want), got[i], want[i])
			return
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d %s lines, the truth has %d", len(got), what, len(want))
	}
}

// TestE2ECBCoreRanges: the records per-core CB residency is made of,
// line for line against the replica's truth (scenario cb_cache: 320
// cached programs, cache hits, the same CB index at two sizes on disjoint
// core groups, a CB on two ranges, a trace, a mesh program): every
// cb_alloc carries its CB's device, address, size and core ranges as
// track_allocate_cb got them, every program_dispatch the ProgramImpl* and
// the device (a chip, or the MeshDevice of a mesh workload) of one
// generate_dispatch_commands, in call order. The core ranges are read at
// the V1 profile's offsets (gcc-O2) and at DWARF's (gcc-O3-dwarf-zstd);
// the V0 profile gives none (v0-gcc-O2): no cb_alloc line has them, never
// guessed. The summary is TestE2ECBResident's business.
func TestE2ECBCoreRanges(t *testing.T) {
	for _, c := range []struct {
		run
		ranges bool
	}{
		{run{variant: "gcc-O2", mode: "cmd", scenario: "cb_cache"}, true},
		{run{variant: "gcc-O3-dwarf-zstd", mode: "cmd", scenario: "cb_cache"}, true},
		{run{variant: "v0-gcc-O2", mode: "cmd", scenario: "cb_cache"}, false},
	} {
		r := c.run
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) {
			var out string
			r.out = &out
			trace(t, r)
			b, err := os.ReadFile(truthPathOf(t, out))
			if err != nil {
				t.Fatal(err)
			}
			var tr cbRecordsTruth
			if err := json.Unmarshal(b, &tr); err != nil {
				t.Fatal(err)
			}
			var wantAllocs, wantDispatches []string
			for _, a := range tr.CBAllocs {
				if !c.ranges {
					a.CoreRanges = nil
				}
				wantAllocs = append(wantAllocs, cbAllocKey(cbOn(a.Device, a.MeshDevice), a.Address, a.Size, a.Global, a.CoreRanges))
			}
			for _, d := range tr.CBDispatches {
				if d.ReplayTrace < 0 && d.Program != nil {
					wantDispatches = append(wantDispatches, "program "+*d.Program+" on "+cbOn(d.Device, d.MeshDevice))
				}
			}
			if len(wantAllocs) < 600 || len(wantDispatches) < 360 {
				t.Fatalf("truth: %d CBs, %d dispatches: not the cb_cache scenario", len(wantAllocs), len(wantDispatches))
			}

			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<30)
			var gotAllocs, gotDispatches []string
			for sc.Scan() {
				if !strings.Contains(sc.Text(), `"type":"cb_alloc"`) && !strings.Contains(sc.Text(), `"type":"program_dispatch"`) {
					continue
				}
				var l cbLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatal(err)
				}
				var mesh *string
				switch l.DeviceKind {
				case "chip":
				case "mesh":
					mesh = &l.Mesh
				default:
					t.Fatalf("device_kind %s: %s", l.DeviceKind, sc.Text())
				}
				dev := cbOn(l.Device, mesh)
				switch {
				case l.ReadError || l.CoreRangesTotal != nil:
					t.Errorf("read_error or more than 8 ranges: %s", sc.Text())
				case l.Type == "program_dispatch":
					gotDispatches = append(gotDispatches, "program "+l.Program+" on "+dev)
				case (l.CoreRanges != nil) != c.ranges:
					t.Errorf("core_ranges present %v, want %v: %s", l.CoreRanges != nil, c.ranges, sc.Text())
				default:
					gotAllocs = append(gotAllocs, cbAllocKey(dev, l.Address, l.Size, l.Global, l.CoreRanges))
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			sameInOrder(t, "cb_alloc", gotAllocs, wantAllocs)
			sameInOrder(t, "program_dispatch", gotDispatches, wantDispatches)
		})
	}
}
