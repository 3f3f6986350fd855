#!/usr/bin/env python3
"""Drives `anvil logits` and `anvil generate` on the decoder-LM fixtures (tests/data/decoder_lms/<name>/, written
by tools/reference/decoder_lms.py from an independent PyTorch implementation): full logits against logits.npy,
greedy continuations token for token against expected.json, the streamed text against --json's, seeded
sampling reproducible, a llama.cpp .gguf file in place of a folder (tests/data/gguf/models), and the command
line's contract (DESIGN.md): one-line errors with exit status 1, usage
errors with exit status 2. Reads .npy with its own small reader (no numpy needed).

usage: test_lm_commands.py PATH_TO_ANVIL [FIXTURES_DIR (default tests/data/decoder_lms)]
"""
import json
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, anvil, check, check_error, failures, max_relative_error, read_npy  # noqa: E402

cli_support.ANVIL = sys.argv[1]

LMS = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else DATA / "decoder_lms"
NAMES = ["gpt2", "llama", "llama_linear", "llama_dynamic", "qwen2", "qwen3", "mistral"]


def eos_ids(folder: pathlib.Path):
    ids = set()
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.exists():
            value = json.loads(path.read_text()).get("eos_token_id")
            ids.update(value if isinstance(value, list) else [] if value is None else [value])
    return ids


def ids_text(ids) -> str:
    return ",".join(str(i) for i in ids)


def json_result(result, what: str) -> dict:
    check(result.returncode == 0, f"{what}: runs ({result.stderr.strip()!r})")
    try:
        return json.loads(result.stdout) if result.returncode == 0 else {}
    except json.JSONDecodeError:
        check(False, f"{what}: prints JSON ({result.stdout[:200]!r})")
        return {}


def test_model(name: str, tmp: pathlib.Path) -> None:
    folder = LMS / name
    expected = json.loads((folder / "expected.json").read_text())
    prompts = expected["prompts"]
    base = ["--model", folder, "--backend", "cpu"]

    # Full logits of one prompt against the reference: --out and --json.
    prompt = prompts[expected["logits_prompt"]]
    out = tmp / f"{name}_logits.npy"
    result = anvil("logits", *base, "--ids", ids_text(prompt), "--out", out)
    check(result.returncode == 0, f"{name}: logits --out runs ({result.stderr.strip()!r})")
    want_shape, want = read_npy(folder / "logits.npy")
    got_shape, got = read_npy(out) if out.exists() else ((), [])
    error = max_relative_error(got, want)
    check(got_shape == want_shape and error < 1e-4, f"{name}: logits {got_shape} match the reference (error {error:.2g})")
    report = json_result(anvil("logits", *base, "--ids", ids_text(prompt), "--json"), f"{name}: logits --json")
    flat = [v for row in report.get("logits", []) for v in row]
    check(report.get("shape") == list(want_shape) and max_relative_error(flat, want) < 1e-4,
          f"{name}: logits --json match the reference")

    # --compress int8: the weights quantised at load (one scale per output channel), so the logits move off
    # the reference, but not far: int8's step is 1/127 of each row's largest weight, and through the
    # fixtures' 2 layers the logits moved by 0.5-0.7% of the largest logit (bench/compression_accuracy.py).
    squeezed = tmp / f"{name}_int8.npy"
    result = anvil("logits", *base, "--ids", ids_text(prompt), "--out", squeezed, "--compress", "int8")
    check(result.returncode == 0, f"{name}: logits --compress int8 runs ({result.stderr.strip()!r})")
    got_shape, got = read_npy(squeezed) if squeezed.exists() else ((), [])
    moved = max((abs(a - b) for a, b in zip(got, want)), default=1.0) / max(abs(b) for b in want)
    check(got_shape == want_shape and 1e-6 < moved < 2e-2,
          f"{name}: logits --compress int8 near the reference but not equal to it (moved {moved:.2g} of the "
          f"largest logit)")

    # Greedy continuations, token for token (up to the first eos, where anvil stops).
    stops = eos_ids(folder)
    margins = expected.get("min_margin", [1.0] * len(prompts))
    for i, (prompt, greedy) in enumerate(zip(prompts, expected["greedy"])):
        if margins[i] < 1e-3:
            continue  # a near tie along the path: float rounding may pick either token
        want_tokens = []
        for token in greedy:
            if token in stops:
                break
            want_tokens.append(token)
        report = json_result(anvil("generate", *base, "--ids", ids_text(prompt), "--max-new-tokens", len(greedy),
                                   "--json"), f"{name}: generate prompt {i}")
        check(report.get("tokens") == want_tokens,
              f"{name}: greedy continuation of prompt {i} ({report.get('tokens')} vs {want_tokens})")
        reason = "eos" if len(want_tokens) < len(greedy) else "max_new_tokens"
        check(report.get("stop_reason") == reason, f"{name}: prompt {i} stops with {reason}")
        stats = report.get("stats", {})
        check(stats.get("prompt_tokens") == len(prompt) and stats.get("generated_tokens") == len(want_tokens),
              f"{name}: prompt {i} stats count the tokens ({stats})")

    # The streamed text is the --json text; sampling is reproducible for a seed; top-k 1 is greedy.
    prompt = prompts[-1]
    args = ["generate", *base, "--ids", ids_text(prompt), "--max-new-tokens", 12]
    report = json_result(anvil(*args, "--json"), f"{name}: generate --json")
    # Bytes: text mode would turn a generated '\r' into '\n'.
    streamed = subprocess.run([cli_support.ANVIL, *map(str, args)], capture_output=True, timeout=300)
    stdout = streamed.stdout.decode("utf-8", "replace")
    check(streamed.returncode == 0 and stdout == report.get("text", "") + "\n",
          f"{name}: streamed text equals the --json text ({stdout!r} vs {report.get('text')!r})")
    check(streamed.stderr == b"", f"{name}: no progress on stderr when it is not a terminal")
    # The fixtures are built with wide logit margins (tools/reference/decoder_lms.py), so only a high
    # temperature makes the draws differ between seeds.
    sampled = [json_result(anvil(*args, "--temperature", 20, "--seed", seed, "--json"), f"{name}: sampling")
               .get("tokens") for seed in (5, 5, 6)]
    check(sampled[0] == sampled[1] and sampled[0] is not None, f"{name}: the same seed samples the same tokens")
    check(sampled[0] != sampled[2], f"{name}: another seed samples other tokens")
    top1 = json_result(anvil(*args, "--temperature", 1.0, "--top-k", 1, "--seed", 3, "--json"), f"{name}: top-k 1")
    check(top1.get("tokens") == report.get("tokens"), f"{name}: --top-k 1 samples the greedy tokens")


def test_text_prompt_and_chat(name: str) -> None:
    folder = LMS / name
    base = ["generate", "--model", folder, "--backend", "cpu", "--max-new-tokens", 4]
    report = json_result(anvil(*base, "--prompt", "hello world", "--json"), f"{name}: generate --prompt")
    check(report.get("stats", {}).get("prompt_tokens", 0) > 0 and len(report.get("tokens", [])) <= 4,
          f"{name}: --prompt is tokenized ({report.get('stats')})")
    config = json.loads((folder / "tokenizer_config.json").read_text()) if (folder / "tokenizer_config.json").exists() else {}
    result = anvil(*base, "--prompt", "hello", "--chat", "--json")
    if config.get("chat_template"):
        report = json_result(result, f"{name}: generate --chat")
        check(report.get("stats", {}).get("prompt_tokens", 0) > 2, f"{name}: --chat renders the template")
        chat = json.loads((folder / "expected.json").read_text()).get("chat")
        messages = chat["messages"] if chat else []
        if [m["role"] for m in messages] == ["system", "user"]:
            report = json_result(anvil("generate", "--model", folder, "--backend", "cpu", "--chat", "--system",
                                       messages[0]["content"], "--prompt", messages[1]["content"],
                                       "--max-new-tokens", len(chat["greedy"]), "--json"), f"{name}: --chat --system")
            stops = eos_ids(folder)
            want = []
            for token in chat["greedy"]:
                if token in stops:
                    break
                want.append(token)
            check(report.get("stats", {}).get("prompt_tokens") == len(chat["ids"]),
                  f"{name}: --chat --system gives the reference's {len(chat['ids'])} prompt tokens")
            check(report.get("tokens") == want, f"{name}: --chat continues as the reference ({report.get('tokens')})")
    else:
        check_error(result, 1, "anvil: error:", "chat template", what=f"{name}: --chat without a chat template")


def test_gguf(tmp: pathlib.Path) -> None:
    """A llama.cpp file in place of a folder (tools/reference/gguf_models.py wrote it, with PyTorch's logits)."""
    folder = DATA / "gguf" / "models"
    ids = json.loads((folder / "prompt.json").read_text())["ids"]
    out = tmp / "gguf_logits.npy"
    result = anvil("logits", "--model", folder / "llama_gqa_q8_0.gguf", "--ids", ids_text(ids), "--backend", "cpu",
                   "--out", out)
    check(result.returncode == 0, f"gguf: logits --model FILE.gguf runs ({result.stderr.strip()!r})")
    want_shape, want = read_npy(folder / "llama_gqa_q8_0_logits.npy")
    got_shape, got = read_npy(out) if out.exists() else ((), [])
    error = max_relative_error(got, want) if got else 1.0
    check(got_shape == want_shape and error < 1e-4, f"gguf: logits match PyTorch's (error {error:.2g})")
    # The file's own tokenizer (tokenizer.ggml.*): --prompt gives the reference encoder's ids, so it continues
    # exactly as --ids with those ids does (greedy); the Qwen2 file's ChatML template renders --chat.
    tokenization = json.loads((folder / "tokenization.json").read_text())
    for file, name in (("llama_gqa_q8_0.gguf", "llama_gqa"), ("qwen2_tied_q8_0.gguf", "qwen2_tied")):
        text, want_ids = tokenization["texts"][0], tokenization["ids"][name][0]
        base = ["generate", "--model", folder / file, "--backend", "cpu", "--max-new-tokens", 4, "--json"]
        by_text = json_result(anvil(*base, "--prompt", text), f"gguf: generate --prompt with {file}")
        by_ids = json_result(anvil(*base, "--ids", ids_text(want_ids)), f"gguf: generate --ids with {file}")
        check(by_text.get("stats", {}).get("prompt_tokens") == len(want_ids) and by_text.get("tokens") and
              by_text.get("tokens") == by_ids.get("tokens"),
              f"gguf: {file} --prompt is the reference's {len(want_ids)} ids ({by_text.get('tokens')})")
    chat = json_result(anvil("generate", "--model", folder / "qwen2_tied_q8_0.gguf", "--backend", "cpu", "--chat",
                             "--system", "You are terse.", "--prompt", "Where is the mill?", "--max-new-tokens", 2,
                             "--json"), "gguf: generate --chat")
    rendered = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhere is the mill?<|im_end|>\n" \
               "<|im_start|>assistant\n"
    want_ids = tokenization["ids"]["qwen2_tied"][tokenization["texts"].index(rendered)]
    check(chat.get("stats", {}).get("prompt_tokens") == len(want_ids),
          f"gguf: --chat renders tokenizer.chat_template into the reference's {len(want_ids)} ids ({chat.get('stats')})")
    check_error(anvil("generate", "--model", folder / "llama_gqa_q8_0.gguf", "--prompt", "hello", "--chat",
                      "--backend", "cpu"), 1, "anvil: error:", "chat template",
                what="generate --chat with a GGUF file that has no chat template")
    check_error(anvil("logits", "--model", folder / "refused" / "arch_falcon.gguf", "--ids", "1", "--backend",
                      "cpu"), 1, "anvil: error:", "falcon", what="logits of a GGUF architecture anvil does not run")
    # --products int8: the activations rounded to 8 bits as llama.cpp rounds them. logits stays exact unless
    # asked (above); asked, it moves from the reference by about llama.cpp's own 0.3-0.8% of the range.
    int8_out = tmp / "gguf_logits_int8.npy"
    result = anvil("logits", "--model", folder / "llama_gqa_q4_0.gguf", "--ids", ids_text(ids), "--backend", "cpu",
                   "--products", "int8", "--out", int8_out)
    check(result.returncode == 0, f"gguf: logits --products int8 runs ({result.stderr.strip()!r})")
    _, want = read_npy(folder / "llama_gqa_q4_0_logits.npy")
    _, got = read_npy(int8_out) if int8_out.exists() else ((), [0.0] * len(want))
    moved = max(abs(a - b) for a, b in zip(got, want)) / max(abs(b) for b in want)
    check(1e-5 < moved < 0.03, f"gguf: --products int8 logits within 3% of the range, and not exact ({moved:.3g})")
    base = ["generate", "--model", folder / "llama_gqa_q4_0.gguf", "--backend", "cpu", "--ids", ids_text(ids[:4]),
            "--max-new-tokens", 2, "--json"]
    default = json_result(anvil(*base), "gguf: generate")
    check(default.get("products") == "int8", "gguf: generate uses int8 products by default for a .gguf file")
    # The Q4_0 file's 102,720 weights held as blocks (57.5 KiB in the file), not as f32 (401 KiB).
    held = default.get("resident_weight_bytes", 0)
    check(0 < held < 102720 * 4 // 2, f"gguf: generate --json reports the weights held, as blocks ({held} bytes)")
    check(json_result(anvil(*base, "--products", "exact"), "gguf: generate --products exact").get("products") ==
          "exact", "gguf: generate --products exact")
    check_error(anvil(*base, "--products", "int4"), 2, "anvil: usage:", "--products",
                what="generate --products int4")


def test_rescale_fp16(tmp: pathlib.Path) -> None:
    """--rescale-fp16 on the Llama built to overflow fp16 (tools/reference/fp16_rescale.py): the shifts its
    reference predicts, overflow before and none after, fp16-numerics logits back near fp32, fp32 unchanged."""
    folder = DATA / "fp16_rescale" / "llama_overflow"
    expected = json.loads((folder / "expected.json").read_text())
    ids = ids_text(expected["calibration_ids"])
    want_shape, want = read_npy(folder / "logits.npy")
    base = ["--model", folder, "--ids", ids, "--backend", "cpu"]

    stored = json_result(anvil("logits", *base, "--ane-numerics", "--json"), "overflow: logits --ane-numerics")
    flat = [v for row in stored.get("logits", []) for v in row]
    check(flat and any(v is None for v in flat), "overflow: with --ane-numerics the stored weights' logits are not "
                                                 "finite (null in JSON)")

    report = json_result(anvil("logits", *base, "--ane-numerics", "--rescale-fp16", "--json"),
                         "overflow: logits --ane-numerics --rescale-fp16")
    rescale = report.get("fp16_rescale", {})
    check(rescale.get("calibration_tokens") == len(expected["calibration_ids"]),
          "overflow: --rescale-fp16 calibrates on --ids by default")
    check([p.get("shift") for p in rescale.get("pairs", [])] == [p["shift"] for p in expected["pairs"]],
          f"overflow: the shifts the reference predicts ({[p['shift'] for p in expected['pairs']]})")
    check(len(rescale.get("overflow_before", [])) > 0 and rescale.get("overflow_after") == [],
          "overflow: fp16 overflow before rescaling, none after")
    flat = [v for row in report.get("logits", []) for v in row]
    error = max_relative_error(flat, want) if flat and None not in flat else float("inf")
    check(error < 5e-2, f"overflow: fp16-numerics logits near the fp32 reference after rescaling ({error:.2g})")

    plain, rescaled = tmp / "overflow_plain.npy", tmp / "overflow_rescaled.npy"
    anvil("logits", *base, "--out", plain)
    result = anvil("logits", *base, "--rescale-fp16", "--calibrate-text", "the mill wheel turns", "--out", rescaled)
    check(result.returncode == 0 and "ane_numerics after: no op leaves fp16" in result.stderr,
          f"overflow: --calibrate-text runs and reports to stderr ({result.stderr.strip()[-200:]!r})")
    check(plain.exists() and rescaled.exists() and read_npy(plain) == read_npy(rescaled),
          "overflow: fp32 logits identical with and without rescaling")

    generated = json_result(anvil("generate", "--model", folder, "--ids", ids, "--backend", "cpu", "--max-new-tokens",
                                  "3", "--rescale-fp16", "--json"), "overflow: generate --rescale-fp16 --json")
    check(len(generated.get("fp16_rescale", {}).get("pairs", [])) == 4, "overflow: generate --json has the scales")

    check_error(anvil("logits", *base, "--calibrate-ids", "1,2"), 2, "anvil: usage:", "--rescale-fp16",
                what="--calibrate-ids without --rescale-fp16")
    check_error(anvil("logits", *base, "--rescale-fp16", "--calibrate-ids", "1", "--calibrate-text", "x"), 2,
                "anvil: usage:", what="--calibrate-ids and --calibrate-text together")
    check_error(anvil("logits", *base, "--rescale-fp16", "--calibrate-ids", "3,999"), 1, "anvil: error:",
                "calibration token id 999", what="a calibration id outside the vocabulary")
    check_error(anvil("logits", "--model", folder, "--ids", ids, "--backend", "ane", "--ane-numerics"), 2,
                "anvil: usage:", "--backend cpu", what="--ane-numerics with --backend ane")


def test_errors() -> None:
    folder = next((LMS / n for n in NAMES if (LMS / n).exists()), LMS / "llama")
    check_error(anvil("logits", "--ids", "1,2"), 2, "anvil: usage:", "--model", what="logits without --model")
    check_error(anvil("logits", "--model", folder, "--ids", "1,x"), 2, "anvil: usage:", "--ids",
                what="logits with bad --ids")
    check_error(anvil("logits", "--model", folder), 2, "anvil: usage:", "--ids", what="logits without --ids")
    check_error(anvil("logits", "--model", folder, "--ids", "1,2", "--compress", "int4"), 2, "anvil: usage:",
                "--compress", what="logits --compress int4")
    check_error(anvil("generate", "--model", folder, "--ids", "1", "--frobnicate"), 2, "anvil: usage:",
                "--frobnicate", what="generate with an unknown option")
    check_error(anvil("generate", "--model", folder, "--ids", "1", "--prompt", "x"), 2, "anvil: usage:",
                what="generate with --ids and --prompt")
    check_error(anvil("generate", "--model", folder, "--ids", "1", "--temperature", "-1"), 2, "anvil: usage:",
                "temperature", what="generate with a negative temperature")
    check_error(anvil("generate", "--model", folder, "--ids", "1", "--top-p", "abc"), 2, "anvil: usage:",
                "--top-p", what="generate with a non-numeric --top-p")
    check_error(anvil("generate", "--model", folder, "--ids", "1", "--chat"), 2, "anvil: usage:", "--chat",
                what="generate --chat with --ids")
    check_error(anvil("logits", "--model", folder, "--ids", "1,2", "--products", "fast"), 2, "anvil: usage:",
                "--products", what="logits --products fast")
    check_error(anvil("logits", "--model", DATA / "bert_stack", "--ids", "1,2", "--backend", "cpu"), 1,
                "anvil: error:", "decoder", what="logits of a folder that is not a decoder LM")
    check_error(anvil("generate", "--model", DATA / "no_such_folder", "--ids", "1", "--backend", "cpu"), 1,
                "anvil: error:", what="generate with a missing folder")
    if folder.exists():
        check_error(anvil("logits", "--model", folder, "--ids", "999999", "--backend", "cpu"), 1, "anvil: error:",
                    "999999", what="logits of a token id outside the vocabulary")


def main() -> int:
    present = [n for n in NAMES if (LMS / n / "expected.json").exists()]
    check(len(present) == len(NAMES), f"decoder-LM fixtures present ({present})")
    with tempfile.TemporaryDirectory() as tmp:
        for name in present:
            test_model(name, pathlib.Path(tmp))
        if present:
            test_text_prompt_and_chat(present[0])
            if "qwen3" in present:
                test_text_prompt_and_chat("qwen3")
        test_gguf(pathlib.Path(tmp))
        test_rescale_fp16(pathlib.Path(tmp))
        test_errors()
    print(f"cli.lm: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
