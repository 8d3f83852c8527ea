#!/usr/bin/env python3
"""Generates a libtt_metal.so as big as a real one, for the attach-time benchmark.

  scripts/genbiglib.py --replica DIR --out DIR [--symbols N] [--seed N]

Links the replica's objects (DIR/obj/src/*.o of a testdata/replica build: the real TT-Metal
symbols tttrace probes, working code) with generated x86-64 assembly: N exported functions
(default 560,000) with Itanium-mangled names in the shape of TT-Metal's (tt::tt_metal::...,
std:: template instantiations over TT-Metal types, ttnn::, tt::umd::, fmt/nlohmann), bodies
of 16-256 bytes, and some vtable / typeinfo objects. Everything is exported, as TT-Metal
builds with default visibility, so .dynsym/.dynstr hold every name as well as
.symtab/.strtab. The result is over 200 MB. ttwork and libttwork.so are copied next to it
(RUNPATH $ORIGIN), so the replica's workloads run against the big library.

Deterministic for a given seed and replica build; does nothing when DIR already holds a
library made from the same inputs (a stamp file records them). Python 3 standard library,
GNU as and g++.
"""
import argparse
import glob
import hashlib
import os
import random
import shutil
import subprocess
import sys
import time

WORDS = ("buffer device program kernel core range tensor shard spec layout config dispatch command "
         "queue fabric mesh host worker noc dram trace event sub manager allocator bank page "
         "address region socket router channel circular semaphore runtime args compile build "
         "binary firmware launch message profiler watcher cache hash key value tile face shape "
         "stride dtype memory interleaved sharded height width block grid coord physical "
         "logical virtual ethernet tunnel relay prefetch completion writer reader compute "
         "reduce matmul conv pool eltwise unary binary ternary transpose permute reshape "
         "pad slice concat split embedding softmax layernorm rotary attention sdpa moreh "
         "ccl all_gather reduce_scatter barrier fence sync async wait status state info").split()

PARAMS = ["v", "i", "m", "j", "b", "RKS0_", "PKNS0_6BufferE", "PNS0_7IDeviceE", "RK12CoreRangeSet",
          "St10shared_ptrINS0_6BufferEE", "RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
          "RKSt6vectorIjSaIjEE", "NS0_10BufferTypeE", "RKNS0_6TensorE", "St8optionalIjE",
          "PKNS0_7IDeviceE", "RKNS0_16MemoryConfigE", "NS0_8DataTypeE", "mmm", "RKN2tt8tt_metal7CoreRangeE"]


def ident(rng, n_words, camel):
    ws = [rng.choice(WORDS) for _ in range(n_words)]
    if camel:
        return "".join(w.replace("_", " ").title().replace(" ", "") for w in ws)
    return "_".join(ws)


def src(name):
    return "%d%s" % (len(name), name)


def params(rng):
    return "".join(rng.choice(PARAMS) for _ in range(rng.randint(1, 4)))


def symbol(rng, i):
    """One mangled name; i makes it unique (in a class or method name)."""
    uniq = "%x" % i
    cls = ident(rng, rng.randint(1, 3), True) + uniq
    meth = ident(rng, rng.randint(1, 3), False)
    r = rng.random()
    if r < 0.42:  # tt::tt_metal[::sub]::Class::method
        sub = rng.choice(["", "detail", "distributed", "experimental", "program_dispatch",
                          "tt_fabric", "jit_build", "inspector", "v1"])
        ns = "2tt8tt_metal" + (src(sub) if sub else "")
        konst = "K" if rng.random() < 0.3 else ""
        return "_ZN%s%s%s%sE%s" % (konst, ns, src(cls), src(meth), params(rng))
    if r < 0.62:  # std:: instantiations over TT-Metal types
        tmpl = rng.choice(["6vector", "10shared_ptr", "8optional", "13unordered_map", "3map", "8function"])
        return "_ZNSt%sIN2tt8tt_metal%sESaIS3_EE%sIJRKS3_EEEvN9__gnu_cxx17__normal_iteratorIPS3_S5_EEDpOT_" % (
            tmpl, src(cls), src("_M_" + meth))
    if r < 0.80:  # ttnn::operations::<op>::Class::method
        return "_ZN4ttnn10operations%s%s%sE%s" % (src(ident(rng, 1, False)), src(cls), src(meth), params(rng))
    if r < 0.90:  # tt::umd::Class::method
        return "_ZN2tt3umd%s%sE%s" % (src(cls), src(meth), params(rng))
    lib = rng.choice(["3fmt2v116detail", "8nlohmann16json_abi_v3_11_36detail", "7reflect6detail", "5tracy"])
    return "_ZN%s%s%sE%s" % (lib, src(cls), src(meth), params(rng))


def write_asm(path, rng, first, count):
    with open(path, "w") as f:
        f.write("\t.text\n"
                ".macro F name, pad\n"
                "\t.globl \\name\n\t.type \\name, @function\n\t.p2align 4\n"
                "\\name:\n\tmovl $1, %eax\n\tret\n\t.skip \\pad, 0xcc\n"
                "\t.size \\name, .-\\name\n"
                ".endm\n"
                ".macro O name, size\n"
                "\t.globl \\name\n\t.type \\name, @object\n\t.p2align 3\n"
                "\\name:\n\t.zero \\size\n\t.size \\name, \\size\n"
                ".endm\n")
        objs = []
        for i in range(first, first + count):
            name = symbol(rng, i)
            if rng.random() < 0.03:
                cls = ident(rng, 2, True) + "%x" % i
                kind = rng.choice(["_ZTVN2tt8tt_metal", "_ZTIN2tt8tt_metal", "_ZTSN2tt8tt_metal"])
                objs.append("O %s%sE, %d\n" % (kind, src(cls), 8 * rng.randint(2, 8)))
            f.write("F %s, %d\n" % (name, rng.randint(1, 240)))
        f.write("\t.section .data.rel.ro,\"aw\"\n")
        f.writelines(objs)
        f.write("\t.section .note.GNU-stack,\"\",@progbits\n")


def digest(paths, extra):
    h = hashlib.sha256(extra.encode())
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replica", required=True, help="a testdata/replica build directory (OUT)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--symbols", type=int, default=560000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()

    objs = sorted(glob.glob(os.path.join(a.replica, "obj", "src", "*.o")))
    if not objs:
        sys.exit("genbiglib: no objects in %s/obj/src: build the replica first" % a.replica)
    inputs = objs + [os.path.join(a.replica, n) for n in ("ttwork", "libttwork.so")]
    stamp = digest(inputs + [os.path.abspath(__file__)], "%d %d" % (a.symbols, a.seed))
    os.makedirs(a.out, exist_ok=True)
    stamp_path = os.path.join(a.out, ".stamp")
    lib = os.path.join(a.out, "libtt_metal.so")
    if os.path.exists(lib) and os.path.exists(stamp_path) and open(stamp_path).read().strip() == stamp:
        return
    t0 = time.monotonic()
    gen = os.path.join(a.out, "gen")
    shutil.rmtree(gen, ignore_errors=True)
    os.makedirs(gen)
    parts = 16
    per = (a.symbols + parts - 1) // parts
    srcs = []
    for k in range(parts):
        first = k * per
        count = min(per, a.symbols - first)
        if count <= 0:
            break
        s = os.path.join(gen, "part%02d.s" % k)
        write_asm(s, random.Random(a.seed * 1000 + k), first, count)
        srcs.append(s)
    print("genbiglib: %d functions in %d assembly files (%.0f s)" % (a.symbols, len(srcs), time.monotonic() - t0),
          flush=True)
    # Assemble in parallel.
    procs, gobjs = [], []
    for s in srcs:
        o = s[:-2] + ".o"
        gobjs.append(o)
        procs.append(subprocess.Popen(["as", "--64", "-o", o, s]))
        while len([p for p in procs if p.poll() is None]) >= a.jobs:
            time.sleep(0.05)
    if any(p.wait() != 0 for p in procs):
        sys.exit("genbiglib: as failed")
    tmp = lib + ".tmp"
    subprocess.run(["g++", "-shared", "-pthread", "-Wl,-soname,libtt_metal.so", "-Wl,--build-id", "-o", tmp]
                   + objs + gobjs, check=True)
    os.replace(tmp, lib)
    for n in ("ttwork", "libttwork.so"):
        shutil.copy2(os.path.join(a.replica, n), os.path.join(a.out, n))
    shutil.rmtree(gen)
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print("genbiglib: %s: %.0f MB (%.0f s)" % (lib, os.path.getsize(lib) / 1e6, time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    main()
