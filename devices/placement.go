package devices

import (
	"strconv"
	"strings"
)

// Placement is where a process runs in a multi-process, multi-host job:
// the host tttrace runs on and the ranks its launcher gave it (read from
// the process's environment by the runtime). A rank that is not set, or
// not a plain number, is nil (absent from the JSON).
type Placement struct {
	Host string `json:"host"`
	// Rank: the job rank (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID,
	// PMIX_RANK: the first set, in that order, as TT-Metal's own tools
	// look; docs/ttmetal.md); RankFrom names it.
	Rank     *int64 `json:"rank,omitempty"`
	RankFrom string `json:"rank_from,omitempty"`
	// MeshID, MeshHostRank: tt-run's TT_MESH_ID and TT_MESH_HOST_RANK.
	MeshID       *int64 `json:"mesh_id,omitempty"`
	MeshHostRank *int64 `json:"mesh_host_rank,omitempty"`
	// The Kubernetes pod and container the process runs in
	// (docs/kubernetes.md): PodUID and ContainerID from its cgroup; Pod,
	// Namespace and Container from the kubelet's pod-resources API ("":
	// not in a pod, or not known, PodWhy says why).
	PodUID      string `json:"pod_uid,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	Pod         string `json:"pod,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Container   string `json:"container,omitempty"`
	PodWhy      string `json:"pod_why,omitempty"`
}

// RankVars are the environment variables of a job rank, in the order
// they are looked at.
var RankVars = []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK"}

// PlacementOf reads the ranks from an environment lookup (getenv returns
// a variable's value and whether it is set) on host.
func PlacementOf(host string, getenv func(string) (string, bool)) Placement {
	pl := Placement{Host: host}
	for _, k := range RankVars {
		if v, ok := getenv(k); ok {
			if n := rankNumber(v); n != nil {
				pl.Rank, pl.RankFrom = n, k
			}
			break
		}
	}
	if v, ok := getenv("TT_MESH_ID"); ok {
		pl.MeshID = rankNumber(v)
	}
	if v, ok := getenv("TT_MESH_HOST_RANK"); ok {
		pl.MeshHostRank = rankNumber(v)
	}
	return pl
}

// rankNumber is v as a rank: a decimal number 0..2^31-1, else nil.
func rankNumber(v string) *int64 {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 10 {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<31-1 {
		return nil
	}
	return &n
}

// String says it for people: "host h1, rank 3 (OMPI_COMM_WORLD_RANK),
// mesh 1, mesh host rank 0, pod ml/trainer-0, container worker" (the pod's
// UID when its name is not known); the parts not known are left out.
func (pl Placement) String() string {
	var parts []string
	if pl.Host != "" {
		parts = append(parts, "host "+pl.Host)
	}
	if pl.Rank != nil {
		parts = append(parts, "rank "+strconv.FormatInt(*pl.Rank, 10))
	}
	if pl.MeshID != nil {
		parts = append(parts, "mesh "+strconv.FormatInt(*pl.MeshID, 10))
	}
	if pl.MeshHostRank != nil {
		parts = append(parts, "mesh host rank "+strconv.FormatInt(*pl.MeshHostRank, 10))
	}
	switch {
	case pl.Pod != "":
		parts = append(parts, "pod "+pl.Namespace+"/"+pl.Pod)
	case pl.PodUID != "":
		parts = append(parts, "pod uid "+pl.PodUID)
	}
	if pl.Container != "" {
		parts = append(parts, "container "+pl.Container)
	}
	return strings.Join(parts, ", ")
}
