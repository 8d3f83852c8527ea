#!/usr/bin/env python3
"""Runs the ttwork workloads from Python, the way `import ttnn` maps libtt_metal.so:
libttwork.so (and through its RUNPATH libtt_metal.so) is loaded with ctypes only after the
interpreter has started. Same options as the ttwork binary; exit status = its return value.
libttwork.so is looked up beside this file, or in $TTWORK_LIBDIR.

Python-only options (taken out before the rest reaches ttwork_main):
  --load-after FILE  print "waiting-to-load" on stderr and load nothing until FILE exists
  --preload PATH     first load PATH with RTLD_GLOBAL: a renamed copy of libtt_metal.so
                     (same SONAME), which the loader then uses for libttwork.so's dependency
  --workers N        fork N worker processes before loading anything (pytest-xdist shape);
                     each loads the library and runs the scenario, writing its truth to
                     TRUTH.<worker pid>; the parent waits for all and fails if one failed
  --load-first       with --workers: the parent loads libttwork.so, then forks the workers at
                     once, each running the scenario with no load of its own (a tight fork
                     after the first import: a worker may allocate and end before a tracer
                     has read its fork)
  --worker-delay S   with --workers: each worker sleeps S seconds before it runs the scenario
  --reload           run the scenario, dlclose libttwork.so (and with it libtt_metal.so), say
                     on stderr whether libtt_metal.so left the address space ("unloaded" or
                     "still-mapped"), load both again and run the scenario a second time,
                     writing that run's truth to TRUTH.2 (with --leak: only the second run leaks)

--scenario ops | ops_threads run from Python itself (needs the TT-NN stand-in, TTNN_ERA=...): every
op is a ctypes call into _ttnn.so, the same sequence as ttwork's scenario of that name.
"""
import _ctypes
import ctypes
import os
import sys
import threading
import time

# Scenarios driven from Python itself (the TT-NN stand-in, issue #31): every op is a ctypes call
# of the Python module's entry point, which calls the op through a function pointer, so the
# op's frames sit under this file's Python frames. Same sequences and chips as ttwork's.
PY_SCENARIOS = ("ops", "ops_threads")
DRAM, L1 = 0, 1


def take(args, name, has_value=True):
    """Removes --name [value] from args and returns the value (or True), None if absent."""
    for i, a in enumerate(args):
        if a == name:
            if not has_value:
                del args[i]
                return True
            v = args[i + 1]
            del args[i : i + 2]
            return v
        if has_value and a.startswith(name + "="):
            del args[i]
            return a.split("=", 1)[1]
    return None


def load():
    """Loads libttwork.so (and through it libtt_metal.so)."""
    libdir = os.environ.get("TTWORK_LIBDIR") or os.path.dirname(os.path.abspath(__file__))
    return ctypes.CDLL(os.path.join(libdir, "libttwork.so"))


def run(args, keep=None, lib=None) -> int:
    """Runs ttwork_main(args) in libttwork.so, loaded now unless lib is given; keep, a list,
    receives the library."""
    lib = lib or load()
    lib.ttwork_main.restype = ctypes.c_int
    lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    enc = [os.fsencode(a) for a in args]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    sys.stdout.flush()
    if keep is not None:
        keep.append(lib)
    return lib.ttwork_main(len(enc), argv)


def mapped(name) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith("/" + name) for line in f)


def run_reloaded(args) -> int:
    """--reload: the first run without --leak, dlclose, the second run as asked."""
    first = [a for a in args if a != "--leak"]
    second = list(args)
    truth = take(second, "--truth")
    take(first, "--truth")
    if truth:
        first += ["--truth", truth]
        second += ["--truth", truth + ".2"]
    libs = []
    code = run(first, libs)
    if code != 0:
        return code
    _ctypes.dlclose(libs.pop()._handle)
    print("unloaded" if not mapped("libtt_metal.so") else "still-mapped", file=sys.stderr, flush=True)
    return run(second)


class Ttnn:
    """The stand-in's Python module (_ttnn.so) and libtt_metal.so's truth entry points."""

    def __init__(self, libdir):
        m = ctypes.CDLL(os.path.join(libdir, "_ttnn.so"))
        vp, u64, u32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32
        for name, res, argt in [
            ("ttnn_era", ctypes.c_char_p, []),
            ("ttnn_open_device", vp, [ctypes.c_int, ctypes.c_int]),
            ("ttnn_close_device", None, [vp]),
            ("ttnn_clear_program_cache", None, [vp]),
            ("ttnn_tensor", vp, [vp, u64, ctypes.c_int]),
            ("ttnn_free", None, [vp]),
            ("ttnn_matmul", vp, [vp, vp]),
            ("ttnn_add", vp, [vp, vp]),
            ("ttnn_conv2d", vp, [vp, vp]),
            ("ttnn_reshard", vp, [vp, u32]),
            ("ttnn_split", ctypes.c_int, [vp, u32, u64, ctypes.POINTER(vp), ctypes.c_int]),
            ("ttnn_last_error", ctypes.c_char_p, []),
        ]:
            f = getattr(m, name)
            f.restype, f.argtypes = res, argt
        self.m = m
        metal = ctypes.CDLL(os.path.join(libdir, "libtt_metal.so"))
        metal.tt_replica_write_truth.restype = ctypes.c_int
        metal.tt_replica_write_truth.argtypes = [ctypes.c_char_p]
        self.metal = metal

    def error(self):
        return self.m.ttnn_last_error().decode()


def check(cond, what):
    if not cond:
        print("ttwork.py: check failed: %s" % what, file=sys.stderr, flush=True)
        os.abort()


def py_ops(t, opt):
    """ops: see ttwork.cpp scenario_ops (chip 60)."""
    m = t.m
    dev = m.ttnn_open_device(60, 0)
    check(dev, "open chip 60")
    a = m.ttnn_tensor(dev, 64 << 10, DRAM)
    b = m.ttnn_tensor(dev, 32 << 10, DRAM)
    m1 = m.ttnn_matmul(a, b)
    m2 = m.ttnn_matmul(a, b)
    s = m.ttnn_add(m1, m2)
    c = m.ttnn_conv2d(a, b)
    check(all([a, b, m1, m2, s, c]), "ops made their outputs")
    r = m.ttnn_reshard(s, 0)
    check(r is None and "reshard" in t.error(), "reshard of 0 cores fails validation")
    z = m.ttnn_tensor(dev, 4096, DRAM)
    r2 = m.ttnn_reshard(s, 8)
    check(z and r2, "reshard of 8 cores")
    parts = (ctypes.c_void_p * 4)()
    n = m.ttnn_split(s, 3, 400 << 10, parts, 4)
    check(n == -1 and "Out of Memory" in t.error(), "split runs out of L1")
    l1 = m.ttnn_tensor(dev, 2048, L1)
    check(l1, "L1 tensor")
    m.ttnn_free(m2)
    m.ttnn_free(z)
    print("ops: %s ops on chip 60" % m.ttnn_era().decode(), flush=True)
    if opt["leak"]:
        opt["kept"] += [m1, c, r2, l1]
        for x in (a, b, s):
            m.ttnn_free(x)
        return 0
    for x in (a, b, m1, s, c, r2, l1):
        m.ttnn_free(x)
    m.ttnn_clear_program_cache(dev)
    m.ttnn_close_device(dev)
    return 0


def py_ops_threads(t, opt):
    """ops_threads: see ttwork.cpp scenario_ops_threads (chips 61, 62)."""
    m = t.m
    dev = m.ttnn_open_device(61, 0)
    disp = m.ttnn_open_device(62, 1)
    check(dev and disp, "open chips 61, 62")
    failed = []

    def worker(i):
        for rnd in range(8):
            a = m.ttnn_tensor(dev, 16 << 10, DRAM)
            b = m.ttnn_tensor(dev, (8 << 10) * (1 + i % 2), DRAM)
            mm = m.ttnn_matmul(a, b)
            s = m.ttnn_add(mm, a) if mm else None
            c = m.ttnn_conv2d(a, b)
            if not all([a, b, mm, s, c]):
                failed.append(i)
            if rnd == 7 and opt["leak"]:
                opt["kept"] += [s, c]
                s = c = None
            for x in (a, b, mm, s, c):
                m.ttnn_free(x)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(opt["threads"] or 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check(not failed, "every thread's ops made their outputs")
    x = m.ttnn_tensor(disp, 32 << 10, DRAM)
    y = m.ttnn_tensor(disp, 16 << 10, DRAM)
    m1 = m.ttnn_matmul(x, y)
    m2 = m.ttnn_matmul(x, y)
    s = m.ttnn_add(m1, x)
    check(all([x, y, m1, m2, s]), "ops on the dispatch-thread chip")
    print("ops_threads: %s ops, %d threads on chip 61, dispatch thread on chip 62"
          % (m.ttnn_era().decode(), len(threads)), flush=True)
    if opt["leak"]:
        opt["kept"] += [m1, s]
        for v in (x, y, m2):
            m.ttnn_free(v)
        return 0
    for v in (x, y, m1, m2, s):
        m.ttnn_free(v)
    for d in (dev, disp):
        m.ttnn_clear_program_cache(d)
        m.ttnn_close_device(d)
    return 0


def run_py_scenario(args) -> int:
    """--scenario ops|ops_threads from Python: load the TT-NN module, go point, ops, truth."""
    scenario = take(args, "--scenario")
    truth = take(args, "--truth")
    go_file = take(args, "--go-file")
    threads = take(args, "--threads")
    leak = take(args, "--leak", has_value=False)
    take(args, "--seed")
    if len(args) > 1:
        print("ttwork.py: %s takes --truth, --go-file, --threads, --leak, --seed; not %s"
              % (scenario, " ".join(args[1:])), file=sys.stderr)
        return 2
    libdir = os.environ.get("TTWORK_LIBDIR") or os.path.dirname(os.path.abspath(__file__))
    t = Ttnn(libdir)
    if go_file:
        t.metal.tt_replica_mark_attach.restype = None
        print("ready", file=sys.stderr, flush=True)
        while not os.path.exists(go_file):
            time.sleep(0.005)
        t.metal.tt_replica_mark_attach()
    opt = {"leak": bool(leak), "threads": int(threads) if threads else 0, "kept": []}
    code = (py_ops if scenario == "ops" else py_ops_threads)(t, opt)
    sys.stdout.flush()
    if truth:
        w = t.metal.tt_replica_write_truth(os.fsencode(truth))
        if w != 0:
            print("ttwork.py: writing the ground truth failed (%d)" % w, file=sys.stderr)
            code = code or 1
    return code


def main() -> int:
    args = list(sys.argv)
    load_after = take(args, "--load-after")
    preload = take(args, "--preload")
    workers = take(args, "--workers")
    reload = take(args, "--reload", has_value=False)
    load_first = take(args, "--load-first", has_value=False)
    worker_delay = take(args, "--worker-delay")
    if load_after:
        print("waiting-to-load", file=sys.stderr, flush=True)
        while not os.path.exists(load_after):
            time.sleep(0.005)
    if workers:
        truth = take(args, "--truth")
        pids = []
        lib = load() if load_first else None
        for _ in range(int(workers)):
            pid = os.fork()
            if pid == 0:
                mine = list(args)
                if truth:
                    mine += ["--truth", "%s.%d" % (truth, os.getpid())]
                if preload:
                    ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL)
                if worker_delay:
                    time.sleep(float(worker_delay))
                code = run(mine, lib=lib)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            pids.append(pid)
        failed = 0
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                failed += 1
        return 1 if failed else 0
    if preload:
        ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL)
    scenario = [a for i, a in enumerate(args) if i > 0 and args[i - 1] == "--scenario"]
    if scenario and scenario[0] in PY_SCENARIOS:
        return run_py_scenario(args)
    if reload:
        return run_reloaded(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
