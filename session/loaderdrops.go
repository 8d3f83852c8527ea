package session

import (
	"fmt"

	"github.com/tttrace/tttrace/devices"
)

// A traced process may call ld.so's _dl_debug_state without end
// (dlopen/dlclose in a loop). BPF gives each process a budget of link-map
// records and drops, counting them, the calls over it (bpf/tttrace.bpf.c,
// dl_allow). A dropped call may be the one after which a TT-Metal library
// was mapped: the process's maps are read again at its next record, or
// here, at the next look at the counters (every tick), whichever comes
// first.

// loaderDrops is the session's view of the dropped calls.
type loaderDrops struct {
	total uint64            // the kernel's count, as last read
	taken uint64            // the per-process counts taken, summed
	byPid map[uint32]uint64 // per process, for the summary
}

// takeLoaderDrops looks at the drop counters; with rescan, the maps of
// every process that dropped a call since the last look are read again
// (of every process, when some drops could not be told by process).
func (s *session) takeLoaderDrops(rescan bool) {
	total, byPid, err := s.be.LoaderDrops()
	if err != nil || (total == s.dl.total && len(byPid) == 0) {
		return
	}
	s.dl.total = total
	if s.dl.byPid == nil {
		s.dl.byPid = map[uint32]uint64{}
	}
	for pid, n := range byPid {
		if s.dl.byPid[pid] == 0 {
			fmt.Fprintf(s.log, "tttrace: pid %d calls the dynamic loader's _dl_debug_state faster than its budget: "+
				"the calls over it are not recorded (its maps are read again instead)\n", pid)
		}
		s.dl.byPid[pid] += n
		s.dl.taken += n
		if rescan {
			s.onLinkMap(pid)
		}
	}
	if s.dl.taken < total && rescan {
		// Drops of processes BPF had no room to name.
		for pid := range s.procs {
			if _, done := byPid[pid]; !done {
				s.onLinkMap(pid)
			}
		}
		s.dl.taken = total
	}
}

// addLoaderDrops puts the dropped calls in the summary.
func (s *session) addLoaderDrops(sum *devices.Summary) {
	s.takeLoaderDrops(false)
	sum.LoaderCallsDropped = s.dl.total
	for i := range sum.Processes {
		sum.Processes[i].LoaderCallsDropped = s.dl.byPid[sum.Processes[i].Pid]
	}
}
