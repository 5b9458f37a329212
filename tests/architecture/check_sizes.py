#!/usr/bin/env python3
"""The size rules of docs/architecture.md: no source file over 800 lines, no function over 100.

    check_sizes.py ROOT [--plant]

Fails naming every file and function past its limit, except those listed in ALLOWED below, each
with the reason it is left (a TODO(cleanup) in the code says the same). --plant adds a planted file
of 801 lines and a function of 101: how the test proves the check fails.

A function is what clang-format leaves at column 0: a line that opens a body with `{` after a
parameter list, up to the next line that starts with `}`. Definitions inside a class body and
lambdas are not seen; they are rarely long in this tree, and a review catches the rest.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
FOLDERS = ["base", "kernels", "engine", "daemon", "policies", "libclient", "ctl", "tools", "tests"]
SUFFIXES = {".cc", ".h", ".inc", ".cuh", ".cpp"}
# Left on purpose, with the reason; shrink this list, never grow it without one.
ALLOWED = {
    # Each module's source text is its NVRTC cache key: split with a GPU session that re-measures
    # the kernels (kernels/cuda/kernel_library.h's TODO(cleanup)).
    "kernels/cuda/kernels/attention.cuh": "file",
    "kernels/cuda/kernels/matmul_int.cuh": "file",
}
NOT_A_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|template|#|//)")


def functions(lines):
    """(first line number, length, text) of each function defined at column 0."""
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line.split("(")[0]
        if (line[:1].strip() and line.rstrip().endswith("{") and "(" in line and "=" not in head
                and not NOT_A_FUNCTION.match(line)):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("}"):
                j += 1
            yield i + 1, j - i + 1, line.strip()
            i = j
        i += 1


def check(root, extra):
    problems = []
    files = [p for folder in FOLDERS for p in sorted((root / folder).rglob("*")) if p.suffix in SUFFIXES]
    for path, text in [(p, None) for p in files] + extra:
        rel = str(path.relative_to(root)) if text is None else str(path)
        lines = (text if text is not None else path.read_text(encoding="utf-8", errors="replace")).split("\n")
        if len(lines) > MAX_FILE_LINES and ALLOWED.get(rel) != "file":
            problems.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE_LINES})")
        for first, length, head in functions(lines):
            if length > MAX_FUNCTION_LINES and ALLOWED.get(f"{rel}:{head}") != "function":
                problems.append(f"{rel}:{first}: a function of {length} lines (at most {MAX_FUNCTION_LINES}): {head}")
    return problems


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    extra = []
    if "--plant" in sys.argv[2:]:
        body = ["  x++;"] * 99
        extra.append((pathlib.Path("planted/too_long.cc"), "\n".join(["int planted(int x) {"] + body + ["}"] + [""] * 700)))
    problems = check(root, extra)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} size rule(s) broken (docs/architecture.md, \"Dependency rules\")")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
