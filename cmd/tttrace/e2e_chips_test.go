package main

// Physical chips end to end: replica workloads that each call their chip
// "0" but see different chips through TT_VISIBLE_DEVICES run under
// tttrace --all; the host-wide sums (tttrace_chip_memory_bytes) must go by
// physical chip, exactly, and a chip whose identity cannot be known must
// not be added to anyone's. The host's /dev/tenstorrent and /sys are
// simulated under a directory (--dev-root, for tests): character devices
// made with mknod and sysfs links as the kernel driver makes them.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// devRootHost are the host's character devices whose numbers devRoot
// gives /dev/tenstorrent/0, 1, ...: tttrace counts a process on a chip only
// while it holds that chip's device open (as UMD does), and a workload
// holds "/dev/tenstorrent/N" by holding devRootHost[N] (holdChip).
var devRootHost = []string{"/dev/zero", "/dev/full"}

// devRoot makes DIR/dev/tenstorrent/N for each N -> PCI address of devs
// (character devices with the numbers of devRootHost) and
// DIR/sys/dev/char/MAJ:MIN links to PCI device directories holding their
// PCI device id.
func devRoot(t *testing.T, devs map[int]string) string {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "dev", "tenstorrent")
	char := filepath.Join(root, "sys", "dev", "char")
	for _, d := range []string{dev, char} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for n, pci := range devs {
		var st unix.Stat_t
		if err := unix.Stat(devRootHost[n], &st); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(dev, strconv.Itoa(n)), unix.S_IFCHR|0o600, int(st.Rdev)); err != nil {
			t.Fatalf("mknod: %v", err)
		}
		pdir := filepath.Join(root, "sys", "devices", "pci0000:00", pci)
		cdir := filepath.Join(pdir, "tenstorrent", fmt.Sprintf("tenstorrent!%d", n))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pdir, "device"), []byte("0x401e\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../"+pci, filepath.Join(cdir, "device")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(cdir, filepath.Join(char, fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// holdChip has cmd, not started yet, hold /dev/tenstorrent/n of a devRoot
// open, as TT-Metal holds the chips it uses.
func holdChip(t *testing.T, cmd *exec.Cmd, n int) {
	t.Helper()
	f, err := os.Open(devRootHost[n])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
}

// scrapeFamilies fetches addr's /metrics: every sample of the families
// named, as its labels (empty ones left out) and value.
func scrapeFamilies(addr string, names ...string) (map[string][]sample, error) {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string][]sample{}
	for _, n := range names {
		f := fams[n]
		if f == nil {
			continue
		}
		for _, m := range f.Metric {
			s := sample{labels: map[string]string{}}
			for _, lp := range m.Label {
				if lp.GetValue() != "" {
					s.labels[lp.GetName()] = lp.GetValue()
				}
			}
			s.value = m.GetGauge().GetValue()
			out[n] = append(out[n], s)
		}
	}
	return out, nil
}

type sample struct {
	labels map[string]string
	value  float64
}

func TestE2EPhysicalChips(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	// Numbered against the address order: UMD sorts by address, so
	// TT_VISIBLE_DEVICES=0 is /dev/tenstorrent/1 at 0000:02:00.0.
	root := devRoot(t, map[int]string{0: "0000:05:00.0", 1: "0000:02:00.0"})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tt, tout := start(t, bin, "--all", "--lib", filepath.Join(dir, "libtt_metal.so"), "--dev-root", root, "--host", "node-a",
		"--listen", addr, "--json", "--no-events", "-o", f("out"), "--ready-file", f("ready"))
	waitFor(t, func() bool { _, err := os.Stat(f("ready")); return err == nil }, "tttrace ready")

	// What each workload's chip 0 is, known from the layout above (pci
	// "": not known: an entry past the host's two devices).
	type workload struct {
		visible, pci, dev, scenario string
		cmd                         *exec.Cmd
		out                         *syncBuffer
		tr                          *truth
	}
	ws := []*workload{
		{visible: "0", pci: "0000:02:00.0", dev: "/dev/tenstorrent/1", scenario: "basic"},
		{visible: "1", pci: "0000:05:00.0", dev: "/dev/tenstorrent/0", scenario: "cb"},
		{visible: "0000:02:00.0", pci: "0000:02:00.0", dev: "/dev/tenstorrent/1", scenario: "mesh"},
		{visible: "7", scenario: "basic"},
	}
	for i, w := range ws {
		w.cmd = exec.Command(filepath.Join(dir, "ttwork"), "--scenario", w.scenario, "--leak",
			"--truth", f(fmt.Sprint(i, ".truth")), "--hold-file", f(fmt.Sprint(i, ".hold")))
		w.cmd.Env = append(os.Environ(), "TT_VISIBLE_DEVICES="+w.visible)
		if n, ok := strings.CutPrefix(w.dev, "/dev/tenstorrent/"); ok {
			num, _ := strconv.Atoi(n)
			holdChip(t, w.cmd, num)
		}
		w.out = &syncBuffer{}
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
	}
	for i, w := range ws {
		waitFor(t, func() bool { return strings.Contains(w.out.String(), "holding") }, "workload holding")
		w.tr = readTruth(t, f(fmt.Sprint(i, ".truth")))
	}
	mine := map[string]*workload{}
	for _, w := range ws {
		mine[strconv.Itoa(w.cmd.Process.Pid)] = w
	}

	// From one scrape: every workload's series carry its chip's identity
	// and equal its truth; each physical chip's host sum is the truths of
	// the workloads on it, plus what other processes of the host that
	// tttrace --all traces too hold there (their own series); the unknown
	// chip has its own series, its truth alone.
	poll(t, "host sums per physical chip", func() string {
		fams, err := scrapeFamilies(addr, "tttrace_device_memory_bytes", "tttrace_chip_memory_bytes")
		if err != nil {
			return err.Error()
		}
		want := map[string]float64{} // "uid/type" or "pid/chip/type" -> bytes
		got := map[string]float64{}
		seen := map[string]bool{}
		for _, s := range fams["tttrace_device_memory_bytes"] {
			l := s.labels
			w := mine[l["pid"]]
			if w == nil {
				if l["chip_uid"] != "" {
					want[l["chip_uid"]+"/"+l["type"]] += s.value
				}
				continue
			}
			seen[l["pid"]+"/"+l["chip"]] = true
			uid := "" // only chip 0 is one of its PCIe chips
			if l["chip"] == "0" {
				uid = w.pci
			}
			if l["chip_uid"] != uid || l["pci"] != uid || l["host"] != "node-a" {
				return fmt.Sprintf("pid %s chip %s: chip_uid %q pci %q host %q, want %q %q node-a", l["pid"], l["chip"], l["chip_uid"], l["pci"], l["host"], uid, uid)
			}
		}
		for pid, w := range mine {
			for _, d := range w.tr.Devices {
				if !seen[pid+"/"+strconv.Itoa(int(d.Device))] {
					return fmt.Sprintf("pid %s chip %d: no series", pid, d.Device)
				}
				for _, ty := range truthTypes {
					v := float64(d.total(ty.field))
					if w.pci == "" || d.Device != 0 {
						want[pid+"/"+strconv.Itoa(int(d.Device))+"/"+ty.label] = v
					} else {
						want[w.pci+"/"+ty.label] += v
					}
				}
			}
		}
		for _, s := range fams["tttrace_chip_memory_bytes"] {
			l := s.labels
			if l["host"] != "node-a" {
				return fmt.Sprintf("chip series without host node-a: %v", l)
			}
			if l["chip_uid"] != "" {
				if l["pid"] != "" || l["chip"] != "" || l["pci"] != l["chip_uid"] {
					return fmt.Sprintf("a physical chip's series names a process: %v", l)
				}
				got[l["chip_uid"]+"/"+l["type"]] = s.value
				continue
			}
			if w := mine[l["pid"]]; w != nil {
				got[l["pid"]+"/"+l["chip"]+"/"+l["type"]] = s.value
			}
		}
		// Only the keys of our workloads and physical chips are compared:
		// other processes' unknown chips are theirs.
		for k := range got {
			if _, ok := want[k]; !ok && strings.Count(k, "/") == 1 && (strings.HasPrefix(k, "0000:02:00.0/") || strings.HasPrefix(k, "0000:05:00.0/")) {
				want[k] = 0
			}
		}
		var d []string
		for k, v := range want {
			if got[k] != v {
				d = append(d, fmt.Sprintf("%s = %v, want %v", k, got[k], v))
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
	tt.Process.Signal(syscall.SIGINT)
	// 7, 11: another process of the host, traced too, lost events or
	// was probed late.
	if err := tt.Wait(); exitCode(err) != 0 && exitCode(err) != 7 && exitCode(err) != 11 {
		t.Fatalf("tttrace: %v\n%s", err, tout)
	}
	// The summary: chip_uid, pci and dev per chip, or null with why.
	sum := lastSummary(t, f("out"))
	for pid, w := range mine {
		n, _ := strconv.Atoi(pid)
		p := process(sum, uint32(n))
		if p == nil {
			t.Fatalf("pid %s not in the summary", pid)
		}
		for _, d := range p.Devices {
			pcie := d.Device == 0 && w.pci != ""
			switch {
			case pcie && (d.UID == nil || *d.UID != w.pci || d.PCI != w.pci || d.Dev != w.dev || d.Why != ""):
				t.Errorf("pid %s (TT_VISIBLE_DEVICES=%s) chip %d: %+v, want %s %s", pid, w.visible, d.Device, d.ChipIdentity, w.pci, w.dev)
			case !pcie && (d.UID != nil || d.PCI != "" || d.Why == ""):
				t.Errorf("pid %s (TT_VISIBLE_DEVICES=%s) chip %d: %+v, want unknown with why", pid, w.visible, d.Device, d.ChipIdentity)
			}
		}
	}
}
