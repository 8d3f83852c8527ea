package events

import (
	"math/bits"
	"strconv"
)

// AppendJSON appends e as one NDJSON object (with its trailing newline) to
// buf. It allocates nothing beyond growing buf. Fields are those documented
// in docs/ndjson.md; fields that do not apply to a kind are left out.
func AppendJSON(buf []byte, e *Event) []byte {
	// exit and lost are the tracer's own records: no BPF seq, no thread.
	synthesized := e.Kind.Synthesized()
	if int(e.Kind) < len(kindHeads) && kindHeads[e.Kind] != "" {
		buf = append(buf, kindHeads[e.Kind]...) // {"type":"alloc","seq": or {"type":"lost","ts_ns":
	} else {
		buf = append(buf, `{"type":"`...)
		buf = append(buf, e.Kind.String()...)
		buf = append(buf, `","seq":`...)
	}
	if !synthesized {
		buf = appendUint(buf, e.Seq)
		buf = append(buf, `,"ts_ns":`...)
	}
	buf = appendUint(buf, e.TsNs)
	buf = append(buf, `,"pid":`...)
	buf = appendUint(buf, uint64(e.Pid))
	if !synthesized {
		buf = append(buf, `,"tid":`...)
		buf = appendUint(buf, uint64(e.Tid))
	}
	switch e.Kind {
	case KindAlloc, KindFree, KindMarkDeallocated:
		buf = appendHex(buf, `,"buffer":"0x`, e.Object)
		buf = appendDevice(buf, e)
		buf = appendBufferFields(buf, e)
		buf = append(buf, hookedOwns[b2i(e.Hooked)<<1|b2i(e.OwnsData)]...)
		if e.Site != 0 {
			buf = append(buf, `,"site":`...)
			buf = appendUint(buf, uint64(e.Site))
		}
		if e.Stack == StackLost {
			// The summary's lost_stacks counts these (a replay needs it).
			buf = append(buf, `,"stack_lost":true`...)
		}
		if e.SiteMissing != SiteComplete {
			// The summary's sites_missing counts these by reason.
			buf = append(buf, `,"site_missing":"`...)
			buf = append(buf, e.SiteMissing.String()...)
			buf = append(buf, '"')
		}
	case KindView:
		buf = appendDevice(buf, e)
		buf = appendBufferFields(buf, e)
	case KindCBAlloc:
		buf = appendDevice(buf, e)
		buf = append(buf, `,"address":`...)
		buf = appendUint(buf, e.Address)
		buf = append(buf, `,"size":`...)
		buf = appendUint(buf, e.Size)
		buf = appendBool(buf, "global", e.Global)
		buf = appendCoreRanges(buf, e)
	case KindCBFree, KindDeviceClose, KindMeshClose:
		buf = appendDevice(buf, e)
		if e.Kind == KindDeviceClose && e.DeviceKind == DeviceChip && e.Device != 0 {
			// The Device* closed (the timeline names it).
			buf = appendHex(buf, `,"device_ptr":"0x`, e.Device)
		}
	case KindCBLayout, KindProgramDispatch:
		buf = appendHex(buf, `,"program":"0x`, e.Object)
		buf = appendDevice(buf, e)
	case KindCBTeardown, KindProgramDestroy:
		buf = appendHex(buf, `,"program":"0x`, e.Object)
	case KindAllocCapacity, KindAllocRequest:
		buf = appendAllocator(buf, e)
	case KindAllocOom:
		if e.Site != 0 {
			buf = append(buf, `,"site":`...)
			buf = appendUint(buf, uint64(e.Site))
		}
	case KindTrace:
		buf = appendTrace(buf, e)
	case KindOpEnter:
		buf = append(buf, `,"entered":"`...)
		buf = append(buf, e.Entered.String()...)
		buf = append(buf, '"')
	case KindRuntimeID:
		if e.Object != 0 {
			buf = appendHex(buf, `,"program":"0x`, e.Object)
		}
		buf = append(buf, `,"runtime_id":`...)
		buf = appendUint(buf, e.RuntimeID)
	case KindFork:
		buf = append(buf, `,"ppid":`...)
		buf = appendUint(buf, uint64(e.ParentPid))
	case KindLost:
		buf = append(buf, `,"count":`...)
		buf = appendUint(buf, e.LostBefore)
	case KindExit:
		buf = append(buf, `,"exit_code":`...)
		buf = strconv.AppendInt(buf, int64(e.ExitCode), 10)
		buf = append(buf, `,"exit_signal":`...)
		buf = strconv.AppendInt(buf, int64(e.ExitSignal), 10)
	}
	if e.InOp() {
		buf = appendOp(buf, e.Kind, &e.OpFields)
	}
	if e.Kind != KindLost && e.LostBefore != 0 {
		buf = append(buf, `,"lost_before":`...)
		buf = appendUint(buf, e.LostBefore)
	}
	if e.ReadError {
		buf = append(buf, `,"read_error":true`...)
	}
	return append(buf, "}\n"...)
}

// Constant runs of the encoding, joined ahead of time so an event is a
// few appends: kindHeads[k] opens the object up to the first number.
var kindHeads [len(kindNames)]string

// hookedOwns[hooked<<1|owns_data] closes a buffer event's fields.
var hookedOwns = [4]string{
	`,"hooked":false,"owns_data":false`, `,"hooked":false,"owns_data":true`,
	`,"hooked":true,"owns_data":false`, `,"hooked":true,"owns_data":true`,
}

// deviceHeads[k] starts the device fields of device kind k, up to its
// first value.
var deviceHeads = [...]string{
	DeviceNone:    `,"device_kind":"none"`,
	DeviceChip:    `,"device_kind":"chip","device":`,
	DeviceMesh:    `,"device_kind":"mesh","mesh":"0x`,
	DeviceUnknown: `,"device_kind":"unknown","device_ptr":"0x`,
}

// bufferHeads[t] is the buffer type of a valid type up to the address.
var bufferHeads [NumBufferTypes]string

func init() {
	for k, name := range kindNames {
		if name == "" {
			continue
		}
		if Kind(k).Synthesized() {
			kindHeads[k] = `{"type":"` + name + `","ts_ns":`
		} else {
			kindHeads[k] = `{"type":"` + name + `","seq":`
		}
	}
	for t, name := range bufferTypeNames {
		bufferHeads[t] = `,"buffer_type":"` + name + `","address":`
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func appendDevice(buf []byte, e *Event) []byte {
	switch e.DeviceKind {
	case DeviceNone:
		return append(buf, deviceHeads[DeviceNone]...)
	case DeviceChip:
		buf = append(buf, deviceHeads[DeviceChip]...)
		return appendInt(buf, int64(e.Chip))
	case DeviceMesh:
		return appendHex(buf, deviceHeads[DeviceMesh], e.Device)
	case DeviceUnknown:
		buf = appendHex(buf, deviceHeads[DeviceUnknown], e.Device)
		return appendHex(buf, `,"device_vptr":"0x`, e.DeviceVptr)
	}
	buf = append(buf, `,"device_kind":"`...)
	buf = append(buf, e.DeviceKind.String()...)
	return append(buf, '"')
}

func appendBufferFields(buf []byte, e *Event) []byte {
	if e.BufferType.Valid() {
		buf = append(buf, bufferHeads[e.BufferType]...)
	} else {
		buf = append(buf, `,"buffer_type":"`...)
		buf = append(buf, e.BufferType.String()...)
		buf = append(buf, `","address":`...)
	}
	buf = appendUint(buf, e.Address)
	buf = append(buf, `,"size":`...)
	buf = appendUint(buf, e.Size)
	buf = append(buf, `,"page_size":`...)
	return appendUint(buf, e.PageSize)
}

// appendHex appends head (which ends with "0x), v in hex, and the closing
// quote.
func appendHex(buf []byte, head string, v uint64) []byte {
	buf = append(buf, head...)
	n := 1
	if v != 0 {
		n = (bits.Len64(v) + 3) / 4
	}
	buf, d := grow(buf, n)
	for i := n - 1; i >= 0; i-- {
		d[i] = hexDigits[v&0xf]
		v >>= 4
	}
	return append(buf, '"')
}

// The hot path formats a dozen numbers per event; strconv's Append*
// format into a scratch array and copy it, these write in place.

const hexDigits = "0123456789abcdef"

// digitPairs holds "00".."99".
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// pow10 bounds the decimal lengths: v has n digits when pow10[n-1] <= v < pow10[n].
var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

func decimalLen(v uint64) int {
	// bits.Len64 gives log2; 1233/4096 approximates log10(2).
	n := (bits.Len64(v)*1233)>>12 + 1
	if n < len(pow10) && v >= pow10[n] {
		n++
	}
	if n > 1 && v < pow10[n-1] {
		n--
	}
	return n
}

// grow extends buf by n bytes and returns it with the n new bytes.
func grow(buf []byte, n int) ([]byte, []byte) {
	l := len(buf)
	if cap(buf)-l < n {
		buf = append(buf, make([]byte, n)...)
	} else {
		buf = buf[:l+n]
	}
	return buf, buf[l:]
}

// appendInt appends v in decimal, as strconv.AppendInt(buf, v, 10).
func appendInt(buf []byte, v int64) []byte {
	if v < 0 {
		return appendUint(append(buf, '-'), uint64(-v))
	}
	return appendUint(buf, uint64(v))
}

// appendUint appends v in decimal, as strconv.AppendUint(buf, v, 10).
func appendUint(buf []byte, v uint64) []byte {
	if v < 10 {
		return append(buf, byte('0'+v))
	}
	n := decimalLen(v)
	buf, d := grow(buf, n)
	i := n
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		d[i], d[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		d[0], d[1] = digitPairs[v*2], digitPairs[v*2+1]
	} else {
		d[0] = byte('0' + v)
	}
	return buf
}

func appendBool(buf []byte, key string, v bool) []byte {
	buf = append(buf, `,"`...)
	buf = append(buf, key...)
	buf = append(buf, `":`...)
	return strconv.AppendBool(buf, v)
}
