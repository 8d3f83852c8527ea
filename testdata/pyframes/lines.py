"""Dump, for every code object of the given source files, the interpreter's
own line table and the line of every instruction as the interpreter computes
it (code.co_lines()): the truth pyframes' line-table decoders are checked
against. One JSON object per code object on stdout."""
import json
import sys


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from walk(c)


for path in sys.argv[1:]:
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    for code in walk(top):
        lines = []
        for start, end, line in code.co_lines():
            for off in range(start, end, 2):
                lines.append([off, -1 if line is None else line])
        print(json.dumps({
            "name": code.co_name,
            "firstlineno": code.co_firstlineno,
            "linetable": code.co_linetable.hex(),
            "lines": lines,
        }))
