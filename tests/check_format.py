#!/usr/bin/env python3
"""Fails when a tracked C++ file differs from what clang-format makes of it (STYLE.md: formatting is automatic).

usage: check_format.py SOURCE_DIR CLANG_FORMAT
The generated single header is left out: it is checked by amalgamation.fresh instead.
"""
import pathlib
import subprocess
import sys


def main() -> int:
    root, clang_format = pathlib.Path(sys.argv[1]), sys.argv[2]
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "*.hpp", "*.cpp"], capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"skipped: {root} is not a git checkout, so there is no list of tracked files to check")
        return 77
    files = [str(root / name) for name in listed.stdout.split() if not name.startswith("single_include/")]
    result = subprocess.run([clang_format, "--dry-run", "-Werror", *files], capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stderr[:20000])
        print("check_format: run clang-format -i on the files above", file=sys.stderr)
        return 1
    print(f"check_format: {len(files)} files formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
