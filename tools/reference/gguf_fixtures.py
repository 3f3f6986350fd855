#!/usr/bin/python3
"""GGUF fixtures for anvil's reader: an independent writer of GGUF v3 files, with its own quantiser for each
ggml type, written from the GGUF specification (ggml/docs/gguf.md) and ggml's block layouts (ggml-common.h).

types.gguf holds metadata of every value type (scalars, a string, arrays of integers, floats, bools and
strings), and one tensor per ggml type anvil dequantises: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
Q5_K, Q6_K, Q8_K and IQ4_NL, each of shape [3, 256] (ne = [256, 3]) from seeded random values, at offsets
aligned to general.alignment = 64 (not the default 32, so that a reader that ignores the key fails).
types_expected.npy is every tensor's values as this writer decodes the blocks it wrote (concatenated in
tensor order), and types.json lists the tensors (name, type, ne) and the metadata expected. The decoding
here works on whole arrays of codes (numpy), not block by block as anvil's reference loops do.

Also writes the malformed corpus (tests/data/malformed/gguf/, which seeds the fuzz target too): each file is a
small valid GGUF with one defect, named for it; expected.tsv gives the words its error must contain.

  /usr/bin/python3 tools/reference/gguf_fixtures.py tests/data
"""
import json
import os
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
# gguf_type (metadata value types)
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml_type
TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13,
         "Q6_K": 14, "Q8_K": 15, "IQ4_NL": 20, "BF16": 30}
IQ4NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int32)
ALIGNMENT = 64


def f16(x):
    return np.asarray(x, np.float32).astype(np.float16)


def f16_bytes(x):
    return f16(x).tobytes()


# ---- quantisers: each returns (bytes, decoded float32 values) -------------------------------------------

def quant_f32(x):
    return x.astype("<f4").tobytes(), x.astype(np.float32)


def quant_f16(x):
    h = f16(x)
    return h.astype("<f2").tobytes(), h.astype(np.float32)


def quant_bf16(x):
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return rounded.astype("<u2").tobytes(), (rounded.astype(np.uint32) << 16).view(np.float32)


def blocks(x, size):
    return x.reshape(-1, size)


def quant_q8_0(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        d = f16(np.abs(b).max() / 127.0)
        q = np.clip(np.round(b / np.float32(d)) if d else np.zeros(32), -127, 127).astype(np.int8)
        out += f16_bytes(d) + q.tobytes()
        values.append(q.astype(np.float32) * np.float32(d))
    return bytes(out), np.concatenate(values)


def nibble_pack(codes):
    """32 codes 0..15 -> 16 bytes: byte j holds code j (low nibble) and code j + 16 (high nibble)."""
    codes = codes.astype(np.uint8)
    return (codes[:16] | (codes[16:] << 4)).tobytes()


def quant_q4_0(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        extreme = b[np.argmax(np.abs(b))]
        d = f16(extreme / -8.0)
        q = np.clip(np.round(b / np.float32(d)) + 8 if d else np.full(32, 8), 0, 15).astype(np.int32)
        out += f16_bytes(d) + nibble_pack(q)
        values.append((q - 8).astype(np.float32) * np.float32(d))
    return bytes(out), np.concatenate(values)


def quant_q4_1(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        lo, hi = b.min(), b.max()
        d, m = f16((hi - lo) / 15.0), f16(lo)
        q = np.clip(np.round((b - np.float32(m)) / np.float32(d)) if d else np.zeros(32), 0, 15).astype(np.int32)
        out += f16_bytes(d) + f16_bytes(m) + nibble_pack(q)
        values.append(q.astype(np.float32) * np.float32(d) + np.float32(m))
    return bytes(out), np.concatenate(values)


def high_bits(q):
    """The fifth bit of 32 codes as the u32 qh: bit j is code j's bit 4."""
    return int(sum(((int(v) >> 4) & 1) << j for j, v in enumerate(q))).to_bytes(4, "little")


def quant_q5_0(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        extreme = b[np.argmax(np.abs(b))]
        d = f16(extreme / -16.0)
        q = np.clip(np.round(b / np.float32(d)) + 16 if d else np.full(32, 16), 0, 31).astype(np.int32)
        out += f16_bytes(d) + high_bits(q) + nibble_pack(q & 15)
        values.append((q - 16).astype(np.float32) * np.float32(d))
    return bytes(out), np.concatenate(values)


def quant_q5_1(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        lo, hi = b.min(), b.max()
        d, m = f16((hi - lo) / 31.0), f16(lo)
        q = np.clip(np.round((b - np.float32(m)) / np.float32(d)) if d else np.zeros(32), 0, 31).astype(np.int32)
        out += f16_bytes(d) + f16_bytes(m) + high_bits(q) + nibble_pack(q & 15)
        values.append(q.astype(np.float32) * np.float32(d) + np.float32(m))
    return bytes(out), np.concatenate(values)


def pack_k_scales(scales, mins):
    """8 six-bit scales and mins -> the 12 bytes of Q4_K/Q5_K: bytes 0-3 hold scales 0-3 and, in their top two
    bits, the high bits of scales 4-7; bytes 4-7 the same for the mins; bytes 8-11 the low nibbles of scales
    4-7 (low half) and mins 4-7 (high half)."""
    packed = [0] * 12
    for j in range(4):
        packed[j] = (scales[j] & 63) | ((scales[j + 4] >> 4) << 6)
        packed[j + 4] = (mins[j] & 63) | ((mins[j + 4] >> 4) << 6)
        packed[j + 8] = (scales[j + 4] & 15) | ((mins[j + 4] & 15) << 4)
    return bytes(packed)


def quant_k(x, five):
    """Q4_K / Q5_K: per 256 values, 8 groups of 32, each x = d * scale * q - dmin * min, q of 4 (or 5) bits.
    Codes are laid out per 64 values: 32 bytes whose low nibbles are group 2i and high nibbles group 2i + 1; for
    Q5_K, qh[l] bit 2i is the fifth bit of group 2i's value l and bit 2i + 1 that of group 2i + 1's."""
    top = 31 if five else 15
    out, values = bytearray(), []
    for b in blocks(x, 256):
        groups = b.reshape(8, 32)
        lows = np.minimum(groups.min(axis=1), 0)
        spans = groups.max(axis=1) - lows
        d = f16(max(spans.max() / top / 63.0, 1e-8))
        dmin = f16(max(-lows.min() / 63.0, 1e-8))
        scales = np.clip(np.round(spans / top / np.float32(d)), 1, 63).astype(np.int32)
        mins = np.clip(np.round(-lows / np.float32(dmin)), 0, 63).astype(np.int32)
        step = np.float32(d) * scales.astype(np.float32)
        offset = np.float32(dmin) * mins.astype(np.float32)
        q = np.clip(np.round((groups + offset[:, None]) / step[:, None]), 0, top).astype(np.int32)
        values.append((step[:, None] * q - offset[:, None]).astype(np.float32).reshape(-1))
        low = q & 15
        qs = bytearray()
        for i in range(4):
            qs += (low[2 * i] | (low[2 * i + 1] << 4)).astype(np.uint8).tobytes()
        qh = bytearray(32)
        if five:
            for i in range(8):
                for l in range(32):
                    qh[l] |= ((int(q[i, l]) >> 4) & 1) << i
        out += f16_bytes(d) + f16_bytes(dmin) + pack_k_scales(scales, mins) + (bytes(qh) if five else b"") + bytes(qs)
    return bytes(out), np.concatenate(values)


def quant_q6_k(x):
    """Q6_K: per 256 values, 16 groups of 16 with an int8 scale each, x = d * scale * (q - 32), q of 6 bits. Per
    128 values (n = 0, 1): ql[64 n + l] holds the low nibbles of values l (low) and l + 64 (high), ql[64 n + l +
    32] those of l + 32 and l + 96; qh[32 n + l] bits 0-1, 2-3, 4-5, 6-7 are the top two bits of values l,
    l + 32, l + 64, l + 96 (all within the n-th 128)."""
    out, values = bytearray(), []
    for b in blocks(x, 256):
        groups = b.reshape(16, 16)
        amax = np.abs(groups).max(axis=1)
        scale_f = amax / 31.0
        d = f16(max(np.abs(scale_f).max() / 127.0, 1e-8))
        sc = np.clip(np.round(scale_f / np.float32(d)), 1, 127).astype(np.int32)
        step = np.float32(d) * sc.astype(np.float32)
        q = (np.clip(np.round(groups / step[:, None]), -32, 31) + 32).astype(np.int32).reshape(256)
        values.append((np.repeat(step, 16) * (q - 32)).astype(np.float32))
        ql, qh = bytearray(128), bytearray(64)
        for n in range(2):
            v = q[128 * n: 128 * (n + 1)]
            for l in range(32):
                ql[64 * n + l] = (v[l] & 15) | ((v[l + 64] & 15) << 4)
                ql[64 * n + l + 32] = (v[l + 32] & 15) | ((v[l + 96] & 15) << 4)
                qh[32 * n + l] = (v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6)
        out += bytes(ql) + bytes(qh) + sc.astype(np.int8).tobytes() + f16_bytes(d)
    return bytes(out), np.concatenate(values)


def quant_q8_k(x):
    out, values = bytearray(), []
    for b in blocks(x, 256):
        d = np.float32(np.abs(b).max() / 127.0)
        q = np.clip(np.round(b / d), -127, 127).astype(np.int8)
        sums = q.astype(np.int16).reshape(16, 16).sum(axis=1).astype("<i2")
        out += struct.pack("<f", d) + q.tobytes() + sums.tobytes()
        values.append(q.astype(np.float32) * d)
    return bytes(out), np.concatenate(values)


def quant_iq4_nl(x):
    out, values = bytearray(), []
    for b in blocks(x, 32):
        d = f16(np.abs(b).max() / 127.0)
        q = np.abs(b[:, None] / np.float32(d) - IQ4NL_TABLE[None, :]).argmin(axis=1)
        out += f16_bytes(d) + nibble_pack(q)
        values.append(IQ4NL_TABLE[q].astype(np.float32) * np.float32(d))
    return bytes(out), np.concatenate(values)


QUANTISERS = {"F32": quant_f32, "F16": quant_f16, "BF16": quant_bf16, "Q8_0": quant_q8_0, "Q4_0": quant_q4_0,
              "Q4_1": quant_q4_1, "Q5_0": quant_q5_0, "Q5_1": quant_q5_1, "Q4_K": lambda x: quant_k(x, False),
              "Q5_K": lambda x: quant_k(x, True), "Q6_K": quant_q6_k, "Q8_K": quant_q8_k, "IQ4_NL": quant_iq4_nl}

# ---- the container ---------------------------------------------------------------------------------------


def gguf_string(s):
    data = s.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


SCALAR_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?",
                  U64: "<Q", I64: "<q", F64: "<d"}


def gguf_value(kind, value):
    if kind == STRING:
        return gguf_string(value)
    if kind == ARRAY:
        element, items = value
        body = b"".join(gguf_string(v) if element == STRING else struct.pack(SCALAR_FORMATS[element], v)
                        for v in items)
        return struct.pack("<IQ", element, len(items)) + body
    return struct.pack(SCALAR_FORMATS[kind], value)


def write_gguf(metadata, tensors, alignment=ALIGNMENT, version=3):
    """metadata: [(key, kind, value)]; tensors: [(name, ggml type number, ne, bytes)]."""
    header = GGUF_MAGIC + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, kind, value in metadata:
        header += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, value)
    offset, infos, data = 0, b"", []
    for name, kind, ne, payload in tensors:
        infos += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", kind, offset)
        padded = payload + b"\0" * (-len(payload) % alignment)
        data.append(padded)  # joined once: appending to one bytes object copies it each time
        offset += len(padded)
    head = header + infos
    head += b"\0" * (-len(head) % alignment)
    return head + b"".join(data)


METADATA = [
    ("general.architecture", STRING, "llama"),
    ("general.name", STRING, "anvil gguf fixture"),
    ("general.alignment", U32, ALIGNMENT),
    ("fixture.u8", U8, 200), ("fixture.i8", I8, -100), ("fixture.u16", U16, 65000), ("fixture.i16", I16, -30000),
    ("fixture.i32", I32, -2000000000), ("fixture.f32", F32V, 0.5), ("fixture.bool", BOOL, True),
    ("fixture.u64", U64, 2 ** 40), ("fixture.i64", I64, -(2 ** 40)), ("fixture.f64", F64, 0.125),
    ("fixture.ints", ARRAY, (I32, [1, -2, 3])), ("fixture.floats", ARRAY, (F32V, [0.25, -1.5])),
    ("fixture.bools", ARRAY, (BOOL, [True, False, True])),
    ("fixture.strings", ARRAY, (STRING, ["a", "ü", ""])),
]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    out = os.path.join(root, "gguf")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261203)
    tensors, expected, listing = [], [], []
    for index, (name, kind) in enumerate(TYPES.items()):
        values = (rng.standard_normal(3 * 256) * 0.5 + rng.standard_normal() * 0.1).astype(np.float32)
        payload, decoded = QUANTISERS[name](values)
        tensor = f"t{index}.{name.lower()}"
        tensors.append((tensor, kind, [256, 3], payload))
        expected.append(decoded.astype(np.float32))
        error = float(np.abs(decoded - values).max() / np.abs(values).max())
        listing.append({"name": tensor, "type": name, "ne": [256, 3], "bytes": len(payload),
                        "relative_error": error})
    data = write_gguf(METADATA, tensors)
    with open(os.path.join(out, "types.gguf"), "wb") as f:
        f.write(data)
    np.save(os.path.join(out, "types_expected.npy"), np.concatenate(expected))
    with open(os.path.join(out, "types.json"), "w") as f:
        json.dump({"tensors": listing, "alignment": ALIGNMENT}, f, indent=1)
        f.write("\n")

    # Zero-sized dimensions are legal (ggml requires only non-negative sizes): a file holding such tensors
    # beside ordinary ones, and a name of 63 bytes, the longest ggml holds.
    zero_sized = [("empty.f32", 0, [0, 2], b""), ("w" * 63, 0, [4, 2], np.arange(8, dtype="<f4").tobytes()),
                  ("empty.q8_0", 8, [32, 0], b""), ("after.f16", 1, [2, 1], f16_bytes(np.array([1.5, -2.0])))]
    with open(os.path.join(out, "zero_sized.gguf"), "wb") as f:
        f.write(write_gguf([("general.architecture", STRING, "llama")], zero_sized))

    # The malformed corpus: one defect each, with the words the error must contain.
    bad = os.path.join(root, "malformed", "gguf")
    os.makedirs(bad, exist_ok=True)
    small = [("w", 0, [4, 2], np.arange(8, dtype="<f4").tobytes())]
    meta = [("general.architecture", STRING, "llama")]
    good = write_gguf(meta, small)
    cases = {
        "bad_magic.gguf": (b"GGUX" + good[4:], "not a GGUF file"),
        "version1.gguf": (good[:4] + struct.pack("<I", 1) + good[8:], "version 1"),
        "big_endian.gguf": (good[:4] + struct.pack(">I", 3) + good[8:], "big-endian"),
        "truncated_header.gguf": (good[:30], "too small"),
        "huge_tensor_count.gguf": (good[:8] + struct.pack("<Q", 2 ** 60) + good[16:], "tensors"),
        "huge_metadata_count.gguf": (good[:16] + struct.pack("<Q", 2 ** 61) + good[24:], "metadata entries"),
        "huge_string.gguf": (good[:24] + struct.pack("<Q", 2 ** 62) + good[32:], "claims"),
        "truncated_data.gguf": (good[:-40], "truncated"),
        "five_dims.gguf": (write_gguf(meta, [("w", 0, [1, 1, 1, 4, 2], np.arange(8, dtype="<f4").tobytes())]),
                           "dimensions"),
        # The GGUF spec: keys are ASCII and shorter than 2^16 bytes; ggml: names shorter than GGML_MAX_NAME (64).
        "non_ascii_key.gguf": (write_gguf(meta + [("général.name", STRING, "x")], small), "is not ASCII"),
        "long_key.gguf": (write_gguf(meta + [("k" * 65536, U8, 1)], small), "shorter than 2^16 bytes"),
        "long_tensor_name.gguf": (write_gguf(meta, [("n" * 64, 0, [4, 2], np.arange(8, dtype="<f4").tobytes())]),
                                  "ggml holds at most 63"),
        "overflow_dims.gguf": (write_gguf(meta, [("w", 0, [2 ** 32, 2 ** 32, 2 ** 32], b"")]), "2^64"),
        "partial_block.gguf": (write_gguf(meta, [("w", 8, [16, 1], b"\0" * 34)]), "multiple of its block"),
        "unknown_type.gguf": (write_gguf(meta, [("w", 99, [4, 2], b"\0" * 32)]), "does not know"),
        "duplicate_tensor.gguf": (write_gguf(meta, small + small), "appears twice"),
        "duplicate_key.gguf": (write_gguf(meta + meta, small), "appears twice"),
        "bad_alignment.gguf": (write_gguf(meta + [("general.alignment", U32, 48)], small), "power of two"),
        "nested_array.gguf": (write_gguf(meta + [("x", ARRAY, (ARRAY, []))], small), "array of arrays"),
        "bad_bool.gguf": (write_gguf(meta + [("b", U8, 2)], small).replace(
            gguf_string("b") + struct.pack("<I", U8), gguf_string("b") + struct.pack("<I", BOOL)), "bool holding 2"),
        "unknown_value_type.gguf": (write_gguf(meta + [("v", U8, 1)], small).replace(
            gguf_string("v") + struct.pack("<I", U8), gguf_string("v") + struct.pack("<I", 77)), "unknown value type"),
    }
    # A tensor offset that is not a multiple of the alignment: the info's offset field is the last 8 bytes of
    # the (only) tensor info.
    unaligned = bytearray(good)
    info_end = good.index(b"w", 24) + 1 + 4 + 16 + 4
    unaligned[info_end:info_end + 8] = struct.pack("<Q", 4)
    cases["unaligned_offset.gguf"] = (bytes(unaligned), "not a multiple of the alignment")
    overlap = write_gguf(meta, small + [("v", 0, [4, 2], np.arange(8, dtype="<f4").tobytes())])
    second = overlap.index(b"v", 24) + 1 + 4 + 16 + 4
    overlap = overlap[:second] + struct.pack("<Q", 0) + overlap[second + 8:]
    cases["overlapping_tensors.gguf"] = (overlap, "overlap")
    with open(os.path.join(bad, "expected.tsv"), "w") as manifest:
        for name, (content, words) in sorted(cases.items()):
            with open(os.path.join(bad, name), "wb") as f:
                f.write(content)
            manifest.write(f"{name}\t{words}\n")
    for entry in listing:
        print(f"{entry['name']:12s} {entry['bytes']:5d} bytes, max error {entry['relative_error']:.4f} of max |x|")


if __name__ == "__main__":
    main()
