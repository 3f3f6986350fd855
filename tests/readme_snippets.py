#!/usr/bin/env python3
"""Compiles every ```cpp block of README.md, so the documentation cannot drift from the code.

usage: readme_snippets.py README CXX INCLUDE_DIR WORK_DIR [EXTRA_FLAG...]
Each block's #include lines stay at file scope, everything else is the body of a function (the snippets are
written as statements a user would put in main). All blocks are compiled as one translation unit, which
parses the headers once instead of once per block (9 blocks: 56 s in CI one by one); only when that fails are
they compiled one by one to name the block. -fsyntax-only: the snippets name files that exist only on a user's
machine.
"""
import pathlib
import re
import subprocess
import sys


def split(block):
    """A block's #include lines and the rest, its body."""
    lines = block.splitlines()
    return ([line for line in lines if line.startswith("#include")],
            [line for line in lines if not line.startswith("#include")])


def function(number, body):
    return (f"namespace readme_snippet_{number}_scope {{\n"
            f"[[maybe_unused]] static void readme_snippet_{number}() {{\n" + "\n".join(body) + "\n}\n"
            f"}}  // namespace readme_snippet_{number}_scope\n")


def main() -> int:
    readme, cxx, include_dir, work = sys.argv[1], sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
    extra = sys.argv[5:]
    blocks = re.findall(r"```cpp\n(.*?)```", pathlib.Path(readme).read_text(encoding="utf-8"), re.S)
    if not blocks:
        print(f"{readme}: no ```cpp blocks found", file=sys.stderr)
        return 1
    work.mkdir(parents=True, exist_ok=True)

    def compile_source(source):
        return subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-variable",
                               "-Werror", f"-I{include_dir}", *extra, str(source)], capture_output=True, text=True)

    includes, functions = [], []
    for number, block in enumerate(blocks, 1):
        block_includes, body = split(block)
        includes += [line for line in block_includes if line not in includes]
        functions.append(function(number, body))
    combined = work / "readme_snippets.cpp"
    combined.write_text("\n".join(includes) + "\n\n" + "\n".join(functions), encoding="utf-8")
    together = compile_source(combined)
    if together.returncode == 0:
        for number in range(1, len(blocks) + 1):
            print(f"README.md snippet {number}: ok")
        return 0

    print("README.md: the snippets fail together; compiling them one by one")
    failures = 0
    for number, block in enumerate(blocks, 1):
        block_includes, body = split(block)
        source = work / f"readme_snippet_{number}.cpp"
        source.write_text("\n".join(block_includes) + "\n\n" + function(number, body), encoding="utf-8")
        result = compile_source(source)
        status = "ok" if result.returncode == 0 else "FAILED"
        print(f"README.md snippet {number}: {status}")
        if result.returncode != 0:
            print(result.stdout + result.stderr)
            failures += 1
    if not failures:
        # Each block compiles alone but not beside the others: a clash between blocks, not a broken snippet.
        print(f"README.md: every snippet compiles alone, but not together ({combined}):")
        print(together.stdout + together.stderr)
        failures = 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
