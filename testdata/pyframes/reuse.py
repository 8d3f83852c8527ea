"""Calls a C function, probe_target(tag), from functions made one after the
other with exec, each dropped (and collected) before the next is made:
CPython gives a new code object the address of the one just freed, nearly
always, while the line of the call differs from one function to the next.
Writes the stack at each call as the interpreter sees it (as stacks.py does)
and each function's code object's id to a JSON file.

usage: reuse.py LIBRARY OUT_JSON CALLS
It waits for a line on stdin before the calls, and for another after
writing the JSON, before it exits.
"""
import ctypes
import gc
import json
import sys

lib = ctypes.CDLL(sys.argv[1])
calls = int(sys.argv[3])
truth = {}
ids = {}


def record(tag):
    """The stack of record's caller, innermost first."""
    frames = []
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        frames.append([code.co_filename, getattr(code, "co_qualname", code.co_name), f.f_lineno])
        f = f.f_back
    truth[tag] = frames


sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
for tag in range(1, calls + 1):
    src = "\n" * (tag % 5) + "def made(tag):\n    record(tag); lib.probe_target(tag)\n"
    ns = {"record": record, "lib": lib}
    exec(compile(src, "<made>", "exec"), ns)
    ids[tag] = id(ns["made"].__code__)
    ns["made"](tag)
    del ns
    gc.collect()
with open(sys.argv[2], "w") as out:
    json.dump({"truth": truth, "ids": ids}, out)
sys.stdout.write("done\n")
sys.stdout.flush()
sys.stdin.readline()
