package events

import "strconv"

// AppendJSON appends e as one NDJSON object (with its trailing newline) to
// buf. It allocates nothing beyond growing buf. Fields are those documented
// in docs/ndjson.md; fields that do not apply to a kind are left out.
func AppendJSON(buf []byte, e *Event) []byte {
	buf = append(buf, `{"type":"`...)
	buf = append(buf, e.Kind.String()...)
	buf = append(buf, '"')
	// exit and lost are the tracer's own records: no BPF seq, no thread.
	synthesized := e.Kind == KindProcessExit || e.Kind == KindLost
	if !synthesized {
		buf = append(buf, `,"seq":`...)
		buf = strconv.AppendUint(buf, e.Seq, 10)
	}
	buf = append(buf, `,"ts_ns":`...)
	buf = strconv.AppendUint(buf, e.TsNs, 10)
	buf = append(buf, `,"pid":`...)
	buf = strconv.AppendUint(buf, uint64(e.Pid), 10)
	if !synthesized {
		buf = append(buf, `,"tid":`...)
		buf = strconv.AppendUint(buf, uint64(e.Tid), 10)
	}
	switch e.Kind {
	case KindAlloc, KindFree, KindMarkDeallocated:
		buf = appendHex(buf, "buffer", e.Object)
		buf = appendDevice(buf, e)
		buf = appendBufferFields(buf, e)
		buf = appendBool(buf, "hooked", e.Hooked)
		buf = appendBool(buf, "owns_data", e.OwnsData)
	case KindView:
		buf = appendDevice(buf, e)
		buf = appendBufferFields(buf, e)
	case KindCBAlloc:
		buf = appendDevice(buf, e)
		buf = append(buf, `,"address":`...)
		buf = strconv.AppendUint(buf, e.Address, 10)
		buf = append(buf, `,"size":`...)
		buf = strconv.AppendUint(buf, e.Size, 10)
		buf = appendBool(buf, "global", e.Global)
	case KindCBFree, KindDeviceClose, KindMeshClose:
		buf = appendDevice(buf, e)
	case KindCBLayout:
		buf = appendHex(buf, "program", e.Object)
		buf = appendDevice(buf, e)
	case KindCBTeardown, KindProgramDestroy:
		buf = appendHex(buf, "program", e.Object)
	case KindFork:
		buf = append(buf, `,"ppid":`...)
		buf = strconv.AppendUint(buf, e.Object, 10)
	case KindLost:
		buf = append(buf, `,"count":`...)
		buf = strconv.AppendUint(buf, e.LostBefore, 10)
	case KindProcessExit:
		buf = append(buf, `,"exit_code":`...)
		buf = strconv.AppendInt(buf, int64(e.ExitCode), 10)
		buf = append(buf, `,"exit_signal":`...)
		buf = strconv.AppendInt(buf, int64(e.ExitSignal), 10)
	}
	if e.Kind != KindLost && e.LostBefore != 0 {
		buf = append(buf, `,"lost_before":`...)
		buf = strconv.AppendUint(buf, e.LostBefore, 10)
	}
	if e.ReadError {
		buf = appendBool(buf, "read_error", true)
	}
	return append(buf, "}\n"...)
}

func appendDevice(buf []byte, e *Event) []byte {
	buf = append(buf, `,"device_kind":"`...)
	buf = append(buf, e.DeviceKind.String()...)
	buf = append(buf, '"')
	switch e.DeviceKind {
	case DeviceChip:
		buf = append(buf, `,"device":`...)
		buf = strconv.AppendInt(buf, int64(e.Chip), 10)
	case DeviceMesh:
		buf = appendHex(buf, "mesh", e.Device)
	case DeviceUnknown:
		buf = appendHex(buf, "device_ptr", e.Device)
		buf = appendHex(buf, "device_vptr", e.DeviceVptr)
	}
	return buf
}

func appendBufferFields(buf []byte, e *Event) []byte {
	buf = append(buf, `,"buffer_type":"`...)
	buf = append(buf, e.BufferType.String()...)
	buf = append(buf, `","address":`...)
	buf = strconv.AppendUint(buf, e.Address, 10)
	buf = append(buf, `,"size":`...)
	buf = strconv.AppendUint(buf, e.Size, 10)
	buf = append(buf, `,"page_size":`...)
	return strconv.AppendUint(buf, e.PageSize, 10)
}

func appendHex(buf []byte, key string, v uint64) []byte {
	buf = append(buf, `,"`...)
	buf = append(buf, key...)
	buf = append(buf, `":"0x`...)
	buf = strconv.AppendUint(buf, v, 16)
	return append(buf, '"')
}

func appendBool(buf []byte, key string, v bool) []byte {
	buf = append(buf, `,"`...)
	buf = append(buf, key...)
	buf = append(buf, `":`...)
	return strconv.AppendBool(buf, v)
}
