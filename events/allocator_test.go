package events

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"
)

// The allocator records' lines, parsed back and compared field by field
// with what docs/ndjson.md lists for them.
func TestAllocatorJSON(t *testing.T) {
	for _, tc := range []struct {
		e    Event
		want map[string]any
	}{
		{Event{Seq: 7, TsNs: 100, Pid: 5, Tid: 6, Kind: KindAllocCapacity, Object: 0xabc, DeviceKind: DeviceChip, Chip: 3,
			BufferType: L1, AllocatorFields: AllocatorFields{Banks: 64, BankSize: 1 << 20, Alignment: 16, Base: 0x18000, Limit: 0x18000}},
			map[string]any{"type": "alloc_capacity", "seq": 7.0, "ts_ns": 100.0, "pid": 5.0, "tid": 6.0, "manager": "0xabc",
				"device_kind": "chip", "device": 3.0, "buffer_type": "L1", "banks": 64.0, "bank_size": float64(1 << 20),
				"alignment": 16.0, "base": float64(0x18000), "interleaved_limit": float64(0x18000)}},
		{Event{Seq: 8, TsNs: 101, Pid: 5, Tid: 6, Kind: KindAllocCapacity, Object: 0xabd, DeviceKind: DeviceNone, Chip: -1,
			BufferType: 9, AllocatorFields: AllocatorFields{Banks: 1}},
			map[string]any{"type": "alloc_capacity", "seq": 8.0, "ts_ns": 101.0, "pid": 5.0, "tid": 6.0, "manager": "0xabd",
				"device_kind": "none", "buffer_type": "BufferType(9)", "banks": 1.0, "bank_size": 0.0,
				"alignment": 0.0, "base": 0.0, "interleaved_limit": 0.0}},
		{Event{Seq: 9, TsNs: 102, Pid: 5, Tid: 6, Kind: KindAllocRequest, Object: 0xabc, Size: 4096, PageSize: 1024, Site: 4,
			AllocatorFields: AllocatorFields{Shards: 8, AllocatorID: 2, BottomUp: true}},
			map[string]any{"type": "alloc_request", "seq": 9.0, "ts_ns": 102.0, "pid": 5.0, "tid": 6.0, "manager": "0xabc",
				"size": 4096.0, "page_size": 1024.0, "bottom_up": true, "num_shards": 8.0, "allocator_id": 2.0, "site": 4.0}},
		{Event{Seq: 10, TsNs: 103, Pid: 5, Tid: 6, Kind: KindAllocRequest, Object: 0xabc, Size: 32, PageSize: 32},
			map[string]any{"type": "alloc_request", "seq": 10.0, "ts_ns": 103.0, "pid": 5.0, "tid": 6.0, "manager": "0xabc",
				"size": 32.0, "page_size": 32.0, "bottom_up": false, "allocator_id": 0.0}},
	} {
		line := AppendJSON(nil, &tc.e)
		var got map[string]any
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s\nwant %v", line, tc.want)
		}
	}
	if KindAllocCapacity.String() != "alloc_capacity" || KindAllocRequest.String() != "alloc_request" {
		t.Fatal("allocator kinds unnamed")
	}
}

// TestDecodeAllocator: the two allocator records decode into the fields the
// ledger reads, and a record of another kind is refused.
func TestDecodeAllocator(t *testing.T) {
	capRaw := make([]byte, AllocCapacityWireSize)
	c := (*AllocCapacityWire)(unsafe.Pointer(&capRaw[0]))
	c.Hdr = Header{Seq: 9, TsNs: 10, Pid: 11, Tid: 12, Kind: KindAllocCapacity}
	c.Manager, c.Device, c.BankSize, c.Alignment, c.Base, c.Limit = 0x1000, 0x2000, 1<<20, 16, 0x18000, 0x18000
	c.Banks, c.Chip, c.BufferType, c.DeviceKind, c.LostBefore = 64, 3, 1, DeviceChip, 2
	var e Event
	if err := DecodeAllocator(capRaw, &e); err != nil {
		t.Fatal(err)
	}
	want := Event{Seq: 9, TsNs: 10, Pid: 11, Tid: 12, Kind: KindAllocCapacity, Object: 0x1000, Device: 0x2000,
		DeviceKind: DeviceChip, Chip: 3, BufferType: 1, LostBefore: 2}
	want.Banks, want.BankSize, want.Alignment, want.Base, want.Limit = 64, 1<<20, 16, 0x18000, 0x18000
	if e != want {
		t.Errorf("capacity:\n got %+v\nwant %+v", e, want)
	}
	c.DeviceKind, c.Chip = DeviceNone, 0
	if DecodeAllocator(capRaw, &e); e.Chip != -1 {
		t.Errorf("capacity without a chip: chip %d, want -1", e.Chip)
	}

	reqRaw := make([]byte, AllocRequestWireSize)
	r := (*AllocRequestWire)(unsafe.Pointer(&reqRaw[0]))
	r.Hdr = Header{Seq: 20, Pid: 11, Tid: 13, Kind: KindAllocRequest}
	r.Manager, r.Size, r.PageSize, r.NumShards, r.AllocatorID, r.BottomUp = 0x1000, 4096, 2048, 8, 5, 1
	if err := DecodeAllocator(reqRaw, &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != KindAllocRequest || e.Object != 0x1000 || e.Size != 4096 || e.PageSize != 2048 || e.Shards != 8 ||
		e.AllocatorID != 5 || !e.BottomUp || e.Chip != -1 || e.BufferType != -1 || e.Tid != 13 {
		t.Errorf("request: %+v", e)
	}
	if err := DecodeAllocator(reqRaw[:AllocRequestWireSize-1], &e); err == nil {
		t.Error("a short request record was decoded")
	}
	evRaw := make([]byte, WireSize)
	(*Wire)(unsafe.Pointer(&evRaw[0])).Hdr.Kind = KindAlloc
	if err := DecodeAllocator(evRaw, &e); err == nil {
		t.Error("an alloc event was decoded as an allocator record")
	}
}
