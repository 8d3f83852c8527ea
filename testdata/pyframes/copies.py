"""From the main thread, calls probe_target from DEPTH Python frames deep
for each DEPTH in LO..HI-1, twice at each: the load of pyframes' test of
the data stack's copies (TestCaptureCopies).

usage: copies.py LIBRARY LO HI   (waits for a line on stdin first, says
"done" when it has made its calls and waits for another to exit)"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lo, hi = int(sys.argv[2]), int(sys.argv[3])


def down(k, tag):
    if k > 1:
        return down(k - 1, tag)
    lib.probe_target(tag)
    lib.probe_target(tag + 1)


def run():
    tag = 1
    for depth in range(lo, hi):
        down(depth, tag)
        tag += 2


sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
run()
sys.stdout.write("done\n")
sys.stdout.flush()
sys.stdin.readline()
