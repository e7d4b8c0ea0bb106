#!/usr/bin/env python3
"""Generates the inputs of scripts/bench-everyday, the same bytes on every run.

  generate.py cproject DIR N   a C project of N source files, a shared header and a
                               Makefile (objects with dependency files, one program
                               that prints "ok" and a checksum when run)
  generate.py pypkg DIR N      a Python package DIR/evpkg of N modules whose
                               __init__.py imports every one
"""
import os
import sys


def cproject(root, n):
    os.makedirs(f"{root}/src")
    os.makedirs(f"{root}/include")
    with open(f"{root}/include/common.h", "w") as h:
        h.write("#ifndef COMMON_H\n#define COMMON_H\n#include <stddef.h>\n\n")
        h.write("struct acc { unsigned long sum; unsigned long rounds; };\n")
        h.write("static inline unsigned long mix(unsigned long x) {\n")
        h.write("    x ^= x >> 33; x *= 0xff51afd7ed558ccdUL; x ^= x >> 33; return x;\n}\n")
        for i in range(n):
            h.write(f"unsigned long unit{i:03d}(struct acc *a);\n")
        h.write("#endif\n")
    for i in range(n):
        with open(f"{root}/src/unit{i:03d}.c", "w") as c:
            c.write('#include <stdio.h>\n#include <string.h>\n#include "common.h"\n\n')
            table = ", ".join(str((i * 131 + k * 17) % 251) for k in range(64))
            c.write(f"static const unsigned char table[64] = {{{table}}};\n\n")
            for k in range(6):
                c.write(f"static unsigned long step{k}(unsigned long x, const char *s) {{\n")
                c.write("    size_t len = strlen(s);\n")
                c.write("    for (size_t j = 0; j < len; j++)\n")
                c.write(f"        x = mix(x + (unsigned char)s[j] + table[(j + {k}) % 64]);\n")
                c.write(f"    return x ^ {i * 7 + k}UL;\n}}\n\n")
            c.write(f"unsigned long unit{i:03d}(struct acc *a) {{\n")
            c.write(f"    char name[32];\n    snprintf(name, sizeof name, \"unit{i:03d}\");\n")
            c.write("    unsigned long x = a->sum;\n")
            for k in range(6):
                c.write(f"    x = step{k}(x, name);\n")
            c.write("    a->sum = x;\n    a->rounds++;\n    return x;\n}\n")
    with open(f"{root}/src/main.c", "w") as c:
        c.write('#include <stdio.h>\n#include "common.h"\n\nint main(void) {\n')
        c.write("    struct acc a = {0, 0};\n")
        for i in range(n):
            c.write(f"    unit{i:03d}(&a);\n")
        c.write('    printf("ok %lu %lx\\n", a.rounds, a.sum);\n    return 0;\n}\n')
    with open(f"{root}/Makefile", "w") as m:
        m.write(
            "CFLAGS = -O2 -Wall -Iinclude\n"
            "SRCS = $(sort $(wildcard src/*.c))\n"
            "OBJS = $(SRCS:.c=.o)\n\n"
            "prog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n"
            "src/%.o: src/%.c\n\t$(CC) $(CFLAGS) -MMD -c -o $@ $<\n\n"
            "-include $(OBJS:.o=.d)\n"
        )


def pypkg(root, n):
    pkg = f"{root}/evpkg"
    os.makedirs(pkg)
    with open(f"{pkg}/__init__.py", "w") as f:
        f.write('"""A generated package: every module imported at once."""\n')
        for i in range(n):
            f.write(f"from . import m{i:03d}\n")
        f.write(f"MODULES = {n}\n")
    for i in range(n):
        with open(f"{pkg}/m{i:03d}.py", "w") as f:
            f.write(f'"""Generated module {i}."""\n')
            f.write("import collections\nimport functools\n\n")
            f.write(f"TABLE = {{{', '.join(f'{k}: {(i * 31 + k) % 97}' for k in range(40))}}}\n\n")
            f.write("Point = collections.namedtuple('Point', 'x y')\n\n")
            for k in range(4):
                f.write(f"class Thing{k}:\n")
                f.write(f'    """Thing {k} of module {i}."""\n\n')
                f.write("    def __init__(self, value):\n        self.value = value\n\n")
                f.write(f"    def scaled(self, factor={k + 1}):\n")
                f.write("        return [self.value * factor + TABLE[j] for j in TABLE]\n\n")
                f.write("    def __repr__(self):\n")
                f.write(f"        return 'Thing{k}(%r)' % (self.value,)\n\n\n")
            for k in range(8):
                f.write(f"@functools.lru_cache(maxsize=None)\ndef function{k}(x):\n")
                f.write(f"    total = {k}\n    for j in range(x):\n")
                f.write(f"        total += TABLE.get(j % 40, 0) * {k + i}\n    return total\n\n\n")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("cproject", "pypkg"):
        sys.exit(__doc__)
    {"cproject": cproject, "pypkg": pypkg}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))


if __name__ == "__main__":
    main()
