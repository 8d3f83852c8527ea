// REPORTER=socket builds: the in-process reporter of the instrumented design tttrace replaces
// (docs/ttmetal.md §8): every tracked allocation and free is sent, with a blocking send, as a
// packed message over a Unix socket to an allocation server (work/reportd.cpp). Used only to
// measure what such a reporter costs the traced process (scripts/bench.sh). Other builds: no-ops.
#pragma once

#ifdef TT_REPLICA_REPORTER_SOCKET
#include "internal.hpp"

namespace tt::tt_metal {
class Buffer;
namespace replica {
TT_REPLICA_HIDDEN void report_buffer(int kind, const Buffer* buffer);
}  // namespace replica
}  // namespace tt::tt_metal

#define TT_REPLICA_REPORT(kind, buffer) ::tt::tt_metal::replica::report_buffer((kind), (buffer))
#else
#define TT_REPLICA_REPORT(kind, buffer) ((void)0)
#endif
