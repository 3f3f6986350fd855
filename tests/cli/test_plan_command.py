#!/usr/bin/env python3
"""Drives `anvil bench --plan` on a Llama-2-7B config.json with no weights (in a temporary folder) and on a GGUF
fixture: the chunks of layers, their fp16 weights and KV caches and the program counts, worked out here from the
shapes, in --json and in the table; --max-program-weights, --context and --compress; and the errors (no
config.json, not a decoder LM, bad sizes, options of timing runs).

usage: test_plan_command.py PATH_TO_ANVIL
"""
import json
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, anvil, check, check_error, failures  # noqa: E402

cli_support.ANVIL = sys.argv[1]

LLAMA2_7B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
}
H, I, V, LAYERS = 4096, 11008, 32000, 32
LAYER = 2 * (4 * H * H + 3 * H * I) + 2 * 2 * H  # fp16: q, k, v, o; gate, up, down; two norms
HEAD = 2 * V * H + 2 * H  # the LM head and the final norm
# The environment's budget would change the verdicts; the plan reads it, so these runs go without it.
ENV = {k: v for k, v in os.environ.items() if k != "ANVIL_ANE_COMPILE_BUDGET"}


def plan(*args):
    return anvil("bench", "--plan", *args, env=ENV)


def test_7b(folder: pathlib.Path) -> None:
    start = time.monotonic()
    result = plan("--model", folder, "--json")
    elapsed = time.monotonic() - start
    check(result.returncode == 0, f"plan 7B: runs ({result.stderr.strip()!r})")
    if result.returncode != 0:
        return
    print(f"      the 7B plan took {elapsed * 1e3:.0f} ms, process start included")
    check(elapsed < 5, f"plan 7B: no weights to read, so it is quick ({elapsed:.2f} s)")
    p = json.loads(result.stdout)
    chunks = p["chunks"]
    # 256 MiB: a layer alone passes it (two programs each), the head is a chunk of its own.
    check(len(chunks) == LAYERS + 1, f"plan 7B: 33 chunks at 256 MiB ({len(chunks)})")
    check(all(c["layers"] == 1 and c["weight_bytes"] == LAYER and c["programs"] == 2 for c in chunks[:-1]),
          f"plan 7B: each layer {LAYER} bytes in two programs")
    check([c["stages"] for c in chunks[:3]] == ["layer 0", "layer 1", "layer 2"], "plan 7B: chunks named by layer")
    check(chunks[-1]["stages"] == "head" and chunks[-1]["weight_bytes"] == HEAD and chunks[-1]["head"],
          f"plan 7B: the head is {HEAD} bytes on its own")
    check(all(c["kv_cache_bytes"] == 2 * 2 * 32 * 128 * 4096 for c in chunks[:-1]),
          "plan 7B: 64 MiB of fp16 K and V per layer at context 4096")
    check(p["programs_per_shape"] == 65 and p["programs"] == 130, "plan 7B: 65 programs per shape, 130 in all")
    check(p["compile_budget"] == 119 and not p["fits_compile_budget"] and not p["fits_live_programs"],
          "plan 7B: past the compile budget and the live-program limit")
    check(p["context"] == 4096 and p["context_ladder"] == [512, 1024, 2048, 4096], "plan 7B: the context ladder")

    # 1 GiB: two layers per chunk, the head beside the last two.
    result = plan("--model", folder, "--max-program-weights", "1G", "--json")
    chunks = json.loads(result.stdout)["chunks"] if result.returncode == 0 else []
    check(len(chunks) == 16 and all(c["layers"] == 2 and c["programs"] == 1 for c in chunks),
          f"plan 7B at 1G: 16 chunks of two layers ({len(chunks)})")
    check(bool(chunks) and chunks[-1]["stages"] == "layer 30 to head" and chunks[-1]["weight_bytes"] == 2 * LAYER + HEAD,
          "plan 7B at 1G: the last chunk holds layers 30, 31 and the head")

    # The table: one row per chunk, the totals, the verdicts; int8 adds a column; --context scales the caches.
    result = plan("--model", folder, "--compress", "int8", "--context", "1024")
    text = result.stdout
    check(result.returncode == 0 and "int8 (Core ML)" in text and "layer 31" in text and "head" in text
          and "programs: 65 per step shape; 130 for prefill and decode at context 1024" in text
          and "compile budget: 130 programs of 119 per process: exceeded" in text and "16.0 MiB" in text,
          f"plan 7B: the table ({text[:400]!r})")


def test_gguf() -> None:
    result = plan("--model", DATA / "gguf" / "models" / "llama_gqa_f16.gguf", "--max-program-weights", "40000", "--json")
    check(result.returncode == 0, f"plan GGUF: runs ({result.stderr.strip()!r})")
    if result.returncode == 0:
        p = json.loads(result.stdout)
        check(p["layers"] == 2 and p["hidden"] == 64 and len(p["chunks"]) > 1,
              f"plan GGUF: the metadata's shapes, in {len(p['chunks'])} chunks")


def test_errors(folder: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as empty:
        check_error(plan("--model", empty), 1, "anvil: error: bench --plan: ", "no config.json",
                    what="plan: a folder without config.json")
        bert = pathlib.Path(empty) / "bert"
        bert.mkdir()
        (bert / "config.json").write_text('{"model_type": "bert", "vocab_size": 30, "hidden_size": 12}')
        check_error(plan("--model", bert), 1, "anvil: error: bench --plan: ", "model_type 'bert'",
                    "not a supported decoder language model", what="plan: not a decoder LM")
    check_error(plan("--model", folder, "--context", "0"), 2, "anvil: usage: bench --plan: ", "--context",
                what="plan: --context 0")
    check_error(plan("--model", folder, "--max-program-weights", "12X"), 2, "anvil: usage: bench --plan: ",
                "--max-program-weights", "12X", what="plan: a bad size")
    check_error(plan("--model", folder, "--task", "generate"), 2, "anvil: usage: bench: ", "--plan takes",
                what="plan: an option of timing runs")
    check_error(plan(), 2, "anvil: usage: bench --plan: ", "--model", what="plan: no --model")
    check_error(plan("--model", folder, "--compress", "zip"), 2, "anvil: usage: bench --plan: ", "--compress",
                what="plan: an unknown compression")
    result = anvil("--help")
    check(result.returncode == 0 and "bench --plan" in result.stdout, "anvil --help names bench --plan")
    result = anvil("bench", "--help")
    check(result.returncode == 0 and "--plan" in result.stdout and "--max-program-weights" in result.stdout,
          "anvil bench --help describes --plan")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        (folder / "config.json").write_text(json.dumps(LLAMA2_7B))
        test_7b(folder)
        test_gguf()
        test_errors(folder)
    print(f"plan command: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
