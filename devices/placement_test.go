package devices

import "testing"

func TestPlacementOf(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
		from string
	}{
		{map[string]string{}, "host h", ""},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "3", "PMI_RANK": "9", "TT_MESH_ID": "1", "TT_MESH_HOST_RANK": "0"}, "host h, rank 3, mesh 1, mesh host rank 0", "OMPI_COMM_WORLD_RANK"},
		{map[string]string{"SLURM_PROCID": "12", "PMIX_RANK": "7"}, "host h, rank 12", "SLURM_PROCID"},
		{map[string]string{"PMIX_RANK": "7"}, "host h, rank 7", "PMIX_RANK"},
		// The first one set decides, even when it is not a number.
		{map[string]string{"OMPI_COMM_WORLD_RANK": "x", "PMI_RANK": "2"}, "host h", ""},
		{map[string]string{"PMI_RANK": "-1", "TT_MESH_ID": "99999999999", "TT_MESH_HOST_RANK": " 4 "}, "host h, mesh host rank 4", ""},
	} {
		pl := PlacementOf("h", func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if pl.String() != c.want || pl.RankFrom != c.from {
			t.Errorf("%v: %q from %q, want %q from %q", c.env, pl.String(), pl.RankFrom, c.want, c.from)
		}
	}
}
