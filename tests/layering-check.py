#!/usr/bin/env python3
"""The shape of the tree, as a test: arrows point down only, and the core knows no plugin.

    layering-check.py SOURCE_ROOT

1. No code under core/ names a plugin: no string literal is a plugin's name (the folders
   under plugins/, and their weft-<name>.so files). The host device type's name "cpu" is
   allowed once, where core/device.c defines it: it names a device type, which PyTorch
   calls cpu, not the plugin that provides its backend.
2. Each library includes only its own headers and those of the libraries below it:
   core -> nothing; ops -> core; nn -> ops, core; models -> nn, ops, core;
   train -> nn, ops, core; quant -> nn, ops, core; testkit -> ops, core.
Comments are ignored. Exit 0 when the tree is in shape, 1 with every violation listed."""
import os
import re
import sys

LIBRARIES = {  # library -> the libraries whose headers it may include
    "core": ["core"],
    "ops": ["ops", "core"],
    "nn": ["nn", "ops", "core"],
    "models": ["models", "nn", "ops", "core"],
    "train": ["train", "nn", "ops", "core"],
    "quant": ["quant", "nn", "ops", "core"],
    "testkit": ["testkit", "ops", "core"],
}
ALLOWED_LITERALS = {("core/device.c", '#define HOST_DEVICE_TYPE_NAME "cpu"')}

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](weft(?:/[\w.]+|\.h))[>"]', re.M)


def sources(root, lib):
    for dirpath, _, files in os.walk(os.path.join(root, lib)):
        for f in sorted(files):
            if f.endswith((".c", ".h", ".in")):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, root), open(path, encoding="utf-8").read()


def headers_of(root, lib):
    inc = os.path.join(root, lib, "include")
    found = set()
    for dirpath, _, files in os.walk(inc):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), inc)
            found.add(rel[:-3] if rel.endswith(".in") else rel)
    return found


def main():
    root = sys.argv[1]
    plugins = sorted(d for d in os.listdir(os.path.join(root, "plugins"))
                     if os.path.isdir(os.path.join(root, "plugins", d)))
    names = set(plugins) | {"sparse-cuda", "dist", "dist-mpi", "dist-nccl"}
    names |= {"weft-%s.so" % n for n in names}
    problems = []
    for rel, text in sources(root, "core"):
        code = COMMENT.sub(" ", text)
        for line in code.splitlines():
            for lit in LITERAL.findall(line):
                if lit in names and (rel, line.strip()) not in ALLOWED_LITERALS:
                    problems.append('%s: names plugin "%s": %s' % (rel, lit, line.strip()))
    headers = {lib: headers_of(root, lib) for lib in LIBRARIES}
    for lib, allowed in LIBRARIES.items():
        mine = set().union(*(headers[a] for a in allowed))
        for rel, text in sources(root, lib):
            for inc in INCLUDE.findall(COMMENT.sub(" ", text)):
                if inc in mine:
                    continue
                owner = [l for l in LIBRARIES if inc in headers[l]]
                where = "the %s library's" % owner[0] if owner else "nobody's (a plugin's?)"
                problems.append("%s: includes <%s>, %s header: %s may include only %s" %
                                (rel, inc, where, lib, ", ".join(allowed)))
    for p in problems:
        print("layering: " + p)
    if problems:
        return 1
    print("layering: ok (%d plugin names checked in core/, %d libraries)" %
          (len(names), len(LIBRARIES)))
    return 0


sys.exit(main())
