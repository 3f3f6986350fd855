#!/usr/bin/env python3
"""anvil's must-fail / must-compile tests for compile-time checks.

Usage: run.py COMPILER INCLUDE_DIR [EXTRA_FLAG...]

Each tests/compile_fail/*.cpp is a pair of twins in one file. Compiled with -DANVIL_COMPILE_FAIL it must fail,
and the compiler's output must contain every substring given on the `// expect-error: <substring>` lines at
the top of the file. Compiled without the macro it must compile warning-free, which proves the failure comes
from the check and not from a typo. Python standard library only.
"""
import pathlib
import subprocess
import sys

EXPECT = "// expect-error:"
BASE_FLAGS = ["-std=c++20", "-fsyntax-only"]
PASS_FLAGS = ["-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Werror"]


def expectations(path):
    found = []
    for line in path.read_text().splitlines():
        if not line.startswith(EXPECT):
            break
        found.append(line[len(EXPECT):].strip())
    return found


def compile_source(compiler, include_dir, extra, path, defines):
    command = [compiler, *BASE_FLAGS, *defines, "-I", include_dir, *extra, str(path)]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return result.returncode, result.stdout


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    compiler, include_dir, extra = argv[1], argv[2], argv[3:]
    sources = sorted(pathlib.Path(__file__).resolve().parent.glob("*.cpp"))
    if not sources:
        print("compile_fail: no test sources found", file=sys.stderr)
        return 1
    failures = 0
    for path in sources:
        expected = expectations(path)
        if not expected or any(not e for e in expected):
            print(f"FAIL {path.name}: the first line must be '{EXPECT} <substring>'")
            failures += 1
            continue
        code, output = compile_source(compiler, include_dir, extra, path, ["-DANVIL_COMPILE_FAIL"])
        missing = [e for e in expected if e not in output]
        if code == 0:
            print(f"FAIL {path.name}: compiled, but must fail with: {expected[0]}")
            failures += 1
        elif missing:
            print(f"FAIL {path.name}: failed, but the diagnostic lacks {missing}; it was:\n{output}")
            failures += 1
        code, output = compile_source(compiler, include_dir, extra + PASS_FLAGS, path, [])
        if code != 0:
            print(f"FAIL {path.name}: the must-compile twin (without ANVIL_COMPILE_FAIL) fails:\n{output}")
            failures += 1
        if code == 0 and not missing:
            print(f"ok   {path.name}")
    print(f"compile_fail: {failures} failure(s) in {len(sources)} files" if failures else
          f"compile_fail: all {len(sources)} files fail and compile as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
