#!/usr/bin/env python3
"""Drives `anvil embed`, `anvil rerank`, `anvil classify` and `anvil export` with `--adapter DIR`: a base model
folder plus a PEFT LoRA adapter, run as PeftModel.from_pretrained(base, adapter) computes it. Each case of
tests/data/adapters/cases.json (written by tools/reference/lora_adapters.py) is checked against the float64
PyTorch computation that applies the adapter unmerged (base(x) + lora_B(lora_A(x)) * alpha / r, the saved head
in place of the base's), and must differ from the base model's own output. Then the adapters anvil refuses,
each with one line naming why: PEFT features anvil does not compute, a target module the model lacks or that
is not a Linear, a shape that does not fit, missing files.

usage: test_adapter_commands.py PATH_TO_ANVIL
"""
import json
import pathlib
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, anvil, check, check_error, failures, max_relative_error, read_npy  # noqa: E402

cli_support.ANVIL = sys.argv[1]

ADAPTERS = DATA / "adapters"
TOLERANCE = 2e-4  # float32 against float64, relative to max(1, |expected|)


def id_args(folder: pathlib.Path):
    shape, ids = read_npy(folder / "ids.npy")
    _, types = read_npy(folder / "type_ids.npy")
    _, lengths = read_npy(folder / "lengths.npy")
    args = []
    for row, length in enumerate(lengths):
        start = row * shape[1]
        args += ["--ids", ",".join(str(v) for v in ids[start:start + length]),
                 "--type-ids", ",".join(str(v) for v in types[start:start + length])]
    return args


def run_case(case, tmp: pathlib.Path) -> None:
    name, model = case["name"], DATA / case["model"]
    adapter = ADAPTERS / name
    out = tmp / f"{name}.npy"
    inputs = ["--pixels", model / "pixels.npy"] if case["command"] == "classify" else id_args(model)
    result = anvil(case["command"], "--model", model, "--backend", "cpu", "--adapter", adapter, *inputs,
                   "--out", out)
    check(result.returncode == 0, f"{name}: anvil {case['command']} --adapter runs ({result.stderr.strip()})")
    if result.returncode != 0:
        return
    _, got = read_npy(out)
    expected_shape, expected = read_npy(adapter / "expected.npy")
    _, base = read_npy(model / case["base_expected"])
    if case["command"] == "rerank":  # the score is the first logit
        labels = expected_shape[1]
        expected, base = expected[::labels], base[::labels]
    error = max_relative_error(got, expected)
    changed = max_relative_error(base, expected)
    check(error < TOLERANCE, f"{name}: {case['command']} --adapter gives PyTorch's float64 result with PEFT's "
                             f"unmerged LoRA (max error {error:.2g})")
    check(changed > 100 * TOLERANCE, f"{name}: the adapter changes the base model's output ({changed:.2g})")


def write_safetensors(path: pathlib.Path, tensors) -> None:
    """name -> (shape, float32 values), in PEFT's file format."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_bad(tmp: pathlib.Path) -> None:
    model = DATA / "text_encoders" / "bert_sentence"
    good = ADAPTERS / "bert_sentence"
    config = json.loads((good / "adapter_config.json").read_text())

    def variant(name: str, **changes) -> pathlib.Path:
        folder = tmp / name
        shutil.copytree(good, folder)
        (folder / "adapter_config.json").write_text(json.dumps({**config, **changes}))
        return folder

    def refused(folder, *needles, what):
        result = anvil("embed", "--model", model, "--backend", "cpu", "--adapter", folder, "--ids", "3,20,4")
        check_error(result, 1, "anvil: error:", *needles, what=f"embed --adapter: {what}")

    refused(variant("dora", use_dora=True), "use_dora = true", "is not supported", what="use_dora")
    refused(variant("rslora", use_rslora=True), "use_rslora = true", "is not supported", what="use_rslora")
    refused(variant("bias", bias="lora_only"), 'bias = "lora_only"', "is not supported", what="bias lora_only")
    refused(variant("fan_in_fan_out", fan_in_fan_out=True), "fan_in_fan_out = true", what="fan_in_fan_out")
    refused(variant("rank_pattern", rank_pattern={"query": 2}), "rank_pattern", what="rank_pattern")
    refused(variant("ia3", peft_type="IA3"), "is not a LoRA adapter", what="peft_type IA3")
    refused(variant("unknown", target_modules=["query", "nosuch"]), "unknown LoRA target module 'nosuch'",
            str(model), what="a target module the model lacks")
    refused(variant("not_linear", target_modules=["LayerNorm"]), "is not a Linear", what="a LayerNorm target")
    refused(variant("rank", r=2), "lora_A.weight has shape [4, 36], expected [2, 36]",
            what="r disagreeing with the matrices")
    missing = variant("missing_matrix", target_modules=["query", "value", "intermediate.dense", "key"])
    refused(missing, "adapter_model.safetensors has no base_model.model.encoder.layer.0.attention.self.key",
            what="a target's matrices missing")
    extra = variant("extra")
    write_safetensors(extra / "adapter_model.safetensors",
                      {"base_model.model.encoder.layer.0.attention.self.query.lora_A.weight": ([4, 36], [0.0] * 144),
                       "base_model.model.encoder.layer.0.attention.self.query.lora_B.weight": ([36, 4], [0.0] * 144),
                       "base_model.model.decoder.lora_A.weight": ([4, 36], [0.0] * 144)})
    refused(extra, "base_model.model.decoder.lora_A.weight belongs to no LoRA module or head",
            what="a tensor of no module")
    embedding = variant("embedding", target_modules=["query"])
    write_safetensors(embedding / "adapter_model.safetensors",
                      {"base_model.model.embeddings.word_embeddings.lora_embedding_A": ([4, 64], [0.0] * 256)})
    refused(embedding, "lora_embedding_A", "is not supported", what="LoRA on an Embedding")
    no_tensors = variant("no_tensors")
    (no_tensors / "adapter_model.safetensors").unlink()
    refused(no_tensors, "adapter_model.safetensors does not exist", what="adapter_model.safetensors missing")
    no_config = variant("no_config")
    (no_config / "adapter_config.json").unlink()
    refused(no_config, "adapter_config.json does not exist", what="adapter_config.json missing")
    refused(tmp / "nowhere", "nowhere", "not a folder", what="no such folder")
    # A cross-encoder's adapter on a sentence encoder: its names (bert.encoder...) are not the base's.
    refused(ADAPTERS / "bert_cross", "does not fit", "unknown LoRA target module", what="another model's adapter")
    check_error(anvil("tokenize", "--model", model, "a", "--adapter", good), 2, "anvil: usage:", "--adapter",
                what="tokenize --adapter: not an option of tokenize")


def run_export(tmp: pathlib.Path) -> None:
    """export --adapter writes the adapted weights: the package differs from the base's."""
    model = DATA / "text_encoders" / "bert_sentence"
    plain, adapted = tmp / "plain.mlpackage", tmp / "adapted.mlpackage"
    first = anvil("export", "--model", model, "--out", plain, "--sequence-length", "8")
    second = anvil("export", "--model", model, "--out", adapted, "--sequence-length", "8",
                   "--adapter", ADAPTERS / "bert_sentence")
    check(first.returncode == 0 and second.returncode == 0,
          f"export --adapter writes a package ({first.stderr.strip()} {second.stderr.strip()})")

    def weights(package):
        return b"".join(p.read_bytes() for p in sorted(package.rglob("*.bin")))

    if first.returncode == 0 and second.returncode == 0:
        check(weights(plain) != weights(adapted), "export --adapter: the package's weights are the adapted ones")


def run_trained() -> None:
    """An adapter `anvil train --lora` wrote (tests/data/train/cases) runs on its base folder."""
    cases = DATA / "train" / "cases"
    result = anvil("rerank", "--model", cases / "models" / "bert", "--backend", "cpu", "--adapter",
                   cases / "adapters" / "bert_lora", "--ids", "2,5,9,3", "--type-ids", "0,0,0,0", "--json")
    check(result.returncode == 0 and len(json.loads(result.stdout or "{}").get("scores", [])) == 1,
          f"rerank --adapter with an adapter anvil train wrote ({result.stderr.strip()})")


def main() -> int:
    cases = json.loads((ADAPTERS / "cases.json").read_text())["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for case in cases:
            run_case(case, tmp)
        run_bad(tmp)
        run_trained()
        run_export(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
