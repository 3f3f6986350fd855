#!/usr/bin/python3
"""Fails when a tracked file outside tests/data/ is an executable binary.

Build outputs (a test program, a benchmark) once landed at the repository's root by accident; the library ships
as source, and the only binaries it keeps are the test fixtures under tests/data/. A file counts as an executable
binary when it starts with an ELF, Mach-O (thin or fat) or PE header, or when git records it as executable and its
first 8 KiB hold a NUL byte (a script is text). Run from anywhere inside the git checkout; exits 77 (skipped, with
a line saying why) outside one.
"""
import pathlib
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWED = ("tests/data/",)
MACH_O = {b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe"}


def why_binary(head: bytes, executable: bool) -> str:
    if head.startswith(b"\x7fELF"):
        return "an ELF executable or object"
    if head[:4] in MACH_O:
        return "a Mach-O binary"
    if head.startswith(b"MZ") and len(head) >= 64:
        (pe_offset,) = struct.unpack_from("<I", head, 60)
        if head[pe_offset:pe_offset + 4] == b"PE\0\0":
            return "a PE (Windows) executable"
    if executable and b"\0" in head:
        return "an executable file that is not text"
    return ""


def main() -> int:
    try:
        listing = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s", "-z"], check=True,
                                 capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_tracked_binaries: skipped: {ROOT} is not a git checkout ({e})")
        return 77
    found = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        name = path.decode("utf-8", "replace")
        mode = meta.split(b" ")[0]
        if mode == b"120000" or mode == b"160000" or name.startswith(ALLOWED):
            continue  # links and submodules hold no bytes here
        file = ROOT / name
        if not file.is_file():
            continue  # deleted in the work tree: git status says so, this check has nothing to read
        with open(file, "rb") as f:
            head = f.read(8192)
        why = why_binary(head, mode == b"100755")
        if why:
            found.append(f"{name}: {why}")
    for line in found:
        print(f"tracked binary outside tests/data/: {line}")
    if found:
        print("remove it (git rm) or, if it is a test fixture, move it under tests/data/")
        return 1
    print("no executable binary is tracked outside tests/data/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
