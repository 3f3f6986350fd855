#!/usr/bin/env python3
"""Drives the `anvil` command line as users and scripts do, checking its contract (DESIGN.md): output of
`anvil info` in text and --json against what this script wrote into the checkpoints (written here with the
standard library, from the safetensors format description — an independent writer), one-line errors with exit
status 1, usage errors with exit status 2.

usage: test_cli.py PATH_TO_ANVIL
"""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

from cli_support import max_relative_error, read_npy, write_npy_f32

ANVIL = sys.argv[1]
DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1, "F8_E4M3": 1}
failures = []


def check(condition: bool, what: str) -> None:
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


def write_safetensors(path: pathlib.Path, tensors: dict, metadata: dict | None = None) -> None:
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape) in tensors.items():
        count = 1
        for extent in shape:
            count *= extent
        size = count * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        blobs.append(bytes((i * 7 + len(name)) % 251 for i in range(size)))
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def anvil(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANVIL, *map(str, args)], capture_output=True, text=True, timeout=60)


def check_one_line_error(result: subprocess.CompletedProcess, status: int, prefix: str, *needles: str,
                         what: str) -> None:
    lines = result.stderr.splitlines()
    check(result.returncode == status, f"{what}: exit status {status} (got {result.returncode})")
    check(len(lines) == 1 and lines[0].startswith(prefix), f"{what}: one line starting '{prefix}' ({lines})")
    for needle in needles:
        check(needle in result.stderr, f"{what}: message names '{needle}'")
    check(result.stdout == "", f"{what}: nothing on stdout")


def round_bf16(value: float) -> float:
    """value rounded to float32, then to bfloat16 to nearest, ties to even (finite values)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bf16_square_model() -> bytes:
    """An ONNX model (IR 8, opset 13): y = Mul(x, x), x and y bfloat16 [2, 3]."""
    def varint(n):
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                return out

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    def number(field_number, n):
        return varint(field_number << 3) + varint(n)

    def value_info(name):  # ValueInfoProto{name, type: TypeProto{tensor_type{elem_type 16, shape [2, 3]}}}
        shape = field(1, number(1, 2)) + field(1, number(1, 3))
        return field(1, name.encode()) + field(2, field(1, number(1, 16) + field(2, shape)))

    node = field(1, b"x") + field(1, b"x") + field(2, b"y") + field(4, b"Mul")
    graph = field(1, node) + field(2, b"bf16_square") + field(11, value_info("x")) + field(12, value_info("y"))
    return number(1, 8) + field(8, number(2, 13)) + field(7, graph)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        single = tmp / "tiny.safetensors"
        tensors = {"encoder.weight": ("BF16", [48, 32]), "encoder.bias": ("F32", [48]),
                   "positions": ("I64", [7]), "scale": ("F16", []), "mask": ("BOOL", [3, 0])}
        write_safetensors(single, tensors, {"format": "pt"})
        parameters = 48 * 32 + 48 + 7 + 1 + 0

        result = anvil("info", single)
        check(result.returncode == 0, f"info on a file succeeds ({result.stderr.strip()})")
        for name, (dtype, shape) in tensors.items():
            row = next((line for line in result.stdout.splitlines() if line.startswith(name + " ")), "")
            check(row.split()[1:2] == [dtype.lower() if dtype != "BOOL" else "bool"], f"info lists {name} as {dtype}")
            check("[" + ", ".join(map(str, shape)) + "]" in row, f"info lists {name} with shape {shape}")
        check(f"parameters: {parameters:,}" in result.stdout, f"info totals {parameters:,} parameters")

        result = anvil("info", single, "--json")
        check(result.returncode == 0, "info --json succeeds")
        report = json.loads(result.stdout)
        check(report["parameter_count"] == parameters, "--json parameter_count")
        check(report["tensor_count"] == len(tensors), "--json tensor_count")
        check({t["name"]: t["shape"] for t in report["tensors"]} == {n: s for n, (_, s) in tensors.items()},
              "--json shapes")
        check(report["files"][0]["metadata"] == {"format": "pt"}, "--json metadata")
        check(report["dtypes"]["bf16"] == {"tensors": 1, "parameters": 48 * 32}, "--json per-dtype totals")

        folder = tmp / "model"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
            "num_hidden_layers": 2, "vocab_size": 100, "rope_scaling": {"type": "linear", "factor": 2.0}}))
        write_safetensors(folder / "model-00001-of-00002.safetensors", {"embed.weight": ("F32", [100, 32])})
        write_safetensors(folder / "model-00002-of-00002.safetensors", {"head.weight": ("F16", [100, 32]),
                                                                          "norm.weight": ("F32", [32])})
        (folder / "model.safetensors.index.json").write_text(json.dumps({
            "metadata": {"total_size": 100 * 32 * 4 + 100 * 32 * 2 + 32 * 4},
            "weight_map": {"embed.weight": "model-00001-of-00002.safetensors",
                           "head.weight": "model-00002-of-00002.safetensors",
                           "norm.weight": "model-00002-of-00002.safetensors"}}))
        result = anvil("info", folder)
        check(result.returncode == 0, f"info on a sharded folder succeeds ({result.stderr.strip()})")
        check("2 safetensors files" in result.stdout, "info counts both shards")
        check("model_type=llama" in result.stdout and "hidden_size=32" in result.stdout, "info summarises config")
        check("model-00002-of-00002.safetensors" in result.stdout, "info names each tensor's shard")
        report = json.loads(anvil("info", folder, "--json").stdout)
        check(report["config"]["num_hidden_layers"] == 2, "--json config summary")
        check(report["parameter_count"] == 100 * 32 * 2 + 32, "--json totals across shards")
        check(report["byte_size"] == 100 * 32 * 4 + 100 * 32 * 2 + 32 * 4, "--json byte size across shards")

        # An .npy file, written here with the standard library in numpy's format 1.0.
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 5), }"
        header += " " * (-(10 + len(header) + 1) % 64) + "\n"
        (tmp / "pixels.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                                         + struct.pack("<30f", *range(30)))
        result = anvil("info", tmp / "pixels.npy")
        check(result.returncode == 0 and "f32 [2, 3, 5], 30 elements" in result.stdout,
              f"info on an .npy file ({result.stdout.strip()}{result.stderr.strip()})")
        report = json.loads(anvil("info", tmp / "pixels.npy", "--json").stdout)
        check(report["dtype"] == "f32" and report["shape"] == [2, 3, 5], "info --json on an .npy file")
        (tmp / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00\x04\x00{}\n")
        check_one_line_error(anvil("info", tmp / "bad.npy"), 1, "anvil: error:", "bad.npy", what="info on a bad .npy")

        # A GGUF file: tools/reference/gguf_fixtures.py's types.gguf and its listing.
        listing = json.loads((DATA / "gguf" / "types.json").read_text())
        result = anvil("info", DATA / "gguf" / "types.gguf")
        check(result.returncode == 0 and "GGUF v3" in result.stdout and "general.architecture: string 'llama'"
              in result.stdout, f"info on a .gguf file ({result.stderr.strip()})")
        check(all(t["name"] in result.stdout and t["type"] in result.stdout for t in listing["tensors"]),
              "info lists every GGUF tensor with its ggml type")
        report = json.loads(anvil("info", DATA / "gguf" / "types.gguf", "--json").stdout)
        check([(t["name"], t["type"], t["shape"], t["bytes"]) for t in report["tensors"]] ==
              [(t["name"], t["type"], [3, 256], t["bytes"]) for t in listing["tensors"]],
              "info --json gives each GGUF tensor's type, shape (outermost first) and bytes")
        check(report["metadata"]["fixture.ints"] == [1, -2, 3] and report["metadata"]["general.alignment"] == 64
              and report["parameter_count"] == 768 * len(listing["tensors"]), "info --json GGUF metadata and totals")
        # A model file's tokenizer, as anvil reads it (tools/reference/gguf_models.py wrote the files).
        models = DATA / "gguf" / "models"
        result = anvil("info", models / "qwen2_tied_q8_0.gguf")
        check(result.returncode == 0 and "tokenizer: byte-level BPE ('gpt2'), pre-tokenizer 'qwen2', 320 tokens; chat "
              "template: chatml" in result.stdout, f"info names a GGUF file's tokenizer ({result.stdout[-400:]!r})")
        report = json.loads(anvil("info", models / "llama_gqa_q4_0.gguf", "--json").stdout)
        check(report.get("tokenizer") == {"model": "llama", "tokens": 320}, f"info --json: tokenizer ({report.get('tokenizer')})")
        result = anvil("info", models / "refused" / "tokenizer_pre_default.gguf")
        check(result.returncode == 0 and "tokenizer: not readable: " in result.stdout and "'default'" in result.stdout,
              "info describes a file whose tokenizer anvil cannot read, and says why")
        check_one_line_error(anvil("info", DATA / "malformed" / "gguf" / "huge_string.gguf"), 1, "anvil: error:",
                             "huge_string.gguf", what="info on a malformed .gguf")
        # Zero-sized dimensions are legal GGUF (gguf_fixtures.py wrote the file): every tensor is listed with its
        # ggml type. Keys that are not ASCII or not shorter than 2^16 bytes, and names ggml cannot hold, are not.
        report = json.loads(anvil("info", DATA / "gguf" / "zero_sized.gguf", "--json").stdout)
        check([(t["name"], t["type"], t["shape"], t["bytes"]) for t in report["tensors"]] ==
              [("empty.f32", "F32", [2, 0], 0), ("w" * 63, "F32", [2, 4], 32), ("empty.q8_0", "Q8_0", [0, 32], 0),
               ("after.f16", "F16", [1, 2], 4)], f"info lists a GGUF file with zero-sized tensors ({report.get('tensors')})")
        for name, words in [("non_ascii_key.gguf", "is not ASCII"), ("long_key.gguf", "shorter than 2^16 bytes"),
                            ("long_tensor_name.gguf", "ggml holds at most 63")]:
            check_one_line_error(anvil("info", DATA / "malformed" / "gguf" / name), 1, "anvil: error:", words,
                                 what=f"info on {name}")
        # An ONNX model (tools/fixtures/make_onnx_fixtures.py wrote them with the onnx package; expected.json is
        # what onnx reads back): inputs, outputs, opsets, op counts (subgraphs included), initializer bytes.
        onnx_expected = json.loads((DATA / "onnx" / "expected.json").read_text())
        result = anvil("info", DATA / "onnx" / "tiny.onnx")
        check(result.returncode == 0 and "ONNX model, IR version 8" in result.stdout and "opsets: ai.onnx 13" in
              result.stdout and "x: float32 [batch, 4]" in result.stdout and "nodes: 2 (MatMul 1, Relu 1)" in
              result.stdout and "initializers: 1, 48 B" in result.stdout, f"info on an .onnx file ({result.stdout!r})")
        for name, want in onnx_expected.items():
            report = json.loads(anvil("info", DATA / "onnx" / name, "--json").stdout)
            check(report["op_counts"] == want["op_counts"] and report["opsets"] == want["opsets"] and
                  [i["name"] for i in report["inputs"]] == [i["name"] for i in want["inputs"]] and
                  [o["shape"] for o in report["outputs"]] == [o["shape"] for o in want["outputs"]] and
                  report["initializer_count"] == len(want["initializers"]), f"info --json on {name}: {report}")
        report = json.loads(anvil("info", DATA / "onnx" / "external.onnx", "--json").stdout)
        check(report["external_data"] == ["external.onnx.data"] and report["initializer_bytes"] == 288,
              "info --json names an ONNX model's external data and counts its bytes")
        # anvil run: an ONNX model's outputs as DIR/<name>.npy, against what numpy computed in the generator.
        ops = DATA / "onnx" / "ops"
        runs = json.loads((ops / "expected.json").read_text())
        result = anvil("run", "--model", ops / "chain.onnx", "--input", f"p={ops / 'chain.p.npy'}", "--input",
                       f"q={ops / 'chain.q.npy'}", "--out-dir", tmp / "onnx_out", "--backend", "cpu")
        want = runs["chain"]["outputs"]["out"]
        if result.returncode == 0 and (tmp / "onnx_out" / "out.npy").exists():
            shape, values = read_npy(tmp / "onnx_out" / "out.npy")
            check(list(shape) == want["shape"] and max_relative_error(values, want["values"]) < 1e-5,
                  "run writes an ONNX model's output as .npy, equal to numpy's")
        else:
            check(False, f"run on an ONNX model ({result.stderr.strip()})")
        # A Reshape target given as an input: run passes the values in, and the program is specialised to it.
        result = anvil("run", "--model", ops / "reshape_shape_input.onnx", "--input",
                       f"x={ops / 'reshape_shape_input.x.npy'}", "--input",
                       f"target={ops / 'reshape_shape_input.target.npy'}", "--out-dir", tmp / "onnx_reshape")
        want = runs["reshape_shape_input"]["outputs"]["y"]
        if result.returncode == 0 and (tmp / "onnx_reshape" / "y.npy").exists():
            shape, values = read_npy(tmp / "onnx_reshape" / "y.npy")
            check(list(shape) == want["shape"] and max_relative_error(values, want["values"]) == 0,
                  "run settles a shape given as an input from its value")
        else:
            check(False, f"run with a shape given as an input ({result.stderr.strip()})")
        # bfloat16 in and out: .npy has no bfloat16, so a float32 array goes in, rounded to bfloat16 (to nearest,
        # ties to even), and the bfloat16 output comes back as float32. The model, y = x * x on bfloat16 [2, 3],
        # is encoded here by hand (ModelProto field numbers); the expected values are bfloat16 rounding done with
        # integer arithmetic on the float32 bits.
        (tmp / "bf16_square.onnx").write_bytes(bf16_square_model())
        x_values = [1.001, -2.5, 3.1415926, 0.1, 100.7, -0.3]
        write_npy_f32(tmp / "bf16_x.npy", [2, 3], x_values)
        result = anvil("run", "--model", tmp / "bf16_square.onnx", "--input", f"x={tmp / 'bf16_x.npy'}",
                       "--out-dir", tmp / "bf16_out", "--backend", "cpu")
        if result.returncode == 0 and (tmp / "bf16_out" / "y.npy").exists():
            shape, values = read_npy(tmp / "bf16_out" / "y.npy")
            want = [round_bf16(round_bf16(v) * round_bf16(v)) for v in x_values]
            check(list(shape) == [2, 3] and values == want, f"run rounds a bfloat16 input and writes the bfloat16 "
                  f"output as float32 ({values} vs {want})")
            check("(bfloat16, written as float32)" in result.stdout, "run says a bfloat16 output is written as float32")
        else:
            check(False, f"run on a bfloat16 model ({result.stderr.strip()})")
        check("bfloat16" in anvil("run", "--help").stdout, "run --help explains bfloat16 inputs and outputs")
        graph_expected = dict(line.split("\t", 1) for line in
                              (DATA / "malformed" / "onnx_graph" / "expected.tsv").read_text().splitlines() if line)
        for path in sorted((DATA / "malformed" / "onnx_graph").glob("*.onnx")):
            check_one_line_error(anvil("run", "--model", path, "--out-dir", tmp / "x"), 1, "anvil: error:", path.name,
                                 what=f"run on {path.name}")
            # What ONNX's checker rejects, info refuses too, naming the node or value (the node without outputs
            # passes the checker: info lists it, and only the import refuses it).
            if path.name == "no_outputs_node.onnx":
                check(anvil("info", path).returncode == 0, "info lists a graph the checker accepts")
            else:
                check_one_line_error(anvil("info", path), 1, "anvil: error:", graph_expected[path.name],
                                     what=f"info on {path.name}")
        check_one_line_error(anvil("run", "--model", DATA / "onnx" / "subgraphs.onnx", "--out-dir", tmp / "x"), 1,
                             "anvil: error:", "unsupported", "'If'", "'branch'", "opset 16",
                             what="run names an op it cannot import, its node and the opset")
        check_one_line_error(anvil("run", "--model", ops / "gemm.onnx", "--out-dir", tmp / "x"), 2, "anvil: usage:",
                             "'a'", what="run without an input the model needs")
        onnx_corpus = sorted((DATA / "malformed" / "onnx").glob("*.onnx"))
        check(len(onnx_corpus) >= 19, "the malformed ONNX corpus is present")
        for path in onnx_corpus:
            check_one_line_error(anvil("info", path), 1, "anvil: error:", path.name, what=f"info on {path.name}")
        check_one_line_error(anvil("info", tmp / "missing.safetensors"), 1, "anvil: error:", "missing.safetensors",
                             what="info on a missing path")
        (tmp / "short.safetensors").write_bytes(b"\x01\x02")
        check_one_line_error(anvil("info", tmp / "short.safetensors"), 1, "anvil: error:", "short.safetensors",
                             what="info on a 2-byte file")
        (folder / "config.json").write_text("{\"hidden_size\": 32,}")
        check_one_line_error(anvil("info", folder), 1, "anvil: error:", "config.json", what="info with bad config")
        corpus = sorted((DATA / "malformed" / "safetensors").glob("*.safetensors"))
        check(len(corpus) > 0, "the malformed safetensors corpus is present")
        for path in corpus:
            check_one_line_error(anvil("info", path), 1, "anvil: error:", path.name, what=f"info on {path.name}")

        check_one_line_error(anvil(), 2, "anvil: usage:", what="no command")
        check_one_line_error(anvil("frobnicate"), 2, "anvil: usage:", "frobnicate", what="unknown command")
        check_one_line_error(anvil("info"), 2, "anvil: usage:", "PATH", what="info without a path")
        check_one_line_error(anvil("info", single, "--jsn"), 2, "anvil: usage:", "--jsn", what="unknown option")
        result = anvil("info", "--help")
        check(result.returncode == 0 and "usage: anvil info PATH" in result.stdout, "info --help")
        result = anvil("--help")
        check(result.returncode == 0 and "info PATH" in result.stdout, "--help lists info")

        # selftest: every op on the ANE against the CPU; here on the simulator built beside the binary.
        simulator = pathlib.Path(ANVIL).resolve().parent / "libanvil-ane-sim.so"
        check(simulator.exists(), f"the ANE simulator is built beside anvil ({simulator})")
        # The capability record goes to the cache directory: a fresh one, so no other test reads it.
        cache = tmp / "cache"
        env = {k: v for k, v in os.environ.items() if k not in ("ANVIL_ANE_SIM", "ANVIL_ANE_SIM_OPTIONS")}
        env["ANVIL_CACHE_DIR"] = str(cache)
        result = subprocess.run([ANVIL, "selftest", "--json", "--repeats", "1"], capture_output=True, text=True,
                                timeout=300, env=env)
        check(result.returncode == 0, f"selftest passes on the simulator ({result.stderr[-400:]})")
        report = json.loads(result.stdout) if result.returncode == 0 else {"cases": [], "failed": -1, "backend": ""}
        check(report["failed"] == 0 and len(report["cases"]) >= 50, "selftest --json: 50 cases or more, none failed")
        check("simulator" in report["backend"], "selftest names the simulator it ran on")
        placements = {case["case"]: case["placement"] for case in report["cases"]}
        # With the record it wrote: the simulator rejects max_pool, so max pooling is decomposed; gelu, which it
        # only warns about, held natively.
        check(placements.get("linear") == "native" and placements.get("gelu") == "native"
              and placements.get("max_pool2d") == "decomposed" and placements.get("gather") == "host",
              f"selftest reports each op's placement, with the record's choices ({placements})")
        records = sorted(cache.glob("capabilities-*-h16g.json"))
        check(len(records) == 1, f"selftest writes the capability record to the cache directory ({records})")
        record = json.loads(records[0].read_text()) if records else {"features": {}}
        check(record.get("chip") == "h16g" and record["features"].get("matmul", {}).get("native", {}).get("held")
              and record["features"].get("max_pool", {}).get("native", {}).get("held") is False,
              "the record: native matmul held on h16g; max_pool, which the simulator rejects, did not")
        check(report.get("capabilities", {}).get("path") == str(records[0]) if records else False,
              "selftest --json names the record it wrote and lowered the op table with")
        result = subprocess.run([ANVIL, "selftest"], capture_output=True, text=True, timeout=300, env=env)
        check(result.returncode == 0 and "cases passed" in result.stdout and "max error" in result.stdout
              and "capability record:" in result.stdout, "selftest prints its probes and its table")
        # On a simulated M1: the report for a bug report, and a record the next program lowers by.
        m1 = dict(env, ANVIL_ANE_SIM_OPTIONS="architecture=h13g")
        report_file = tmp / "selftest-report.json"
        result = subprocess.run([ANVIL, "selftest", "--report", report_file, "--repeats", "1"], capture_output=True,
                                text=True, timeout=300, env=m1)
        check(result.returncode == 0 and report_file.exists(), f"selftest --report on h13g ({result.stderr[-400:]})")
        m1_report = json.loads(report_file.read_text()) if report_file.exists() else {}
        probes = {(p["feature"], p["variant"]): p for p in m1_report.get("probes", [])}
        check(m1_report.get("chip") == "h13g" and m1_report.get("os_build") and len(m1_report.get("cases", [])) >= 50,
              "the report names the chip and the OS build and lists every op")
        check(probes.get(("matmul", "native"), {}).get("held") is False
              and "matmul" in probes.get(("matmul", "native"), {}).get("error", "")
              and probes.get(("matmul", "decomposed"), {}).get("held") is True,
              "on h13g native matmul fails with the framework's message and the decomposed form holds")
        counts = m1_report.get("simulator", {})
        check(counts.get("op:matmul") == 0 and counts.get("op:reduce_sum", 0) > 0 and counts.get("op:max_pool") == 0,
              f"the simulator's counts show the op table ran the chosen variants ({counts})")
        llama = DATA / "decoder_lms" / "llama"
        result = subprocess.run([ANVIL, "logits", "--model", llama, "--ids", "1,5,9", "--backend", "ane", "--json"],
                                capture_output=True, text=True, timeout=300, env=m1)
        placement = json.loads(result.stdout).get("placement", {}) if result.returncode == 0 else {}
        lowerings = [p.get("lowering", "") for p in placement.get("programs", [])]
        check(result.returncode == 0 and lowerings and all("capabilities-" in l and "h13g" in l
                                                           and "matmul=decomposed" in l for l in lowerings),
              f"a model on h13g lowers by the record selftest wrote ({lowerings[:1]}, {result.stderr[-300:]})")
        missing = tmp / "missing-sim.so"
        result = subprocess.run([ANVIL, "selftest"], capture_output=True, text=True, timeout=60,
                                env=dict(env, ANVIL_ANE_SIM=str(missing)))
        check_one_line_error(result, 1, "anvil: error:", "missing-sim.so", what="selftest with a missing simulator")
        # A copy of the binary with no simulator beside it, on this machine without a Neural Engine.
        alone = tmp / "alone"
        alone.mkdir()
        shutil.copy(ANVIL, alone / "anvil")
        result = subprocess.run([alone / "anvil", "selftest"], capture_output=True, text=True, timeout=60, env=env)
        check_one_line_error(result, 1, "anvil: error:", "no Neural Engine", "ANVIL_ANE_SIM",
                             what="selftest without a Neural Engine or a simulator")
        check_one_line_error(anvil("selftest", "--repeats", "0"), 2, "anvil: usage:", "--repeats",
                             what="selftest --repeats 0")

    print(f"cli: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
