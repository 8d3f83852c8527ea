package ttmetal

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
)

// descFixtureSrc is a program holding upstream's way from a MetalContext
// to UMD's cluster descriptor (metal_context.hpp, metal_env.hpp,
// metal_env_impl.hpp, tt_cluster.hpp, cluster_descriptor.hpp: the members
// read, with some of those around them) in real libstdc++ containers; it
// fills the descriptor of 40 chips, prints g_instances' address and waits.
// Chip i: unique id 1000+7i; board type UBB (i even) or P150; a bus id
// 0x80|i for i%3 != 2; an ASIC location i%8 for i%4 != 3.
const descFixtureSrc = `
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
namespace tt {
enum BoardType : uint32_t { E75, E150, E300, N150, N300, P100, P150, P300, GALAXY, UBB, UBB_WORMHOLE = UBB, UBB_BLACKHOLE, QUASAR, UNKNOWN };
}
namespace tt::umd {
using ChipId = int;
class ClusterDescriptor {
public:
    std::unordered_map<ChipId, std::unordered_map<int, std::tuple<ChipId, int>>> ethernet_connections;
    std::unordered_map<ChipId, ChipId> chips_with_mmio;
    std::unordered_set<ChipId> all_chips;
    std::unordered_map<ChipId, BoardType> chip_board_type;
    std::unordered_map<ChipId, uint64_t> chip_unique_ids;
    std::map<ChipId, std::set<uint32_t>> active_eth_channels;
    std::map<ChipId, uint8_t> asic_locations;
    std::unordered_map<ChipId, std::string> chip_pci_bdfs;
    std::unordered_map<ChipId, uint16_t> chip_to_bus_id;
};
}
namespace tt {
class Cluster {
public:
    int arch_ = 2;
    bool iommu_enabled_ = false;
    umd::ClusterDescriptor* cluster_desc_ = nullptr;
};
}
namespace tt::tt_metal {
class MetalEnvImpl {
public:
    std::unique_ptr<int> rtoptions_;
    std::unique_ptr<Cluster> cluster_;
};
class MetalEnv {
public:
    std::unique_ptr<MetalEnvImpl> impl_;
};
class MetalContext {
public:
    bool initialized_ = false;
    MetalEnv* env_ = nullptr;
};
std::array<std::atomic<MetalContext*>, 32> g_instances{};
}
using namespace tt::tt_metal;
int main() {
    auto* d = new tt::umd::ClusterDescriptor();
    for (int i = 0; i < 40; ++i) {
        d->chip_unique_ids[i] = 1000 + 7 * i;
        d->chip_board_type[i] = i % 2 == 0 ? tt::UBB : tt::P150;
        if (i % 3 != 2) d->chip_to_bus_id[i] = 0x80 | i;
        if (i % 4 != 3) d->asic_locations[i] = i % 8;
        d->chip_pci_bdfs[i] = "0000:00:00.0";
    }
    auto* cl = new tt::Cluster();
    cl->cluster_desc_ = d;
    auto* impl = new MetalEnvImpl();
    impl->cluster_.reset(cl);
    auto* env = new MetalEnv();
    env->impl_.reset(impl);
    auto* ctx = new MetalContext();
    ctx->env_ = env;
    g_instances[3].store(ctx);
    g_instances[5].store(ctx);  // one descriptor, read once
    std::printf("%p\n", static_cast<void*>(&g_instances));
    std::fflush(stdout);
    std::getchar();
}
`

// A live process's descriptor, read with the layout its DWARF gives, is
// the one it filled: every chip of every map, in g++ and clang++ builds.
func TestReadClusterDescriptorsLive(t *testing.T) {
	for _, cc := range []string{"g++", "clang++"} {
		t.Run(cc, func(t *testing.T) {
			exe := compile(t, cc, "desc.cpp", descFixtureSrc, "desc", []string{"-std=c++17", "-O1", "-g"})
			lib, err := OpenLibrary(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer lib.Close()
			d, err := openDWARF(lib, elfx.Debug{Roots: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			dl, err := descLayout(d)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe)
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { in.Close(); cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			addr, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "0x"), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := procfs.OpenMem(cmd.Process.Pid, &procfs.MemBudget{Bytes: 1 << 20, Reads: 4096})
			if err != nil {
				t.Skip("cannot read the fixture's memory: ", err)
			}
			defer mem.Close()
			descs, err := ReadClusterDescriptors(mem, addr, &RootLayout{Slots: 32, Desc: dl})
			if err != nil {
				t.Fatal(err)
			}
			if len(descs) != 1 || len(descs[0]) != 40 {
				t.Fatalf("%d descriptors (%v), want one of 40 chips", len(descs), descs)
			}
			for i := range int32(40) {
				c := descs[0][i]
				board := "P150"
				if i%2 == 0 {
					board = "UBB"
				}
				if c == nil || !c.HasUniqueID || c.UniqueID != uint64(1000+7*i) || !c.HasBoard || !strings.Contains(strings.Join(c.BoardNames, ","), board) ||
					c.HasBus != (i%3 != 2) || (c.HasBus && c.Bus != uint16(0x80|i)) ||
					c.HasAsicLocation != (i%4 != 3) || (c.HasAsicLocation && c.AsicLocation != uint8(i%8)) {
					t.Errorf("chip %d: %+v", i, c)
				}
			}
		})
	}
}

// leBytes are little-endian words.
func leBytes(words ...uint64) []byte {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

// hashNode is a node of an unordered_map<int, uint64_t>: next, key, value.
func hashNode(next uint64, key int32, v uint64) []byte { return leBytes(next, uint64(uint32(key)), v) }

// treeNode is a node of a std::map<int, uint8_t>: color, parent, left,
// right, key and value.
func treeNode(parent, left, right uint64, key int32, v uint8) []byte {
	return leBytes(0, parent, left, right, uint64(uint32(key))|uint64(v)<<32)
}

var (
	u64Map = descMap{ValueOff: 16, ValueSize: 8}
	u8Tree = descMap{ValueOff: 36, ValueSize: 1}
)

// Hostile containers are refused with why, never walked without end.
func TestWalkHostileContainers(t *testing.T) {
	collect := func(walk func(f func(int32, uint64)) error) (string, error) {
		var got []string
		err := walk(func(k int32, v uint64) { got = append(got, fmt.Sprintf("%d=%d", k, v)) })
		return strings.Join(got, " "), err
	}
	hash := func(m fakeMem) func(f func(int32, uint64)) error {
		return func(f func(int32, uint64)) error { return walkHash(m, 0x1000, u64Map, f) }
	}
	// The map at 0x1000: before_begin's next at +16, the count at +24.
	hmap := func(first, n uint64) []byte { return leBytes(0, 0, first, n, 0, 0, 0) }
	good := fakeMem{0x1000: hmap(0x2000, 2), 0x2000: hashNode(0x3000, 4, 40), 0x3000: hashNode(0, -1, 7)}
	if got, err := collect(hash(good)); err != nil || got != "4=40 -1=7" {
		t.Errorf("good list: %q, %v", got, err)
	}
	for name, c := range map[string]struct {
		m    fakeMem
		want string
	}{
		"loop":       {fakeMem{0x1000: hmap(0x2000, 3), 0x2000: hashNode(0x3000, 4, 40), 0x3000: hashNode(0x2000, 5, 7)}, "met twice"},
		"short":      {fakeMem{0x1000: hmap(0x2000, 3), 0x2000: hashNode(0, 4, 40)}, "ends after 1"},
		"long":       {fakeMem{0x1000: hmap(0x2000, 1), 0x2000: hashNode(0x3000, 4, 40), 0x3000: hashNode(0, 5, 7)}, "goes on past"},
		"huge count": {fakeMem{0x1000: hmap(0x2000, 1<<40)}, "more than the 4096"},
		"unreadable": {fakeMem{0x1000: hmap(0x9000, 1)}, "node 0"},
	} {
		if _, err := collect(hash(c.m)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}

	tree := func(m fakeMem) func(f func(int32, uint64)) error {
		return func(f func(int32, uint64)) error { return walkTree(m, 0x1000, u8Tree, f) }
	}
	// The map at 0x1000: the header at +8 (root at +16), the count at +40.
	tmap := func(root, n uint64) []byte { return leBytes(0, 0, root, 0, 0, n) }
	const hdr = 0x1008
	// 0x2000 (key 5) with 0x3000 (key 2) on its left and 0x4000 (key 9) on
	// its right.
	goodTree := fakeMem{0x1000: tmap(0x2000, 3), 0x2000: treeNode(hdr, 0x3000, 0x4000, 5, 50),
		0x3000: treeNode(0x2000, 0, 0, 2, 20), 0x4000: treeNode(0x2000, 0, 0, 9, 90)}
	if got, err := collect(tree(goodTree)); err != nil || got != "2=20 5=50 9=90" {
		t.Errorf("good tree: %q, %v", got, err)
	}
	for name, c := range map[string]struct {
		m    fakeMem
		want string
	}{
		"cycle": {fakeMem{0x1000: tmap(0x2000, 3), 0x2000: treeNode(hdr, 0x3000, 0, 5, 50),
			0x3000: treeNode(0x2000, 0x2000, 0, 2, 20)}, "met twice"},
		"self": {fakeMem{0x1000: tmap(0x2000, 9), 0x2000: treeNode(hdr, 0, 0x2000, 5, 50)}, "met twice"},
		"parent": {fakeMem{0x1000: tmap(0x2000, 2), 0x2000: treeNode(hdr, 0x3000, 0, 5, 50),
			0x3000: treeNode(0x4000, 0, 0, 2, 20)}, "its parent"},
		"order": {fakeMem{0x1000: tmap(0x2000, 2), 0x2000: treeNode(hdr, 0x3000, 0, 5, 50),
			0x3000: treeNode(0x2000, 0, 0, 7, 20)}, "not in order"},
		"count low":  {goodTree.with(0x1000, tmap(0x2000, 2)), "more nodes than its 2"},
		"count high": {goodTree.with(0x1000, tmap(0x2000, 4)), "3 nodes reached, its count says 4"},
		"no root":    {fakeMem{0x1000: tmap(0, 2)}, "root 0x0 with 2"},
		"huge count": {fakeMem{0x1000: tmap(0x2000, 1<<40)}, "more than the 4096"},
	} {
		if _, err := collect(tree(c.m)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// with is m with the bytes at addr replaced.
func (m fakeMem) with(addr uint64, b []byte) fakeMem {
	out := fakeMem{}
	for k, v := range m {
		out[k] = v
	}
	out[addr] = b
	return out
}

// PlaceOf follows the system descriptor's rules (docs/ttmetal.md §11).
func TestPlaceOf(t *testing.T) {
	ubb := []string{"UBB", "UBB_WORMHOLE"}
	for _, c := range []struct {
		name  string
		chip  DescChip
		board string
		tray  uint32
		loc   uint32
		why   string // "": known
	}{
		{"6U Wormhole tray 1", DescChip{BoardNames: ubb, HasBoard: true, Bus: 0xC5, HasBus: true}, "S7T-MB", 1, 5, ""},
		{"6U Wormhole tray 3", DescChip{BoardNames: ubb, HasBoard: true, Bus: 0x08, HasBus: true}, "", 3, 8, ""},
		{"6U Blackhole tray 3", DescChip{BoardNames: []string{"UBB_BLACKHOLE"}, HasBoard: true, Bus: 0xC2, HasBus: true}, "", 3, 2, ""},
		{"UBB no bus", DescChip{BoardNames: ubb, HasBoard: true}, "", 0, 0, "no PCI bus id"},
		{"UBB off the trays", DescChip{BoardNames: ubb, HasBoard: true, Bus: 0x21, HasBus: true}, "", 0, 0, "on no tray"},
		{"P300 elsewhere", DescChip{BoardNames: []string{"P300"}, HasBoard: true, AsicLocation: 1, HasAsicLocation: true, Bus: 6, HasBus: true}, "Other", 0, 1, ""},
		{"P150 on X12DPG-QT6", DescChip{BoardNames: []string{"P150"}, HasBoard: true, Bus: 0x31, HasBus: true, HasAsicLocation: true}, "X12DPG-QT6", 3, 0, ""},
		{"P150 off its trays", DescChip{BoardNames: []string{"P150"}, HasBoard: true, Bus: 0x32, HasBus: true, HasAsicLocation: true}, "X12DPG-QT6", 0, 0, "do not hold"},
		{"P150 no location", DescChip{BoardNames: []string{"P150"}, HasBoard: true}, "", 0, 0, "without an ASIC location"},
		{"n300", DescChip{BoardNames: []string{"N300"}, HasBoard: true, HasAsicLocation: true, AsicLocation: 1}, "", 0, 0, "Ethernet tunnels"},
		{"unknown value", DescChip{Board: 77, HasBoard: true}, "", 0, 0, "77 (not a BoardType"},
		{"no board", DescChip{}, "", 0, 0, "no board type"},
	} {
		p := PlaceOf(&c.chip, c.board)
		if c.why == "" && (!p.Known || p.Tray != c.tray || p.AsicLocation != c.loc || p.Why != "") ||
			c.why != "" && (p.Known || !strings.Contains(p.Why, c.why)) {
			t.Errorf("%s: %+v, want tray %d location %d why %q", c.name, p, c.tray, c.loc, c.why)
		}
	}
}
