#!/usr/bin/python3
"""One fine-tuning step of a BERT-base-shaped sequence classifier: anvil (bench_train_step, the library's
anvil::train::fine_tuning on the CPU backend) against PyTorch 1.13 on this machine, at the same thread count,
in the same run (issue 42's "Must show"). A benchmark, not a test: nothing registers it with ctest.

Run it with Debian's interpreter (numpy, torch 1.13) on a bench_train_step built as the project builds its
benchmarks (-DANVIL_BUILD_BENCH=ON, or header-only in one g++ command, a few minutes:
`g++ -std=c++20 -O2 -DNDEBUG -Iinclude bench/bench_train_step.cpp -o bench_train_step -lpthread -ldl`):

  /usr/bin/python3 bench/train_step_vs_torch.py --anvil-bench build/bench/bench/bench_train_step
  /usr/bin/python3 bench/train_step_vs_torch.py --anvil-bench ... --quick        (smoke run: 2 steps, 1 repeat)
  options: --threads 1,2  --repeats 3  --steps 4  --no-frozen  --keep DIR

What it does:

- Writes, into a temporary folder, a BertForSequenceClassification in the Hugging Face on-disk format
  (config.json + model.safetensors, float32): BERT-base's shape (12 layers, hidden 768, 12 heads, intermediate
  3072, vocabulary 30522, 512 positions, 2 token types), 2 labels, dropout probabilities 0, seeded random
  weights (tools/reference/text_encoders.py's port, hf_format.randomize); and TRAIN.jsonl: 8 x STEPS examples
  of exactly 128 random ids each ({"ids": [...], "label": 0 or 1}), so every step is a full batch of 8 x 128
  with no padding, and no example is seen twice.
- anvil: bench_train_step on that folder (AdamW lr 2e-5, no weight decay, constant schedule, --no-shuffle,
  batch 8), a subprocess; it times load, the first step (which compiles the step's program) and each later
  step, and reports its own peak RSS (VmHWM, see below).
- PyTorch: this script again, as a subprocess (--torch-worker), so that its peak RSS is its own: the same port
  in float32 (the attention mask's additive form in float32, as transformers' get_extended_attention_mask
  makes it), the weights read from the same model.safetensors, the same batches in the same order,
  torch.optim.AdamW(lr 2e-5, weight_decay 0), CrossEntropyLoss; a step is zero_grad + forward + loss +
  backward + optimizer.step, the first timed apart. Thread pools pinned as the other PyTorch baselines pin them
  (tools/reference/threads_first.py: torch.set_num_threads, OpenBLAS and OpenMP at T, OMP_WAIT_POLICY PASSIVE).
- For each row (every tensor trained; then, unless --no-frozen, word_embeddings frozen in both engines: anvil's
  embedding gradient is a one-hot product, O(vocab x tokens x hidden), and this row shows what it costs) and
  each thread count T: R repeats, the two engines alternating which goes first; a run's step time is the
  median of its steps after the first. The table gives each engine's median over the repeats (min-max), the
  ratio torch / anvil of those medians (above 1: anvil faster) with the range of the per-repeat ratios, each
  engine's peak RSS (the largest over the repeats: VmHWM of the engine's own process, Python and torch's
  libraries included, or anvil's mapped checkpoint; not ru_maxrss, which Linux carries over from the parent
  across fork and exec), anvil's first step (compile included) and load times. Both engines start from the
  same weights and data, so their losses must agree: the largest difference is printed under the table.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "tools", "reference")
sys.path.insert(0, REFERENCE)

if "--torch-worker" in sys.argv:
    # Before numpy and torch load: the pools they size are sized then.
    import threads_first  # noqa: E402

    threads_first.pin()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hf_format  # noqa: E402
import text_encoders  # noqa: E402

BATCH, TOKENS = 8, 128
FROZEN = "word_embeddings"
CONFIG = dict(text_encoders.bert_like_config(
    "bert", 768, 12, num_hidden_layers=12, intermediate_size=3072, vocab_size=30522, max_position_embeddings=512,
    architectures=["BertForSequenceClassification"], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    id2label={"0": "LABEL_0", "1": "LABEL_1"}, label2id={"LABEL_0": 0, "LABEL_1": 1})


# ---------------------------------------------------------------------------------------------------------------
# The fixture: the model folder and TRAIN.jsonl.

def write_fixture(folder, steps, seed=0):
    model_dir = hf_format.make_output_dir(os.path.join(folder, "model"))
    model = text_encoders.BertForSequenceClassification(dict(CONFIG, num_labels=2))
    hf_format.randomize(model, hf_format.seeded_generator(seed), torch.float32)
    hf_format.write_safetensors(os.path.join(model_dir, "model.safetensors"),
                                hf_format.state_dict_as(model, torch.float32))
    hf_format.write_json(os.path.join(model_dir, "config.json"), CONFIG)
    del model
    gc.collect()
    rng = np.random.default_rng(seed)
    data = os.path.join(folder, "TRAIN.jsonl")
    with open(data, "w", encoding="utf-8") as file:
        for _ in range(BATCH * steps):
            ids = [101] + [int(v) for v in rng.integers(1000, CONFIG["vocab_size"], TOKENS - 2)] + [102]
            file.write(json.dumps({"ids": ids, "label": int(rng.integers(0, 2))}) + "\n")
    return model_dir, data


# ---------------------------------------------------------------------------------------------------------------
# The PyTorch side (this script with --torch-worker): one run, one JSON line on stdout.

def load_weights(model, path):
    """model.safetensors read straight into the parameters (no second copy of the file in memory)."""
    parameters = dict(model.state_dict(keep_vars=True))
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length).decode("utf-8"))
        base = 8 + length
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            target = parameters.pop(name)
            if entry["dtype"] != "F32" or list(target.shape) != entry["shape"]:
                raise ValueError(f"{path}: {name}: {entry['dtype']} {entry['shape']}, expected F32 "
                                 f"{list(target.shape)}")
            begin, end = entry["data_offsets"]
            file.seek(base + begin)
            view = target.data.numpy().reshape(-1).view(np.uint8)
            if file.readinto(view) != end - begin:
                raise ValueError(f"{path}: {name}: short read")
    if parameters:
        raise ValueError(f"{path}: missing {sorted(parameters)}")


def logits_of(model, ids, types, mask):
    """BertForSequenceClassification's forward in float32: the port's, with the additive mask made in the
    model's dtype as transformers does (the port's own forward makes it in float64 for its float64 goldens)."""
    bert = model.bert
    positions = torch.arange(ids.shape[1])[None, :].expand_as(ids)
    extended = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
    hidden = bert.encoder(bert.embeddings(ids, types, positions), extended)
    return model.classifier(bert.pooler(hidden))


def vm_hwm_mb():
    """The process's resident high-water mark (VmHWM), in MiB. Not ru_maxrss: Linux carries that across exec,
    so a child of a larger parent reports at least the parent's size at fork."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_worker(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as file:
        config = json.load(file)
    model = text_encoders.BertForSequenceClassification(dict(config, num_labels=len(config["id2label"])))
    load_weights(model, os.path.join(args.model, "model.safetensors"))
    model.train()
    for name, parameter in model.named_parameters():
        if any(re.search(pattern, name) for pattern in args.freeze):  # as anvil's --freeze
            parameter.requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    loss_function = torch.nn.CrossEntropyLoss()
    with open(args.data, encoding="utf-8") as file:
        examples = [json.loads(line) for line in file if line.strip()]
    batches = []
    for first in range(0, args.steps * args.batch, args.batch):
        chosen = examples[first:first + args.batch]
        ids = torch.tensor([e["ids"] for e in chosen], dtype=torch.long)
        batches.append((ids, torch.zeros_like(ids), torch.ones(ids.shape, dtype=torch.float32),
                        torch.tensor([e["label"] for e in chosen], dtype=torch.long)))
    load_s = time.perf_counter() - start

    times, losses = [], []
    for ids, types, mask, labels in batches:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_function(logits_of(model, ids, types, mask), labels)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
        print(f"torch: step {len(times)}/{len(batches)} {times[-1]:.3f} s, loss {losses[-1]:.6f}", file=sys.stderr)
    peak_rss_mb = vm_hwm_mb()
    print(json.dumps({"engine": "torch", "threads": args.threads, "torch": torch.__version__,
                      "freeze": args.freeze, "trained_tensors": len(trained),
                      "trained_elements": sum(p.numel() for p in trained), "load_s": load_s,
                      "first_step_s": times[0], "step_s": times[1:], "peak_rss_mb": peak_rss_mb,
                      "peak_rss_mb_getrusage": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      "losses": losses}))


# ---------------------------------------------------------------------------------------------------------------
# The driver.

def child_environment(threads):
    env = dict(os.environ)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(name, None)
    env.update({"ANVIL_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
                "OPENBLAS_NUM_THREADS": str(threads)})
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def run_engine(engine, args, model_dir, data, threads, freeze):
    if engine == "anvil":
        command = [args.anvil_bench, model_dir, data, "--threads", str(threads), "--steps", str(args.steps),
                   "--batch", str(BATCH), "--lr", str(args.lr)]
        for pattern in freeze:
            command += ["--freeze", pattern]
    else:
        command = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", model_dir, "--data",
                   data, "--threads", str(threads), "--steps", str(args.steps), "--batch", str(BATCH), "--lr",
                   str(args.lr)]
        for pattern in freeze:
            command += ["--freeze", pattern]
    done = subprocess.run(command, capture_output=True, text=True, env=child_environment(threads), check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{engine} failed ({done.returncode}): {' '.join(command)}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["step_median_s"] = statistics.median(result["step_s"])
    print(f"  {engine:5s} T={threads} {'frozen ' + ','.join(freeze) if freeze else 'all trained'}: load "
          f"{result['load_s']:.2f} s, first step {result['first_step_s']:.2f} s, steps "
          f"{', '.join(f'{s:.2f}' for s in result['step_s'])} s, peak RSS {result['peak_rss_mb']:.0f} MB",
          flush=True)
    return result


def spread(values, digits=2):
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def print_table(rows, args):
    print()
    print(f"Fine-tuning step, BERT-base BertForSequenceClassification (12 layers, hidden 768, vocab 30522, 2 labels), "
          f"batch {BATCH} x {TOKENS} tokens, float32, AdamW lr {args.lr:g}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; "
          f"{args.repeats} repeat(s) x {args.steps} steps, a run's step time = median of its steps 2..{args.steps}")
    header = ("trained", "T", "anvil step s", "torch step s", "torch/anvil", "anvil RSS MB", "torch RSS MB",
              "anvil 1st step s", "anvil load s")
    table = [header]
    for row in rows:
        anvil_steps = [r["step_median_s"] for r in row["anvil"]]
        torch_steps = [r["step_median_s"] for r in row["torch"]]
        ratios = [t / a for t, a in zip(torch_steps, anvil_steps)]
        ratio = statistics.median(torch_steps) / statistics.median(anvil_steps)
        table.append((
            row["label"], str(row["threads"]), spread(anvil_steps), spread(torch_steps),
            f"{ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
            f"{max(r['peak_rss_mb'] for r in row['anvil']):.0f}",
            f"{max(r['peak_rss_mb'] for r in row['torch']):.0f}",
            spread([r["first_step_s"] for r in row["anvil"]]),
            spread([r["load_s"] for r in row["anvil"]])))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print("(step s: median over repeats, min-max in parentheses; torch/anvil above 1 = anvil faster, per-repeat "
          "range in parentheses; RSS: peak over repeats)")
    for row in rows:
        worst = 0.0
        for a in row["anvil"]:
            for t in row["torch"]:
                worst = max(worst, max(abs(x - y) for x, y in zip(a["losses"], t["losses"])))
        first = row["anvil"][0]["losses"]
        print(f"losses, {row['label']}, T={row['threads']}: anvil {', '.join(f'{v:.5f}' for v in first)}; "
              f"largest |anvil - torch| over all runs {worst:.1e}")


def driver(args):
    if not os.access(args.anvil_bench, os.X_OK):
        raise SystemExit(f"--anvil-bench {args.anvil_bench}: not an executable")
    threads_list = [int(t) for t in args.threads.split(",")]
    folder = args.keep or tempfile.mkdtemp(prefix="train_step_vs_torch.")
    os.makedirs(folder, exist_ok=True)
    try:
        start = time.perf_counter()
        torch.set_num_threads(max(threads_list))
        model_dir, data = write_fixture(folder, args.steps)
        print(f"wrote {model_dir} and {data} ({BATCH * args.steps} examples) in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        variants = [("all", [])] + ([] if args.no_frozen else [(f"{FROZEN} frozen", [FROZEN])])
        rows = []
        for label, freeze in variants:
            for threads in threads_list:
                row = {"label": label, "threads": threads, "anvil": [], "torch": []}
                for repeat in range(args.repeats):
                    order = ("anvil", "torch") if repeat % 2 == 0 else ("torch", "anvil")
                    for engine in order:
                        row[engine].append(run_engine(engine, args, model_dir, data, threads, freeze))
                rows.append(row)
        print_table(rows, args)
        print(f"(whole run {time.perf_counter() - start:.0f} s)")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--anvil-bench", help="the bench_train_step program")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated (worker: one count)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="steps per run, the first included")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--no-frozen", action="store_true", help="leave out the frozen word_embeddings row")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 steps, 1 repeat")
    parser.add_argument("--keep", help="write the fixture here and keep it")
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=BATCH, help=argparse.SUPPRESS)
    parser.add_argument("--freeze", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        args.threads = int(args.threads)
        torch_worker(args)
        return
    if args.quick:
        args.steps, args.repeats = 2, 1
    if args.steps < 2 or args.repeats < 1:
        raise SystemExit("--steps needs at least 2 (the first is timed apart) and --repeats at least 1")
    if not args.anvil_bench:
        parser.error("--anvil-bench is required")
    driver(args)


if __name__ == "__main__":
    main()
