package ttmetal

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Symbol tables (and code, code.go's callSites) are swept from the file a
// chunk at a time with pread into one buffer (elfx.File.Sweep): a 200+ MB
// libtt_metal.so has over 100 MB of symbol and string tables, and none of
// it stays in tttrace's memory. A table is swept in two sequential passes,
// so the string table is never read at random: first the string table, for
// the offsets where a wanted prefix starts (a name may start inside
// another string: linkers merge suffixes), then the symbol table, for the
// entries whose name starts at one of those offsets. Only the matching
// symbols become strings, each at most elfx's name limit (64 KiB), all of
// them together at most the string table's size plus 16 MiB: a crafted
// table whose names overlap (every name running on to the table's end)
// is refused instead of copied once per symbol. Tables larger than elfx's
// table limit (1 GiB: a sparse file can claim gigabytes of zeros) are
// refused before they are read.

// chunkSize is how much of a sweep is read at a time (a variable for
// tests, which make chunk boundaries fall everywhere).
var chunkSize = 1 << 20

// sweep calls fn with consecutive chunks of file range [off, off+n) (whole
// units of unit bytes), each followed by up to extra bytes of the next, for
// what straddles the boundary. The chunk is reused: fn must not keep it.
func (l *Library) sweep(off, n uint64, unit, extra int, fn func(base int, chunk []byte)) error {
	return l.ef.Sweep(off, n, chunkSize, unit, extra, func(base int, b []byte) error {
		fn(base, b)
		return nil
	})
}

// nameBudget is how many bytes of names a scan of a string table of size
// bytes may make.
func nameBudget(size uint64) uint64 { return size + 16<<20 }

// attachPrefixes is every name and prefix the attach path looks up
// (IsTTMetal, ResolveSymbols, the layout's accessors and the probe plan):
// the first scan of a library that asks only for some of them collects all
// of them, and later scans are answered from that (scanAll).
var attachPrefixes = func() []string {
	var ps []string
	ps = append(ps, spellings(symPimplSize, symPimplDevice, symBufferCreateViewPrefix, symVtableDevice, symVtableMeshDevice,
		symDeviceID)...)
	for _, p := range attachTable {
		for _, n := range p.Names {
			ps = append(ps, spellings(strings.TrimSuffix(n, "*"))...)
		}
	}
	for _, a := range bufferAccessors {
		ps = append(ps, spellings(a.name)...)
	}
	ps = append(ps, knownNames...)
	ps = append(ps, knownPrefixes...)
	return ps
}()

// symDeviceID is Device::id() const, slot 3 of Device's vtable, which the
// layout code reads through the vtable's relocation.
const symDeviceID = "_ZNK2tt8tt_metal6Device2idEv"

// symCache is what one scan for attachPrefixes found, in scan order.
type symCache struct {
	pfx  [][]byte
	syms []Symbol
	err  error
}

// covered reports whether every prefix is one of (or extends one of) the
// cache's, so that scanning for them finds nothing the cache lacks.
func (c *symCache) covered(prefixes []string) bool {
	for _, p := range prefixes {
		if !hasAnyPrefix([]byte(p), c.pfx) {
			return false
		}
	}
	return true
}

// cachedScan answers ScanSymbols from the attach scan when it can.
func (l *Library) cachedScan(prefixes []string, fn func(Symbol)) (bool, error) {
	if l.cache == nil {
		c := &symCache{pfx: prefixSet(attachPrefixes)}
		if !c.covered(prefixes) {
			return false, nil
		}
		c.err = l.scanStream(c.pfx, func(s Symbol) { c.syms = append(c.syms, s) })
		l.cache = c
	}
	c := l.cache
	if !c.covered(prefixes) {
		return false, nil
	}
	if c.err != nil {
		return true, c.err
	}
	pfx := prefixSet(prefixes)
	for _, s := range c.syms {
		if hasAnyPrefix([]byte(s.Name), pfx) {
			fn(s)
		}
	}
	return true, nil
}

// scanStream calls fn for every defined symbol of .dynsym and then .symtab
// whose name has one of the prefixes of pfx (a prefixSet).
func (l *Library) scanStream(pfx [][]byte, fn func(Symbol)) error {
	for _, tab := range []struct {
		sym, str string
		dyn      bool
	}{{".dynsym", ".dynstr", true}, {".symtab", ".strtab", false}} {
		if err := l.streamTable(tab.sym, tab.str, tab.dyn, pfx, fn); err != nil {
			return err
		}
	}
	return nil
}

// symTable is a symbol table and its string table (file ranges).
type symTable struct {
	symOff, symSize uint64
	strOff, strSize uint64
	names           uint64 // bytes of names read from it so far
}

// tableSections returns a symbol table and its string table; ok is false
// when the file has no such symbol table.
func (l *Library) tableSections(symName, strName string) (t symTable, ok bool, err error) {
	ss := l.file.Section(symName)
	if ss == nil || ss.Type == elf.SHT_NOBITS {
		return t, false, nil
	}
	st := l.file.Section(strName)
	if st == nil {
		return t, false, fmt.Errorf("%s: %s without %s", l.Path, symName, strName)
	}
	symOff, symSize, ok, err := l.ef.Table(ss)
	if !ok || err != nil {
		return t, false, err
	}
	strOff, strSize, ok, err := l.ef.Table(st)
	if err != nil {
		return t, false, err
	}
	if !ok {
		return t, false, fmt.Errorf("%s: %s without %s", l.Path, symName, strName)
	}
	return symTable{symOff: symOff, symSize: symSize, strOff: strOff, strSize: strSize}, true, nil
}

// name is the NUL-terminated string at off of t's string table, within
// the table's name budget.
func (l *Library) name(t *symTable, off uint32) (string, error) {
	n, err := l.cstring(t.strOff+uint64(off), t.strOff+t.strSize)
	if err != nil {
		return "", err
	}
	t.names += uint64(len(n))
	if t.names > nameBudget(t.strSize) {
		return "", fmt.Errorf("%s: the symbols' names run to more than %d bytes from a %d-byte string table: "+
			"names overlap, refused", l.Path, nameBudget(t.strSize), t.strSize)
	}
	return n, nil
}

func (l *Library) streamTable(symName, strName string, dyn bool, pfx [][]byte, fn func(Symbol)) error {
	t, ok, err := l.tableSections(symName, strName)
	if !ok || err != nil {
		return err
	}
	starts, err := l.prefixStarts(&t, pfx)
	if err != nil || len(starts) == 0 {
		return err
	}
	// The names are read once the sweep is over, not to touch the string
	// table again through the mapping.
	var hits [][sym64Size]byte
	err = l.eachSym(&t, func(ent []byte) {
		if binary.LittleEndian.Uint16(ent[6:]) == uint16(elf.SHN_UNDEF) {
			return
		}
		if _, hit := slices.BinarySearch(starts, binary.LittleEndian.Uint32(ent[0:])); hit {
			hits = append(hits, [sym64Size]byte(ent))
		}
	})
	if err != nil {
		return err
	}
	for _, ent := range hits {
		name, err := l.name(&t, binary.LittleEndian.Uint32(ent[0:]))
		if err != nil {
			return fmt.Errorf("%s: %w", strName, err)
		}
		fn(symbolOf(ent[:], name, dyn))
	}
	return nil
}

func symbolOf(ent []byte, name string, dyn bool) Symbol {
	return Symbol{
		Name:    name,
		Type:    elf.SymType(ent[4] & 0xf),
		Value:   binary.LittleEndian.Uint64(ent[8:]),
		Size:    binary.LittleEndian.Uint64(ent[16:]),
		Dynamic: dyn,
	}
}

// eachSym calls fn with every 24-byte entry of a symbol table, in order.
func (l *Library) eachSym(t *symTable, fn func(ent []byte)) error {
	return l.sweep(t.symOff, t.symSize, sym64Size, 0, func(_ int, d []byte) {
		for i := 0; i+sym64Size <= len(d); i += sym64Size {
			fn(d[i : i+sym64Size])
		}
	})
}

// prefixStarts returns, in increasing order, every offset of the string
// table at which one of the prefixes of pfx starts (with no NUL before its
// end). Candidates are found by the last byte of the prefixes' common head
// (the "Z" of "_Z" for the attach path's: rarer in mangled names than
// "_"), each then compared in full.
func (l *Library) prefixStarts(t *symTable, pfx [][]byte) ([]uint32, error) {
	if len(pfx) == 0 {
		return nil, nil
	}
	head, longest := pfx[0], 0
	for _, p := range pfx {
		n := 0
		for n < len(head) && n < len(p) && head[n] == p[n] {
			n++
		}
		head = head[:n]
		longest = max(longest, len(p))
	}
	m := newMatcher(pfx)
	var out []uint32
	err := l.sweep(t.strOff, t.strSize, 1, longest, func(base int, d []byte) {
		// Starts at or past the chunk's end belong to the next chunk; the
		// extra bytes are only for comparing across the boundary.
		limit := min(len(d), chunkSize)
		if len(head) == 0 {
			for i := 0; i < limit; i++ {
				if m.match(d[i:]) {
					out = append(out, uint32(base+i))
				}
			}
			return
		}
		k := len(head) - 1
		anchors := d[:min(limit+k, len(d))]
		for j := k; j < len(anchors); j++ {
			x := bytes.IndexByte(anchors[j:], head[k])
			if x < 0 {
				break
			}
			j += x
			if i := j - k; m.match(d[i:]) {
				out = append(out, uint32(base+i))
			}
		}
	})
	return out, err
}

// valueSet is a set of addresses, for symbolsAt.
type valueSet []uint64

func (v valueSet) has(x uint64) bool {
	i := sort.Search(len(v), func(i int) bool { return v[i] >= x })
	return i < len(v) && v[i] == x
}

// matcher tests names against a prefixSet quickly when every prefix has 16
// bytes or more, as the attach path's do: most names differ from every
// prefix in their first 16 bytes, which two 8-byte words decide.
type matcher struct {
	pfx   [][]byte
	heads [][2]uint64 // first 16 bytes of each distinct head; nil: no fast path
}

func newMatcher(pfx [][]byte) *matcher {
	m := &matcher{pfx: pfx}
	for _, p := range pfx {
		if len(p) < 16 {
			m.heads = nil
			return m
		}
		h := [2]uint64{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])}
		if !slices.Contains(m.heads, h) {
			m.heads = append(m.heads, h)
		}
	}
	return m
}

// match is hasAnyPrefix(name, m.pfx).
func (m *matcher) match(name []byte) bool {
	if m.heads != nil {
		if len(name) < 16 {
			return false
		}
		h0, h1 := binary.LittleEndian.Uint64(name), binary.LittleEndian.Uint64(name[8:])
		hit := false
		for _, h := range m.heads {
			if h[0] == h0 && h[1] == h1 {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return hasAnyPrefix(name, m.pfx)
}
