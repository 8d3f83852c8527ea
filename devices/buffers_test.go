package devices

import (
	"testing"
	"unsafe"
)

// TestBufEntrySize: a slot per live buffer, a million of them in the
// memory bench (docs/bench.md rows 5); a field added in the wrong place
// pads every slot.
func TestBufEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(bufEntry{}); got > 80 {
		t.Errorf("bufEntry is %d bytes, want at most 80: order its fields widest first", got)
	}
}
