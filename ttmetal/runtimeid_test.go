package ttmetal

import "testing"

// Program::set_runtime_id is probed with the program that reads the
// ProgramImpl* out of the Program only where the library has
// detail::ProgramImpl's functions (Program is then its handle); else with
// the one that does not.
func TestSetRuntimeIDForm(t *testing.T) {
	base := []string{symTrackAllocate, symTrackDeallocate, symVtableDevice, symProgramSetRuntimeID}
	for _, c := range []struct {
		name  string
		extra []string
		want  Program
	}{
		{"with ProgramImpl", []string{symAllocateCBs}, ProgSetRuntimeID},
		{"with ~ProgramImpl only", []string{symProgramImplD2}, ProgSetRuntimeID},
		{"without ProgramImpl", nil, ProgSetRuntimeIDNoImpl},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, syms := openResolved(t, buildLib(t, append(append([]string{}, base...), c.extra...)))
			var got []Program
			for _, a := range syms.AttachPoints {
				if a.Function == "Program::set_runtime_id(uint64_t)" {
					got = append(got, a.Program)
				}
			}
			if len(got) != 1 || got[0] != c.want {
				t.Errorf("set_runtime_id probed with %v, want [%s]", got, c.want)
			}
		})
	}
}
