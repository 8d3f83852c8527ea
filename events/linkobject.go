package events

import (
	"bytes"
	"fmt"

	"golang.org/x/sys/unix"
)

// LinkObject is one object of a process's dynamic-loader link map, as BPF
// read it when ld.so said the map was consistent (struct
// link_object_record, bpf/linkmap.h). Addr and Name are the process's
// word; Dev and Ino the kernel's.
type LinkObject struct {
	Seq      uint64 // the walk's: every record of one walk has it
	TsNs     uint64
	Pid, Tid uint32
	Index    uint32 // position in the list; 0 is the main program
	Addr     uint64 // l_addr: run-time address - ELF address
	Ld       uint64 // l_ld: where its file was looked up
	// Dev is the file's device as stat(2) gives it (st_dev), converted
	// from the kernel's encoding; Dev and Ino are 0 with LinkObjectNoFile
	// or LinkObjectVmaBusy.
	Dev, Ino uint64
	Flags    uint8 // LinkObject* of bpf/wire.h
	// Name is l_name (no NUL), aliasing the raw record: valid as long as it
	// is. "" for the main program.
	Name []byte
}

// DecodeLinkObject decodes a link_object_record, checking that its name
// lies within the record and within LINK_NAME_MAX and holds no NUL; o.Name
// aliases raw. It allocates nothing.
func DecodeLinkObject(raw []byte, o *LinkObject) error {
	w, err := As[LinkObjectWire](raw)
	if err != nil {
		return err
	}
	if int(w.Size) > len(raw)-LinkObjectWireSize || w.Size >= LinkNameMax {
		return fmt.Errorf("link_object record seq %d: a name of %d bytes in a record of %d", w.Hdr.Seq, w.Size, len(raw))
	}
	name := raw[LinkObjectWireSize : LinkObjectWireSize+int(w.Size)]
	if bytes.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("link_object record seq %d: a NUL inside its name", w.Hdr.Seq)
	}
	*o = LinkObject{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Index: w.Index, Addr: w.Addr, Ld: w.Ld,
		Dev: KernelDev(w.Dev), Ino: w.Ino, Flags: w.Flags, Name: name}
	return nil
}

// KernelDev converts a dev_t as the kernel keeps it (major << 20 | minor,
// what BPF reads from a super_block) to st_dev's encoding.
func KernelDev(d uint64) uint64 {
	return unix.Mkdev(uint32(d>>20), uint32(d&(1<<20-1)))
}
