package procfs

import (
	"fmt"
	"strings"
	"testing"
)

func TestSHMChipID(t *testing.T) {
	for path, want := range map[string]int64{
		"/dev/shm/tt_device_3677501122663824519_memory":  3677501122663824519,
		"/dev/shm/tt_device_0_memory":                    0,
		"/dev/shm/tt_device_18446744073709551615_memory": -2, // max uint64, below
		"/dev/shm/tt_device_18446744073709551616_memory": -1, // overflows
		"/dev/shm/tt_device_012_memory":                  -1, // not what to_string prints
		"/dev/shm/tt_device_-1_memory":                   -1,
		"/dev/shm/tt_device_+1_memory":                   -1,
		"/dev/shm/tt_device__memory":                     -1,
		"/dev/shm/tt_device_12_memory.bak":               -1,
		"/tmp/tt_device_12_memory":                       -1,
		"/dev/shm/x/tt_device_12_memory":                 -1,
		"/dev/shm/tt_device_1 2_memory":                  -1,
		"/dev/shm/tt_device_12_memory (deleted)":         -1,
		"/dev/shm/tt_device_१२_memory":                   -1, // non-ASCII digits
		"":                                               -1,
	} {
		id, ok := SHMChipID(path)
		switch {
		case want == -2:
			if !ok || id != 1<<64-1 {
				t.Errorf("%q: %d %v", path, id, ok)
			}
		case want < 0 && ok:
			t.Errorf("%q: accepted as %d", path, id)
		case want >= 0 && (!ok || id != uint64(want)):
			t.Errorf("%q: %d %v, want %d", path, id, ok, want)
		}
	}
}

func TestSHMChipsIn(t *testing.T) {
	text := "7f00-7f01 rw-s 00000000 00:19 11 /dev/shm/tt_device_42_memory\n" +
		"7f01-7f02 rw-s 00000000 00:19 12 /dev/shm/tt_device_43_memory (deleted)\n" +
		"7f02-7f03 rw-s 00000000 00:19 13 /dev/shm/tt_device_44_memory\n" +
		"7f03-7f04 rw-s 00000000 00:19 13 /dev/shm/tt_device_44_memory\n" +
		"7f04-7f05 r-xp 00000000 08:01 14 /usr/lib/libtt_metal.so\n"
	maps, err := ParseMaps([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	got := SHMChipsIn(maps)
	if len(got) != 2 || !got[42] || !got[44] {
		t.Errorf("got %v, want 42 and 44", got)
	}
	// Bounded: a process mapping more files than MaxSHMChips.
	var b strings.Builder
	for i := range MaxSHMChips + 10 {
		fmt.Fprintf(&b, "%x-%x rw-s 00000000 00:19 %d /dev/shm/tt_device_%d_memory\n", 0x1000*(i+1), 0x1000*(i+2), i, i+1)
	}
	maps, err = ParseMaps([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got := SHMChipsIn(maps); len(got) != MaxSHMChips {
		t.Errorf("%d ids, want the bound %d", len(got), MaxSHMChips)
	}
}
