#!/usr/bin/env python3
"""Compiles every ```cpp block of README.md, so the documentation cannot drift from the code.

usage: readme_snippets.py README CXX INCLUDE_DIR WORK_DIR [EXTRA_FLAG...]
Each block becomes one translation unit: its #include lines stay at file scope, everything else is the body
of a function (the snippets are written as statements a user would put in main). -fsyntax-only: the snippets
name files that exist only on a user's machine.
"""
import pathlib
import re
import subprocess
import sys


def main() -> int:
    readme, cxx, include_dir, work = sys.argv[1], sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
    extra = sys.argv[5:]
    blocks = re.findall(r"```cpp\n(.*?)```", pathlib.Path(readme).read_text(encoding="utf-8"), re.S)
    if not blocks:
        print(f"{readme}: no ```cpp blocks found", file=sys.stderr)
        return 1
    work.mkdir(parents=True, exist_ok=True)
    failures = 0
    for number, block in enumerate(blocks, 1):
        lines = block.splitlines()
        includes = [line for line in lines if line.startswith("#include")]
        body = [line for line in lines if not line.startswith("#include")]
        source = work / f"readme_snippet_{number}.cpp"
        source.write_text("\n".join(includes) + f"\n\n[[maybe_unused]] static void readme_snippet_{number}() {{\n"
                          + "\n".join(body) + "\n}\n", encoding="utf-8")
        result = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-variable",
                                 "-Werror", f"-I{include_dir}", *extra, str(source)], capture_output=True, text=True)
        status = "ok" if result.returncode == 0 else "FAILED"
        print(f"README.md snippet {number}: {status}")
        if result.returncode != 0:
            print(result.stdout + result.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
