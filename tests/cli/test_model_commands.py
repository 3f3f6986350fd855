#!/usr/bin/env python3
"""Drives `anvil embed`, `anvil rerank`, `anvil classify`, `anvil zero-shot`, `anvil transcribe` and `anvil tokenize`
on the committed fixtures (CLIP's for zero-shot and CLIP embeddings, Whisper's for transcribe), checking
their results against the expected outputs the PyTorch references wrote (tools/reference/), the token ids
against Hugging Face's own golden ids, and the command line's contract (DESIGN.md): --ids / --type-ids /
--pixels inputs, --out .npy and --json outputs, --backend, one-line errors with exit status 1, usage errors
with exit status 2. Reads .npy with its own small reader (no numpy needed).

usage: test_model_commands.py PATH_TO_ANVIL
"""
import json
import math
import os
import pathlib
import struct
import sys
import tempfile
import wave

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import (DATA, anvil, check, check_error, failures, max_relative_error, read_npy, rows,  # noqa: E402
                         write_npy_f32)

cli_support.ANVIL = sys.argv[1]

TEXT = DATA / "text_encoders"


def id_lists(folder: pathlib.Path, name: str = "ids.npy"):
    shape, ids = read_npy(folder / name)
    _, types = read_npy(folder / name.replace("ids", "type_ids"))
    _, lengths = read_npy(folder / name.replace("ids", "lengths"))
    out_ids, out_types = [], []
    for row, length in enumerate(lengths):
        out_ids.append(",".join(str(v) for v in ids[row * shape[1]:row * shape[1] + length]))
        out_types.append(",".join(str(v) for v in types[row * shape[1]:row * shape[1] + length]))
    return out_ids, out_types


def test_tokenize() -> None:
    bert = DATA / "tokenizers" / "bert-base-uncased"
    result = anvil("tokenize", "--model", bert, "i like strawberries")
    check(result.returncode == 0 and result.stdout.strip() == "[101, 1045, 2066, 13137, 20968, 102]",
          f"tokenize: BERT's golden ids ({result.stdout.strip()!r} {result.stderr!r})")
    result = anvil("tokenize", "--model", bert, "i like strawberries", "--no-special")
    check(result.stdout.strip() == "[1045, 2066, 13137, 20968]", "tokenize --no-special")
    result = anvil("tokenize", "--model", bert, "a cat", "--pair", "a dog", "--json")
    report = json.loads(result.stdout) if result.returncode == 0 else [{}]
    check(report[0].get("ids") == [101, 1037, 4937, 102, 1037, 3899, 102]
          and report[0].get("type_ids") == [0, 0, 0, 0, 1, 1, 1]
          and report[0].get("tokens", [None])[0] == "[CLS]", f"tokenize --pair --json ({report})")
    # GPT-2's byte-level BPE on one of tiktoken's r50k_base goldens (TestPlans.txt).
    result = anvil("tokenize", "--model", DATA / "tokenizers" / "gpt2", "Hello, World! How are you today? 🌍")
    check(result.stdout.strip() == "[15496, 11, 2159, 0, 1374, 389, 345, 1909, 30, 12520, 234, 235]",
          f"tokenize: GPT-2's golden ids ({result.stdout.strip()!r})")
    check_error(anvil("tokenize", "--model", DATA / "images", "x"), 1, "anvil: error:", "tokenizer",
                what="tokenize a folder without a tokenizer")
    check_error(anvil("tokenize", "--model", bert), 2, "anvil: usage:", "TEXT", what="tokenize without text")


def test_embed(tmp: pathlib.Path) -> None:
    folder = TEXT / "bert_sentence"
    ids, types = id_lists(folder)
    args = ["embed", "--model", folder, "--backend", "cpu"]
    for one, kind in zip(ids, types):
        args += ["--ids", one, "--type-ids", kind]
    out = tmp / "embeddings.npy"
    result = anvil(*args, "--out", out)
    check(result.returncode == 0, f"embed --ids --out runs ({result.stderr})")
    expected_shape, expected = read_npy(folder / "embeddings.npy")
    got_shape, got = read_npy(out) if out.exists() else ((), [])
    check(got_shape == expected_shape and max_relative_error(got, expected) < 1e-4,
          f"embed --ids: the PyTorch reference's embeddings, {got_shape} (error "
          f"{max_relative_error(got, expected):.2g})")
    result = anvil(*args, "--json")
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    flat = [v for row in report.get("embeddings", []) for v in row]
    check(report.get("shape") == list(expected_shape) and max_relative_error(flat, expected) < 1e-4,
          "embed --json: shape and embeddings")
    # The other poolings, unnormalised.
    for pooling in ("cls", "max", "mean"):
        result = anvil(*args, "--pooling", pooling, "--no-normalize", "--out", out)
        _, got = read_npy(out) if result.returncode == 0 else ((), [])
        _, expected_pool = read_npy(folder / f"{pooling}.npy")
        check(max_relative_error(got, expected_pool) < 1e-4, f"embed --pooling {pooling} --no-normalize")
    # --pooling none: the hidden states of one text, [S, D].
    result = anvil("embed", "--model", folder, "--backend", "cpu", "--ids", ids[0], "--type-ids", types[0],
                   "--pooling", "none", "--out", out)
    hidden_shape, hidden = read_npy(folder / "hidden.npy")
    length = len(ids[0].split(","))
    got_shape, got = read_npy(out) if result.returncode == 0 else ((), [])
    check(got_shape == (length, hidden_shape[1])
          and max_relative_error(got, hidden[:length * hidden_shape[1]]) < 1e-4,
          f"embed --pooling none: [S, D] hidden states ({got_shape})")
    # Text in: the folder's tokenizer, then the model.
    texts = json.loads((folder / "texts.json").read_text(encoding="utf-8"))
    result = anvil("embed", "--model", folder, "--backend", "cpu", *texts, "--out", out)
    _, expected_text = read_npy(folder / "text_embeddings.npy")
    _, got = read_npy(out) if result.returncode == 0 else ((), [])
    check(max_relative_error(got, expected_text) < 1e-4, f"embed TEXT...: the reference's embeddings ({result.stderr})")
    # The Neural Engine simulator built beside anvil: fp16 agreement.
    env = {k: v for k, v in os.environ.items() if k != "ANVIL_ANE_SIM"}
    result = anvil(*(["embed", "--model", folder, "--backend", "ane"] + args[5:]), "--out", out, env=env)
    _, got = read_npy(out) if result.returncode == 0 else ((), [])
    check(result.returncode == 0 and max_relative_error(got, expected) < 1.5e-2,
          f"embed --backend ane on the simulator: within fp16 tolerance ({result.stderr[-300:]})")
    result = anvil(*(["embed", "--model", folder, "--backend", "ane"] + args[5:]), "--json", env=env)
    placement = json.loads(result.stdout).get("placement", {}) if result.returncode == 0 else {}
    check(placement.get("backend") == "ane" and placement.get("refused") == 0
          and any(s["device"] == "ane" for p in placement.get("programs", []) for s in p["segments"]),
          "embed --json: the placement of every segment, none refused")
    # The Neural Engine refuses every program holding a layer_norm (an op no form of the program does without,
    # unlike softmax, which anvil decomposes when the native op is refused): those segments run on the CPU, so
    # the numbers are the CPU's, one warning line says so, and the placement keeps the framework's message.
    refusing = dict(env, ANVIL_ANE_SIM_OPTIONS="fail_compile_op=layer_norm", ANVIL_CACHE_DIR=str(tmp / "refused"))
    result = anvil(*(["embed", "--model", folder, "--backend", "ane"] + args[5:]), "--json", env=refusing)
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    flat = [v for row in report.get("embeddings", []) for v in row]
    check(result.returncode == 0 and max_relative_error(flat, expected) < 1e-4,
          f"embed with layer_norm refused: the CPU's numbers ({max_relative_error(flat, expected):.2g}, "
          f"{result.stderr[-300:]})")
    refused = [s for p in report.get("placement", {}).get("programs", []) for s in p["segments"]
               if s.get("refused_at")]
    check(len(refused) >= 1 and all(s["refused_at"] == "compile" and "layer_norm" in s["framework_error"]
                                    and s["device"] == "cpu" for s in refused),
          "embed --json: each refused segment, its stage and the framework's message naming layer_norm")
    warnings = [line for line in result.stderr.splitlines() if line.startswith("anvil: warning:")]
    check(len(warnings) == len(refused) and all("layer_norm" in line for line in warnings),
          f"one warning line per refused segment on stderr ({warnings})")
    strict = anvil(*(["embed", "--model", folder, "--backend", "ane", "--strict-device"] + args[5:]), env=refusing)
    check_error(strict, 1, "anvil: error:", "layer_norm", "strict_device", what="embed --strict-device with layer_norm refused")
    # Errors.
    check_error(anvil("embed", "--model", folder, "--ids", "101,x"), 2, "anvil: usage:", "--ids", "'x'",
                what="embed --ids with a non-number")
    check_error(anvil("embed", "--model", folder, "--ids", "1,99999"), 1, "anvil: error:", "99999",
                what="embed --ids out of the vocabulary")
    check_error(anvil("embed", "--model", folder, "a", "--ids", "1,2"), 2, "anvil: usage:", "either",
                what="embed with text and ids")
    check_error(anvil("embed", "--model", folder, "a", "--backend", "tpu"), 2, "anvil: usage:", "--backend",
                what="embed --backend tpu")
    check_error(anvil("embed", "--model", folder, "a", "b", "--pooling", "none"), 2, "anvil: usage:", "one text",
                what="embed --pooling none with two texts")
    check_error(anvil("embed", "a"), 2, "anvil: usage:", "--model", what="embed without --model")
    check_error(anvil("embed", "--model", tmp / "nowhere", "a"), 1, "anvil: error:", "nowhere",
                what="embed on a missing folder")
    check_error(anvil("embed", "--model", DATA / "vit" / "vit", "a"), 1, "anvil: error:", "vit",
                what="embed on an image model")


def test_rerank(tmp: pathlib.Path) -> None:
    folder = TEXT / "bert_cross"
    ids, types = id_lists(folder)
    args = ["rerank", "--model", folder, "--backend", "cpu"]
    for one, kind in zip(ids, types):
        args += ["--ids", one, "--type-ids", kind]
    out = tmp / "scores.npy"
    result = anvil(*args, "--out", out)
    shape, logits = read_npy(folder / "logits.npy")
    expected = [row[0] for row in rows(shape, logits)]
    got_shape, got = read_npy(out) if result.returncode == 0 else ((), [])
    check(got_shape == (len(ids),) and max_relative_error(got, expected) < 1e-4,
          f"rerank --ids --type-ids --out: first logits of the reference ({result.stderr})")
    result = anvil(*args, "--json")
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    best_first = sorted(range(len(expected)), key=lambda i: -expected[i])
    check(max_relative_error(report.get("scores", []), expected) < 1e-4 and report.get("ranking") == best_first,
          "rerank --json: scores in input order and the ranking best first")
    pairs = json.loads((folder / "texts.json").read_text(encoding="utf-8"))
    query = pairs[0][0]
    result = anvil("rerank", "--model", folder, "--backend", "cpu", "--query", query, pairs[0][1], "--json")
    shape, text_logits = read_npy(folder / "text_logits.npy")
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    check(max_relative_error(report.get("scores", []), [rows(shape, text_logits)[0][0]]) < 1e-4,
          f"rerank --query: the reference's score for the pair ({result.stderr})")
    result = anvil("rerank", "--model", folder, "--backend", "cpu", "--query", query, pairs[0][1], pairs[1][1])
    check(result.returncode == 0 and len(result.stdout.splitlines()) == 2, "rerank prints one line per passage")
    check_error(anvil("rerank", "--model", folder, "--ids", ids[0]), 2, "anvil: usage:", "--type-ids",
                "type_vocab_size 2", what="rerank --ids without --type-ids on a model with token types")
    # A model without token types (DistilBERT) takes --ids alone.
    distil = TEXT / "distilbert_cross"
    distil_ids, _ = id_lists(distil)
    args = ["rerank", "--model", distil, "--backend", "cpu", "--json"]
    for one in distil_ids:
        args += ["--ids", one]
    result = anvil(*args)
    shape, logits = read_npy(distil / "logits.npy")
    report = json.loads(result.stdout) if result.returncode == 0 else {}
    check(max_relative_error(report.get("scores", []), [row[0] for row in rows(shape, logits)]) < 1e-4,
          f"rerank --ids without --type-ids on DistilBERT: the reference's scores ({result.stderr.strip()})")
    check_error(anvil("rerank", "--model", folder, "--query", "q"), 2, "anvil: usage:", "PASSAGE",
                what="rerank --query without passages")
    check_error(anvil("rerank", "--model", TEXT / "bert_sentence", "--query", "q", "p"), 1, "anvil: error:",
                what="rerank with a model that has no classification head")


def test_classify(tmp: pathlib.Path) -> None:
    out = tmp / "logits.npy"
    for name in ("vit", "deit", "deit_teacher"):
        folder = DATA / "vit" / name
        result = anvil("classify", "--model", folder, "--pixels", folder / "pixels.npy", "--backend", "cpu",
                       "--out", out)
        shape, expected = read_npy(folder / "logits.npy")
        got_shape, got = read_npy(out) if result.returncode == 0 else ((), [])
        check(got_shape == shape and max_relative_error(got, expected) < 1e-4,
              f"classify --pixels {name}: the reference's logits ({result.stderr})")
    folder = DATA / "vit" / "vit"
    result = anvil("classify", "--model", folder, "--pixels", folder / "pixels.npy", "--backend", "cpu", "--top",
                   "3", "--json")
    report = json.loads(result.stdout) if result.returncode == 0 else {"results": []}
    shape, logits = read_npy(folder / "logits.npy")
    config = json.loads((folder / "config.json").read_text())
    ok = len(report["results"]) == shape[0]
    for result_row, logit_row in zip(report["results"], rows(shape, logits)):
        top = max(logit_row)
        total = sum(math.exp(v - top) for v in logit_row)
        best = sorted(range(len(logit_row)), key=lambda i: -logit_row[i])[:3]
        ok = ok and [c["index"] for c in result_row["top"]] == best
        ok = ok and all(abs(c["probability"] - math.exp(logit_row[c["index"]] - top) / total) < 1e-4
                        and c["label"] == config["id2label"][str(c["index"])] for c in result_row["top"])
    check(ok, "classify --top 3 --json: the three best classes, softmax probabilities and id2label names")

    # The real photos, decoded and preprocessed by anvil, through a random-weight ResNet.
    resnet = DATA / "resnet" / "hf_basic"
    photos = sorted((DATA / "images").glob("*.png")) + sorted((DATA / "images").glob("*.jpg"))
    result = anvil("classify", "--model", resnet, "--backend", "cpu", *photos, "--json", "--out", out)
    report = json.loads(result.stdout) if result.returncode == 0 else {"results": []}
    check(len(photos) == 6 and len(report["results"]) == 6
          and all(len(r["top"]) == 5 and r["top"][0]["probability"] >= r["top"][-1]["probability"] > 0
                  for r in report["results"]),
          f"classify on the six photos: five classes each, best first ({result.stderr[-300:]})")
    # anvil's decode + preprocessing of chelsea.png against torchvision's transform of the same pixels.
    chelsea = DATA / "images" / "chelsea.png"
    reference = DATA / "images" / "preprocessing" / "chelsea_imagenet.npy"
    result_a = anvil("classify", "--model", resnet, "--backend", "cpu", chelsea, "--out", tmp / "a.npy")
    result_b = anvil("classify", "--model", resnet, "--backend", "cpu", "--pixels", reference, "--out",
                     tmp / "b.npy")
    _, a = read_npy(tmp / "a.npy") if result_a.returncode == 0 else ((), [])
    _, b = read_npy(tmp / "b.npy") if result_b.returncode == 0 else ((), [1.0])
    check(max_relative_error(a, b) < 1e-3,
          f"classify chelsea.png = classify on torchvision's preprocessing of it ({max_relative_error(a, b):.2g})")
    bad = tmp / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    check_error(anvil("classify", "--model", resnet, bad), 1, "anvil: error:", "bad.png",
                what="classify a broken PNG")
    check_error(anvil("classify", "--model", resnet, "--pixels", TEXT / "bert_sentence" / "ids.npy"), 1,
                "anvil: error:", what="classify --pixels of the wrong shape")
    check_error(anvil("classify", "--model", resnet, "--top", "0", chelsea), 2, "anvil: usage:", "--top",
                what="classify --top 0")
    check_error(anvil("classify", "--model", TEXT / "bert_sentence", chelsea), 1, "anvil: error:",
                what="classify with a text model")


def softmax(values):
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [e / sum(exps) for e in exps]


def test_clip(tmp: pathlib.Path) -> None:
    folder = DATA / "clip" / "clip"
    texts = json.loads((folder / "texts.json").read_text())
    _, text_embeds = read_npy(folder / "text_embeds.npy")
    _, text_features = read_npy(folder / "text_features.npy")
    _, image_embeds = read_npy(folder / "image_embeds.npy")
    shape, logits = read_npy(folder / "logits_per_image.npy")
    result = anvil("embed", "--model", folder, "--backend", "cpu", "--json", *texts)
    ok = result.returncode == 0
    report = json.loads(result.stdout) if ok else {}
    got = [v for row in report.get("embeddings", []) for v in row]
    check(ok and report["shape"] == [4, 24] and report["tower"] == "text" and
          max_relative_error(got, text_embeds) < 1e-4,
          f"embed CLIP texts --json: the reference's normalised text embeddings ({result.stderr})")
    out = tmp / "clip_features.npy"
    result = anvil("embed", "--model", folder, "--backend", "cpu", "--no-normalize", "--out", out, *texts)
    check(result.returncode == 0 and max_relative_error(read_npy(out)[1], text_features) < 1e-4,
          f"embed CLIP texts --no-normalize --out: get_text_features ({result.stderr})")
    ids_shape, ids = read_npy(folder / "input_ids.npy")
    eos = max(ids)
    lists = []
    for row in rows(ids_shape, ids):
        lists += ["--ids", ",".join(str(v) for v in row[:row.index(eos) + 1])]
    result = anvil("embed", "--model", folder, "--backend", "cpu", "--out", out, *lists)
    check(result.returncode == 0 and max_relative_error(read_npy(out)[1], text_embeds) < 1e-4,
          f"embed CLIP --ids: the same embeddings from token ids ({result.stderr})")
    result = anvil("embed", "--model", folder, "--backend", "cpu", "--pixels", folder / "pixels.npy", "--out", out)
    check(result.returncode == 0 and read_npy(out)[0] == (2, 24) and
          max_relative_error(read_npy(out)[1], image_embeds) < 1e-4,
          f"embed CLIP --pixels: the reference's image embeddings ({result.stderr})")

    pixel_shape, pixels = read_npy(folder / "pixels.npy")
    one = tmp / "one_image.npy"
    half = len(pixels) // 2
    write_npy_f32(one, (1,) + tuple(pixel_shape[1:]), pixels[half:])
    probabilities = tmp / "probabilities.npy"
    result = anvil("zero-shot", "--model", folder, "--backend", "cpu", "--pixels", one, "--template", "{}",
                   "--labels", *texts, "--json", "--out", probabilities)
    ok = result.returncode == 0
    report = json.loads(result.stdout) if ok else {}
    expected = softmax(logits[shape[1]:])
    ranked = [entry["label"] for entry in report.get("labels", [])]
    want = [texts[i] for i in sorted(range(len(texts)), key=lambda i: -expected[i])]
    check(ok and max_relative_error(read_npy(probabilities)[1], expected) < 1e-4 and ranked == want and
          max_relative_error(report["probabilities"], expected) < 1e-4,
          f"zero-shot --pixels --template {{}}: softmax of the reference's logits_per_image, best first "
          f"({result.stderr})")
    photo = DATA / "images" / "chelsea.png"
    result = anvil("zero-shot", "--model", folder, "--backend", "cpu", photo, "--labels", "cat", "dog", "bird")
    lines = result.stdout.splitlines()
    check(result.returncode == 0 and len(lines) == 3 and abs(sum(float(l.split()[0]) for l in lines) - 1) < 1e-3,
          f"zero-shot on a photo: three labels whose probabilities sum to 1 ({result.stderr})")
    check_error(anvil("zero-shot", "--model", folder, photo), 2, "anvil: usage:", "--labels",
                what="zero-shot without labels")
    check_error(anvil("zero-shot", "--model", folder, photo, "--labels", "cat", "--template", "a cat"), 2,
                "anvil: usage:", "{}", what="zero-shot with a template without {}")
    check_error(anvil("zero-shot", "--model", folder, "--pixels", folder / "pixels.npy", "--labels", "cat"), 1,
                "anvil: error:", "zero-shot takes one image", what="zero-shot of two images")
    check_error(anvil("embed", "--model", folder, "--pooling", "mean", "a cat"), 2, "anvil: usage:", "--pooling",
                what="embed CLIP with --pooling")
    check_error(anvil("embed", "--model", folder, "a cat", "--pixels", folder / "pixels.npy"), 2,
                "anvil: usage:", what="embed CLIP with texts and pixels")
    check_error(anvil("embed", "--model", TEXT / "bert_sentence", "--pixels", folder / "pixels.npy"), 2,
                "anvil: usage:", "clip", what="embed --pixels with a sentence encoder")
    check_error(anvil("zero-shot", "--model", TEXT / "bert_sentence", photo, "--labels", "cat"), 1,
                "anvil: error:", "not a CLIP model", what="zero-shot with a sentence encoder")


def test_transcribe(tmp: pathlib.Path) -> None:
    folder = DATA / "whisper" / "whisper"
    jfk = DATA / "audio" / "jfk.wav"
    cases = json.loads((folder / "generation.json").read_text())["cases"]
    first = cases[0]
    limit = str(first["max_new_tokens"])
    encoder_out, mel_out = tmp / "encoder.npy", tmp / "mel.npy"
    result = anvil("transcribe", "--model", folder, jfk, "--language", first["language"], "--max-new-tokens", limit,
                   "--backend", "cpu", "--json", "--encoder-out", encoder_out, "--mel-out", mel_out)
    ok = result.returncode == 0
    report = json.loads(result.stdout) if ok else {}
    check(ok and report["ids"] == first["generated"] and report["windows"][0]["prompt"] == first["prompt"] and
          report["language"] == "<|en|>" and report["text"],
          f"transcribe jfk.wav --json: the reference's prompt and greedy ids ({result.stderr[-300:]})")
    _, hidden = read_npy(folder / "encoder_hidden.npy")
    check(ok and read_npy(encoder_out)[0] == (1500, 32) and max_relative_error(read_npy(encoder_out)[1], hidden) < 1e-4,
          "transcribe --encoder-out: the reference's encoder output [1500, d_model]")
    check(ok and read_npy(mel_out)[0] == (80, 3000), "transcribe --mel-out: the log-mel [n_mels, 3000]")
    result = anvil("transcribe", "--model", folder, "--features", mel_out, "--language", "en", "--max-new-tokens",
                   limit, "--backend", "cpu", "--json")
    check(result.returncode == 0 and json.loads(result.stdout)["ids"] == first["generated"],
          f"transcribe --features: the same ids from the features ({result.stderr[-300:]})")
    stamped = [c for c in cases if c["timestamps"]][0]
    result = anvil("transcribe", "--model", folder, jfk, "--language", stamped["language"], "--timestamps",
                   "--max-new-tokens", str(stamped["max_new_tokens"]), "--backend", "cpu")
    check(result.returncode == 0 and result.stdout.startswith("[0.18 -> 21.72]"),
          f"transcribe --timestamps: segments from the timestamp pairs ({result.stdout[:80]!r})")

    fast = tmp / "fast.wav"
    with wave.open(str(fast), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(44100)
        out.writeframes(b"\x00\x00" * 4410)
    check_error(anvil("transcribe", "--model", folder, fast), 1, "anvil: error:", "44100 Hz", "16000",
                what="transcribe a 44.1 kHz file")
    check_error(anvil("transcribe", "--model", folder, jfk, "--task", "summarize"), 2, "anvil: usage:", "--task",
                what="transcribe --task summarize")
    check_error(anvil("transcribe", "--model", folder, jfk, "--features", mel_out), 2, "anvil: usage:",
                what="transcribe with audio and features")
    check_error(anvil("transcribe", "--model", folder, jfk, "--language", "tlh"), 1, "anvil: error:",
                "unknown language 'tlh'", what="transcribe --language tlh")
    check_error(anvil("transcribe", "--model", DATA / "whisper" / "whisper_en", jfk, "--language", "de"), 1,
                "anvil: error:", "English-only", what="an English-only model with --language de")
    check_error(anvil("transcribe", "--model", TEXT / "bert_sentence", jfk), 1, "anvil: error:",
                "not a Whisper model", what="transcribe with a sentence encoder")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        test_tokenize()
        test_embed(tmp)
        test_rerank(tmp)
        test_classify(tmp)
        test_clip(tmp)
        test_transcribe(tmp)
    print(f"cli.models: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
