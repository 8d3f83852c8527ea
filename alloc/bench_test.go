package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The benchmarks below hold n live blocks in one manager and measure what
// the ledger does per allocation: Stats at the request, Place at the
// alloc, and a Free, in a steady state (n stays n). One op is one
// Stats + Place + Free. The lists are built with FromBlocks, so that the
// set-up costs the same whatever the list's own costs are.

var benchSizes = []int{1_000, 10_000, 100_000}

// benchCfg: a bank large enough for any n here; 32-byte blocks.
var benchCfg = Config{Banks: 12, BankSize: 1 << 40, Alignment: 32, BlockAlign: 32}

const benchSpan = 2048

var benchStats Statistics

// BenchmarkDRAMBottomUp: n blocks allocated bottom-up from 0; each op allocates the
// next one at the bottom of the trailing free block and frees it (the
// largest free block is split at every Place, merged back at every Free).
func BenchmarkDRAMBottomUp(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			blocks := make([]Block, 0, n+1)
			for i := range n {
				blocks = append(blocks, Block{Addr: uint64(i) * benchSpan, Size: benchSpan, Allocated: true})
			}
			top := uint64(n) * benchSpan
			blocks = append(blocks, Block{Addr: top, Size: benchCfg.BankSize - top})
			placeFree(b, blocks, top)
		})
	}
}

// BenchmarkL1TopDown: n blocks allocated top-down from the bank's top;
// each op allocates the next one at the top of the leading free block and
// frees it.
func BenchmarkL1TopDown(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			low := benchCfg.BankSize - uint64(n)*benchSpan
			blocks := make([]Block, 0, n+1)
			blocks = append(blocks, Block{Addr: 0, Size: low})
			for i := range n {
				blocks = append(blocks, Block{Addr: low + uint64(i)*benchSpan, Size: benchSpan, Allocated: true})
			}
			placeFree(b, blocks, low-benchSpan)
		})
	}
}

// BenchmarkFIFO: n blocks live bottom-up, freed oldest first while new
// ones are placed above the newest (the hold scenario's frees, which
// destroy a vector of buffers front to back, with allocations going on).
// The freed blocks at the bottom merge into one growing free block.
func BenchmarkFIFO(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			blocks := make([]Block, 0, n+1)
			for i := range n {
				blocks = append(blocks, Block{Addr: uint64(i) * benchSpan, Size: benchSpan, Allocated: true})
			}
			top := uint64(n) * benchSpan
			blocks = append(blocks, Block{Addr: top, Size: benchCfg.BankSize - top})
			m, err := FromBlocks(benchCfg, blocks)
			if err != nil {
				b.Fatal(err)
			}
			oldest := uint64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				benchStats = m.Stats()
				if err := m.Place(top, benchSpan); err != nil {
					b.Fatal(err)
				}
				if _, ok := m.Free(oldest); !ok {
					b.Fatal("free")
				}
				top += benchSpan
				oldest += benchSpan
			}
		})
	}
}

// BenchmarkFragmented: n live blocks of random sizes with free holes of
// random sizes between about half of them; each op frees a random live
// block (merging it with its free neighbours), and places it again.
func BenchmarkFragmented(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			blocks := make([]Block, 0, 2*n+1)
			live := make([]Block, 0, n)
			var pos uint64
			for range n {
				size := (1 + rng.Uint64N(64)) * 32
				blocks = append(blocks, Block{Addr: pos, Size: size, Allocated: true})
				live = append(live, blocks[len(blocks)-1])
				pos += size
				if rng.Uint64N(2) == 0 {
					hole := (1 + rng.Uint64N(256)) * 32
					blocks = append(blocks, Block{Addr: pos, Size: hole})
					pos += hole
				}
			}
			blocks = append(blocks, Block{Addr: pos, Size: benchCfg.BankSize - pos})
			m, err := FromBlocks(benchCfg, blocks)
			if err != nil {
				b.Fatal(err)
			}
			picks := make([]int, 1<<16)
			for i := range picks {
				picks[i] = rng.IntN(n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				blk := live[picks[i%len(picks)]]
				if _, ok := m.Free(blk.Addr); !ok {
					b.Fatal("free")
				}
				benchStats = m.Stats()
				if err := m.Place(blk.Addr, blk.Size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// placeFree times Stats, then Place and Free of one span at at, on the
// model of blocks.
func placeFree(b *testing.B, blocks []Block, at uint64) {
	m, err := FromBlocks(benchCfg, blocks)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		benchStats = m.Stats()
		if err := m.Place(at, benchSpan); err != nil {
			b.Fatal(err)
		}
		if _, ok := m.Free(at); !ok {
			b.Fatal("free")
		}
	}
}
