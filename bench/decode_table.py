#!/usr/bin/env python3
"""The rows and the table of bench/decode_vs_llama_cpp.sh. Standard library only.

  decode_table.py tag REPEAT                 stdin's JSON lines (llama_cpp_bench.mjs) with "repeat": REPEAT
  decode_table.py anvil-row DECODE FILLED FILE THREADS PRODUCTS REPEAT
                                             one JSON line from two `anvil generate --json` outputs
  decode_table.py table RESULTS              the table of a results file (one JSON line per measurement)
  decode_table.py --self-test                checks the table's arithmetic against numbers worked out by hand

The table, per file and per measure (decode and 512-token prefill tokens/s): each engine's best sample, at
the thread count whose best is highest, with the spread (min-max) of that thread count's samples over the
repetitions; the ratio of the bests (anvil / llama.cpp, above 1: anvil faster); and the range of the ratios
repetition by repetition (each repetition's anvil sample over its llama.cpp sample, both at their best thread
counts), which says whether the ratio holds or only one lucky sample made it.
"""
import json
import sys

MEASURES = (("decode_tokens_per_s", "decode"), ("prefill_tokens_per_s", "prefill 512"))


def tag(repeat):
    for line in sys.stdin:
        if line.strip():
            row = json.loads(line)
            row["repeat"] = int(repeat)
            print(json.dumps(row))


def anvil_row(decode_text, filled_text, file, threads, products, repeat):
    decode, filled = json.loads(decode_text), json.loads(filled_text)
    print(json.dumps({"engine": "anvil" if products == "int8" else "anvil exact", "file": file,
                      "threads": int(threads), "repeat": int(repeat),
                      "prefill_tokens_per_s": filled["stats"]["prefill_tokens_per_s"],
                      "decode_tokens_per_s": decode["stats"]["decode_tokens_per_s"],
                      "generated": len(decode["tokens"]), "tokens": decode["tokens"]}))


def summarise(rows, file, engine, key):
    """The engine's best thread count for `key` on `file`: {threads, best, low, high, by_repeat}, or None."""
    mine = [r for r in rows if r["file"] == file and r["engine"] == engine]
    if not mine:
        return None
    by_threads = {}
    for r in mine:
        by_threads.setdefault(r["threads"], []).append(r)
    threads, samples = max(by_threads.items(), key=lambda kv: max(r[key] for r in kv[1]))
    values = [r[key] for r in samples]
    return {"threads": threads, "best": max(values), "low": min(values), "high": max(values),
            "by_repeat": {r.get("repeat", 1): r[key] for r in samples}, "rows": samples}


def ratios(anvil, llama):
    """(ratio of the bests, lowest and highest ratio of one repetition's samples)."""
    paired = [anvil["by_repeat"][k] / llama["by_repeat"][k] for k in anvil["by_repeat"] if k in llama["by_repeat"]]
    return anvil["best"] / llama["best"], min(paired, default=float("nan")), max(paired, default=float("nan"))


def table(rows):
    files = sorted({r["file"] for r in rows}, key=lambda f: (not f.startswith("llama"), f))
    repeats = len({r.get("repeat", 1) for r in rows})
    lines = [f"each engine's best of {repeats} repetition(s) at its best thread count, (min-max) of that thread "
             "count's samples; ratio = anvil / llama.cpp of the bests [range of the per-repetition ratios]"]
    for key, label in MEASURES:
        lines.append("")
        lines.append(f"{label + ' tok/s':22} {'anvil':>24} {'llama.cpp':>24} {'ratio':>6} {'[range]':>13} "
                     f"{'exact':>6} {'[range]':>13}")
        for f in files:
            s = {e: summarise(rows, f, e, key) for e in ("anvil", "anvil exact", "llama.cpp")}
            if s["anvil"] is None or s["llama.cpp"] is None:
                continue

            def cell(x):
                return f"{x['best']:7.1f} ({x['low']:.1f}-{x['high']:.1f}) {x['threads']}t"

            def ratio_cells(engine):
                if s[engine] is None:
                    return f"{'-':>6} {'':>13}"
                best, low, high = ratios(s[engine], s["llama.cpp"])
                return f"{best:5.2f}x [{low:4.2f}-{high:4.2f}x]"

            lines.append(f"{f:22} {cell(s['anvil']):>24} {cell(s['llama.cpp']):>24} {ratio_cells('anvil')} "
                         f"{ratio_cells('anvil exact')}")
    lines.append("")
    lines.append("greedy tokens: anvil and llama.cpp agree on the first N (decode, each engine's first repetition)")
    for f in files:
        a = [r for r in rows if r["file"] == f and r["engine"] == "anvil"]
        b = [r for r in rows if r["file"] == f and r["engine"] == "llama.cpp"]
        if a and b:
            x, y = min(a, key=lambda r: r.get("repeat", 1))["tokens"], min(b, key=lambda r: r.get("repeat", 1))["tokens"]
            agree = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            lines.append(f"  {f:22} first {agree} of {len(x)}")
    return "\n".join(lines)


def self_test():
    def row(engine, threads, repeat, decode, prefill):
        return {"engine": engine, "file": "llama100m_q4_0.gguf", "threads": threads, "repeat": repeat,
                "decode_tokens_per_s": decode, "prefill_tokens_per_s": prefill, "tokens": [1, 2, 3]}
    rows = [row("llama.cpp", 1, 1, 50.0, 300.0), row("llama.cpp", 2, 1, 80.0, 500.0),
            row("llama.cpp", 1, 2, 55.0, 310.0), row("llama.cpp", 2, 2, 40.0, 450.0),
            row("anvil", 1, 1, 60.0, 200.0), row("anvil", 2, 1, 70.0, 260.0),
            row("anvil", 1, 2, 66.0, 210.0), row("anvil", 2, 2, 72.0, 240.0)]
    # Decode: llama.cpp's best thread count is 2 (best 80, samples 80 and 40), anvil's is 2 (72; 70, 72).
    llama = summarise(rows, "llama100m_q4_0.gguf", "llama.cpp", "decode_tokens_per_s")
    anvil = summarise(rows, "llama100m_q4_0.gguf", "anvil", "decode_tokens_per_s")
    assert (llama["threads"], llama["best"], llama["low"], llama["high"]) == (2, 80.0, 40.0, 80.0), llama
    assert (anvil["threads"], anvil["best"], anvil["low"], anvil["high"]) == (2, 72.0, 70.0, 72.0), anvil
    best, low, high = ratios(anvil, llama)
    # 72 / 80 = 0.9; repetition 1: 70 / 80 = 0.875, repetition 2: 72 / 40 = 1.8.
    assert abs(best - 0.9) < 1e-12 and abs(low - 0.875) < 1e-12 and abs(high - 1.8) < 1e-12, (best, low, high)
    text = table(rows)
    assert " 0.90x [0.88-1.80x]" in text, text
    assert "first 3 of 3" in text, text
    # A thread count's spread is its own samples' only: prefill's best for llama.cpp is 2 threads (500; 500, 450).
    llama_prefill = summarise(rows, "llama100m_q4_0.gguf", "llama.cpp", "prefill_tokens_per_s")
    assert (llama_prefill["low"], llama_prefill["high"]) == (450.0, 500.0), llama_prefill
    print("decode_table.py: self-test passed")


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        self_test()
    elif len(argv) == 3 and argv[1] == "tag":
        tag(argv[2])
    elif len(argv) == 8 and argv[1] == "anvil-row":
        anvil_row(*argv[2:])
    elif len(argv) == 3 and argv[1] == "table":
        with open(argv[2], encoding="utf-8") as results:
            print(table([json.loads(line) for line in results if line.strip()]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
