"""Calls a C function, probe_target(tag), from known places (tags 1-10) while
pyframes' test uprobe is on it, and writes what the Python stack is at each
call as the interpreter itself sees it (sys._getframe: file, qualname where
the code object has one, line) to a JSON file: the truth the captured
stacks are compared with.

usage: stacks.py LIBRARY TRUTH_JSON
It waits for a line on stdin before the calls, and for another after
writing the truth, before it exits.
"""
import ctypes
import json
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])       # releases the GIL around each call
pylib = ctypes.PyDLL(sys.argv[1])    # holds it
truth = {}


def record(tag):
    """The stack of record's caller, innermost first."""
    frames = []
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        frames.append([code.co_filename, getattr(code, "co_qualname", code.co_name), f.f_lineno])
        f = f.f_back
    truth[tag] = frames


def main_thread_call():
    record(1); lib.probe_target(1)


def thread_body():
    record(2); lib.probe_target(2)


def recurse(n):
    if n == 0:
        record(3); lib.probe_target(3)
    else:
        recurse(n - 1)


class Holder:
    def method(self):
        record(4); pylib.probe_target(4)


def key(x):
    record(7); lib.probe_target(7)
    return x


@ctypes.CFUNCTYPE(None, ctypes.c_long)
def callback(tag):
    record(tag); lib.probe_target(tag)


def generator():
    record(9); lib.probe_target(9)
    yield 1


async def coroutine():
    record(10); lib.probe_target(10)


def shallow(n):
    if n == 0:
        record(5); lib.probe_target(5)
    else:
        shallow(n - 1)


sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
main_thread_call()
t = threading.Thread(target=thread_body)
t.start()
t.join()
recurse(90)
Holder().method()
shallow(20)
record(6); lib.probe_target(6)
sorted([1], key=key)        # C calls Python back: a shim frame (3.12+) in between
lib.call_back(callback, 8)  # through ctypes and C
next(generator())           # a generator's frame lives in the generator
try:
    coroutine().send(None)  # and a coroutine's in the coroutine
except StopIteration:
    pass
with open(sys.argv[2], "w") as f:
    json.dump(truth, f)
sys.stdout.write("done\n")
sys.stdout.flush()
sys.stdin.readline()
