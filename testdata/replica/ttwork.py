#!/usr/bin/env python3
"""Runs the ttwork workloads from Python, the way `import ttnn` maps libtt_metal.so:
libttwork.so (and through its RUNPATH libtt_metal.so) is loaded with ctypes only after the
interpreter has started. Same options as the ttwork binary; exit status = its return value.
libttwork.so is looked up beside this file, or in $TTWORK_LIBDIR."""
import ctypes
import os
import sys


def main() -> int:
    libdir = os.environ.get("TTWORK_LIBDIR") or os.path.dirname(os.path.abspath(__file__))
    lib = ctypes.CDLL(os.path.join(libdir, "libttwork.so"))
    lib.ttwork_main.restype = ctypes.c_int
    lib.ttwork_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    args = [os.fsencode(a) for a in sys.argv]
    argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
    sys.stdout.flush()
    return lib.ttwork_main(len(args), argv)


if __name__ == "__main__":
    sys.exit(main())
