// The way from a MetalContext to UMD's cluster descriptor, in upstream's 2026 shape
// (docs/ttmetal.md §11): MetalContext::env_ (MetalEnv*, tt_metal/impl/context/metal_context.hpp)
// -> MetalEnv::impl_ (std::unique_ptr<MetalEnvImpl>,
// tt_metal/api/tt-metalium/experimental/context/metal_env.hpp) -> MetalEnvImpl::cluster_
// (std::unique_ptr<Cluster>, tt_metal/impl/context/metal_env_impl.hpp) -> tt::Cluster::cluster_desc_
// (umd::ClusterDescriptor*, tt_metal/llrt/tt_cluster.hpp). The replica keeps only a few members of
// each, in upstream's order; a tracer takes their offsets from DWARF.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace tt::umd {
class ClusterDescriptor;
}  // namespace tt::umd

namespace tt {

class Cluster {
public:
    explicit Cluster(umd::ClusterDescriptor* desc) : cluster_desc_(desc) {}
    umd::ClusterDescriptor* get_cluster_desc() const { return cluster_desc_; }

private:
    int arch_ = 2;  // tt::ARCH arch_ (WORMHOLE_B0)
    int target_type_ = 0;
    bool iommu_enabled_ = false;
    bool noc_mapping_enabled_ = false;
    // Upstream: "Need to hold reference to cluster descriptor to detect total number of devices
    // available in cluster" (owned by the UMD driver).
    umd::ClusterDescriptor* cluster_desc_ = nullptr;
};

}  // namespace tt

namespace tt::tt_metal {

class MetalEnvImpl {
public:
    MetalEnvImpl();
    ~MetalEnvImpl();
    Cluster& get_cluster() { return *cluster_; }

private:
    std::unique_ptr<int> rtoptions_;  // upstream: std::unique_ptr<llrt::RunTimeOptions>
    std::unique_ptr<Cluster> cluster_;
    std::unique_ptr<int> hal_;  // upstream: std::unique_ptr<Hal>
    std::atomic<int> use_count_{0};
};

class MetalEnv {
public:
    MetalEnv();
    ~MetalEnv();
    MetalEnv(const MetalEnv&) = delete;
    MetalEnv& operator=(const MetalEnv&) = delete;

private:
    std::unique_ptr<MetalEnvImpl> impl_;
};

}  // namespace tt::tt_metal
