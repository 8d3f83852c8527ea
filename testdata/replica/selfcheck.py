#!/usr/bin/env python3
"""Self-check of the libtt_metal.so replica: builds it (unless --no-build), runs every ttwork
scenario through the binary and through ttwork.py, and checks the ground truth it writes.

  python3 testdata/replica/selfcheck.py [--out DIR] [--no-build] [--cxx CXX] [--opt=-O2]
                                        [--make-arg VAR=VALUE ...]

Checks, per run: exit status 0; the truth is valid JSON of the documented shape; devices are
sorted and unique; peaks >= current values; with --leak, the leaks per chip and type sum to the
chip's byte fields and their count is live_buffers; without --leak, nothing is left but what a
scenario leaves by design (DESIGNED_LEFT). Plus
scenario facts: burst reaches 1,000,000 tracked events (its time is printed, not checked), midrun counts its pre-go
buffers as unknown frees, closed chips read zero, CB call counts, determinism per seed.
Python 3 standard library only."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# "alloc:SHAPE" runs ttwork --scenario alloc --shape SHAPE ("alloc:SHAPE+mesh" adds --mesh).
SHAPES = ["n150", "n300", "galaxy", "blackhole"]
SCENARIOS = ["basic", "threads", "oom", "burst", "mesh", "galaxy", "sparse", "cb", "cb_legacy",
             "close", "capture", "sametype", "mark", "midrun", "concurrent", "layout", "l1", "all", "traces",
             "cb_cache"] + \
            ["alloc:" + s for s in SHAPES] + ["alloc:n300+mesh", "alloc:galaxy+mesh"]
# Buffers a scenario leaves allocated by design, even without --leak: mark marks a DRAM buffer of
# chip 42 deallocated, which (as upstream) gives nothing back to the allocator, and never closes
# chip 42 (ttwork.cpp, scenario_mark). "all" runs mark.
DESIGNED_LEFT = {"mark": [(42, "DRAM", 4096)], "all": [(42, "DRAM", 4096)]}
# With the TT-NN stand-in (a TTNN_ERA build): the ops scenarios (README "Ops").
OPS_SCENARIOS = ["ops", "ops_threads", "ops_trace"]
SINGLE_THREADED = ["basic", "oom", "mesh", "galaxy", "sparse", "cb", "cb_legacy", "close",
                   "capture", "sametype", "midrun", "alloc:n300", "alloc:n300+mesh", "cb_cache"]
# Chips whose CBs stay resident without --leak, by design: a core holds the CB configuration of
# the program last dispatched on it until another program's is written or the chip closes, and
# cb_cache leaves chips 90-94 open (docs/ttmetal.md §12).
RESIDENT_LEFT = {"cb_cache": [90, 91, 92, 93, 94]}
RESIDENT_FIELDS = ["cb_bytes", "cb_resident_total_bytes"]
BYTE_FIELDS = {"DRAM": "dram_bytes", "L1": "l1_bytes", "SYSTEM_MEMORY": "system_memory_bytes",
               "L1_SMALL": "l1_small_bytes", "TRACE": "trace_bytes"}
FIELDS = ["dram_bytes", "l1_bytes", "l1_small_bytes", "trace_bytes", "system_memory_bytes",
          "cb_bytes", "live_buffers", "cb_registered_bytes", "cb_resident_total_bytes"]
CALLS = ["track_allocate", "track_deallocate", "track_allocate_cb", "track_deallocate_cb",
         "buffer_create_view", "allocate_circular_buffers", "deallocate_circular_buffers",
         "program_destroy", "device_close", "mesh_close", "mark_as_deallocated"]
# An n150 worker core's L1, the replica's default shape.
L1_CORE_BYTES = 1464 * 1024
MIDRUN_PRE = 40
MIDRUN_PRE_BYTES = sum(32 * (1 + i) for i in range(MIDRUN_PRE))

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, flush=True)


def run(cmd, scenario, leak, truth, tmp, go=False, timeout=120):
    scenario, _, shape = scenario.partition(":")
    shape, plus, extra = shape.partition("+")
    args = cmd + ["--scenario", scenario, "--truth", truth] + (["--shape", shape] if shape else []) + \
        (["--" + extra] if plus else [])
    if leak:
        args.append("--leak")
    t0 = time.monotonic()
    if not go:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode(), p.stderr.decode(), time.monotonic() - t0
    gofile = os.path.join(tmp, "go-%s" % scenario)
    if os.path.exists(gofile):
        os.unlink(gofile)
    p = subprocess.Popen(args + ["--go-file", gofile], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stderr.readline().decode().strip()
    if line != "ready":
        fail("%s: expected 'ready' on stderr, got %r" % (scenario, line))
    open(gofile, "w").close()
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), line + "\n" + err.decode(), time.monotonic() - t0


def check_truth(name, scenario, t, leak):
    for key in ["pid", "devices", "leaks", "unknown_frees", "unknown_free_bytes", "calls"]:
        if key not in t:
            fail("%s: truth has no %s" % (name, key))
            return
    ids = [d["device"] for d in t["devices"]]
    if ids != sorted(set(ids)):
        fail("%s: devices not sorted/unique: %s" % (name, ids))
    for c in CALLS:
        if not isinstance(t["calls"].get(c), int):
            fail("%s: calls.%s missing" % (name, c))
    leaks_by = {}
    for k in t["leaks"]:
        if k["type"] not in BYTE_FIELDS:
            fail("%s: leak of unknown type %s" % (name, k["type"]))
            continue
        e = leaks_by.setdefault(k["device"], {"count": 0})
        f = BYTE_FIELDS[k["type"]]
        e[f] = e.get(f, 0) + k["size"]
        e["count"] += 1
    for d in t["devices"]:
        for f in FIELDS:
            if f not in d or f not in d["peaks"]:
                fail("%s: device %s lacks %s" % (name, d["device"], f))
                continue
            if d[f] < 0 or d["peaks"][f] < d[f]:
                fail("%s: device %s %s=%s peak=%s" % (name, d["device"], f, d[f], d["peaks"][f]))
        e = leaks_by.get(d["device"], {"count": 0})
        for f in BYTE_FIELDS.values():
            if d.get(f) != e.get(f, 0):
                fail("%s: device %s %s=%s but leaks sum to %s" % (name, d["device"], f, d.get(f), e.get(f, 0)))
        if d.get("live_buffers") != e["count"]:
            fail("%s: device %s live_buffers=%s but %d leaks" % (name, d["device"], d.get("live_buffers"), e["count"]))
    for dev in leaks_by:
        if dev not in ids:
            fail("%s: leak on device %s not in devices" % (name, dev))
    if not leak:
        designed = DESIGNED_LEFT.get(scenario, [])
        left = sorted((k["device"], k["type"], k["size"]) for k in t["leaks"])
        if left != sorted(designed):
            fail("%s: leaks without --leak: %s, want %s" % (name, t["leaks"][:3], designed))
        want = {}
        for dev, typ, size in designed:
            e = want.setdefault(dev, {"live_buffers": 0})
            e[BYTE_FIELDS[typ]] = e.get(BYTE_FIELDS[typ], 0) + size
            e["live_buffers"] += 1
        for d in t["devices"]:
            for f in FIELDS:
                if f in RESIDENT_FIELDS and d["device"] in RESIDENT_LEFT.get(scenario, []):
                    continue
                if d.get(f) and d.get(f) != want.get(d["device"], {}).get(f):
                    fail("%s: device %s %s=%s left without --leak" % (name, d["device"], f, d[f]))
    elif scenario != "layout" and not t["leaks"]:
        fail("%s: --leak left no leak" % name)


def round_up(v, a):
    return (v + a - 1) // a * a


def check_allocator(name, scenario, t, leak):
    """The allocator blocks: upstream's get_statistics identities; nothing held without --leak.
    Every failure: size_per_bank and span recomputed from the request, the cause from the
    statistics before it, unchanged after it, and the message worded as upstream's."""
    for d in t["devices"]:
        for typ, a in (d.get("allocator") or {}).items():
            if a["total_allocatable_size_bytes"] != a["bank_size"] or \
                    a["total_free_bytes"] != a["bank_size"] - a["total_allocated_bytes"] or \
                    a["largest_free_block_bytes"] > a["total_free_bytes"]:
                fail("%s: device %s %s statistics %s" % (name, d["device"], typ, a))
            held = sum(round_up(size, a["alignment"]) for dev, t_, size in DESIGNED_LEFT.get(scenario, [])
                       if dev == d["device"] and t_.lower() == typ.lower())
            if not leak and a["total_allocated_bytes"] != held:
                fail("%s: device %s %s holds %s without --leak (by design: %d)" % (name, d["device"], typ, a, held))
    meshes = {m["mesh_id"]: m for m in t.get("meshes", [])}
    for m in t.get("meshes", []):
        # A mesh's own allocator: the same identities; without --leak it holds nothing.
        for typ, a in (m.get("allocator") or {}).items():
            if a["total_allocatable_size_bytes"] != a["bank_size"] or \
                    a["total_free_bytes"] != a["bank_size"] - a["total_allocated_bytes"] or \
                    a["largest_free_block_bytes"] > a["total_free_bytes"]:
                fail("%s: mesh %s %s statistics %s" % (name, m["mesh_id"], typ, a))
            if not leak and a["total_allocated_bytes"] != 0:
                fail("%s: mesh %s %s holds %s without --leak" % (name, m["mesh_id"], typ, a))
    for f in t.get("alloc_failures", []):
        if f.get("mesh", -1) >= 0:
            # A mesh's bank manager refused: the mesh's allocator, not a chip's. A closed
            # mesh is not in the truth.
            if f["mesh"] not in meshes:
                continue
            a = (meshes[f["mesh"]].get("allocator") or {}).get(f["type"])
            where = "mesh %s" % f["mesh"]
        else:
            d = {x["device"]: x for x in t["devices"]}.get(f["device"], {})
            if d and "allocator" not in d:
                continue  # a chip closed since (the ops scenarios close theirs): no allocator left
            a = (d.get("allocator") or {}).get(f["type"])
            where = "device %s" % f["device"]
        if a is None:
            fail("%s: failure on %s %s with no allocator" % (name, where, f["type"]))
            continue
        pages = f["size"] // f["page_size"]
        spb = 0 if pages == 0 else (1 + (pages - 1) // f["banks"]) * round_up(f["page_size"], a["alignment"])
        span = round_up(max(spb, a["freelist_alignment"]), a["freelist_alignment"])
        b = f["before"]
        # A per-core request's cause is its core's (its bank seen through the
        # lockstep list and its own); the message keeps the lockstep numbers,
        # as upstream prints them.
        s = f["core"] if f.get("allocator_id", 0) != 0 and "core" in f else b
        cause = "larger_than_bank" if span > a["bank_size"] else \
            "exhausted" if s["total_free_bytes"] < span else "fragmented"
        msg = ("Out of Memory: Not enough space to allocate %d B %s buffer across %d banks, where each bank "
               "needs to store %d B, but bank size is %d B (allocated: %d B, free: %d B, largest free block: %d B)"
               % (f["size"], f["type"], f["banks"], spb, a["bank_size"], b["total_allocated_bytes"],
                  b["total_free_bytes"], b["largest_free_block_bytes"]))
        if (f["size_per_bank"], f["span"], f["cause"], f["message"]) != (spb, span, cause, msg) or \
                f["before"] != f["after"] or s["largest_free_block_bytes"] >= span:
            fail("%s: failure %s (want size_per_bank %d span %d cause %s)" % (name, f, spb, span, cause))


def cb_cache_facts(name, t):
    """The records per-core CB residency is made of (issue #30): one cb_allocs entry per
    track_allocate_cb, each on a chip of the 8x8 grid with its core ranges; one cb_dispatches entry
    per generate_dispatch_commands, and one per trace replay; each chip's cb_residency agreeing
    with its cores and with the chip's cb_bytes (the busiest core) and cb_resident_total_bytes;
    a registered CB sum several times a core's L1 while every core stays under it."""
    c = t["calls"]
    dev = {d["device"]: d for d in t["devices"]}
    allocs, disp = t.get("cb_allocs", []), t.get("cb_dispatches", [])
    runs = [d for d in disp if d["replay_trace"] < 0]
    if len(allocs) != c["track_allocate_cb"] or len(runs) != c["generate_dispatch_commands"]:
        fail("%s: %d cb_allocs, %d dispatches; calls %s" % (name, len(allocs), len(runs), c))
    if len(disp) - len(runs) != 2 or sum(d["captured"] for d in runs) != 2:
        fail("%s: %d replays and %d dispatches captured, want 2 and 2"
             % (name, len(disp) - len(runs), sum(d["captured"] for d in runs)))
    for a in allocs:
        rs = a["core_ranges"]
        if a["device"] not in (90, 91, 92, 93, 94) or a["mesh_device"] is not None or not rs or \
                any(len(r) != 4 or not 0 <= r[0] <= r[2] <= 7 or not 0 <= r[1] <= r[3] <= 7 for r in rs):
            fail("%s: cb_alloc %s" % (name, a))
            break
    for r in t.get("cb_residency", []):
        cores = [sum(e - b for b, e in k["ranges"]) for k in r["cores"]]
        if any(n != k["bytes"] for n, k in zip(cores, r["cores"])) or \
                (r["max_core_bytes"], r["resident_bytes"]) != (max(cores, default=0), sum(cores)) or \
                (r["max_core_bytes"], r["resident_bytes"]) != \
                (dev.get(r["device"], {}).get("cb_bytes"), dev.get(r["device"], {}).get("cb_resident_total_bytes")):
            fail("%s: chip %s residency %s does not add up" % (name, r["device"], r["max_core_bytes"]))
    p = dev.get(90, {}).get("peaks", {})
    if not (p.get("cb_registered_bytes", 0) > 3 * L1_CORE_BYTES > 3 * p.get("cb_bytes", L1_CORE_BYTES) > 0):
        fail("%s: chip 90 peaks: registered %s, resident %s" % (name, p.get("cb_registered_bytes"), p.get("cb_bytes")))


def op_key(op):
    return (op.get("name", ""), op.get("device_op", ""))


def check_ops(name, scenario, t, leak, out):
    """TT-NN ops (README "Ops"): the rows are the sums of the records; the ops and ops_threads
    scenarios' facts: calls, failures, the op absent after a throw, nesting, runtime ids, layouts
    made on the dispatch thread, leaks."""
    if not t.get("ops_recorded"):
        if scenario.startswith("ops"):
            fail("%s: the truth recorded no ops" % name)
        return
    if t.get("ops_truncated"):
        fail("%s: op records truncated" % name)
    rows = {(r["name"], r.get("device_op", "")): r for r in t["ops"]}
    sums = {}
    for a in t["op_allocs"]:
        op = a.get("op")
        if op is None or a["hooked"]:
            continue
        if op.get("name") and op["depth"] < 1:
            fail("%s: alloc %d in %s at depth %d" % (name, a["n"], op["name"], op["depth"]))
        e = sums.setdefault(op_key(op), [0, 0, 0, 0])
        e[0] += 1
        e[1] += a["size"]
    for f in t["alloc_failures"]:
        if "op" in f:
            sums.setdefault(op_key(f["op"]), [0, 0, 0, 0])[2] += 1
    for c in t["cb_allocs"]:
        if "op" in c and not c["global"]:
            sums.setdefault(op_key(c["op"]), [0, 0, 0, 0])[3] += c["size"]
    for key, (n, b, nf, cb) in sums.items():
        r = rows.get(key)
        if r is None:
            fail("%s: records in %s but no ops row" % (name, key))
        elif (r["allocs"], r["bytes"], r["alloc_failures"], r["cb_bytes"]) != (n, b, nf, cb):
            fail("%s: row %s allocs/bytes/failures/cb_bytes %s, records sum to %s" %
                 (name, key, (r["allocs"], r["bytes"], r["alloc_failures"], r["cb_bytes"]), (n, b, nf, cb)))
    for key, r in rows.items():
        if key not in sums and (r["allocs"] or r["alloc_failures"] or r["cb_bytes"]):
            fail("%s: row %s counts what no record says" % (name, key))
    era = "2026" if any(s + ": 2026" in out for s in OPS_SCENARIOS) else "older"
    binary = "BinaryNgDeviceOperation" if era == "2026" else "BinaryDeviceOperation"

    def calls(n, d=""):
        return rows.get(("ttnn." + n, d), {}).get("calls")

    if scenario == "ops":
        want = {("matmul", ""): 2, ("matmul", "MatmulDeviceOperation"): 2, ("add", ""): 2, ("add", binary): 2,
                ("conv2d", ""): 1, ("conv2d", "Conv2dDeviceOperation"): 1, ("conv2d", "MatmulDeviceOperation"): 1,
                ("reshard", ""): 2, ("reshard", "ReshardDeviceOperation"): 2, ("split", ""): 1,
                ("split", "SplitDeviceOperation"): 1}
        got = {(k[0][5:], k[1]): r["calls"] for k, r in rows.items()}
        if got != want:
            fail("%s: op calls %s, want %s" % (name, got, want))
        split = rows.get(("ttnn.split", "SplitDeviceOperation"), {})
        if (split.get("allocs"), split.get("alloc_failures")) != (2, 1):
            fail("%s: split made %s allocations and %s failures, want 2 and 1" %
                 (name, split.get("allocs"), split.get("alloc_failures")))
        allocs = t["op_allocs"]
        depth2 = [a for a in allocs if a.get("op", {}).get("depth") == 2]
        if [op_key(a["op"]) for a in depth2] != [("ttnn.add", binary)]:
            fail("%s: allocations at depth 2: %s, want one of ttnn.add inside ttnn.conv2d" % (name, depth2))
        failed = [a for a in allocs if op_key(a.get("op", {})) == ("ttnn.reshard", "ReshardDeviceOperation")]
        if len(failed) != 2 or "runtime_id" in failed[0]["op"] or "runtime_id" not in failed[1]["op"]:
            fail("%s: reshard outputs %s: the first (validation threw) has no runtime id, the second has" %
                 (name, failed))
        else:
            after = [a for a in allocs if a["n"] > failed[0]["n"]]
            if not after or after[0].get("op") is not None or after[0]["size"] != 4096:
                fail("%s: the allocation after the failed reshard is %s, want 4096 B outside any op" %
                     (name, after[:1]))
        last = [a for a in allocs if a["size"] == 2048 and a["type"] == "L1"]
        if not last or last[-1].get("op") is not None:
            fail("%s: the L1 tensor after the failed split is in an op: %s" % (name, last[-1:]))
        rids = [d["op"].get("runtime_id") for d in t["cb_dispatches"] if "op" in d]
        if len(rids) != 7 or len(set(rids)) != 7 or None in rids:
            fail("%s: dispatch runtime ids %s, want 7 distinct" % (name, rids))
        if len(t["op_layouts"]) != 5 or any("op" not in l for l in t["op_layouts"]):
            fail("%s: %d CB layouts, want 5, each in its op: %s" % (name, len(t["op_layouts"]), t["op_layouts"]))
        leaked = sorted((k, r["leaked_buffers"]) for k, r in rows.items() if r["leaked_buffers"])
        want_leaked = sorted([(("ttnn.matmul", "MatmulDeviceOperation"), 1), (("ttnn.add", binary), 1),
                              (("ttnn.reshard", "ReshardDeviceOperation"), 1)]) if leak else []
        if leaked != want_leaked:
            fail("%s: leaked rows %s, want %s" % (name, leaked, want_leaked))
    if scenario == "ops_trace":
        want = {("matmul", ""): 2, ("matmul", "MatmulDeviceOperation"): 2, ("add", ""): 2, ("add", binary): 2,
                ("traced_add", ""): 3}
        got = {(k[0][5:], k[1]): r["calls"] for k, r in rows.items()}
        if got != want:
            fail("%s: op calls %s, want %s" % (name, got, want))
        calls_ = [(c["call"], c["trace"], op_key(c["op"]) if "op" in c else None, c.get("op", {}).get("depth"))
                  for c in t["op_traces"]]
        traced = ("ttnn.traced_add", "")
        want_calls = [("begin", 0, None, None), ("end", 0, None, None), ("replay", 0, None, None),
                      ("replay", 0, None, None), ("begin", 1, traced, 1), ("end", 1, traced, 1),
                      ("replay", 1, traced, 1), ("replay", 1, traced, 1), ("replay", 1, traced, 1)]
        want_calls += [("release", 0, None, None)] if leak else [("release", 1, None, None), ("release", 0, None, None)]
        if calls_ != want_calls:
            fail("%s: trace calls %s, want %s" % (name, calls_, want_calls))
        depth2 = [a for a in t["op_allocs"] if a.get("op", {}).get("depth") == 2]
        if [op_key(a["op"]) for a in depth2] != [("ttnn.add", binary)]:
            fail("%s: allocations at depth 2: %s, want one of ttnn.add inside ttnn.traced_add" % (name, depth2))
        if rows.get(traced, {}).get("allocs") != 1:
            fail("%s: ttnn.traced_add's own allocations %s, want 1 (its trace buffer)" %
                 (name, rows.get(traced, {}).get("allocs")))
    if scenario == "ops_threads":
        n = int(out.split(" threads on chip 61")[0].rsplit(" ", 1)[-1]) if " threads on chip 61" in out else 0
        if (calls("matmul"), calls("conv2d"), calls("add")) != (8 * n + 2, 8 * n, 16 * n + 1):
            fail("%s: matmul/conv2d/add calls %s with %d threads" % (name, (calls("matmul"), calls("conv2d"),
                                                                            calls("add")), n))
        alloc_tids = {a["tid"] for a in t["op_allocs"]}
        elsewhere = [l for l in t["op_layouts"] if l["tid"] not in alloc_tids]
        if len(elsewhere) != 2 or any("op" not in l or "runtime_id" not in l["op"] for l in elsewhere):
            fail("%s: CB layouts on the dispatch thread %s, want 2 with their launch's op" % (name, elsewhere))
        tids = {a["tid"] for a in t["op_allocs"] if a.get("op")}
        if len(tids) != n + 1:
            fail("%s: allocations in ops on %d threads, want %d" % (name, len(tids), n + 1))


def scenario_facts(scenario, t, leak, out, secs, go):
    c = t["calls"]
    dev = {d["device"]: d for d in t["devices"]}
    name = "%s%s" % (scenario, " --leak" if leak else "")
    if scenario == "burst":
        n = c["track_allocate"] + c["track_deallocate"]
        if n < 1000000:
            fail("%s: only %d tracked events" % (name, n))
        print("   burst: %d tracked events in %.2f s" % (n, secs))
    if scenario == "midrun":
        want = (MIDRUN_PRE, MIDRUN_PRE_BYTES) if go else (0, 0)
        got = (t["unknown_frees"], t["unknown_free_bytes"])
        if got != want:
            fail("%s: unknown frees %s, want %s" % (name, got, want))
    elif t["unknown_frees"] or t["unknown_free_bytes"]:
        fail("%s: unknown frees without a go point" % name)
    if scenario == "oom" and out.count("Out of Memory") < 3:
        fail("%s: OOM messages missing" % name)
    if scenario == "sametype" and "DRAM and L1 both at" not in out:
        fail("%s: no address collision reported" % name)
    if scenario == "close":
        for chip in (1, 2, 3):
            d = dev.get(chip)
            if d is None or any(d[f] for f in FIELDS):
                fail("%s: closed chip %s not zero: %s" % (name, chip, d))
        if c["device_close"] != 3 or c["mesh_close"] != 1 or c["mark_as_deallocated"] != 6:
            fail("%s: close calls %s" % (name, c))
        if not leak:
            if c["track_allocate"] - c["track_deallocate"] != 5:
                fail("%s: expected 5 allocations never freed (closed chips), calls %s" % (name, c))
    if scenario == "cb":
        want_dcb = 8 if leak else 13
        if c["track_allocate_cb"] != 35 or c["track_deallocate_cb"] != want_dcb:
            fail("%s: CB calls %s" % (name, c))
        if c["allocate_circular_buffers"] != 11 or c["program_destroy"] != (4 if leak else 6):
            fail("%s: program calls %s" % (name, c))
    if scenario == "cb_legacy":
        if c["track_allocate_cb"] != 16 or c["track_deallocate_cb"] != 0:
            fail("%s: CB calls %s" % (name, c))
    if scenario in ("cb", "cb_legacy") and leak:
        want = {1: 3680, 2: 1920, 3: 1920, 4: 1920, 5: 1920, 0: 0}
        for chip, v in want.items():
            # Registered: these scenarios dispatch no program, so nothing is resident.
            got = dev.get(chip, {})
            if got.get("cb_registered_bytes") != v or got.get("cb_bytes", 0) != 0:
                fail("%s: chip %s cb_registered_bytes %s (cb_bytes %s), want %s"
                     % (name, chip, got.get("cb_registered_bytes"), got.get("cb_bytes"), v))
    if scenario == "cb_cache":
        cb_cache_facts(name, t)
    if scenario == "l1":
        got = sorted(k["device"] for k in t.get("l1_clashes", []))
        if got != [50, 51, 52] or out.count("clash with L1 buffers") != 2:
            fail("%s: l1 clashes on %s, %d caught" % (name, got, out.count("clash with L1 buffers")))
        for k in t.get("l1_clashes", []):
            if not k["l1_buffers"] or k["l1_buffers"][0]["address"] != k["lowest_l1_address"] \
                    or any(b["address"] >= k["cb_region_end"] for b in k["l1_buffers"]):
                fail("%s: clash %s" % (name, k))
    elif scenario == "cb_cache":
        # A HYBRID program whose range covers a per-core block's core (chip 93:
        # per-core, no lockstep buffer in the way) and a clash on one of two
        # ranges over lockstep L1 buffers (chip 94).
        got = sorted((k["device"], k["per_core"]) for k in t.get("l1_clashes", []))
        if got != [(93, True), (94, False)]:
            fail("%s: l1 clashes %s, want per-core on 93 and lockstep on 94" % (name, got))
        for k in t.get("l1_clashes", []):
            bs = k["l1_buffers"]
            if k["per_core"] != (not bs) or (bs and bs[0]["address"] != k["lowest_l1_address"]) or \
                    any(b["address"] >= k["cb_region_end"] for b in bs) or \
                    not k["core_ranges"] or any(r["cb_region_end"] <= r["lowest_l1_address"] for r in k["core_ranges"]):
                fail("%s: clash %s" % (name, k))
    elif t.get("l1_clashes"):
        fail("%s: unexpected l1 clashes %s" % (name, t["l1_clashes"][:2]))
    if scenario == "traces":
        # By hand from ttwork.cpp (scenario_trace_*): trace 1 (chip 81) overwrites c and l at
        # replay 1 and f at replay 3; trace 2 (chip 82, dynamic storage) overwrites trace 3's
        # buffer, which lies under its mark; mesh trace 0 overwrites mc once (chip 85, the
        # lowest); traces 4 and 5 are replayed released and after their device closed.
        hz = sorted((h["trace"], h["mesh"], h["replay"], h["device"], h["buffer_type"]) for h in t["trace_hazards"])
        want = [(0, True, 1, 85, "DRAM"), (1, False, 1, 81, "DRAM"), (1, False, 1, 81, "L1"),
                (1, False, 3, 81, "DRAM"), (2, False, 1, 82, "DRAM")]
        if hz != want:
            fail("%s: trace hazards %s, want %s" % (name, hz, want))
        inv = [(r["trace"], r["reason"]) for r in t["trace_invalid_replays"]]
        # trace_mesh's trace 1 is replayed once more after its release.
        if inv != [(4, "released"), (5, "device_closed"), (1, "released")]:
            fail("%s: invalid replays %s" % (name, inv))
        reg = [(r["trace"], r["other_trace"], r["device"]) for r in t["trace_region_hazards"]]
        if reg != [(3, 2, 82)]:
            fail("%s: region hazards %s" % (name, reg))
        if len(t["trace_capture_allocs"]) != 12:
            fail("%s: %d capture allocs, want 12" % (name, len(t["trace_capture_allocs"])))
    if scenario == "capture":
        if c["track_allocate"] != 8:
            fail("%s: capture track_allocate %s" % (name, c["track_allocate"]))
    if scenario == "mesh" and leak:
        if "mesh id 0 over 8 chips" not in out or "sub-mesh id 1" not in out:
            fail("%s: mesh ids: %s" % (name, out))
        if sorted(dev) != list(range(8)):
            fail("%s: devices %s" % (name, sorted(dev)))
    if scenario == "sparse" and sorted(dev) != [0, 2, 7, 15, 31, 35, 63, 100]:
        fail("%s: devices %s" % (name, sorted(dev)))
    if scenario == "galaxy" and sorted(dev) != list(range(32)):
        fail("%s: devices %s" % (name, sorted(dev)))
    check_allocator(name, scenario, t, leak)
    if scenario.startswith("alloc:"):
        shape, plus, _ = scenario.split(":")[1].partition("+")
        causes = [(f["cause"], f["mesh"] >= 0) for f in t.get("alloc_failures", [])]
        want = [(c, False) for c in ("larger_than_bank", "exhausted", "fragmented")]
        if plus:
            want += [(c, True) for c in ("larger_than_bank", "exhausted", "fragmented")]
        if causes != want or out.count("Out of Memory") != len(want):
            fail("%s: failures %s" % (name, causes))
        meshes = t.get("meshes", [])
        if plus and (len(meshes) != 1 or meshes[0]["chips"] != list(range({"n300": 2, "galaxy": 32}.get(shape, 1)))):
            fail("%s: meshes %s" % (name, meshes))
        nchips = {"n300": 2, "galaxy": 32}.get(shape, 1)
        if sorted(dev) != list(range(nchips)) or any(dev[i].get("shape") != shape for i in dev):
            fail("%s: devices %s" % (name, [(i, dev[i].get("shape")) for i in dev]))
        banks = {"n150": (12, 64), "n300": (12, 64), "galaxy": (12, 80), "blackhole": (8, 130)}[shape]
        a = dev.get(0, {}).get("allocator", {})
        if (a.get("DRAM", {}).get("banks"), a.get("L1", {}).get("banks")) != banks:
            fail("%s: banks %s" % (name, {k: v["banks"] for k, v in a.items()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "build"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--cxx")
    ap.add_argument("--opt")
    ap.add_argument("--make-arg", action="append", default=[])
    ap.add_argument("--scenario", action="append", help="only these scenarios")
    ap.add_argument("--no-python", action="store_true", help="skip the ttwork.py runs")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    if not a.no_build:
        margs = ["make", "-s", "-C", HERE, "OUT=" + out] + a.make_arg
        if a.cxx:
            margs.append("CXX=" + a.cxx)
        if a.opt:
            margs.append("OPT=" + a.opt)
        subprocess.run(margs, check=True)
        subprocess.run([os.path.join(HERE, "check-symbols.sh"), out], check=True, stdout=subprocess.DEVNULL)
    runners = [("ttwork", [os.path.join(out, "ttwork")])]
    if not a.no_python:
        runners.append(("ttwork.py", [sys.executable, os.path.join(out, "ttwork.py")]))
    scenarios = a.scenario or SCENARIOS
    ttnn = os.path.exists(os.path.join(out, "_ttnn.so"))
    if ttnn and not a.scenario:
        scenarios = scenarios + OPS_SCENARIOS
        SINGLE_THREADED.append("ops")
    with tempfile.TemporaryDirectory(prefix="replica-selfcheck-") as tmp:
        for rname, cmd in runners:
            for scenario in scenarios:
                if rname == "ttwork.py" and scenario == "burst":
                    variants = [(True, False)]
                else:
                    variants = [(True, False), (False, False)]
                if scenario == "midrun":
                    variants.append((True, True))
                for leak, go in variants:
                    name = "%s %s%s%s" % (rname, scenario, " --leak" if leak else "", " --go-file" if go else "")
                    truth = os.path.join(tmp, "truth.json")
                    if os.path.exists(truth):
                        os.unlink(truth)
                    try:
                        rc, so, se, secs = run(cmd, scenario, leak, truth, tmp, go=go)
                    except subprocess.TimeoutExpired:
                        fail("%s: timed out" % name)
                        continue
                    if rc != 0:
                        fail("%s: exit %d\n%s%s" % (name, rc, so[-2000:], se[-2000:]))
                        continue
                    try:
                        with open(truth) as f:
                            t = json.load(f)
                    except (OSError, ValueError) as e:
                        fail("%s: truth unreadable: %s" % (name, e))
                        continue
                    nfail = len(failures)
                    check_truth(name, scenario, t, leak)
                    scenario_facts(scenario, t, leak, so, secs, go)
                    check_ops(name, scenario, t, leak, so)
                    if len(failures) == nfail:
                        print("ok   %-40s %6.2f s  devices=%d leaks=%d" % (name, secs, len(t["devices"]), len(t["leaks"])),
                              flush=True)
        # Determinism: same seed, same truth (single-threaded scenarios).
        for scenario in [s for s in SINGLE_THREADED if s in scenarios]:
            got = []
            for i in range(2):
                truth = os.path.join(tmp, "det-%d.json" % i)
                rc, _, _, _ = run(runners[0][1], scenario, True, truth, tmp)
                with open(truth) as f:
                    t = json.load(f)
                t.pop("pid")
                for m in t.get("meshes", []):
                    m.pop("mesh_device")  # a heap address
                # ProgramImpl* and MeshDevice*: heap addresses.
                for a in t.get("cb_allocs", []) + t.get("cb_dispatches", []):
                    a.pop("program", None)
                    a.pop("mesh_device", None)
                for r in t.get("cb_residency", []):
                    for c in r.get("cores", []):
                        c.pop("program", None)
                # TT-NN ops: thread ids, Buffer* and ProgramImpl*.
                for a in t.get("op_allocs", []):
                    a.pop("tid")
                    a.pop("buffer")
                for l in t.get("op_layouts", []):
                    l.pop("tid")
                    l.pop("program")
                for k in t.get("l1_clashes", []):
                    k.pop("program", None)
                    k.pop("throw_ts_ns", None)  # a clock
                    for b in k.get("l1_buffers", []):
                        b.pop("buffer", None)
                for f in t.get("alloc_failures", []):
                    f.pop("tid")
                    f.pop("mesh_device", None)
                    # Absolute return addresses: they move with the load address (ASLR).
                    f.pop("callers", None)
                got.append(t)
            if got[0] != got[1]:
                fail("%s: two runs with the same seed differ" % scenario)
            else:
                print("ok   %-40s deterministic" % scenario)
    if failures:
        print("selfcheck: %d failure(s)" % len(failures))
        return 1
    print("selfcheck: all checks passed (%s)" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
