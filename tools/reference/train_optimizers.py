#!/usr/bin/python3
"""PyTorch reference for anvil's optimizers, learning-rate schedules and gradient clipping (include/anvil/train/).

Runs torch.optim.SGD and torch.optim.AdamW (PyTorch 1.13, foreach off: the _single_tensor_* functions) for a few
steps on seeded random float32 parameters and per-step gradients, with the learning rate of each step from a
LambdaLR over Hugging Face transformers' schedule lambdas (optimization.py's get_constant_schedule_with_warmup,
get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup with num_cycles 0.5, written out below) and
torch.nn.utils.clip_grad_norm_ before some steps. Parameters are in two groups where a case says so: the second
group has weight_decay 0, as Hugging Face's Trainer puts biases and LayerNorm weights.

Writes tests/data/train/optimizers/ (or --out DIR):
  <case>.params.npy     float32 [N]: every parameter flattened, concatenated in cases.json's order
  <case>.grads.npy      float32 [steps, N]: each step's gradients, before clipping
  <case>.expected.npy   float32 [steps, N]: the parameters after each step
  <case>.state.npy      float32 [buffers, N]: the optimizer's buffers after the last step, in the case's
                        "buffers" order (absent when there are none)
  schedules.json        base_lr * lambda(step) for each schedule and a few (warmup, training) pairs, read back
                        from the optimizer's param_groups as LambdaLR sets them
  cases.json            per case: optimizer, options, parameters (name, shape, offset, weight_decay), schedule,
                        clipping (max_norm, the steps clipped, clip_grad_norm_'s returned totals), the lr of
                        each step

Rerun (deterministic, seeded): /usr/bin/python3 tools/reference/train_optimizers.py
Standard library + numpy + torch.
"""
import argparse
import json
import math
import os

import numpy as np
import torch

SEED = 1234
# Sizes that exercise torch's vectorised kernels (16 floats a step with AVX2) and their scalar tails.
PARAMETERS = [("dense.weight", [7, 5], True), ("dense.bias", [7], False), ("norm.weight", [3, 4, 2], False),
              ("head.weight", [19], True)]


# transformers' lr lambdas (optimization.py), operation for operation.
def constant_lambda(num_warmup_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1.0, num_warmup_steps))
        return 1.0
    return lr_lambda


def linear_lambda(num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
    return lr_lambda


def cosine_lambda(num_warmup_steps, num_training_steps, num_cycles=0.5):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return lr_lambda


def schedule_lambda(kind, warmup, training):
    if kind == "constant":
        return constant_lambda(warmup)
    if kind == "linear":
        return linear_lambda(warmup, training)
    return cosine_lambda(warmup, training)


CASES = [
    {"name": "sgd_plain", "optimizer": "sgd", "options": {"momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0,
                                                          "nesterov": False},
     "groups": False, "schedule": {"kind": "constant", "base_lr": 0.1, "warmup_steps": 0, "training_steps": 5},
     "steps": 5, "clip": None},
    {"name": "sgd_momentum", "optimizer": "sgd", "options": {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.0,
                                                             "nesterov": False},
     "groups": False, "schedule": {"kind": "linear", "base_lr": 0.05, "warmup_steps": 2, "training_steps": 6},
     "steps": 5, "clip": {"max_norm": 1.0, "steps": [1, 3]}},
    {"name": "sgd_nesterov", "optimizer": "sgd", "options": {"momentum": 0.8, "dampening": 0.0, "weight_decay": 0.01,
                                                             "nesterov": True},
     "groups": True, "schedule": {"kind": "cosine", "base_lr": 0.05, "warmup_steps": 1, "training_steps": 5},
     "steps": 5, "clip": {"max_norm": 10.0, "steps": [0, 2, 4]}},
    {"name": "adamw_decay", "optimizer": "adamw", "options": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                                              "weight_decay": 0.01},
     "groups": False, "schedule": {"kind": "cosine", "base_lr": 0.01, "warmup_steps": 2, "training_steps": 6},
     "steps": 6, "clip": {"max_norm": 0.5, "steps": [0, 1, 2, 3, 4, 5]}},
    {"name": "adamw_groups", "optimizer": "adamw", "options": {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
                                                               "weight_decay": 0.1},
     "groups": True, "schedule": {"kind": "linear", "base_lr": 0.003, "warmup_steps": 1, "training_steps": 5},
     "steps": 5, "clip": {"max_norm": 3.0, "steps": [1, 2]}},
]

SCHEDULE_PAIRS = [(0, 6), (3, 8), (5, 5), (4, 0)]  # (warmup, training): past the end, warmup == training, no decay


def make_optimizer(case, params):
    o = case["options"]
    decay = [p for p, (_, _, d) in zip(params, PARAMETERS) if d or not case["groups"]]
    no_decay = [p for p, (_, _, d) in zip(params, PARAMETERS) if not d and case["groups"]]
    groups = [{"params": decay}] + ([{"params": no_decay, "weight_decay": 0.0}] if no_decay else [])
    lr = case["schedule"]["base_lr"]
    if case["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=o["momentum"], dampening=o["dampening"],
                               weight_decay=o["weight_decay"], nesterov=o["nesterov"], foreach=False)
    return torch.optim.AdamW(groups, lr=lr, betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                             weight_decay=o["weight_decay"], foreach=False)


def run_case(case, rng, out):
    sizes = [int(np.prod(shape)) for _, shape, _ in PARAMETERS]
    total = sum(sizes)
    flat = rng.standard_normal(total).astype(np.float32)
    grads = (rng.standard_normal((case["steps"], total)) * 0.7).astype(np.float32)
    offsets = np.cumsum([0] + sizes)
    params = [torch.nn.Parameter(torch.from_numpy(flat[offsets[i]:offsets[i + 1]].reshape(shape).copy()))
              for i, (_, shape, _) in enumerate(PARAMETERS)]
    optimizer = make_optimizer(case, params)
    s = case["schedule"]
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, schedule_lambda(s["kind"], s["warmup_steps"], s["training_steps"]))
    expected = np.zeros((case["steps"], total), np.float32)
    lrs, norms = [], []
    for step in range(case["steps"]):
        for i, p in enumerate(params):
            p.grad = torch.from_numpy(grads[step, offsets[i]:offsets[i + 1]].reshape(p.shape).copy())
        if case["clip"] and step in case["clip"]["steps"]:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, case["clip"]["max_norm"])))
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        expected[step] = torch.cat([p.detach().reshape(-1) for p in params]).numpy()
    buffers = ["exp_avg", "exp_avg_sq"] if case["optimizer"] == "adamw" else (
        ["momentum_buffer"] if case["options"]["momentum"] != 0 else [])
    name = case["name"]
    np.save(os.path.join(out, name + ".params.npy"), flat)
    np.save(os.path.join(out, name + ".grads.npy"), grads)
    np.save(os.path.join(out, name + ".expected.npy"), expected)
    if buffers:
        state = np.stack([torch.cat([optimizer.state[p][b].reshape(-1) for p in params]).numpy() for b in buffers])
        np.save(os.path.join(out, name + ".state.npy"), state.astype(np.float32))
    described = {k: v for k, v in case.items() if k != "groups"}
    described["parameters"] = [{"name": n, "shape": shape, "offset": int(offsets[i]),
                                "weight_decay": bool(d or not case["groups"])}
                               for i, (n, shape, d) in enumerate(PARAMETERS)]
    described["buffers"] = buffers
    described["lrs"] = lrs
    if case["clip"]:
        described["clip"] = dict(case["clip"], totals=norms)
    return described


def schedules():
    out = []
    for kind in ("constant", "linear", "cosine"):
        for warmup, training in SCHEDULE_PAIRS:
            base_lr = 0.02
            optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_lambda(kind, warmup, training))
            lrs = []
            for _ in range(max(warmup, training) + 3):
                lrs.append(optimizer.param_groups[0]["lr"])
                optimizer.step()
                scheduler.step()
            out.append({"kind": kind, "base_lr": base_lr, "warmup_steps": warmup, "training_steps": training,
                        "lrs": lrs})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "train", "optimizers"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    cases = [run_case(case, rng, args.out) for case in CASES]
    notes = ("float32 params and grads; torch " + torch.__version__ + " CPU, foreach=False; lrs from LambdaLR over "
             "transformers' lambdas; clip totals are clip_grad_norm_'s return values")
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"notes": notes, "cases": cases}, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "schedules.json"), "w") as f:
        json.dump({"notes": "base_lr * lambda(step) as LambdaLR sets it, steps from 0", "schedules": schedules()},
                  f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
