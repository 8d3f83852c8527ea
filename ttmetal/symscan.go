package ttmetal

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Symbol tables (and code, code.go's callSites) are swept through the
// file's mapping a chunk at a time, and each chunk's pages are dropped from
// the mapping once swept: a 200+ MB libtt_metal.so has over 100 MB of
// symbol and string tables, and every page touched would otherwise stay
// counted in tttrace's resident memory (they stay in the page cache). A
// table is swept in two sequential passes, so the string table is never
// read at random: first the string table, for the offsets where a wanted
// prefix starts (a name may start inside another string: linkers merge
// suffixes), then the symbol table, for the entries whose name starts at
// one of those offsets. Only the matching symbols become strings.

// chunkSize is how much of a sweep is resident at a time (a variable for
// tests, which make chunk boundaries fall everywhere).
var chunkSize = 1 << 20

// release drops the pages of file range [off, off+n) from the mapping (not
// from the page cache): they no longer count as tttrace's memory, and are
// read again from the page cache if touched. Best effort.
func (l *Library) release(off, n uint64) {
	page := uint64(unix.Getpagesize())
	start := off &^ (page - 1)
	end := min((off+n+page-1)&^(page-1), uint64(len(l.data)))
	if start < end {
		_ = unix.Madvise(l.data[start:end], unix.MADV_DONTNEED)
	}
}

// faultAround is how far around a faulting address the kernel may map
// pages already in the page cache: fault_around_bytes (64 KiB by default),
// or a whole large folio of the page cache, up to 2 MiB.
const faultAround = 2 << 20

// sweep calls fn with consecutive chunks of file range [off, off+n) (whole
// units of unit bytes), each followed by up to extra bytes of the next, for
// what straddles the boundary, and drops each chunk's pages once fn
// returns, with the pages the kernel mapped around them.
func (l *Library) sweep(off, n uint64, unit, extra int, fn func(base int, chunk []byte)) {
	size := uint64(max(chunkSize/unit, 1) * unit)
	for base := uint64(0); base < n; base += size {
		end := min(base+size+uint64(extra), n)
		fn(int(base), l.data[off+base:off+end])
		from := max(off+base, faultAround) - faultAround
		l.release(from, off+end+faultAround-from)
	}
	// What a fault mapped beyond a chunk released before it.
	from := max(off, faultAround) - faultAround
	l.release(from, off+n+faultAround-from)
}

// attachPrefixes is every name and prefix the attach path looks up
// (IsTTMetal, ResolveSymbols, the layout's accessors and the probe plan):
// the first scan of a library that asks only for some of them collects all
// of them, and later scans are answered from that (scanAll).
var attachPrefixes = func() []string {
	var ps []string
	ps = append(ps, withV0(symPimplSize, symPimplDevice, symBufferCreateViewPrefix, symVtableDevice, symVtableMeshDevice,
		symDeviceID)...)
	for _, p := range attachTable {
		for _, n := range p.Names {
			ps = append(ps, withV0(strings.TrimSuffix(n, "*"))...)
		}
	}
	for _, a := range bufferAccessors {
		ps = append(ps, withV0(a.name)...)
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

// symTable is a symbol table and its string table.
type symTable struct {
	symOff, symSize uint64
	str             []byte // the string table, mapped
	strOff          uint64
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
	if _, err := l.slice(ss.Offset, ss.Size); err != nil {
		return t, false, fmt.Errorf("%s: %w", symName, err)
	}
	str, err := l.slice(st.Offset, st.Size)
	if err != nil {
		return t, false, fmt.Errorf("%s: %w", strName, err)
	}
	return symTable{symOff: ss.Offset, symSize: ss.Size, str: str, strOff: st.Offset}, true, nil
}

// name is the NUL-terminated string at off of t's string table.
func (l *Library) name(t *symTable, off uint32) (string, error) {
	return l.cstring(t.strOff+uint64(off), t.strOff+uint64(len(t.str)))
}

func (l *Library) streamTable(symName, strName string, dyn bool, pfx [][]byte, fn func(Symbol)) error {
	t, ok, err := l.tableSections(symName, strName)
	if !ok || err != nil {
		return err
	}
	starts := l.prefixStarts(&t, pfx)
	if len(starts) == 0 {
		return nil
	}
	// The names are read once the sweep is over, not to touch the string
	// table again through the mapping.
	var hits [][sym64Size]byte
	l.eachSym(&t, func(ent []byte) {
		if binary.LittleEndian.Uint16(ent[6:]) == uint16(elf.SHN_UNDEF) {
			return
		}
		if _, hit := slices.BinarySearch(starts, binary.LittleEndian.Uint32(ent[0:])); hit {
			hits = append(hits, [sym64Size]byte(ent))
		}
	})
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
func (l *Library) eachSym(t *symTable, fn func(ent []byte)) {
	l.sweep(t.symOff, t.symSize, sym64Size, 0, func(_ int, d []byte) {
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
func (l *Library) prefixStarts(t *symTable, pfx [][]byte) []uint32 {
	if len(pfx) == 0 {
		return nil
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
	l.sweep(t.strOff, uint64(len(t.str)), 1, longest, func(base int, d []byte) {
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
	return out
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
