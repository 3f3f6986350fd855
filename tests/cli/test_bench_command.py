#!/usr/bin/env python3
"""Drives `anvil bench` on one fixture of every model family (tests/data), on the CPU and on the Neural Engine
(its simulator, found beside the tool), and checks the report: every field DESIGN.md's contract lists, timings
that are positive and consistent, the checkpoint's bytes equal to the folder's safetensors files (measured here),
the weights each device holds against the checkpoint's size,
tokens/s for decoder LMs, and clear errors for a folder without a task and an unknown --task.

usage: test_bench_command.py PATH_TO_ANVIL
"""
import json
import math
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, anvil, check, check_error, failures  # noqa: E402

cli_support.ANVIL = sys.argv[1]

FAMILIES = [
    ("embed", DATA / "text_encoders" / "bert_sentence"),
    ("rerank", DATA / "text_encoders" / "distilbert_cross"),
    ("classify", DATA / "resnet" / "hf_basic"),
    ("classify", DATA / "vit" / "deit"),
    ("generate", DATA / "decoder_lms" / "qwen2"),
    ("generate", DATA / "decoder_lms" / "gpt2"),
]
FIELDS = ["task", "load_s", "first_result_s", "compile_s", "steady_s", "checkpoint_bytes", "resident_weight_bytes",
          "weights_cpu_bytes", "weights_ane_bytes", "resident_growth_bytes", "peak_resident_bytes", "placement"]


def checkpoint_elements(folder: pathlib.Path) -> int:
    """The number of weight elements in the folder's safetensors files, from their headers."""
    total = 0
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, entry in header.items():
            if name != "__metadata__":
                total += math.prod(entry["shape"])
    return total


def test_family(task: str, folder: pathlib.Path, backend: str) -> None:
    what = f"bench {folder.name} --backend {backend}"
    result = anvil("bench", "--model", folder, "--backend", backend, "--runs", "2", "--batch", "2",
                   "--prompt-tokens", "8", "--new-tokens", "6", "--json")
    check(result.returncode == 0, f"{what}: runs ({result.stderr.strip()!r})")
    if result.returncode != 0:
        return
    report = json.loads(result.stdout)
    for field in FIELDS:
        check(field in report, f"{what}: reports {field}")
    check(report.get("task") == task, f"{what}: the task from config.json is {task} ({report.get('task')})")
    check(all(report.get(k, 0) > 0 for k in ("load_s", "first_result_s", "steady_s")),
          f"{what}: positive load, first-result and steady-state times")
    check(abs(report["first_result_s"] - report["steady_s"] - report["compile_s"]) < 1e-6 or report["compile_s"] == 0,
          f"{what}: compile_s is first result minus steady state")
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    check(report.get("checkpoint_bytes") == size, f"{what}: checkpoint bytes {report.get('checkpoint_bytes')} = {size}")
    cpu_weights, ane_weights = report.get("weights_cpu_bytes", -1), report.get("weights_ane_bytes", -1)
    check(report.get("resident_weight_bytes") == cpu_weights + ane_weights,
          f"{what}: resident weight bytes are the CPU's and the Neural Engine's")
    # Bounds from the checkpoint's own tensors (read here): the CPU holds each weight it reads once, as stored
    # (at least 2 bytes an element), as an f32 copy or as packed f32 panels (padded to whole panels, which
    # for these tiny fixtures can nearly double a matrix); a tied embedding is both a gather's f32 copy and
    # the head's panels. The Neural Engine holds fp16 blobs, one set per loaded program.
    elements = checkpoint_elements(folder)
    programs = max(1, len(report.get("placement", {}).get("programs", [])))
    check(cpu_weights <= 2 * 4 * elements, f"{what}: CPU weights {cpu_weights} at most twice the f32 weights")
    if backend == "cpu":
        check(ane_weights == 0 and cpu_weights >= elements,
              f"{what}: CPU weights {cpu_weights} at least half the weights at 2 bytes ({elements} elements), "
              f"none on the ANE ({ane_weights})")
    else:
        check(elements <= ane_weights <= programs * (2 * elements + 64 * 1024),
              f"{what}: Neural Engine weights {ane_weights} within [half, all] of the fp16 weights "
              f"({elements} elements) for each of {programs} programs")
    check(report.get("peak_resident_bytes", 0) >= report.get("resident_growth_bytes", 0) > 0,
          f"{what}: the peak resident set holds the growth over load and first result")
    check(report.get("placement", {}).get("backend") == backend,
          f"{what}: placement says {backend} ({report.get('placement', {}).get('backend')})")
    if task == "generate":
        check(report.get("generated_tokens") == 6 and report.get("prompt_tokens") == 8,
              f"{what}: 8 prompt and 6 new tokens ({report.get('prompt_tokens')}, {report.get('generated_tokens')})")
        check(report.get("decode_tokens_per_s", 0) > 0 and report.get("prefill_tokens_per_s", 0) > 0,
              f"{what}: prefill and decode tokens/s")
    else:
        check(report.get("items_per_s", 0) > 0, f"{what}: items/s")


def main() -> int:
    for task, folder in FAMILIES:
        for backend in ("cpu", "ane", "coreml"):
            test_family(task, folder, backend)
    # Plain text output names the measurements.
    result = anvil("bench", "--model", FAMILIES[0][1], "--backend", "cpu", "--runs", "1", "--batch", "1")
    check(result.returncode == 0 and "steady state" in result.stdout and "weights resident" in result.stdout
          and "peak" in result.stdout,
          f"bench: the text report ({result.stdout.strip()!r})")
    # A .gguf file is a decoder LM; its checkpoint is the file, its blocks stay blocks (102,720 Q4_0 weights:
    # less than half their f32 bytes held), with generate's int8 products.
    gguf = DATA / "gguf" / "models" / "llama_gqa_q4_0.gguf"
    result = anvil("bench", "--model", gguf, "--backend", "cpu", "--runs", "1", "--prompt-tokens", "4",
                   "--new-tokens", "3", "--json")
    check(result.returncode == 0, f"bench FILE.gguf: runs ({result.stderr.strip()!r})")
    if result.returncode == 0:
        report = json.loads(result.stdout)
        check(report.get("task") == "generate" and report.get("checkpoint_bytes") == gguf.stat().st_size,
              f"bench FILE.gguf: task generate, checkpoint bytes the file's ({report.get('checkpoint_bytes')})")
        check(0 < report.get("weights_cpu_bytes", 0) < 102720 * 2,
              f"bench FILE.gguf: the weights held as blocks ({report.get('weights_cpu_bytes')} bytes)")
        check(report.get("generated_tokens") == 3, f"bench FILE.gguf: 3 new tokens ({report.get('generated_tokens')})")
    with tempfile.TemporaryDirectory() as tmp:
        check_error(anvil("bench", "--model", tmp, "--backend", "cpu"), 1, "anvil: error: bench: ", "config.json",
                    "--task", what="bench: a folder without config.json")
    check_error(anvil("bench", "--model", FAMILIES[0][1], "--task", "dance", "--backend", "cpu"), 2,
                "anvil: usage: bench: ", "--task must be", "dance", what="bench: an unknown --task")
    print(f"bench command: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
