package main

// Every chip named by its physical identity end to end (#36): replica
// workloads on an n300-shaped topology (chip 0 on PCIe, chip 1 behind it
// over Ethernet) and a Galaxy-shaped one (32 chips, 4 on PCIe) whose
// Devices hold their chips' UMD unique ids and map their
// /dev/shm/tt_device_<id>_memory files, as 2026 TT-Metal does. Two
// processes share one topology (the same physical chips): every chip of
// each carries its unique id (the truth's), a local chip keeps its PCI
// address beside it, and the host sums go by physical chip exactly, each
// chip's bytes those of both processes. tttrace traces the two pids only
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
		args     []string // the workload's scenario
		chips    int
		local    int
	}{
		{"n300", []string{"--scenario", "alloc", "--shape", "n300"}, 2, 1},
		{"galaxy", []string{"--scenario", "galaxy"}, 32, 4},
	} {
		t.Run(c.topology, func(t *testing.T) { testUMDChipIDs(t, c.topology, c.args, c.chips, c.local) })
	}
}

func testUMDChipIDs(t *testing.T, topology string, args []string, nchips, nlocal int) {
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
		w.umd = readUMDTruth(t, f(fmt.Sprint(i, ".truth")))
	}
	// The truth: every chip of the topology, the same ids in both
	// processes, each attached to its file; their files go with the test.
	uid := map[int32]string{} // logical id -> unique id
	pci := map[int32]string{}
	for _, ch := range ws[0].umd.UMD.Chips {
		uid[ch.Device], pci[ch.Device] = ch.UniqueID, ch.PCI
		t.Cleanup(func() { os.Remove(ch.SHM) })
	}
	local := 0
	for _, ch := range ws[1].umd.UMD.Chips {
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
			if l["chip_uid"] != uid[int32(chip)] || l["pci"] != wantPCI {
				return fmt.Sprintf("pid %s chip %s: chip_uid %q pci %q, want %q %q", l["pid"], l["chip"], l["chip_uid"], l["pci"], uid[int32(chip)], wantPCI)
			}
			seen[l["pid"]+"/"+l["chip"]] = true
		}
		want := map[string]float64{}
		for pid, w := range mine {
			for _, d := range w.tr.Devices {
				if !seen[pid+"/"+strconv.Itoa(int(d.Device))] {
					return fmt.Sprintf("pid %s chip %d: no series", pid, d.Device)
				}
				for _, ty := range truthTypes {
					want[uid[d.Device]+"/"+ty.label] += float64(d.total(ty.field))
				}
			}
		}
		got := map[string]float64{}
		for _, s := range fams["tttrace_chip_memory_bytes"] {
			l := s.labels
			if l["chip_uid"] == "" || l["pid"] != "" || l["chip"] != "" {
				return fmt.Sprintf("a host-wide series not of one physical chip: %v", l)
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
			if d.UID == nil || *d.UID != want || d.UniqueID != want || d.PCI != wantPCI || d.Dev != wantDev || d.Why != "" {
				t.Errorf("pid %s chip %d: %+v, want chip_uid = unique_id = %s, pci %q, dev %q", pid, d.Device, d.ChipIdentity, want, wantPCI, wantDev)
			}
		}
	}
}
