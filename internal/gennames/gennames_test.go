package gennames

import "testing"

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{
		"CB_ALLOC":          "CBAlloc",
		"ALLOC_REQUEST":     "AllocRequest",
		"LF_BUFFER_IMPL_ID": "LfBufferImplID",
		"_SIZE__PER_BANK_":  "SizePerBank",
		"":                  "",
	} {
		if got := Camel(in); got != want {
			t.Errorf("Camel(%q) = %q, want %q", in, got, want)
		}
	}
}
