package main

// Every chip named by its physical identity end to end (#36): replica
// workloads on an n300-shaped topology (chip 0 on PCIe, chip 1 behind it
// over Ethernet), a 6U-Galaxy-shaped one (32 chips on 4 trays, all on
// PCIe) and a Blackhole P300 (2 chips on PCIe) whose Devices hold their
// chips' UMD unique ids and map their /dev/shm/tt_device_<id>_memory
// files, and whose cluster descriptor gives each chip's board type, bus id
// and ASIC location, as 2026 TT-Metal does. Two processes share one
// topology (the same physical chips): every chip of each carries its
// unique id and its place (tray, ASIC location: the truth's, null where
// the system descriptor's rules give none), a local chip keeps its PCI
// address beside it, and the host sums go by physical chip exactly, each
// chip's bytes those of both processes. In the mixed case the second
// process shows no unique ids (no UMD stand-in: as a library without
// DWARF), so it names its PCIe chip by its PCI address alone: that chip
// is still one chip host-wide, under the first process's unique id, and
// its chip behind Ethernet stays its own. tttrace traces the two pids only
// (-p), so no other process of the host is counted.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// umdTruth is the truth's "umd": the topology's chips.
type umdTruth struct {
	UMD *struct {
		Topology string `json:"topology"`
		Chips    []struct {
			Device   int32  `json:"device"`
			UniqueID string `json:"unique_id"`
			Remote   bool   `json:"remote"`
			Tray     *int   `json:"tray"`
			Asic     *int   `json:"asic_location"`
			PCI      string `json:"pci"`
			Attached bool   `json:"attached"`
			SHM      string `json:"shm"`
		} `json:"chips"`
	} `json:"umd"`
}

func readUMDTruth(t *testing.T, path string) *umdTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var u umdTruth
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	if u.UMD == nil {
		t.Fatalf("%s: no umd topology in the truth", path)
	}
	return &u
}

func TestE2EUMDChipIDs(t *testing.T) {
	for _, c := range []struct {
		topology string
		name     string
		args     []string // the workload's scenario
		chips    int
		local    int
		mixed    bool
	}{
		{"n300", "n300", []string{"--scenario", "alloc", "--shape", "n300"}, 2, 1, false},
		{"galaxy", "galaxy", []string{"--scenario", "galaxy"}, 32, 32, false},
		// Two chips of n300 banks on the P300's two Blackhole chips: the
		// allocator's shape is not what is looked at here.
		{"p300", "p300", []string{"--scenario", "alloc", "--shape", "n300"}, 2, 2, false},
		{"n300", "n300-mixed", []string{"--scenario", "alloc", "--shape", "n300"}, 2, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) { testUMDChipIDs(t, c.topology, c.args, c.chips, c.local, c.mixed) })
	}
}

// hostTray is the tray the system descriptor gives a Blackhole board off
// UBB on this host: 0 unless the host's motherboard is one of the two it
// lists (then the test does not know; -1).
func hostTray() int {
	b, _ := os.ReadFile("/sys/class/dmi/id/board_name")
	switch strings.TrimSpace(string(b)) {
	case "SIENAD8-2L2T", "X12DPG-QT6":
		return -1
	}
	return 0
}

func testUMDChipIDs(t *testing.T, topology string, args []string, nchips, nlocal int, mixed bool) {
	bin, _ := setup(t)
	dir := variantDir(t, "gcc-O3-dwarf-zstd") // DWARF: the Device's layout
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	// A board of its own: unique ids no other run of the host shares.
	board := strconv.FormatUint(rand.Uint64()>>8|1, 10)
	// The n300's PCIe chip as the host's /dev/tenstorrent/0, which both
	// workloads hold open (as UMD does): its PCI address stays beside its
	// unique id. The Galaxy's chips have no /dev/tenstorrent here: their
	// unique ids alone name them.
	var root string
	if topology == "n300" {
		root = devRoot(t, map[int]string{0: "0000:02:00.0"})
	}
	tray := hostTray()
	if topology == "p300" && tray < 0 {
		t.Skip("this host's motherboard puts boards in trays by bus id: the P300's tray is the host's")
	}
	type workload struct {
		cmd *exec.Cmd
		out *syncBuffer
		tr  *truth
		umd *umdTruth
	}
	ws := make([]*workload, 2)
	var pids []string
	for i := range ws {
		w := &workload{out: &syncBuffer{}}
		w.cmd = exec.Command(filepath.Join(dir, "ttwork"), append(args, "--leak", "--seed", strconv.Itoa(11+i),
			"--truth", f(fmt.Sprint(i, ".truth")), "--go-file", f("go"), "--hold-file", f(fmt.Sprint(i, ".hold")))...)
		w.cmd.Env = append(os.Environ(), "TT_REPLICA_UMD_TOPOLOGY="+topology, "TT_REPLICA_UMD_BOARD="+board)
		if mixed && i == 1 {
			w.cmd.Env = append(os.Environ(), "TT_REPLICA_UMD_TOPOLOGY=")
		}
		if root != "" {
			holdChip(t, w.cmd, 0)
		}
		w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if w.cmd.ProcessState == nil {
				w.cmd.Process.Kill()
				w.cmd.Wait()
			}
		})
		ws[i] = w
		pids = append(pids, strconv.Itoa(w.cmd.Process.Pid))
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ttArgs := []string{"--lib", filepath.Join(dir, "libtt_metal.so"), "--host", "node-a", "--listen", addr,
		"--json", "--no-events", "-o", f("out"), "--ready-file", f("ready"), "-p", pids[0], "-p", pids[1]}
	if root != "" {
		ttArgs = append(ttArgs, "--dev-root", root)
	}
	tt, tout := start(t, bin, ttArgs...)
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready")
	touch(t, f("go"))
	for i, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "holding") }, "workload holding")
		w.tr = readTruth(t, f(fmt.Sprint(i, ".truth")))
		if !mixed || i == 0 {
			w.umd = readUMDTruth(t, f(fmt.Sprint(i, ".truth")))
		}
	}
	// The truth: every chip of the topology, the same ids in both
	// processes, each attached to its file; their files go with the test.
	uid := map[int32]string{} // logical id -> unique id
	pci := map[int32]string{}
	place := map[int32][2]string{} // logical id -> tray, asic_location ("" none)
	for _, ch := range ws[0].umd.UMD.Chips {
		uid[ch.Device], pci[ch.Device] = ch.UniqueID, ch.PCI
		t.Cleanup(func() { os.Remove(ch.SHM) })
		var p [2]string
		if ch.Asic != nil {
			p = [2]string{strconv.Itoa(tray), strconv.Itoa(*ch.Asic)}
			if ch.Tray != nil {
				p[0] = strconv.Itoa(*ch.Tray)
			}
		}
		place[ch.Device] = p
	}
	truthChips := ws[1].umd
	if mixed {
		truthChips = ws[0].umd
	}
	local := 0
	for _, ch := range truthChips.UMD.Chips {
		if uid[ch.Device] != ch.UniqueID || !ch.Attached {
			t.Fatalf("the workloads' topologies differ or chip %d is not attached: %+v", ch.Device, ch)
		}
		if !ch.Remote {
			local++
		}
	}
	if len(uid) != nchips || local != nlocal {
		t.Fatalf("topology of %d chips, %d local; want %d, %d", len(uid), local, nchips, nlocal)
	}
	mine := map[string]*workload{pids[0]: ws[0], pids[1]: ws[1]}
	// named: how a workload's chip is named host-wide: its unique id, or in
	// the mixed case the second workload's PCIe chip by the first's unique
	// id (joined through its PCI address); "" when not known.
	named := func(w *workload, chip int32) string {
		if w.umd != nil {
			return uid[chip]
		}
		if chip == 0 {
			return uid[0]
		}
		return ""
	}

	// One scrape: every series of a workload names its chip by the unique
	// id (and the n300's chip 0 by its PCI address too); each physical
	// chip's host sum is both workloads' truths on it.
	poll(t, "chips named and summed by unique id", func() string {
		fams, err := scrapeFamilies(addr, "tttrace_device_memory_bytes", "tttrace_chip_memory_bytes")
		if err != nil {
			return err.Error()
		}
		seen := map[string]bool{}
		for _, s := range fams["tttrace_device_memory_bytes"] {
			l := s.labels
			if mine[l["pid"]] == nil {
				return fmt.Sprintf("a series of a process not traced: %v", l)
			}
			chip, _ := strconv.Atoi(l["chip"])
			wantPCI := ""
			if root != "" && chip == 0 {
				wantPCI = pci[0]
			}
			wantUID := named(mine[l["pid"]], int32(chip))
			var wantPlace [2]string
			if wantUID != "" {
				wantPlace = place[int32(chip)]
			}
			if l["chip_uid"] != wantUID || l["pci"] != wantPCI || l["tray"] != wantPlace[0] || l["asic_location"] != wantPlace[1] {
				return fmt.Sprintf("pid %s chip %s: chip_uid %q pci %q tray %q asic_location %q, want %q %q %q %q", l["pid"], l["chip"],
					l["chip_uid"], l["pci"], l["tray"], l["asic_location"], wantUID, wantPCI, wantPlace[0], wantPlace[1])
			}
			seen[l["pid"]+"/"+l["chip"]] = true
		}
		want := map[string]float64{}
		for pid, w := range mine {
			for _, d := range w.tr.Devices {
				if !seen[pid+"/"+strconv.Itoa(int(d.Device))] {
					return fmt.Sprintf("pid %s chip %d: no series", pid, d.Device)
				}
				key := named(w, d.Device)
				if key == "" {
					key = fmt.Sprintf("pid %s chip %d", pid, d.Device)
				}
				for _, ty := range truthTypes {
					want[key+"/"+ty.label] += float64(d.total(ty.field))
				}
			}
		}
		got := map[string]float64{}
		for _, s := range fams["tttrace_chip_memory_bytes"] {
			l := s.labels
			if l["chip_uid"] == "" {
				if !mixed || l["pid"] == "" || l["chip"] == "" {
					return fmt.Sprintf("a host-wide series not of one physical chip: %v", l)
				}
				got[fmt.Sprintf("pid %s chip %s/%s", l["pid"], l["chip"], l["type"])] = s.value
				continue
			}
			c := -1
			for id, u := range uid {
				if u == l["chip_uid"] {
					c = int(id)
				}
			}
			p := place[int32(c)]
			if l["pid"] != "" || l["chip"] != "" || c < 0 || l["tray"] != p[0] || l["asic_location"] != p[1] {
				return fmt.Sprintf("a host-wide series not of one physical chip, or not at its place %v: %v", p, l)
			}
			got[l["chip_uid"]+"/"+l["type"]] = s.value
		}
		var d []string
		for k, v := range want {
			if got[k] != v {
				d = append(d, fmt.Sprintf("%s = %v, want %v", k, got[k], v))
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok && v != 0 {
				d = append(d, fmt.Sprintf("%s = %v, want no such chip", k, v))
			}
		}
		return strings.Join(d, "; ")
	})

	for i, w := range ws {
		touch(t, f(fmt.Sprint(i, ".hold")))
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("workload %d: %v\n%s", i, err, w.out)
		}
	}
	if err := tt.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	// The summary: every chip of each workload with its unique id.
	sum := lastSummary(t, f("out"))
	for pid, w := range mine {
		n, _ := strconv.Atoi(pid)
		p := process(sum, uint32(n))
		if p == nil {
			t.Fatalf("pid %s not in the summary", pid)
		}
		if len(p.Devices) != len(w.tr.Devices) {
			t.Errorf("pid %s: %d chips, truth %d", pid, len(p.Devices), len(w.tr.Devices))
		}
		for _, d := range p.Devices {
			want := uid[d.Device]
			wantPCI, wantDev := "", ""
			if root != "" && d.Device == 0 {
				wantPCI, wantDev = pci[0], "/dev/tenstorrent/0"
			}
			if w.umd == nil {
				// The summary is the process's own view: its PCIe chip by
				// its PCI address, its chip behind Ethernet unknown.
				if d.Device == 0 && (d.UID == nil || *d.UID != pci[0] || d.UniqueID != "" || d.Tray != nil) ||
					d.Device != 0 && (d.UID != nil || d.Why == "") {
					t.Errorf("pid %s chip %d (no unique ids): %+v", pid, d.Device, d.ChipIdentity)
				}
				continue
			}
			if d.UID == nil || *d.UID != want || d.UniqueID != want || d.PCI != wantPCI || d.Dev != wantDev || d.Why != "" {
				t.Errorf("pid %s chip %d: %+v, want chip_uid = unique_id = %s, pci %q, dev %q", pid, d.Device, d.ChipIdentity, want, wantPCI, wantDev)
			}
			pl := place[d.Device]
			switch {
			case pl[0] == "" && (d.Tray != nil || d.AsicLocation != nil || !strings.Contains(d.PlaceWhy, "Ethernet tunnels")):
				t.Errorf("pid %s chip %d: place %+v, want none (a Wormhole chip off UBB)", pid, d.Device, d.ChipIdentity)
			case pl[0] != "" && (d.Tray == nil || d.AsicLocation == nil || strconv.Itoa(int(*d.Tray)) != pl[0] ||
				strconv.Itoa(int(*d.AsicLocation)) != pl[1] || d.PlaceWhy != ""):
				t.Errorf("pid %s chip %d: place %+v, want tray %s asic location %s", pid, d.Device, d.ChipIdentity, pl[0], pl[1])
			}
		}
	}
}
