// Package elfx is the ground floor every reader of ELF files stands on:
// files opened safely (regular files only, never a FIFO or a device),
// read with pread (a file another process truncates gives a read error,
// never a SIGBUS), sections read under size limits (compressed ones
// included: a few MB must not decompress to GBs), the build-id note,
// .gnu_debuglink and the look-up of separate debug files, DWARF pointer
// encodings and LEB128, the CFA and DW_OP opcode names, DWARF read under
// the same limits, and type chains walked with a depth limit.
//
// Every file it reads comes from outside (a traced process maps it, a
// user names it): every size in it is checked before it is used, and
// every loop over it is bounded by the bytes it has. Functions take
// *elf.File or paths and return paths and plain values, so any package
// can use them without an import cycle.
package elfx
