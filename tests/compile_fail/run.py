#!/usr/bin/env python3
"""anvil's must-fail / must-compile tests for compile-time checks.

Usage: run.py COMPILER INCLUDE_DIR [EXTRA_FLAG...]

Each tests/compile_fail/*.cpp is a pair of twins in one file. Compiled with -DANVIL_COMPILE_FAIL it must fail,
and the compiler's output must contain every substring given on the `// expect-error: <substring>` lines at
the top of the file. Compiled without the macro it must compile warning-free, which proves the failure comes
from the check and not from a typo. Python standard library only.

The must-fail halves are compiled one file each, on every core, against a precompiled header of every header
the files include, built once with the same flags (g++ 12: 1.15 s a file without it, 0.43 s with it). The
must-compile halves are compiled together as one translation unit (each file's code in a namespace of its own,
its main renamed), which costs one parse of the headers instead of one per file; only when that fails are they
compiled one by one to name the file. That unit takes no precompiled header: the headers' own code must
compile warning-free under its stricter flags, which a header parsed under other flags would not show.
"""
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

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


def compile_source(compiler, include_dir, extra, path, defines, pch=()):
    command = [compiler, *BASE_FLAGS, *defines, "-I", include_dir, *extra, *pch, str(path)]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return result.returncode, result.stdout


def split_includes(sources):
    """Every #include line of the sources, in first-seen order, and each file's other lines."""
    includes, bodies = [], []
    for path in sources:
        body = []
        for line in path.read_text().splitlines():
            if line.startswith("#include"):
                if line not in includes:
                    includes.append(line)
            else:
                body.append(line)
        bodies.append(body)
    return includes, bodies


def precompiled_header(compiler, include_dir, extra, sources, work):
    """The flags that make a compile use a precompiled header of every header the sources include, built with
    the must-fail halves' flags; none when it cannot be built (the files then parse the headers themselves).

    GCC finds header.gch beside the -include'd header, and -Winvalid-pch makes it say when it skips the file
    for a flag that differs; Clang takes the file itself through -include-pch and refuses a mismatched one
    with an error."""
    header = work / "compile_fail_headers.hpp"
    header.write_text("\n".join(split_includes(sources)[0]) + "\n")
    version = subprocess.run([compiler, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    clang = "clang" in version.stdout.lower()
    output = header.with_name(header.name + (".pch" if clang else ".gch"))
    flags = [f for f in BASE_FLAGS if f != "-fsyntax-only"]
    command = [compiler, *flags, "-DANVIL_COMPILE_FAIL", "-I", include_dir, *extra, "-x", "c++-header",
               str(header), "-o", str(output)]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if result.returncode != 0:
        print(f"compile_fail: no precompiled header, the files parse the headers themselves:\n{result.stdout}")
        return []
    return ["-include-pch", str(output)] if clang else ["-Winvalid-pch", "-include", str(header)]


def combined_twins(sources):
    """One translation unit holding every must-compile twin."""
    includes, bodies = split_includes(sources)
    for number, (path, body) in enumerate(zip(sources, bodies)):
        code = re.sub(r"\bint main\(", "int twin_main(", "\n".join(body))
        bodies[number] = f"// {path.name}\nnamespace twin_{number} {{\n{code}\n}}  // namespace twin_{number}\n"
    return "\n".join(includes) + "\n\n" + "\n".join(bodies)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    compiler, include_dir, extra = argv[1], argv[2], argv[3:]
    sources = sorted(pathlib.Path(__file__).resolve().parent.glob("*.cpp"))
    if not sources:
        print("compile_fail: no test sources found", file=sys.stderr)
        return 1

    def must_fail(path):
        """The lines to print for one file's must-fail half, and whether it failed."""
        expected = expectations(path)
        if not expected or any(not e for e in expected):
            return [f"FAIL {path.name}: the first line must be '{EXPECT} <substring>'"], True
        code, output = compile_source(compiler, include_dir, extra, path, ["-DANVIL_COMPILE_FAIL"], pch)
        missing = [e for e in expected if e not in output]
        if code == 0:
            return [f"FAIL {path.name}: compiled, but must fail with: {expected[0]}"], True
        if missing:
            return [f"FAIL {path.name}: failed, but the diagnostic lacks {missing}; it was:\n{output}"], True
        # Not a failure, but the time the header saves is lost.
        skipped = [line for line in output.splitlines() if "-Winvalid-pch" in line]
        return [f"ok   {path.name} fails as expected", *skipped], False

    def must_compile(path):
        code, output = compile_source(compiler, include_dir, extra + PASS_FLAGS, path, [])
        if code != 0:
            return [f"FAIL {path.name}: the must-compile twin (without ANVIL_COMPILE_FAIL) fails:\n{output}"], True
        return [], False

    failures = 0
    pch = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        with tempfile.TemporaryDirectory() as work:
            twins = pathlib.Path(work) / "must_compile_twins.cpp"
            twins.write_text(combined_twins(sources))
            # main may end without a return; a renamed main may not, so that one warning is off here.
            combined = pool.submit(compile_source, compiler, include_dir, extra + PASS_FLAGS + ["-Wno-return-type"],
                                   twins, [])
            pch = precompiled_header(compiler, include_dir, extra, sources, pathlib.Path(work))
            for lines, failed in pool.map(must_fail, sources):
                print("\n".join(lines))
                failures += failed
            code, output = combined.result()
        if code == 0:
            print(f"ok   all {len(sources)} must-compile twins compile warning-free")
        else:
            print("compile_fail: the combined must-compile twins fail; compiling them one by one")
            for lines, failed in pool.map(must_compile, sources):
                if lines:
                    print("\n".join(lines))
                failures += failed
    print(f"compile_fail: {failures} failure(s) in {len(sources)} files" if failures else
          f"compile_fail: all {len(sources)} files fail and compile as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
