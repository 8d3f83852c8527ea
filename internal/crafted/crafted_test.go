package crafted

import (
	"bytes"
	"compress/zlib"
	"io"
	"testing"
)

// The repeated deflate runs make a valid zlib stream of size zero bytes.
func TestCompressed(t *testing.T) {
	const size = 5 << 20
	b := Compressed(size)
	r, err := zlib.NewReader(bytes.NewReader(b[24:]))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || len(got) != size || !bytes.Equal(got, make([]byte, size)) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if len(b) > size/500 {
		t.Errorf("%d bytes compressed", len(b))
	}
}
