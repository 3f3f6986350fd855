#!/usr/bin/env python3
"""Writes include/anvil/io/unicode_tables.hpp: the Unicode data anvil's tokenizers need, as compact tables.

Everything comes from Python's unicodedata (its Unicode version is recorded in the header):
  - general categories as sorted range starts, packed `start << 8 | category` (binary-searched);
  - simple lower-case mappings as runs `first, last, stride, delta` (stride 1 or 2, as the alternating Latin
    blocks need) plus the few multi-code-point mappings of str.lower() (U+0130);
  - canonical decompositions, fully expanded and canonically ordered (Hangul syllables are left to the
    algorithm), as `code point, offset, length` into one pool;
  - canonical combining classes as runs `first, last, class` (non-zero only), for the canonical reordering
    step of NFD;
  - primary composites for NFC as `first, second, composite`, sorted by (first, second): every code point
    whose canonical decomposition is a pair and that NFC leaves alone (so composition exclusions, singletons
    and non-starter decompositions are out; Hangul syllables are left to the algorithm).

Run `python3 tools/make_unicode_tables.py` to rewrite the header, `--check` to fail (exit 1) when the committed
header differs from what this Python would write (exit 77, skipped, when this Python has another Unicode version).
"""
import argparse
import pathlib
import sys
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "include" / "anvil" / "io" / "unicode_tables.hpp"

# The order of anvil::detail::unicode_category in unicode.hpp; Cn (unassigned) is 0.
CATEGORIES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
              "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3
MAX_CODE_POINT = 0x10FFFF


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def category_ranges():
    index = {name: i for i, name in enumerate(CATEGORIES)}
    starts, previous = [], None
    for cp in range(MAX_CODE_POINT + 1):
        category = index[unicodedata.category(chr(cp))]
        if category != previous:
            starts.append(cp << 8 | category)
            previous = category
    return starts


def lower_mappings():
    single, multi = {}, []
    for cp in range(MAX_CODE_POINT + 1):
        if is_surrogate(cp):
            continue
        lowered = chr(cp).lower()
        if lowered == chr(cp):
            continue
        if len(lowered) == 1:
            single[cp] = ord(lowered) - cp
        else:
            multi.append((cp, [ord(c) for c in lowered]))
    # Greedy runs of equal delta; a stride-2 run only skips code points that map nowhere, so runs never
    # overlap and the lookup needs one binary search.
    runs, cps, i = [], sorted(single), 0
    while i < len(cps):
        first, delta = cps[i], single[cps[i]]
        stride, last, j = 1, first, i + 1
        if j < len(cps) and single[cps[j]] == delta:
            if cps[j] == first + 1:
                stride = 1
            elif cps[j] == first + 2 and first + 1 not in single:
                stride = 2
        while j < len(cps) and cps[j] == last + stride and single[cps[j]] == delta and \
                (stride == 1 or last + 1 not in single):
            last = cps[j]
            j += 1
        runs.append((first, last, stride, delta))
        i = j
    return runs, multi


def decompositions():
    entries, pool = [], []
    for cp in range(MAX_CODE_POINT + 1):
        if is_surrogate(cp) or HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        decomposed = unicodedata.normalize("NFD", chr(cp))
        if decomposed != chr(cp):
            entries.append((cp, len(pool), len(decomposed)))
            pool.extend(ord(c) for c in decomposed)
    return entries, pool


def combining_classes():
    runs = []
    for cp in range(MAX_CODE_POINT + 1):
        ccc = 0 if is_surrogate(cp) else unicodedata.combining(chr(cp))
        if ccc == 0:
            continue
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == ccc:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, ccc])
    return runs


def compositions():
    pairs = []
    for cp in range(MAX_CODE_POINT + 1):
        if is_surrogate(cp) or HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        raw = unicodedata.decomposition(chr(cp))
        if not raw or raw.startswith("<"):
            continue
        parts = [int(x, 16) for x in raw.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(cp)) == chr(cp):
            pairs.append((parts[0], parts[1], cp))
    return sorted(pairs)


def wrap(items, indent="    ", width=110):
    lines, line = [], indent
    for item in items:
        piece = item + ","
        if len(line) + len(piece) + 1 > width:
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def render():
    starts = category_ranges()
    runs, multi = lower_mappings()
    entries, pool = decompositions()
    ccc = combining_classes()
    composed = compositions()
    multi_pool, multi_entries = [], []
    for cp, lowered in multi:
        multi_entries.append((cp, len(multi_pool), len(lowered)))
        multi_pool.extend(lowered)
    out = []
    out.append(f"""// GENERATED by tools/make_unicode_tables.py from Python's unicodedata (Unicode {unicodedata.unidata_version}).
// Do not edit: rerun `python3 tools/make_unicode_tables.py`; its `--check` (a test) fails when this is stale.
// Read through unicode.hpp, which documents the layouts.
// clang-format off
#pragma once

#include <cstdint>

namespace anvil::detail::unicode_tables {{

inline constexpr const char* unicode_version = "{unicode_version()}";

// General category ranges: start << 8 | category (the order of unicode_category), sorted by start.
inline constexpr std::uint32_t category_starts[] = {{
{wrap(f"0x{s:x}" for s in starts)}
}};

struct lower_run {{
    std::uint32_t first, last, stride;
    std::int32_t delta;
}};
// Simple lower-case mappings: first..last step stride map to code point + delta.
inline constexpr lower_run lower_runs[] = {{
{wrap(f"{{0x{a:x}, 0x{b:x}, {s}, {d}}}" for a, b, s, d in runs)}
}};

struct expansion {{
    std::uint32_t code_point;
    std::uint16_t offset, length;
}};
// Lower-case mappings to several code points: lower_multi_pool[offset, offset + length).
inline constexpr expansion lower_multi[] = {{
{wrap(f"{{0x{a:x}, {o}, {n}}}" for a, o, n in multi_entries)}
}};
inline constexpr std::uint32_t lower_multi_pool[] = {{
{wrap(f"0x{c:x}" for c in multi_pool)}
}};

// Full canonical decompositions (NFD of one code point, Hangul syllables excluded):
// decomposition_pool[offset, offset + length), sorted by code point.
inline constexpr expansion decompositions[] = {{
{wrap(f"{{0x{a:x}, {o}, {n}}}" for a, o, n in entries)}
}};
inline constexpr std::uint32_t decomposition_pool[] = {{
{wrap(f"0x{c:x}" for c in pool)}
}};

struct class_run {{
    std::uint32_t first, last, combining_class;
}};
// Non-zero canonical combining classes, sorted.
inline constexpr class_run combining_class_runs[] = {{
{wrap(f"{{0x{a:x}, 0x{b:x}, {c}}}" for a, b, c in ccc)}
}};

struct composition {{
    std::uint32_t first, second, composite;
}};
// Primary composites (canonical composition of NFC), sorted by (first, second).
inline constexpr composition compositions[] = {{
{wrap(f"{{0x{a:x}, 0x{b:x}, 0x{c:x}}}" for a, b, c in composed)}
}};

}}  // namespace anvil::detail::unicode_tables
// clang-format on
""")
    return "".join(out)


def unicode_version():
    return unicodedata.unidata_version


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the committed header is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        recorded = f"(Unicode {unicodedata.unidata_version})"
        if current and recorded not in current.splitlines()[0]:
            # Another Python's tables would differ anyway; only the version that wrote the header can judge it.
            print(f"skipped: {OUTPUT.name} was generated with another Unicode version than this Python's "
                  f"{unicodedata.unidata_version}")
            return 77
        if current != text:
            print(f"{OUTPUT} is stale (this Python has Unicode {unicodedata.unidata_version}); rerun "
                  f"python3 tools/make_unicode_tables.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
