package prometheus

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/tttrace/tttrace/devices"
)

// The memory_stats endpoint: GET /v1/memory_stats?pid=PID answers with the
// process's current window (tttrace mark; window 0, the whole run, before
// the first mark): per chip each counter's peak in it and, per buffer type,
// memory_stats as PJRT/JAX give them per device (bytes_in_use,
// peak_bytes_in_use, bytes_limit, largest_free_block_bytes), as of the
// sink's last tick (about 100 ms): a serving process reads its own peak.
// Without pid: every traced process. An unknown pid is a 404.

type memStatsProc struct {
	Pid    uint32         `json:"pid"`
	Window devices.Window `json:"window"`
}

func (e *Exporter) memoryStats(w http.ResponseWriter, r *http.Request) {
	s := e.snap.Load()
	w.Header().Set("Content-Type", "application/json")
	answer := func(code int, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			code, b = http.StatusInternalServerError, []byte(`{"error":"encoding"}`)
		}
		w.WriteHeader(code)
		_, _ = w.Write(append(b, '\n'))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		answer(http.StatusMethodNotAllowed, map[string]string{"error": "GET only"})
		return
	}
	arg := r.URL.Query().Get("pid")
	if arg == "" {
		out := struct {
			Processes []memStatsProc `json:"processes"`
		}{Processes: []memStatsProc{}}
		for _, p := range s.procs {
			pid, _ := strconv.ParseUint(p.pid, 10, 32)
			out.Processes = append(out.Processes, memStatsProc{Pid: uint32(pid), Window: p.window})
		}
		answer(http.StatusOK, out)
		return
	}
	pid, err := strconv.ParseUint(arg, 10, 32)
	if err != nil {
		answer(http.StatusBadRequest, map[string]string{"error": "pid is not a process id"})
		return
	}
	for _, p := range s.procs {
		if p.pid == strconv.FormatUint(pid, 10) {
			answer(http.StatusOK, memStatsProc{Pid: uint32(pid), Window: p.window})
			return
		}
	}
	answer(http.StatusNotFound, map[string]string{"error": "pid " + strconv.FormatUint(pid, 10) + " is not traced"})
}
