#!/usr/bin/env python3
"""Writes (or, with --check, checks) the README's table of ONNX backend tests passed, failed, unsupported and
with bad data (tests/onnx_conformance/errata.tsv: data that contradicts ONNX's own model or spec).

Usage: onnx_conformance_table.py [--check] [REPO_ROOT]

The table is made from tests/onnx_conformance/expected.tsv (which tests/onnx_conformance/runner.cpp writes with
--write, and checks against every run with --expect) and goes between the markers
<!-- onnx-conformance:begin --> and <!-- onnx-conformance:end --> of README.md.

Node tests are counted under the op they test: a model of one op (Constant aside) under that op; an
"_expanded" model (the op written out as its function body) under the op of its unexpanded twin; any other
model of several ops under "(several ops)". The other suites get a row each. Standard library only.
"""
import collections
import pathlib
import sys

BEGIN, END = "<!-- onnx-conformance:begin -->", "<!-- onnx-conformance:end -->"


def read_results(path):
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        rows.append((fields[0], fields[1], fields[2]))
    return rows


def tested_op(ops):
    """The op a node test is about, when its model holds one (Constant aside)."""
    kinds = [op for op in ops.split("+") if op and op != "Constant"] if ops else []
    if len(kinds) == 1:
        return kinds[0]
    if not kinds and ops == "Constant":
        return "Constant"
    return None


def table(rows):
    node = {name: (ops, status) for name, ops, status in rows if name.startswith("node/")}
    per_op = collections.defaultdict(collections.Counter)
    for name, (ops, status) in node.items():
        op = tested_op(ops)
        if op is None and name.endswith("_expanded"):
            twin = node.get(name[: -len("_expanded")])
            op = tested_op(twin[0]) if twin else None
        per_op[op or "(several ops)"][status] += 1
    totals = collections.Counter(status for _, (_, status) in node.items())
    suites = collections.defaultdict(collections.Counter)
    for name, _, status in rows:
        suite = name.split("/", 1)[0]
        if suite != "node":
            suites[suite][status] += 1

    def line(label, counts):
        total = sum(counts.values())
        return (f"| {label} | {total} | {counts['pass']} | {counts['fail']} | {counts['unsupported']} | "
                f"{counts['bad data']} |")

    run = sum(totals.values())
    lines = [
        f"ONNX's node tests: **{totals['pass']} of {run} pass** ({100.0 * totals['pass'] / run:.1f}%), "
        f"{totals['fail']} fail, {totals['unsupported']} are refused as unsupported, {totals['bad data']} have data "
        "that contradicts ONNX's own model or spec (`tests/onnx_conformance/errata.tsv`).",
        "",
        "| suite | tests | pass | fail | unsupported | bad data |",
        "|---|---:|---:|---:|---:|---:|",
        line("node (all)", totals),
    ]
    lines += [line(suite, counts) for suite, counts in sorted(suites.items())]
    lines += ["", "<details><summary>Node tests per op</summary>", "", "| op | tests | pass | fail | unsupported | bad data |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [line(op, counts) for op, counts in sorted(per_op.items(), key=lambda kv: kv[0].lower())]
    lines += ["", "</details>"]
    return "\n".join(lines)


def main(argv):
    check = "--check" in argv
    rest = [a for a in argv[1:] if a != "--check"]
    root = pathlib.Path(rest[0]) if rest else pathlib.Path(__file__).resolve().parents[1]
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"{readme}: the markers {BEGIN} and {END} are missing", file=sys.stderr)
        return 1
    head, rest_text = text.split(BEGIN, 1)
    _, tail = rest_text.split(END, 1)
    fresh = head + BEGIN + "\n" + table(read_results(root / "tests/onnx_conformance/expected.tsv")) + "\n" + END + tail
    if check:
        if fresh != text:
            print("README.md's ONNX conformance table is stale: run tools/onnx_conformance_table.py", file=sys.stderr)
            return 1
        print("README.md's ONNX conformance table matches tests/onnx_conformance/expected.tsv")
        return 0
    readme.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
