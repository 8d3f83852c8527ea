package main

// The multi-host path end to end: two tttrace instances named as two hosts
// (--host node-a, node-b) on 127.0.0.1 ports, each tracing replica ranks
// started by a faked tt-run / MPI environment with TT_VISIBLE_DEVICES, are
// scraped by one real Prometheus server (Debian's prometheus package); every
// query of the Grafana dashboard (contrib/grafana/tttrace.json) is run
// against it and its answer compared with the replica's ground truth: per
// rank, per physical chip, the chips of unknown identity, the allocator's
// capacity, free bytes, largest free block and failures.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// promQueryHosts runs an instant query and returns each sample by its
// labels ("chip=0,host=node-a,type=dram", sorted), without __name__, job
// and command (checked non-empty where present), and with instance named
// as the host it scrapes (hosts: instance -> host).
func promQueryHosts(base, q string, hosts map[string]string) (map[string]float64, error) {
	resp, err := httpClient.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var ls []string
		for k, v := range s.Metric {
			switch k {
			case "__name__", "job":
			case "command":
				if v == "" {
					return nil, fmt.Errorf("query %s: an empty command", q)
				}
			case "instance":
				ls = append(ls, "instance="+hosts[v])
			default:
				ls = append(ls, k+"="+v)
			}
		}
		sort.Strings(ls)
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v", q, s.Value[1])
		}
		out[strings.Join(ls, ",")] = v
	}
	return out, nil
}

// key is a sample's labels as promQueryHosts writes them; empty values are
// left out (no label, to Prometheus).
func key(kv ...string) string {
	var ls []string
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			ls = append(ls, kv[i]+"="+kv[i+1])
		}
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

type dashboard struct {
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Repeat  string `json:"repeat"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestE2EPrometheusFleet(t *testing.T) {
	bin, replica := setup(t)
	promBin := requireTool(t, "prometheus", "prometheus")
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	f := func(name string) string { return filepath.Join(tmp, name) }
	// Each host has two PCIe devices, numbered against the address order:
	// TT_VISIBLE_DEVICES=0 is 0000:02:00.0, =1 is 0000:05:00.0.
	root := devRoot(t, map[int]string{0: "0000:05:00.0", 1: "0000:02:00.0"})

	type rank struct {
		host, visible, uid string // uid "": not known (an entry past the two devices)
		rank, mesh         int
		cmd                *exec.Cmd
		out                *syncBuffer
		pid                string
		tr                 *truth
		atr                *allocTruth
	}
	ranks := []*rank{
		{host: "node-a", visible: "0", uid: "0000:02:00.0", rank: 0, mesh: 0},
		{host: "node-a", visible: "1", uid: "0000:05:00.0", rank: 1, mesh: 0},
		{host: "node-b", visible: "0", uid: "0000:02:00.0", rank: 2, mesh: 1},
		{host: "node-b", visible: "7", rank: 3, mesh: 1},
	}
	for i, r := range ranks {
		r.cmd = exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "alloc", "--shape", "n150", "--leak",
			"--truth", f(fmt.Sprint(i, ".truth")), "--go-file", f(fmt.Sprint(i, ".go")), "--hold-file", f(fmt.Sprint(i, ".hold")))
		r.cmd.Env = append(os.Environ(), "TT_VISIBLE_DEVICES="+r.visible, "OMPI_COMM_WORLD_RANK="+strconv.Itoa(r.rank),
			"TT_MESH_ID="+strconv.Itoa(r.mesh), "TT_MESH_HOST_RANK=0")
		if n, ok := map[string]int{"0000:05:00.0": 0, "0000:02:00.0": 1}[r.uid]; ok {
			holdChip(t, r.cmd, n) // the chip its TT_VISIBLE_DEVICES names, held as TT-Metal holds it
		}
		r.out = &syncBuffer{}
		r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.pid = strconv.Itoa(r.cmd.Process.Pid)
		t.Cleanup(func() {
			if r.cmd.ProcessState == nil {
				r.cmd.Process.Kill()
				r.cmd.Wait()
			}
		})
	}
	for _, r := range ranks {
		waitFor(t, func() bool { return strings.Contains(r.out.String(), "ready") }, "workload ready")
	}
	// One tttrace per host, each attached to its host's ranks before they
	// open their chips (the allocator is then known from its making).
	hosts := map[string]string{} // instance -> host
	var targets []string
	for _, h := range []string{"node-a", "node-b"} {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		args := []string{"--lib", filepath.Join(dir, "libtt_metal.so"), "--host", h, "--dev-root", root, "--listen", addr,
			"--json", "--no-events", "-o", f(h + ".out"), "--ready-file", f(h + ".ready")}
		for _, r := range ranks {
			if r.host == h {
				args = append(args, "-p", r.pid)
			}
		}
		start(t, bin, args...)
		waitFor(t, func() bool { _, err := os.Stat(f(h + ".ready")); return err == nil }, "tttrace ready")
		hosts[addr] = h
		targets = append(targets, "'"+addr+"'")
	}
	for i, r := range ranks {
		touch(t, f(fmt.Sprint(i, ".go")))
		waitFor(t, func() bool { return strings.Contains(r.out.String(), "holding") }, "workload holding\n"+r.out.String())
		r.tr = readTruth(t, f(fmt.Sprint(i, ".truth")))
		r.atr = readAllocTruth(t, f(fmt.Sprint(i, ".truth")))
	}

	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tttrace\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	if err := os.WriteFile(f("prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pout := start(t, promBin, "--config.file", f("prometheus.yml"), "--storage.tsdb.path", t.TempDir(),
		"--web.listen-address", promAddr)
	base := "http://" + promAddr
	poll(t, "prometheus ready", func() string {
		resp, err := httpClient.Get(base + "/-/ready")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status + "\n" + pout.String()
		}
		return ""
	})

	// The truth of every panel, from the replica's truths and the layout
	// above alone. A per-rank panel's truth is filtered by rankSel.
	allTypes := []string{"dram", "l1", "l1_small", "trace", "system_memory", "cb"}
	fields := map[string]string{"dram": "dram_bytes", "l1": "l1_bytes", "l1_small": "l1_small_bytes", "trace": "trace_bytes",
		"system_memory": "system_memory_bytes", "cb": "cb_bytes"}
	chipOf := func(r *rank, d int32) string { // the chip's uid: only chip 0 is a PCIe chip
		if d == 0 {
			return r.uid
		}
		return ""
	}
	truths := map[string]func(rankSel string) map[string]float64{
		"Lost events (whole range)":               func(string) map[string]float64 { return map[string]float64{"": 0} },
		"Leaked by ended processes (whole range)": func(string) map[string]float64 { return map[string]float64{"": 0} },
		"Traced processes":                        func(string) map[string]float64 { return map[string]float64{"": float64(len(ranks))} },
		"Device memory per physical chip (all processes of a host)": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					if uid := chipOf(r, d.Device); uid != "" {
						for _, ty := range allTypes {
							w[key("host", r.host, "chip_uid", uid, "type", ty)] += float64(d.total(fields[ty]))
						}
					}
				}
			}
			return w
		},
		"Chips of unknown identity (per process)": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					if chipOf(r, d.Device) == "" {
						for _, ty := range allTypes {
							w[key("host", r.host, "pid", r.pid, "chip", strconv.Itoa(int(d.Device)), "type", ty)] = float64(d.total(fields[ty]))
						}
					}
				}
			}
			return w
		},
		"Device memory of rank $rank": func(sel string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				if sel != "" && sel != strconv.Itoa(r.rank) {
					continue
				}
				for _, d := range r.tr.Devices {
					for _, ty := range allTypes {
						w[key("host", r.host, "rank", strconv.Itoa(r.rank), "chip", strconv.Itoa(int(d.Device)), "chip_uid", chipOf(r, d.Device), "type", ty)] += float64(d.total(fields[ty]))
					}
				}
			}
			return w
		},
		"Allocator capacity per physical chip": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.atr.Devices {
					for ty, a := range d.Allocator {
						k := key("host", r.host, "chip_uid", chipOf(r, d.Device), "type", strings.ToLower(ty))
						if chipOf(r, d.Device) == "" {
							k = key("host", r.host, "chip", strconv.Itoa(int(d.Device)), "pid", r.pid, "type", strings.ToLower(ty))
						}
						w[k] = max(w[k], float64(uint64(a.Banks)*a.BankSize))
					}
				}
			}
			return w
		},
		"Failed allocations since tttrace started": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, fl := range r.atr.Failures {
					w[key("instance", r.host, "chip", strconv.Itoa(int(fl.Device)), "chip_uid", chipOf(r, fl.Device), "type", strings.ToLower(fl.Type), "cause", fl.Cause)]++
				}
			}
			return w
		},
		"Device memory per process": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					for _, ty := range allTypes {
						w[key("instance", r.host, "pid", r.pid, "chip", strconv.Itoa(int(d.Device)))] += float64(d.total(fields[ty]))
					}
				}
			}
			return w
		},
		"Peak per process and chip": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					for _, ty := range allTypes {
						if p := d.Peaks[fields[ty]]; p > 0 {
							w[key("instance", r.host, "pid", r.pid, "chip", strconv.Itoa(int(d.Device)), "type", ty)] = float64(p)
						}
					}
				}
			}
			return w
		},
		"Live buffers per process": func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					w[key("instance", r.host, "pid", r.pid, "chip", strconv.Itoa(int(d.Device)))] = float64(d.LiveBuffers)
				}
			}
			return w
		},
		"Leaked bytes per chip and type": func(string) map[string]float64 {
			// Nobody ended: every chip seen has its series, at 0.
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.tr.Devices {
					for _, ty := range allTypes[:5] {
						w[key("instance", r.host, "chip", strconv.Itoa(int(d.Device)), "chip_uid", chipOf(r, d.Device), "type", ty)] = 0
					}
				}
			}
			return w
		},
	}
	allocPanel := func(stat func(a allocTruthAllocator) uint64) func(string) map[string]float64 {
		return func(string) map[string]float64 {
			w := map[string]float64{}
			for _, r := range ranks {
				for _, d := range r.atr.Devices {
					for ty, a := range d.Allocator {
						w[key("host", r.host, "rank", strconv.Itoa(r.rank), "chip", strconv.Itoa(int(d.Device)), "chip_uid", chipOf(r, d.Device), "type", strings.ToLower(ty))] = float64(stat(a))
					}
				}
			}
			return w
		}
	}
	truths["Free device memory per rank and chip (allocator)"] = allocPanel(func(a allocTruthAllocator) uint64 { return uint64(a.Banks) * a.Free })
	truths["Largest free block per rank and chip (allocator)"] = allocPanel(func(a allocTruthAllocator) uint64 { return uint64(a.Banks) * a.LargestBlock })
	// Rates have no exact truth: the panel must give data for each kind.
	dataOnly := map[string]bool{"Events per second by kind": true}

	b, err := os.ReadFile("../../contrib/grafana/tttrace.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"instance", "chip", "type", "rank"} {
		if !vars[v] {
			t.Errorf("the dashboard has no $%s selector", v)
		}
	}
	all := strings.NewReplacer("$instance", ".*", "$chip", ".*", "$type", ".*", "$rank", ".*", "$__range", "5m", "$__rate_interval", "1m")
	checked := 0
	for _, p := range dash.Panels {
		want, ok := truths[p.Title]
		if !ok && !dataOnly[p.Title] {
			t.Errorf("dashboard panel %q: no truth to compare it with", p.Title)
			continue
		}
		for _, tg := range p.Targets {
			q := all.Replace(tg.Expr)
			sels := []string{""}
			if p.Repeat == "rank" {
				// Also as each repeated panel runs it: one rank.
				for _, r := range ranks {
					sels = append(sels, strconv.Itoa(r.rank))
				}
			}
			for _, sel := range sels {
				q := q
				if sel != "" {
					q = strings.ReplaceAll(all.Replace(strings.ReplaceAll(tg.Expr, "$rank", sel)), "$rank", sel)
				}
				if !dataOnly[p.Title] && len(want(sel)) == 0 {
					t.Errorf("panel %q (rank %q): the truth is empty: the comparison proves nothing", p.Title, sel)
				}
				poll(t, "dashboard panel "+p.Title+" "+sel, func() string {
					got, err := promQueryHosts(base, q, hosts)
					if err != nil {
						return err.Error()
					}
					if dataOnly[p.Title] {
						if len(got) == 0 {
							return q + ": no data"
						}
						return ""
					}
					if d := sameSamples(got, want(sel)); d != "" {
						return q + ": " + d
					}
					return ""
				})
				checked++
				if !dataOnly[p.Title] {
					t.Logf("panel %q (rank %q): %d series equal the truth", p.Title, sel, len(want(sel)))
				}
			}
		}
	}
	if checked < len(truths) {
		t.Fatalf("%d queries checked, %d panels with a truth", checked, len(truths))
	}
	// The queries docs/prometheus.md suggests are valid PromQL over these
	// metrics (a wrong join is an error), and its VRAM % equals the truth.
	doc, err := os.ReadFile("../../docs/prometheus.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(doc), "```promql\n")
	block, _, _ = strings.Cut(block, "```")
	n := 0
	for _, q := range strings.Split(block, "\n") {
		if q = strings.TrimSpace(q); q == "" || strings.HasPrefix(q, "#") {
			continue
		}
		n++
		if _, err := promQueryHosts(base, q, hosts); err != nil {
			t.Errorf("docs/prometheus.md: %v", err)
		}
	}
	if n < 5 {
		t.Errorf("docs/prometheus.md: %d queries found", n)
	}
	vram, err := promQueryHosts(base, `1 - sum by (host, rank, pid, chip, chip_uid, type) (tttrace_device_free_bytes{chip_uid!=""}) / on (host, chip_uid, type) group_left max by (host, chip_uid, type) (tttrace_device_capacity_bytes{chip_uid!=""})`, hosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranks {
		for _, d := range r.atr.Devices {
			if chipOf(r, d.Device) == "" {
				continue
			}
			for ty, a := range d.Allocator {
				k := key("host", r.host, "rank", strconv.Itoa(r.rank), "pid", r.pid, "chip", strconv.Itoa(int(d.Device)), "chip_uid", chipOf(r, d.Device), "type", strings.ToLower(ty))
				want := 1 - float64(a.Free)/float64(a.BankSize)
				if g, ok := vram[k]; !ok || g-want > 1e-9 || want-g > 1e-9 {
					t.Errorf("VRAM %% %s = %v (%v), want %v", k, g, ok, want)
				}
			}
		}
	}
	for i, r := range ranks {
		touch(t, f(fmt.Sprint(i, ".hold")))
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v\n%s", r.rank, err, r.out)
		}
	}
}
