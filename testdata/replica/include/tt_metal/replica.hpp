// Replica-only API (not in upstream TT-Metal): ground truth for tests.
#pragma once

#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/graph_tracking.hpp"
#include "tt_metal/mesh_buffer.hpp"
#include "tt_metal/program.hpp"
#include "tt_metal/types.hpp"

extern "C" {
// Writes the ground truth JSON to `path`. 0 ok, -1 I/O error, -2 internal inconsistency
// (file still written, details on stderr).
int tt_replica_write_truth(const char* path);
// Marks "the tracer attaches now": allocations made before are counted as unknown_frees when
// freed later, and peaks restart from the memory visible after this point.
void tt_replica_mark_attach(void);
// Ends the current window and starts one named `name` (the window before the first mark is
// named ""): the truth's "windows" give each window's peaks per chip, from the levels at its
// start, and its levels at its end.
void tt_replica_mark_window(const char* name);
// TT-NN ops (README "Ops"): the TT-NN stand-in calls enter at the entry of each op function and
// leave when it returns or throws. kind TT_REPLICA_OP_TOP: an op as Python calls it, named by its
// Python name ("ttnn.matmul"); TT_REPLICA_OP_DEVICE: a device-op launch function, named by the
// device op's short type name ("MatmulDeviceOperation"). Returns the thread's frame count.
#define TT_REPLICA_OP_TOP 1
#define TT_REPLICA_OP_DEVICE 2
int tt_replica_op_enter(const char* name, int kind);
void tt_replica_op_leave(void);
// Lists every allocation and CB layout with its op in the truth (op_allocs, op_layouts) from now on.
void tt_replica_ops_record(int on);
}
