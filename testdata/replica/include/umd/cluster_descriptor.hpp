// tt::umd::ClusterDescriptor: what UMD's topology discovery learns of a cluster, with the members
// tttrace may read from a process's memory in upstream's names, container types and order
// (tenstorrent/tt-umd device/api/umd/device/cluster_descriptor.hpp; BoardType from
// device/api/umd/device/types/cluster_descriptor_types.hpp; docs/ttmetal.md §11). Every map is
// keyed by the logical chip id (ChipId): PCIe-reachable chips take the ids 0..n-1, chips reached
// over Ethernet come after them. Upstream members the replica leaves out: chip_arch,
// harvesting_masks_map, health_errors and the firmware versions.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tt {

// Upstream's BoardType: a plain enum in namespace tt ("types in this file can be used without
// using the driver"), UBB_WORMHOLE an alias of UBB.
enum BoardType : uint32_t {
    E75,
    E150,
    E300,
    N150,
    N300,
    P100,
    P150,
    P300,
    GALAXY,
    UBB,
    UBB_WORMHOLE = UBB,
    UBB_BLACKHOLE,
    QUASAR,
    UNKNOWN,
};

}  // namespace tt

namespace tt::umd {

using ChipId = int;
using EthernetChannel = int;
using BoardType = tt::BoardType;

enum class IODeviceType { PCIe, JTAG, UNDEFINED };

// The routing firmware's Ethernet coordinates of a chip (EthCoord).
struct EthCoord {
    int cluster_id = 0;
    int x = 0;
    int y = 0;
    int rack = 0;
    int shelf = 0;
};

class ClusterDescriptor {
public:
    ClusterDescriptor() = default;

    bool is_chip_mmio_capable(ChipId chip) const { return chips_with_mmio.count(chip) != 0; }
    bool is_chip_remote(ChipId chip) const { return !is_chip_mmio_capable(chip); }
    const std::unordered_set<ChipId>& get_all_chips() const { return all_chips; }
    const std::unordered_map<ChipId, uint64_t>& get_chip_unique_ids() const { return chip_unique_ids; }
    const std::unordered_map<ChipId, EthCoord>& get_chip_locations() const { return chip_locations; }
    uint8_t get_asic_location(ChipId chip) const {
        auto it = asic_locations.find(chip);
        return it == asic_locations.end() ? 0 : it->second;
    }
    BoardType get_board_type(ChipId chip) const {
        auto it = chip_board_type.find(chip);
        return it == chip_board_type.end() ? BoardType::UNKNOWN : it->second;
    }
    uint16_t get_bus_id(ChipId chip) const {
        auto it = chip_to_bus_id.find(chip);
        return it == chip_to_bus_id.end() ? 0 : it->second;
    }

    // Upstream's members, in upstream's order, public here: the replica fills them.
    std::unordered_map<ChipId, std::unordered_map<EthernetChannel, std::tuple<ChipId, EthernetChannel>>>
        ethernet_connections;
    std::unordered_map<ChipId, std::unordered_map<EthernetChannel, std::tuple<uint64_t, EthernetChannel>>>
        ethernet_connections_to_remote_devices;
    std::unordered_map<ChipId, EthCoord> chip_locations;
    std::map<int, std::map<int, std::map<int, std::map<int, ChipId>>>> coords_to_chip_ids;
    std::unordered_map<ChipId, ChipId> chips_with_mmio;
    std::unordered_set<ChipId> all_chips;
    std::unordered_map<ChipId, bool> noc_translation_enabled;
    std::unordered_map<ChipId, ChipId> closest_mmio_chip_cache;
    std::unordered_map<ChipId, BoardType> chip_board_type;
    std::unordered_map<ChipId, std::unordered_set<ChipId>> chips_grouped_by_closest_mmio;
    std::unordered_map<ChipId, uint64_t> chip_unique_ids;
    std::map<ChipId, std::set<uint32_t>> active_eth_channels;
    std::map<ChipId, std::set<uint32_t>> idle_eth_channels;
    std::map<uint64_t, std::unordered_set<ChipId>> board_to_chips;
    std::map<ChipId, uint8_t> asic_locations;
    std::unordered_map<ChipId, uint64_t> chip_to_board_id;
    std::unordered_map<ChipId, std::string> chip_pci_bdfs;
    std::vector<ChipId> unhealthy_devices;
    IODeviceType io_device_type = IODeviceType::PCIe;
    // Bus ID cached "to pin chip location for UBB trays" (upstream's comment).
    std::unordered_map<ChipId, uint16_t> chip_to_bus_id;
};

}  // namespace tt::umd
