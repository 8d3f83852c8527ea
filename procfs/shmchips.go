package procfs

import (
	"strconv"
	"strings"
)

// The per-chip counters 2026 TT-Metal keeps in POSIX shared memory
// (docs/ttmetal.md §11): each Device maps /dev/shm/tt_device_<id>_memory,
// <id> the chip's UMD unique id in decimal (shm_open of
// "/tt_device_<id>_memory"), for as long as it lives.

// MaxSHMChips bounds the chip files SHMChips returns: a host has at most a
// few dozen chips, a process mapping more says nothing more.
const MaxSHMChips = 4096

// SHMChipPrefix and SHMChipSuffix frame a chip's counters file.
const (
	SHMChipPrefix = "/dev/shm/tt_device_"
	SHMChipSuffix = "_memory"
)

// SHMChipID is the unique id in the name of a chip's counters file, or
// false when path is not one: exactly /dev/shm/tt_device_<digits>_memory,
// the digits a decimal uint64 without a sign or leading zero (what
// std::to_string prints).
func SHMChipID(path string) (uint64, bool) {
	s, ok := strings.CutPrefix(path, SHMChipPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, SHMChipSuffix)
	if !ok || s == "" || len(s) > 20 || (s[0] == '0' && s != "0") {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

// SHMChips are the unique ids of the chip counters files pid maps (files
// since removed left out), at most MaxSHMChips of them.
func SHMChips(pid int) (map[uint64]bool, error) {
	maps, err := Maps(pid)
	if err != nil {
		return nil, err
	}
	return SHMChipsIn(maps), nil
}

// SHMChipsIn are the unique ids of the chip counters files in maps.
func SHMChipsIn(maps []Mapping) map[uint64]bool {
	out := map[uint64]bool{}
	for _, m := range maps {
		if len(out) >= MaxSHMChips {
			break
		}
		if m.Deleted() {
			continue
		}
		if id, ok := SHMChipID(m.Path); ok {
			out[id] = true
		}
	}
	return out
}
