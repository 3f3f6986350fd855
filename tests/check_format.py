#!/usr/bin/env python3
"""Fails when a tracked C++ file differs from what clang-format makes of it (STYLE.md: formatting is automatic).

usage: check_format.py SOURCE_DIR CLANG_FORMAT
The generated files are left out: the single header (checked by amalgamation.fresh) and the simulator's embedded
copy of mil_ops.json (checked by ane_sim.ops_table_fresh).
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
    generated = ("single_include/", "tools/ane-sim/mil_ops_json.hpp")
    files = [str(root / name) for name in listed.stdout.split() if not name.startswith(generated)]
    result = subprocess.run([clang_format, "--dry-run", "-Werror", *files], capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stderr[:20000])
        print("check_format: run clang-format -i on the files above", file=sys.stderr)
        return 1
    print(f"check_format: {len(files)} files formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
