// The one wire message of the socket reporter (REPORTER=socket builds): written by
// src/reporter.cpp in the traced process, read by work/reportd.cpp. 72 bytes, packed, as the
// instrumented server's smallest message (docs/ttmetal.md §8).
#pragma once

#include <cstdint>

namespace tt::tt_metal::replica {

struct __attribute__((packed)) ReportMessage {
    uint8_t kind;  // 1 alloc, 2 free
    uint8_t buffer_type;
    uint16_t reserved;
    int32_t device_id;
    uint64_t size;
    uint64_t address;
    uint64_t buffer_id;
    int32_t pid;
    int32_t tid;
    uint64_t ts_ns;
    uint64_t pad[3];
};
static_assert(sizeof(ReportMessage) == 72, "message size");

}  // namespace tt::tt_metal::replica
