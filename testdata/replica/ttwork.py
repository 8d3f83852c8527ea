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
  --reload           run the scenario, dlclose libttwork.so (and with it libtt_metal.so), say
                     on stderr whether libtt_metal.so left the address space ("unloaded" or
                     "still-mapped"), load both again and run the scenario a second time,
                     writing that run's truth to TRUTH.2 (with --leak: only the second run leaks)
"""
import _ctypes
import ctypes
import os
import sys
import time


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


def run(args, keep=None) -> int:
    """Loads libttwork.so and runs ttwork_main(args); keep, a list, receives the library."""
    libdir = os.environ.get("TTWORK_LIBDIR") or os.path.dirname(os.path.abspath(__file__))
    lib = ctypes.CDLL(os.path.join(libdir, "libttwork.so"))
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


def main() -> int:
    args = list(sys.argv)
    load_after = take(args, "--load-after")
    preload = take(args, "--preload")
    workers = take(args, "--workers")
    reload = take(args, "--reload", has_value=False)
    if load_after:
        print("waiting-to-load", file=sys.stderr, flush=True)
        while not os.path.exists(load_after):
            time.sleep(0.005)
    if workers:
        truth = take(args, "--truth")
        pids = []
        for _ in range(int(workers)):
            pid = os.fork()
            if pid == 0:
                mine = list(args)
                if truth:
                    mine += ["--truth", "%s.%d" % (truth, os.getpid())]
                if preload:
                    ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL)
                code = run(mine)
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
    if reload:
        return run_reloaded(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
