#!/usr/bin/env python3
"""Runs each example program in examples/ on a random-weight fixture and checks what it prints against the
`anvil` command line on the same folder (whose numbers tests/cli checks against PyTorch references).

usage: test_examples.py EXAMPLES_BIN_DIR ANVIL_CLI DATA_DIR
Python standard library only.
"""
import json
import math
import pathlib
import re
import subprocess
import sys

failures = []


def run(*command) -> str:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def check(condition: bool, what: str) -> None:
    print(("ok      " if condition else "FAILED  ") + what)
    if not condition:
        failures.append(what)


def test_embed(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "text_encoders" / "bert_sentence"
    texts = json.loads((folder / "texts.json").read_text())[:3]
    printed = run(examples / "embed", folder, *texts, "--backend", "cpu")
    reference = json.loads(run(cli, "embed", "--model", folder, "--backend", "cpu", "--json", *texts))["embeddings"]
    dim = len(reference[0])
    for line in printed.splitlines()[: len(texts)]:
        check(line.split(" ", 2)[1] == f"[{dim}]", f"embed: prints the embedding size {dim}: {line!r}")
    pairs = dict(((int(a), int(b)), float(v)) for a, b, v in
                 re.findall(r"similarity\((\d+), (\d+)\) = (-?[0-9.]+)", printed))
    check(len(pairs) == 3, f"embed: three pairs of three texts ({len(pairs)})")
    for (i, j), value in pairs.items():
        a, b = reference[i], reference[j]
        cosine = sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
        check(abs(cosine - value) < 2e-4, f"embed: similarity({i}, {j}) {value} equals the CLI's {cosine:.4f}")


def test_rerank(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "text_encoders" / "bert_cross"
    query, passages = "the cat", ["sat on the mat", "is running very fast in the night", "world"]
    printed = run(examples / "rerank", folder, query, *passages, "--backend", "cpu")
    reference = json.loads(run(cli, "rerank", "--model", folder, "--query", query, *passages, "--backend", "cpu",
                               "--json"))
    rows = [line.split(None, 1) for line in printed.splitlines()]
    expected = [(reference["scores"][i], passages[i]) for i in reference["ranking"]]
    check(len(rows) == len(passages), f"rerank: one line per passage ({len(rows)})")
    for (score, passage), (want_score, want_passage) in zip(rows, expected):
        check(passage == want_passage and abs(float(score) - want_score) < 1e-3,
              f"rerank: {passage!r} {score} in the CLI's order with its score {want_score:.4f}")


def test_classify(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "vit" / "vit"
    image = data / "images" / "chelsea.png"
    if not image.exists():
        image = data / "images" / "dog.jpg"
    try:
        printed = run(examples / "classify", folder, image, "--top", "3", "--backend", "cpu")
    except AssertionError as e:  # without stb_image only PPM/PGM decode: the message must say so
        check(" exited 1: " in str(e) and "stb" in str(e), f"classify: a clear error without stb ({e})")
        return
    reference = json.loads(run(cli, "classify", "--model", folder, image, "--top", "3", "--backend", "cpu",
                               "--json"))["results"][0]["top"]
    rows = [line.split(None, 1) for line in printed.splitlines()[1:]]
    check(len(rows) == 3, f"classify: three labels ({len(rows)})")
    for (probability, label), want in zip(rows, reference):
        check(label == want["label"] and abs(float(probability) - want["probability"]) < 1e-3,
              f"classify: {label!r} {probability} is the CLI's {want['label']!r} {want['probability']:.4f}")


def test_chat(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "decoder_lms" / "qwen2"
    printed = run(examples / "chat", folder, "--prompt", "hello there", "--max-new-tokens", "12", "--backend",
                  "cpu")
    reference = json.loads(run(cli, "generate", "--model", folder, "--chat", "--prompt", "hello there",
                               "--max-new-tokens", "12", "--backend", "cpu", "--json"))
    check(printed == reference["text"] + "\n",
          f"chat: the streamed reply {printed!r} is the CLI's greedy reply {reference['text']!r}")


def test_zero_shot(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "clip" / "clip"
    image = data / "images" / "chelsea.png"
    labels = ["cat", "dog", "bird"]
    try:
        printed = run(examples / "zero_shot", folder, image, *labels, "--backend", "cpu")
    except AssertionError as e:  # without stb_image only PPM/PGM decode: the message must say so
        check(" exited 1: " in str(e) and "stb" in str(e), f"zero_shot: a clear error without stb ({e})")
        return
    reference = json.loads(run(cli, "zero-shot", "--model", folder, image, "--labels", *labels, "--backend", "cpu",
                               "--json"))["labels"]
    rows = [line.split(None, 1) for line in printed.splitlines()]
    check(len(rows) == 3, f"zero_shot: three labels ({len(rows)})")
    for (probability, label), want in zip(rows, reference):
        check(label == want["label"] and abs(float(probability) - want["probability"]) < 1e-3,
              f"zero_shot: {label!r} {probability} is the CLI's {want['label']!r} {want['probability']:.4f}")


def test_transcribe(examples: pathlib.Path, cli: str, data: pathlib.Path) -> None:
    folder = data / "whisper" / "whisper"
    audio = data / "audio" / "jfk.wav"
    printed = run(examples / "transcribe", folder, audio, "--language", "en", "--max-new-tokens", "8", "--backend",
                  "cpu")
    reference = json.loads(run(cli, "transcribe", "--model", folder, audio, "--language", "en", "--max-new-tokens",
                               "8", "--backend", "cpu", "--json"))
    check(printed == reference["text"] + "\n",
          f"transcribe: the streamed text {printed!r} is the CLI's {reference['text']!r}")


def main() -> int:
    examples, cli, data = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    for test in (test_embed, test_rerank, test_classify, test_chat, test_zero_shot, test_transcribe):
        try:
            test(examples, cli, data)
        except AssertionError as e:
            check(False, f"{test.__name__}: {e}")
    print(f"examples: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
