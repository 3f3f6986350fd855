#!/usr/bin/env python3
"""Writes include/anvil/backend/ane/mil_op_defaults.hpp: every optional MIL op input that has a default in
coremltools' op registry, with that default, from the simulator's copy of mil_ops.json.

Why: coremltools writes every such input, defaults included, and Core ML's ML Program parser refuses ops that
leave some out although its documentation calls them optional (RUNTIME.md §0b #17: ONNX Runtime's Core ML
builders, "coreml docs claims validate_indices is optional but in practice it is required"). anvil's MIL writer
adds each one a caller leaves out, on both routes, from this table.

Each parameter records the first opset whose definition has it (gather's validate_indices exists from iOS17, so
an ios16 program must not carry it), and how its value is made: a scalar int32, bool or string; a scalar of the
op's float type; or one of the shape-dependent defaults mil_ops.json spells as text ('all 1' strides and
dilations per spatial axis, 'all 0' pads per spatial side, 'all axes' for layer_norm).

Left out: linear's bias ('zeros', a tensor the size of the output): ONNX Runtime's Core ML builder omits it and
Core ML runs those models (RUNTIME.md §0b #17), and anvil lowers constant-weight products to conv on both routes.

Run `python3 tools/make_mil_op_defaults.py` to rewrite the header, `--check` to fail (exit 1) when it is stale.
"""
import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tools" / "ane-sim" / "mil_ops.json"
OUTPUT = ROOT / "include" / "anvil" / "backend" / "ane" / "mil_op_defaults.hpp"
LEFT_OUT = {("linear", "bias")}
SHAPED = {"all 1": "ones_per_spatial_axis", "all 0": "zeros_per_spatial_side", "all axes": "every_axis"}


def opset(text):
    match = re.fullmatch(r"iOS(\d+)", text)
    if not match:
        raise SystemExit(f"make_mil_op_defaults: opset '{text}' is not iOS<N>")
    return int(match.group(1))


def added_at(entry):
    """Input name -> the opset whose re-registration added it (mil_ops.json's '[auto: +inputs a, b]' diffs)."""
    added = {}
    for version, text in entry.get("changes", {}).items():
        match = re.search(r"\[auto:([^\]]*)\]", text)
        if not match:
            continue
        for clause in match.group(1).split(";"):
            clause = clause.strip()
            if clause.startswith("+inputs "):
                for name in clause[len("+inputs "):].split(","):
                    added[name.strip()] = opset(version)
    return added


def kind_of(op, name, spec, types):
    default, declared = spec["default"], spec["type"]
    if isinstance(default, str) and default in SHAPED:
        return SHAPED[default], 0, ""
    scalar = re.fullmatch(r"scalar<(\w+)>", declared)
    if not scalar:
        raise SystemExit(f"make_mil_op_defaults: {op}.{name}: no rule for a default '{default}' of {declared}")
    element = scalar.group(1)
    allowed = types.get(element, [element])
    if isinstance(default, bool):
        return "boolean", int(default), ""
    if isinstance(default, str):
        if "string" not in allowed:
            raise SystemExit(f"make_mil_op_defaults: {op}.{name}: text default '{default}' for {declared}")
        return "string", 0, default
    if isinstance(default, int) and "int32" in allowed:
        return "int32", default, ""
    if isinstance(default, (int, float)) and ("fp16" in allowed or "fp32" in allowed):
        return "floating", float(default), ""
    raise SystemExit(f"make_mil_op_defaults: {op}.{name}: no rule for a default {default!r} of {declared}")


def number_text(value):
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    return text if any(c in text for c in ".e") else text + ".0"


def render():
    table = json.loads(SOURCE.read_text())
    rows = []
    for op, entry in table.items():
        if op == "_meta":
            continue
        types = entry.get("types", {})
        since = opset(entry["since"])
        added = added_at(entry)
        for name, spec in entry["inputs"].items():
            if not spec.get("optional") or spec.get("default") is None or (op, name) in LEFT_OUT:
                continue
            kind, number, text = kind_of(op, name, spec, types)
            rows.append((op, name, max(since, added.get(name, since)), kind, number, text))
    lines = [
        "// anvil: the MIL op inputs coremltools writes when a caller leaves them out, with their defaults.",
        "// Core ML's ML Program parser refuses ops without them although its documentation calls them",
        "// optional (RUNTIME.md §0b #17), so mil_writer adds each one a lowering leaves out, on both routes.",
        "// Do not edit: rerun `python3 tools/make_mil_op_defaults.py` (from tools/ane-sim/mil_ops.json); its",
        "// `--check` (a test) fails when this is stale.",
        "#pragma once",
        "",
        "#include <array>",
        "#include <cstdint>",
        "#include <string_view>",
        "",
        "namespace anvil::detail::ane {",
        "",
        "// How a defaulted input's value is made.",
        "enum class mil_default_kind : std::uint8_t {",
        "    int32,                   // a scalar int32: `number`",
        "    boolean,                 // a scalar bool: `number` is 0 or 1",
        "    string,                  // a scalar string: `text`",
        "    floating,                // a scalar of the op's float type (its `x`'s): `number`",
        "    ones_per_spatial_axis,   // int32 [1] * (rank(x) - 2): strides and dilations",
        "    zeros_per_spatial_side,  // int32 [0] * 2 (rank(x) - 2): pads",
        "    every_axis,              // int32 range(rank(x)): layer_norm's axes",
        "};",
        "",
        "struct mil_default_input {",
        "    std::string_view op;",
        "    std::string_view name;",
        "    int since;  // the first opset (15 = ios15, ..., 18 = ios18) whose definition has the input",
        "    mil_default_kind kind;",
        "    double number;",
        "    std::string_view text;",
        "};",
        "",
        f"inline constexpr std::array<mil_default_input, {len(rows)}> mil_default_inputs{{{{",
    ]
    for op, name, since, kind, number, text in rows:
        lines.append(f'    {{"{op}", "{name}", {since}, mil_default_kind::{kind}, {number_text(number)}, "{text}"}},')
    lines += ["}};", "", "}  // namespace anvil::detail::ane", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed header is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python3 tools/make_mil_op_defaults.py", file=sys.stderr)
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is current")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
