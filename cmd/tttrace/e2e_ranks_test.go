package main

// Ranks end to end: a replica process started with a faked tt-run / MPI
// environment carries its host (--host), rank and mesh ids in the NDJSON
// summary and the report; one started without them has none.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestE2ERanks(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	for _, c := range []struct {
		name       string
		env        []string
		rank       int64
		mesh, host int64 // -1: absent
		from       string
	}{
		{"tt-run", []string{"OMPI_COMM_WORLD_RANK=3", "TT_MESH_ID=1", "TT_MESH_HOST_RANK=0", "PMI_RANK=9"}, 3, 1, 0, "OMPI_COMM_WORLD_RANK"},
		{"slurm", []string{"SLURM_PROCID=12"}, 12, -1, -1, "SLURM_PROCID"},
		{"none", nil, -1, -1, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			out, rep := filepath.Join(tmp, "out.ndjson"), filepath.Join(tmp, "report.txt")
			for _, args := range [][]string{{"--json", "-o", out}, {"-o", rep}} {
				cmd := exec.Command(bin, append(append(args, "--host", "node-a", "--lib", lib, "--"), filepath.Join(dir, "ttwork"), "--scenario", "basic")...)
				cmd.Env = append(os.Environ(), c.env...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("tttrace: %v\n%s", err, stderr.String())
				}
			}
			sum := lastSummary(t, out)
			if len(sum.Processes) != 1 {
				t.Fatalf("%d processes", len(sum.Processes))
			}
			p := sum.Processes[0]
			get := func(v *int64) int64 {
				if v == nil {
					return -1
				}
				return *v
			}
			if p.Host != "node-a" || get(p.Rank) != c.rank || get(p.MeshID) != c.mesh || get(p.MeshHostRank) != c.host || p.RankFrom != c.from {
				t.Errorf("summary placement %+v (rank %d mesh %d host rank %d), want host node-a rank %d mesh %d host rank %d from %q",
					p.Placement, get(p.Rank), get(p.MeshID), get(p.MeshHostRank), c.rank, c.mesh, c.host, c.from)
			}
			b, err := os.ReadFile(rep)
			if err != nil {
				t.Fatal(err)
			}
			if c.rank >= 0 && !strings.Contains(string(b), p.Placement.String()) {
				t.Errorf("the report does not say %q:\n%.500s", p.Placement.String(), b)
			}
		})
	}
}

// -p: the ranks come from the running process's /proc/PID/environ.
func TestE2ERanksAttached(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	out, goFile := filepath.Join(tmp, "out.ndjson"), filepath.Join(tmp, "go")
	w := exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "basic", "--go-file", goFile)
	w.Env = append(os.Environ(), "PMI_RANK=5", "TT_MESH_ID=2")
	var stderr bytes.Buffer
	traceHeld(t, bin, w, goFile, []string{"--json", "-o", out, "--host", "node-b"}, &stderr, &stderr)
	sum := lastSummary(t, out)
	p := procOf(t, sum, uint32(w.Process.Pid))
	if p.Host != "node-b" || p.Rank == nil || *p.Rank != 5 || p.RankFrom != "PMI_RANK" || p.MeshID == nil || *p.MeshID != 2 || p.MeshHostRank != nil {
		t.Errorf("placement %q (from %q), want host node-b, rank 5 from PMI_RANK, mesh 2", p.Placement.String(), p.RankFrom)
	}
}
