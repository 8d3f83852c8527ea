"""Calls probe_target(0) N times from a stack DEPTH Python frames deep, in
the main thread: the load of pyframes' cost measurement.

usage: cost.py LIBRARY DEPTH N   (waits for a line on stdin first)"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
depth, n = int(sys.argv[2]), int(sys.argv[3])


def down(k):
    if k > 1:
        return down(k - 1)
    for _ in range(n):
        lib.probe_target(0)


sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
down(depth)
