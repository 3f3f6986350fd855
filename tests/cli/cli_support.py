"""What the command-line tests share: running the anvil binary, recording checks, reading .npy files (no numpy
needed) and comparing values.

Each test script sets `ANVIL` (the binary's path) before calling `anvil()`.
"""
import ast
import math
import pathlib
import struct
import subprocess

ANVIL = ""
DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
failures = []


def check(condition: bool, what: str) -> None:
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


def read_npy(path: pathlib.Path):
    """(shape, flat values) of a little-endian f4/i4/i8 .npy in C order."""
    data = path.read_bytes()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    major = data[6]
    header_length = struct.unpack("<H" if major == 1 else "<I", data[8:10] if major == 1 else data[8:12])[0]
    start = (10 if major == 1 else 12) + header_length
    header = ast.literal_eval(data[10 if major == 1 else 12:start].decode("latin1"))
    if header["fortran_order"]:
        raise ValueError(f"{path}: Fortran order")
    code = {"<f4": "f", "<i4": "i", "<i8": "q"}[header["descr"]]
    shape = tuple(header["shape"])
    count = math.prod(shape)
    return shape, list(struct.unpack(f"<{count}{code}", data[start:start + count * struct.calcsize(code)]))


def write_npy_f32(path: pathlib.Path, shape, values) -> None:
    """A little-endian float32 .npy in C order (numpy's format 1.0)."""
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" %
              "".join(f"{d}, " for d in shape)).encode("latin1")
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header +
                     struct.pack(f"<{len(values)}f", *values))


def rows(shape, values):
    width = shape[-1]
    return [values[i:i + width] for i in range(0, len(values), width)]


def max_relative_error(got, expected) -> float:
    if len(got) != len(expected):
        return math.inf
    return max((abs(a - b) / max(1.0, abs(b)) for a, b in zip(got, expected)), default=0.0)


def anvil(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([ANVIL, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def check_error(result, status: int, prefix: str, *needles: str, what: str) -> None:
    lines = result.stderr.splitlines()
    check(result.returncode == status, f"{what}: exit status {status} (got {result.returncode}: {result.stderr!r})")
    check(len(lines) == 1 and lines[0].startswith(prefix), f"{what}: one line starting '{prefix}'")
    for needle in needles:
        check(needle in result.stderr, f"{what}: message names '{needle}'")
