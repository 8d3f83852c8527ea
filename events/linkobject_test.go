package events

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Link-object records: the name is the record's tail, within the record
// and the room BPF has for it, without a NUL; the device is converted
// from the kernel's encoding to stat's.
func TestDecodeLinkObject(t *testing.T) {
	rec := func(size uint32, name string) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, LinkObjectWire{Hdr: Header{Seq: 4, TsNs: 5, Pid: 6, Tid: 7, Kind: KindLinkObject},
			Addr: 0x7f0000000000, Ld: 0x7f0000003e00, Dev: 259<<20 | 0x12345, Ino: 99, Index: 3, Size: size, Flags: LinkObjectLast})
		b.WriteString(name)
		return b.Bytes()
	}
	var o LinkObject
	if err := DecodeLinkObject(rec(12, "/lib/libx.soXYZ"), &o); err != nil {
		t.Fatal(err)
	}
	if o.Seq != 4 || o.TsNs != 5 || o.Pid != 6 || o.Tid != 7 || o.Index != 3 || o.Addr != 0x7f0000000000 || o.Ld != 0x7f0000003e00 ||
		o.Ino != 99 || o.Flags != LinkObjectLast || string(o.Name) != "/lib/libx.so" {
		t.Errorf("decoded %+v", o)
	}
	if unix.Major(o.Dev) != 259 || unix.Minor(o.Dev) != 0x12345 {
		t.Errorf("device %#x: %d:%d, want 259:%d", o.Dev, unix.Major(o.Dev), unix.Minor(o.Dev), 0x12345)
	}
	if err := DecodeLinkObject(rec(0, ""), &o); err != nil || len(o.Name) != 0 {
		t.Errorf("the main program's empty name: %q, %v", o.Name, err)
	}
	for what, raw := range map[string][]byte{
		"a name past the record":           rec(13, "/lib/libx.so"),
		"a name past its room":             rec(LinkNameMax, string(make([]byte, LinkNameMax))),
		"a NUL inside the name":            rec(5, "/a\x00bc"),
		"a record shorter than its struct": rec(0, "")[:LinkObjectWireSize-1],
	} {
		if err := DecodeLinkObject(raw, &o); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	raw := rec(0, "")
	raw[unsafe.Offsetof(Header{}.Kind)] = uint8(KindStack)
	if err := DecodeLinkObject(raw, &o); err == nil {
		t.Error("a record of another kind was decoded as a link object")
	}
	ok := rec(12, "/lib/libx.so")
	if n := testing.AllocsPerRun(100, func() { _ = DecodeLinkObject(ok, &o) }); n != 0 {
		t.Errorf("DecodeLinkObject allocates %v times", n)
	}
}
