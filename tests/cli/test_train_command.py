"""`anvil train` against its independent float64 reference (tools/reference/train_reference.py).

tests/data/train/cases/ (made by tools/reference/train_fixtures.py) holds random-weight Hugging Face folders of
each family, their TRAIN.jsonl, and per case the command line and what the reference computed: the --json lines
(steps.jsonl) and the final float64 value of every trained tensor (reference_weights_f64.safetensors). Each case
runs `anvil train` with the same command line from that folder and compares:
  - every step's loss, lr and grad_norm;
  - every trained tensor of the output (model.safetensors, or PEFT's adapter_model.safetensors) with the
    reference's float64 value;
  - every other tensor byte for byte with the input, and the output's names, shapes and dtypes with the input's;
  - a ResNet's BatchNorm statistics (BatchNorm in train mode): running_mean / running_var with the reference's
    float64 values, num_batches_tracked (I64) exactly the input's + the steps;
  - for LoRA, adapter_config.json key for key with the one the reference wrote as PEFT writes it;
  - with --eval, each epoch's eval_loss, and eval_accuracy or eval_mse: a ResNet's with BatchNorm in eval mode on
    the running statistics of that moment (resnet_batchnorm), a multi-label classifier's exact-match accuracy
    (bert_multilabel).
Two variants of resnet_batchnorm need no reference of their own: the same folder under torchvision's names with a
timm config.json (the reference's values renamed, --eval included), and --freeze on BatchNorm buffers (frozen
buffers written back byte for byte, the rest as the reference has them: a buffer is not read by the train-mode
forward, so freezing one changes nothing else; this variant leaves --eval out, which reads them).
The bad inputs of cases.json must fail with one line naming the problem. --save-every / --resume: a resumed run
equals the uninterrupted one bit for bit. Every case runs on the simulated Neural Engine too (losses, grad norms and
eval losses within fp16 tolerances of the reference, the same eval accuracies, no step skipped by loss scaling); and
a batch repeated for 8 steps: the loss falls, matches the CPU's within fp16 tolerances, and one program is compiled.

Standard library only (the safetensors reader follows the format's description).
"""
import json
import math
import os
import pathlib
import re
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cli_support  # noqa: E402
from cli_support import DATA, check, check_error, failures  # noqa: E402

CASES = DATA / "train" / "cases"
FORMATS = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i"}

# Tolerances. The reference trains in float64, anvil in float32 (fp32 master weights and fp32 gradients), so
# each step differs by float32 rounding (~1e-7 relative), which a few steps of AdamW or momentum carry forward.
# A gradient that is zero in exact arithmetic (an attention key bias: softmax ignores a shift common to every key)
# is rounding noise in both; AdamW's update of such a tensor is about lr per step whatever the noise's size, so
# those tensors are compared with an absolute tolerance of lr x steps (cases.json's notes).
STEP_RTOL = 2e-5
# On the simulated Neural Engine the forward and backward run in fp16 (11-bit significands) over a few layers
# and steps.
ANE_RTOL = 2e-2
WEIGHT_ATOL, WEIGHT_RTOL = 2e-5, 2e-4


def read_safetensors(path: pathlib.Path):
    """name -> (dtype, shape, raw bytes); and the metadata."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    start = 8 + length
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[start + begin:start + end])
    return tensors, metadata


def write_safetensors(path: pathlib.Path, tensors, metadata):
    """name -> (dtype, shape, raw bytes), in the order given, as safetensors lays them out."""
    header, offset = {"__metadata__": metadata}, 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, raw in tensors.values()))


def values(entry):
    dtype, shape, raw = entry
    code = FORMATS[dtype]
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))


def is_key_bias(name: str) -> bool:
    return name.endswith(("key.bias", "k_lin.bias", "attn.k.bias"))


def without_eval(args):
    at = args.index("--eval")
    return args[:at] + args[at + 2:]


def compare_steps(name, lines, expected_path, evaluations=True):
    """Every step's loss, lr and grad_norm, and every evaluation line (--eval), against the reference's (not its
    evaluation lines when `evaluations` is false: a run without --eval)."""
    expected_all = [json.loads(line) for line in expected_path.read_text().splitlines()
                    if evaluations or "eval_loss" not in line]
    got_all = [json.loads(line) for line in lines if line.strip()]
    expected = [r for r in expected_all if "loss" in r]
    got = [r for r in got_all if "loss" in r]
    check(len(got) == len(expected), f"{name}: {len(expected)} steps (got {len(got)})")
    check([r["step"] for r in got] == [r["step"] for r in expected], f"{name}: steps numbered from 1")
    worst = {"loss": 0.0, "lr": 0.0, "grad_norm": 0.0}
    for g, e in zip(got, expected):
        for key in worst:
            worst[key] = max(worst[key], abs(g[key] - e[key]) / max(abs(e[key]), 1e-12))
    check(worst["lr"] < 1e-12, f"{name}: every step's lr equals the reference's (rel {worst['lr']:.1e})")
    check(worst["loss"] < STEP_RTOL, f"{name}: loss within {STEP_RTOL} relative (worst {worst['loss']:.1e})")
    check(worst["grad_norm"] < STEP_RTOL,
          f"{name}: grad_norm within {STEP_RTOL} relative (worst {worst['grad_norm']:.1e})")
    expected_evals = [r for r in expected_all if "eval_loss" in r]
    got_evals = [r for r in got_all if "eval_loss" in r]
    if expected_evals or got_evals:
        check([(r["epoch"], r["step"], sorted(r)) for r in got_evals] ==
              [(r["epoch"], r["step"], sorted(r)) for r in expected_evals],
              f"{name}: an evaluation after each epoch ({[(r['epoch'], r['step']) for r in got_evals]})")
        # Positions in the stream: each evaluation right after its epoch's last step.
        check([i for i, r in enumerate(got_all) if "eval_loss" in r] ==
              [i for i, r in enumerate(expected_all) if "eval_loss" in r], f"{name}: evaluations follow their step")
        for g, e in zip(got_evals, expected_evals):
            for key in ("eval_loss", "eval_accuracy", "eval_mse"):
                if key in e:
                    error = abs(g.get(key, math.inf) - e[key]) / max(abs(e[key]), 1e-12)
                    check(error < STEP_RTOL if key != "eval_accuracy" else g.get(key) == e[key],
                          f"{name}: epoch {e['epoch']} {key} {g.get(key)} (reference {e[key]})")
    return got


def lr_sum(args):
    lr = float(args[args.index("--lr") + 1]) if "--lr" in args else 5e-5
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 8
    return lr * steps


def is_running_statistic(name: str) -> bool:
    return name.endswith((".running_mean", ".running_var"))


def compare_weights(name, out: pathlib.Path, case, expected=None, model=None, rename=lambda n: n, freeze=()):
    """`expected`: the case whose reference the output must match (this one's by default); `rename` maps its
    names to the output's; `freeze`: --freeze regexes that keep BatchNorm buffers as stored."""
    args = case["args"]
    expected = expected or name
    model = model or CASES / args[args.index("--model") + 1]
    reference, _ = read_safetensors(CASES / "expected" / expected / "reference_weights_f64.safetensors")
    reference = {rename(k): v for k, v in reference.items()}
    source, _ = read_safetensors(model / "model.safetensors")
    steps = sum('"loss"' in line for line in (CASES / "expected" / expected / "steps.jsonl").read_text().splitlines())
    frozen = [t for t in source if any(re.search(r, t) for r in freeze)]
    reference = {k: v for k, v in reference.items() if k not in frozen}
    lora = (CASES / "expected" / expected / "adapter_config.json").exists()
    written, metadata = read_safetensors(out / ("adapter_model.safetensors" if lora else "model.safetensors"))
    check(metadata == {"format": "pt"}, f"{name}: metadata {{'format': 'pt'}} as Hugging Face writes it")
    # [trained tensors, running statistics]: the share of the allowed difference used (at most 1 passes), where,
    # the largest difference, how many.
    worst = [[0.0, "", 0.0, 0], [0.0, "", 0.0, 0]]
    worst_key_bias = 0.0
    for tensor, entry in reference.items():
        if tensor not in written:
            check(False, f"{name}: the output has the trained tensor {tensor}")
            continue
        got, want = values(written[tensor]), values(entry)
        if written[tensor][1] != entry[1]:
            check(False, f"{name}: {tensor} has shape {entry[1]} (got {written[tensor][1]})")
            continue
        if is_key_bias(tensor):
            worst_key_bias = max(worst_key_bias, max(abs(a - b) for a, b in zip(got, want)))
            continue
        bucket = worst[is_running_statistic(tensor)]
        ratio = max(abs(a - b) / (WEIGHT_ATOL + WEIGHT_RTOL * abs(b)) for a, b in zip(got, want))
        bucket[2] = max(bucket[2], max(abs(a - b) for a, b in zip(got, want)))
        bucket[3] += 1
        if ratio > bucket[0]:
            bucket[0], bucket[1] = ratio, tensor
    trained, statistics = worst
    check(trained[0] <= 1.0, f"{name}: {trained[3]} trained tensors within {WEIGHT_ATOL} + {WEIGHT_RTOL} x "
          f"|reference| of the float64 reference (largest difference {trained[2]:.1e}; {trained[0]:.2f} of the "
          f"tolerance, in {trained[1]})")
    if statistics[3]:
        check(statistics[0] <= 1.0, f"{name}: {statistics[3]} BatchNorm running_mean / running_var within "
              f"{WEIGHT_ATOL} + {WEIGHT_RTOL} x |reference| of the float64 reference (largest difference "
              f"{statistics[2]:.1e}; {statistics[0]:.2f} of the tolerance, in {statistics[1]})")
    bound = 2 * lr_sum(args)
    check(worst_key_bias <= bound, f"{name}: attention key biases (zero gradient in exact arithmetic) moved at "
          f"most 2 x lr x steps ({worst_key_bias:.1e} <= {bound:.1e})")
    if lora:
        want_config = json.loads((CASES / "expected" / expected / "adapter_config.json").read_text())
        got_config = json.loads((out / "adapter_config.json").read_text())
        check(got_config == want_config, f"{name}: adapter_config.json as PEFT writes it "
              f"(differs in {sorted(k for k in want_config if got_config.get(k) != want_config[k])})")
        untouched = {k: v for k, v in written.items() if k not in reference}
        for tensor, entry in untouched.items():  # a frozen head tensor: written back as it was
            stored = source.get(tensor.replace("base_model.model.", "", 1))
            check(stored is not None and stored == entry, f"{name}: frozen {tensor} written back byte for byte")
        return
    check(sorted(written) == sorted(source), f"{name}: model.safetensors has exactly the input's tensor names")
    same_types = all(written[t][:2] == source[t][:2] for t in source if t in written)
    check(same_types, f"{name}: every tensor keeps its dtype and shape")
    counters = [t for t in source if t.endswith(".num_batches_tracked") and t not in frozen]
    if counters:
        def counted(t):
            return values(written[t])[0] if t in written and written[t][0] == "I64" else None
        wrong = [t for t in counters if counted(t) != values(source[t])[0] + steps]
        check(not wrong, f"{name}: {len(counters)} num_batches_tracked I64 = the input's + {steps} steps "
              f"({values(source[counters[0]])[0]} -> {counted(counters[0])}"
              f"{'; wrong: ' + ', '.join(wrong[:3]) if wrong else ''})")
    changed = [t for t in source if t not in reference and t not in counters and t in written
               and written[t] != source[t]]
    check(not changed, f"{name}: every tensor not trained or updated is byte for byte the input's "
          f"({len(frozen)} frozen buffers among them) ({changed[:3]})")
    check((out / "config.json").read_bytes() == (model / "config.json").read_bytes(), f"{name}: config.json copied")


def run_case(case, tmp: pathlib.Path):
    name = case["name"]
    out = tmp / name
    args = [a.replace("{out}", str(out)) for a in case["args"]]
    result = cli_support.anvil("train", *args, "--backend", "cpu")
    if result.returncode != 0:
        check(False, f"{name}: anvil train ran ({result.stderr.strip()[-400:]})")
        return
    compare_steps(name, result.stdout.splitlines(), CASES / "expected" / name / "steps.jsonl")
    compare_weights(name, out, case)


def run_case_on_simulator(case, tmp: pathlib.Path):
    """The same case on the simulated Neural Engine (fp16 compute, dynamic loss scaling): every step's loss and
    grad_norm within fp16 tolerances of the float64 reference, and one program per batch shape."""
    name = case["name"]
    out = tmp / ("ane_" + name)
    args = [a.replace("{out}", str(out)) for a in case["args"]]
    result = cli_support.anvil("train", *args, "--backend", "ane")
    if result.returncode != 0:
        check(False, f"{name} (simulator): anvil train ran ({result.stderr.strip()[-400:]})")
        return
    expected = [json.loads(line) for line in (CASES / "expected" / name / "steps.jsonl").read_text().splitlines()]
    expected = [r for r in expected if "loss" in r]
    got = [r for r in map(json.loads, result.stdout.splitlines()) if "loss" in r]
    clean = len(got) == len(expected) and not any(r.get("skipped") for r in got)
    check(clean, f"{name} (simulator): {len(expected)} steps, none skipped by loss scaling "
          f"({[r['step'] for r in got if r.get('skipped')]} skipped)")
    if not clean:
        return
    loss = max(abs(g["loss"] - e["loss"]) / abs(e["loss"]) for g, e in zip(got, expected))
    norm = max(abs(g["grad_norm"] - e["grad_norm"]) / abs(e["grad_norm"]) for g, e in zip(got, expected))
    check(loss < ANE_RTOL and norm < ANE_RTOL,
          f"{name} (simulator): loss and grad_norm within {ANE_RTOL} of the reference (worst {loss:.1e}, {norm:.1e})")
    expected_evals = [json.loads(line) for line in (CASES / "expected" / name / "steps.jsonl").read_text().splitlines()
                      if "eval_loss" in line]
    got_evals = [r for r in map(json.loads, result.stdout.splitlines()) if "eval_loss" in r]
    if expected_evals or got_evals:
        same = [(r["epoch"], r["step"], sorted(r)) for r in got_evals] == \
            [(r["epoch"], r["step"], sorted(r)) for r in expected_evals]
        check(same, f"{name} (simulator): an evaluation after each epoch ({[r['epoch'] for r in got_evals]})")
        for g, e in zip(got_evals, expected_evals):
            # The fixtures' decisions are far from their boundaries (the smallest top-logit gap or |logit|
            # in the reference's evaluations is 0.12), so fp16 compute keeps the accuracy exactly.
            for key in ("eval_loss", "eval_mse"):
                if key in e:
                    error = abs(g[key] - e[key]) / abs(e[key])
                    check(error < ANE_RTOL, f"{name} (simulator): epoch {e['epoch']} {key} within {ANE_RTOL} of the "
                          f"reference ({g[key]}, reference {e[key]})")
            if "eval_accuracy" in e:
                check(g["eval_accuracy"] == e["eval_accuracy"], f"{name} (simulator): epoch {e['epoch']} "
                      f"eval_accuracy {g['eval_accuracy']} (reference {e['eval_accuracy']})")


def torchvision_name(name: str) -> str:
    """A Hugging Face ResNetForImageClassification tensor name as torchvision's (and timm's) ResNet names it."""
    name = name.replace("resnet.embedder.embedder.convolution", "conv1")
    name = name.replace("resnet.embedder.embedder.normalization", "bn1").replace("classifier.1.", "fc.")
    block = re.match(r"resnet\.encoder\.stages\.(\d+)\.layers\.(\d+)\.(.*)", name)
    if not block:
        return name
    stage, index, rest = block.groups()
    rest = re.sub(r"layer\.(\d+)\.convolution", lambda m: f"conv{int(m.group(1)) + 1}", rest)
    rest = re.sub(r"layer\.(\d+)\.normalization", lambda m: f"bn{int(m.group(1)) + 1}", rest)
    rest = rest.replace("shortcut.convolution", "downsample.0").replace("shortcut.normalization", "downsample.1")
    return f"layer{int(stage) + 1}.{index}.{rest}"


def run_resnet_variants(spec, tmp: pathlib.Path):
    """resnet_batchnorm again, checked against its reference: (1) the folder under torchvision's names with a
    timm config.json (the architecture read from the tensors, the head "fc"); (2) --freeze on BatchNorm buffers."""
    case = next(c for c in spec["cases"] if c["name"] == "resnet_batchnorm")
    args = case["args"]
    model = tmp / "models" / "timm_resnet"
    model.mkdir(parents=True)
    tensors, metadata = read_safetensors(CASES / "models" / "resnet" / "model.safetensors")
    write_safetensors(model / "model.safetensors", {torchvision_name(k): v for k, v in tensors.items()}, metadata)
    (model / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 3,
                                                   "num_features": 16}, indent=2))
    timm_args = list(args)
    timm_args[args.index("--model") + 1] = str(model)
    for name, given, extra, options in (
            ("resnet_batchnorm_timm", timm_args, [], {"model": model, "rename": torchvision_name}),
            ("resnet_batchnorm_freeze_buffers", without_eval(args),
             ["--freeze", r"running_var$", "--freeze", r"^resnet\.embedder\..*num_batches_tracked$"],
             {"freeze": (r"running_var$", r"^resnet\.embedder\..*num_batches_tracked$")})):
        out = tmp / name
        result = cli_support.anvil("train", *[a.replace("{out}", str(out)) for a in given], *extra, "--backend",
                                   "cpu")
        if result.returncode != 0:
            check(False, f"{name}: anvil train ran ({result.stderr.strip()[-400:]})")
            continue
        compare_steps(name, result.stdout.splitlines(), CASES / "expected" / "resnet_batchnorm" / "steps.jsonl",
                      evaluations=name.endswith("_timm"))
        compare_weights(name, out, case, expected="resnet_batchnorm", **options)
    lora = cli_support.anvil("train", *[a.replace("{out}", str(tmp / "resnet_lora")) for a in args], "--lora", "2",
                             "--lora-targets", "classifier.1", "--backend", "cpu")
    check_error(lora, 1, "anvil: error:", "LoRA on a ResNet is not supported", what="resnet --lora: refused")


def run_bad(case, tmp: pathlib.Path):
    args = [a.replace("{out}", str(tmp / ("bad_" + case["name"]))) for a in case["args"]]
    result = cli_support.anvil("train", *args, "--backend", "cpu")
    check_error(result, 1, "anvil: error:", case["error"], what=f"bad input {case['name']}")


def run_resume(tmp: pathlib.Path):
    """--save-every and --resume: a run stopped after step 3 and resumed equals the uninterrupted run bit for bit
    (the step lines and the output file), on the CPU, for a model with dropout (the masks of step s depend on s
    only); for a ResNet too (its BatchNorm statistics, kept in float64 between steps, travel in the checkpoint)."""
    base = ["--model", "models/distilbert_dropout", "--data", "data/distilbert_dropout.jsonl", "--steps", "7",
            "--batch-size", "5",
            "--lr", "0.01", "--weight-decay", "0.01", "--warmup-steps", "2", "--max-grad-norm", "1.0", "--seed", "9",
            "--json", "--backend", "cpu"]
    whole = cli_support.anvil("train", *base, "--out", tmp / "whole", "--save-every", "3")
    check(whole.returncode == 0, f"resume: the whole run ({whole.stderr.strip()[-300:]})")
    if whole.returncode:
        return
    check(sorted(p.name for p in (tmp / "whole").iterdir() if p.name.startswith("checkpoint-")) ==
          ["checkpoint-3", "checkpoint-6"], "resume: --save-every 3 wrote checkpoint-3 and checkpoint-6")
    part = cli_support.anvil("train", *base, "--out", tmp / "rest", "--resume", tmp / "whole" / "checkpoint-3")
    check(part.returncode == 0, f"resume: the resumed run ({part.stderr.strip()[-300:]})")
    if part.returncode:
        return
    check(part.stdout.splitlines() == whole.stdout.splitlines()[3:],
          "resume: steps 4 to 7 print exactly what the whole run printed")
    check((tmp / "rest" / "model.safetensors").read_bytes() == (tmp / "whole" / "model.safetensors").read_bytes(),
          "resume: model.safetensors equals the whole run's byte for byte")
    latest = cli_support.anvil("train", *base, "--out", tmp / "latest", "--resume", tmp / "whole")
    check(latest.returncode == 0 and latest.stdout.splitlines() == whole.stdout.splitlines()[6:],
          "resume: an output folder resumes from its latest checkpoint (checkpoint-6: step 7 left)")
    changed = cli_support.anvil("train", *[a if a != "0.01" else "0.02" for a in base], "--out", tmp / "changed",
                                "--resume", tmp / "whole" / "checkpoint-3")
    check_error(changed, 1, "anvil: error:", "--resume", "--lr", what="resume: a changed option is refused by name")
    nothing = cli_support.anvil("train", *base, "--out", tmp / "none", "--resume", tmp / "rest")
    check_error(nothing, 1, "anvil: error:", "holds no checkpoint", what="resume: a folder without checkpoints")

    resnet = ["--model", "models/resnet", "--data", "data/resnet.jsonl", "--steps", "5", "--batch-size", "4",
              "--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--json", "--backend", "cpu"]
    whole = cli_support.anvil("train", *resnet, "--out", tmp / "resnet_whole", "--save-every", "2")
    part = cli_support.anvil("train", *resnet, "--out", tmp / "resnet_rest", "--resume",
                             tmp / "resnet_whole" / "checkpoint-2")
    check(whole.returncode == 0 and part.returncode == 0 and
          part.stdout.splitlines() == whole.stdout.splitlines()[2:] and
          (tmp / "resnet_rest" / "model.safetensors").read_bytes() ==
          (tmp / "resnet_whole" / "model.safetensors").read_bytes(),
          f"resume: a ResNet resumed after step 2 equals the whole run, running statistics included "
          f"({(whole.stderr + part.stderr).strip()[-300:]})")


def run_simulator(tmp: pathlib.Path):
    """The same batch 8 times on the simulated Neural Engine: the loss falls, one program is compiled, and the
    losses match the CPU's within fp16 tolerances."""
    base = ["--model", "models/bert", "--data", "data/bert.jsonl", "--batch-size", "10", "--steps", "8",
            "--no-shuffle", "--lr", "0.002", "--schedule", "constant"]
    cpu = cli_support.anvil("train", *base, "--out", tmp / "sim_cpu", "--json", "--backend", "cpu")
    ane = cli_support.anvil("train", *base, "--out", tmp / "sim_ane", "--json", "--backend", "ane")
    summary = cli_support.anvil("train", *base, "--out", tmp / "sim_ane2", "--backend", "ane")
    for what, r in (("cpu", cpu), ("ane", ane), ("ane summary", summary)):
        check(r.returncode == 0, f"simulator: {what} run ({r.stderr.strip()[-400:]})")
    if cpu.returncode or ane.returncode or summary.returncode:
        return
    cpu_loss = [json.loads(line)["loss"] for line in cpu.stdout.splitlines()]
    ane_loss = [json.loads(line)["loss"] for line in ane.stdout.splitlines()]
    check(len(ane_loss) == 8 and all(b < a for a, b in zip(ane_loss, ane_loss[1:])),
          f"simulator: the loss falls on a repeated batch ({[round(v, 4) for v in ane_loss]})")
    worst = max(abs(a - c) / abs(c) for a, c in zip(ane_loss, cpu_loss))
    check(worst < 2e-2, f"simulator: losses within 2e-2 of the CPU's (fp16 compute; worst {worst:.1e})")
    check("1 programs compiled" in summary.stdout,
          f"simulator: one program compiled for 8 steps ({summary.stdout.strip()})")


def main() -> int:
    cli_support.ANVIL = os.path.abspath(sys.argv[1])
    spec = json.loads((CASES / "cases.json").read_text())
    os.chdir(CASES)  # the cases' paths are relative to the fixture folder
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        for case in spec["cases"]:
            run_case(case, tmp)
            run_case_on_simulator(case, tmp)
        run_resnet_variants(spec, tmp)
        for case in spec["bad"]:
            run_bad(case, tmp)
        run_resume(tmp)
        run_simulator(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
