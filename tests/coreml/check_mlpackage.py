#!/usr/bin/env python3
"""Checks Core ML packages the way COREML.md §5 recommends, with no Mac and no coremltools.

For each PACKAGE.mlpackage given:
  - Manifest.json: version 1.0.0, every item has path/name/author/description, every path exists under Data/,
    the root identifier names the model item;
  - model.mlmodel decodes with `protoc --decode=CoreML.Specification.Model` against the subset schema written
    from COREML.md's field numbers (tests/data/coreml/*.proto), with no field left unknown (protoc prints those
    by number), the spec version paired with the opset, FLOAT16 I/O only from spec 7, the description's
    inputs and outputs equal to the main function's;
  - every op of every function against coremltools' op definitions (tools/ane-sim/mil_ops.json) at the
    function's opset: a known op, no unknown input, every required input, and every optional input that
    coremltools gives a default (linear's bias excepted), since Core ML's parser refuses ops that leave those
    out (RUNTIME.md §0b #17);
  - weight.bin: storage version 2, `count` equal to the number of records, every blobFileValue's offset a
    64-byte aligned record with sentinel 0xDEADBEEF, the dtype code of the tensor's type, a payload size of
    prod(shape) * element size right after the record, inside the file; and no record nobody references.

Exits 1 naming the package and what is wrong. Needs protoc (Debian: protobuf-compiler); exits 77 (CTest's
skip code, reported as skipped) when it is missing.
"""
import json
import pathlib
import re
import shutil
import struct
import subprocess
import sys

SCHEMA_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "coreml"
MIL_OPS = pathlib.Path(__file__).resolve().parent.parent.parent / "tools" / "ane-sim" / "mil_ops.json"
OPSET_VERSION = {"CoreML5": 15, "CoreML6": 16, "CoreML7": 17, "CoreML8": 18}
# mil_ops.json lists these under another op's signature (its "aliases").
SIGNATURE_OF = {"not_equal": "equal", "less_equal": "equal", "greater_equal": "equal", "reduce_prod": "reduce_sum"}
# ONNX Runtime's Core ML builder omits linear's bias in models that run (RUNTIME.md §0b #17).
DEFAULT_NOT_REQUIRED = {("linear", "bias")}
OPSET_OF_SPEC = {6: "CoreML5", 7: "CoreML6", 8: "CoreML7", 9: "CoreML8", 10: "CoreML9"}
# MIL type -> (BlobDataType code, bits per element), COREML.md §1.5.
BLOB_CODE = {"FLOAT16": (1, 16), "FLOAT32": (2, 32), "UINT8": (3, 8), "INT8": (4, 8), "BFLOAT16": (5, 16),
             "INT16": (6, 16), "UINT16": (7, 16), "INT4": (8, 4), "UINT1": (9, 1), "UINT2": (10, 2), "UINT4": (11, 4),
             "UINT3": (12, 3), "UINT6": (13, 6), "INT32": (14, 32), "UINT32": (15, 32)}
ARRAY_OF_MIL = {"FLOAT16": "FLOAT16", "FLOAT32": "FLOAT32", "INT32": "INT32"}


class Failure(Exception):
    pass


def parse_text_format(text):
    """protoc's text output as nested lists of (name, value-or-children)."""
    root = []
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        m = re.match(r"^([A-Za-z_0-9]+) \{$", line)
        if m:
            children = []
            stack[-1].append((m.group(1), children))
            stack.append(children)
            continue
        m = re.match(r"^([A-Za-z_0-9]+): (.*)$", line)
        if not m:
            raise Failure(f"unexpected protoc output line: {line}")
        value = m.group(2)
        if value.startswith('"'):
            value = bytes(value[1:-1], "utf-8").decode("unicode_escape")
        stack[-1].append((m.group(1), value))
    return root


def get(node, name):
    return [v for k, v in node if k == name]


def one(node, name, where):
    values = get(node, name)
    if len(values) != 1:
        raise Failure(f"{where}: expected one {name}, found {len(values)}")
    return values[0]


def tensor_of(value_type, where):
    tensor = one(value_type, "tensorType", where)
    dtype = one(tensor, "dataType", where)
    shape = [int(one(one(d, "constant", where), "size", where) if get(one(d, "constant", where), "size") else 0)
             for d in get(tensor, "dimensions")]
    rank = get(tensor, "rank")
    if shape and (not rank or int(rank[0]) != len(shape)):
        raise Failure(f"{where}: rank {rank} does not match {len(shape)} dimensions")
    return dtype, shape


def value_type_of(value_type, where):
    """(is_state, dtype, shape) of a ValueType: a tensor, or a state wrapping one (StateType.wrappedType)."""
    states = get(value_type, "stateType")
    if states:
        dtype, shape = tensor_of(one(states[0], "wrappedType", where), where)
        return True, dtype, shape
    dtype, shape = tensor_of(value_type, where)
    return False, dtype, shape


def walk_values(node, found):
    """Every Value message that carries a blobFileValue, with its type."""
    for key, child in node:
        if isinstance(child, list):
            if get(child, "blobFileValue"):
                found.append(child)
            walk_values(child, found)


_MIL_OPS = None


def op_inputs(op, version):
    """{input: needed} of `op` as defined at opset `version`: the newest definition, with the inputs later
    re-registrations added taken out (mil_ops.json's "[auto: +inputs ...]" diffs); `needed` is True for a
    required input and for an optional one coremltools gives a default. None when the op is unknown then."""
    global _MIL_OPS
    if _MIL_OPS is None:
        _MIL_OPS = json.loads(MIL_OPS.read_text())
    entry = _MIL_OPS.get(SIGNATURE_OF.get(op, op))
    if entry is None or int(entry["since"][3:]) > version:
        return None
    inputs = {name: (not spec["optional"]) or (spec.get("default") is not None and (op, name) not in DEFAULT_NOT_REQUIRED)
              for name, spec in entry["inputs"].items()}
    for changed_at, text in entry.get("changes", {}).items():
        if int(changed_at[3:]) <= version:
            continue
        diff = re.search(r"\[auto:([^\]]*)\]", text)
        for clause in (diff.group(1).split(";") if diff else []):
            clause = clause.strip()
            if clause.startswith("+inputs "):
                for name in clause[len("+inputs "):].split(","):
                    inputs.pop(name.strip(), None)
            elif clause.startswith("-inputs "):
                for name in clause[len("-inputs "):].split(","):
                    inputs[name.strip()] = True
    return inputs


def check_op(op, given, opset, where):
    """`given`: the names an op binds (its inputs, and a constexpr op's attributes before iOS18)."""
    version = OPSET_VERSION.get(opset)
    if version is None:
        raise Failure(f"{where}: opset {opset} is not one this checker knows")
    inputs = op_inputs(op, version)
    if inputs is None:
        raise Failure(f"{where}: {op} is not an op of {opset} (tools/ane-sim/mil_ops.json)")
    unknown = sorted(set(given) - set(inputs))
    if unknown:
        raise Failure(f"{where}: {op} has no input {', '.join(unknown)} in {opset}")
    missing = sorted(name for name, needed in inputs.items() if needed and name not in given)
    if missing:
        raise Failure(f"{where}: {op} leaves out {', '.join(missing)}, which coremltools writes (a required input "
                      f"or one its definition gives a default: Core ML's parser requires it, RUNTIME.md §0b #17)")


def check_ops(block, opset, function):
    """Every op of a block but consts; returns how many were checked."""
    count = 0
    for op in get(block, "operations"):
        kind = one(op, "type", "op")
        if kind == "const":
            continue
        attributes = {one(a, "key", kind): one(a, "value", kind) for a in get(op, "attributes")}
        given = [one(e, "key", kind) for e in get(op, "inputs")]
        given += [key for key in attributes if key not in ("name", "val")]
        label = re.search(r"'values', '([^']*)'", str(attributes.get("name", "")))
        check_op(kind, given, opset, f"function {function}, op {label.group(1) if label else kind}")
        count += 1
    return count


def check_manifest(package):
    manifest_path = package / "Manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as e:
        raise Failure(f"Manifest.json: {e}")
    if manifest.get("fileFormatVersion") != "1.0.0":
        raise Failure(f"Manifest.json: fileFormatVersion {manifest.get('fileFormatVersion')!r}, expected 1.0.0")
    entries = manifest.get("itemInfoEntries", {})
    for ident, item in entries.items():
        for field in ("path", "name", "author", "description"):
            if field not in item:
                raise Failure(f"Manifest.json: item {ident} has no {field}")
        if not (package / "Data" / item["path"]).exists():
            raise Failure(f"Manifest.json: item {ident}'s path Data/{item['path']} does not exist")
    root = manifest.get("rootModelIdentifier")
    if root not in entries:
        raise Failure(f"Manifest.json: rootModelIdentifier {root!r} is not an item")
    return package / "Data" / entries[root]["path"]


def check_package(package, protoc):
    model_path = check_manifest(package)
    decoded = subprocess.run([protoc, f"-I{SCHEMA_DIR}", "--decode=CoreML.Specification.Model", "model_subset.proto"],
                             stdin=model_path.open("rb"), capture_output=True, text=True)
    if decoded.returncode != 0:
        raise Failure(f"protoc could not decode model.mlmodel: {decoded.stderr.strip()}")
    unknown = [line for line in decoded.stdout.splitlines() if re.match(r"^\s*[0-9]+(: | \{)", line)]
    if unknown:
        raise Failure(f"model.mlmodel has fields the schema does not know: {unknown[:3]}")
    model = parse_text_format(decoded.stdout)
    spec = int(one(model, "specificationVersion", "Model"))
    program = one(model, "mlProgram", "Model")
    if one(program, "version", "Program") != "1":
        raise Failure("Program.version is not 1")
    functions = {one(entry, "key", "functions"): one(entry, "value", "functions")
                 for entry in get(program, "functions")}
    if not functions:
        raise Failure("the program has no functions")
    for name, function in functions.items():
        opset = one(function, "opset", f"function {name}")
        if OPSET_OF_SPEC.get(spec) != opset:
            raise Failure(f"function {name}: opset {opset} does not pair with spec {spec} "
                          f"({OPSET_OF_SPEC.get(spec)})")
        keys = [one(e, "key", name) for e in get(function, "block_specializations")]
        if keys != [opset]:
            raise Failure(f"function {name}: block_specializations {keys}, expected [{opset}]")
    description = one(model, "description", "Model")
    described = get(description, "functions")
    if described:
        if spec < 9:
            raise Failure(f"a multi-function model needs spec 9, this is {spec}")
        if get(description, "input") or get(description, "output"):
            raise Failure("a multi-function model must leave the top-level inputs and outputs empty")
        interfaces = {one(f, "name", "FunctionDescription"): (get(f, "input"), get(f, "output"), get(f, "state"))
                      for f in described}
    else:
        interfaces = {"main": (get(description, "input"), get(description, "output"), get(description, "state"))}
    if set(interfaces) != set(functions):
        raise Failure(f"described functions {sorted(interfaces)} differ from the program's {sorted(functions)}")
    checked_ops = 0
    for name, (inputs, outputs, states) in interfaces.items():
        function = functions[name]
        block = one(one(function, "block_specializations", name), "value", name)
        checked_ops += check_ops(block, one(function, "opset", name), name)
        declared, state_inputs = {}, {}
        for i in get(function, "inputs"):
            is_state, dtype, shape = value_type_of(one(i, "type", name), f"{name} input")
            (state_inputs if is_state else declared)[one(i, "name", name)] = (dtype, shape)
        # States (COREML.md §2.2): spec 9, FLOAT16 with an explicit shape, described in `state` and declared as
        # the function's state inputs; write_state (no outputs) writes only a state.
        described_states = {}
        for feature in states:
            fname = one(feature, "name", "state")
            array = one(one(one(feature, "type", fname), "stateType", fname), "arrayType", fname)
            shape = [int(x) for x in get(array, "shape")]
            if spec < 9:
                raise Failure(f"state {fname}: states need spec 9, this is {spec}")
            if one(array, "dataType", fname) != "FLOAT16" or not shape:
                raise Failure(f"state {fname}: a state must be FLOAT16 with an explicit shape")
            described_states[fname] = ("FLOAT16", shape)
        program_states = {n: (ARRAY_OF_MIL.get(d), s) for n, (d, s) in state_inputs.items()}
        if described_states != program_states:
            raise Failure(f"function {name}: states described {described_states}, the program has {program_states}")
        for op in get(block, "operations"):
            if one(op, "type", "op") == "write_state":
                if get(op, "outputs"):
                    raise Failure("write_state has outputs")
                bound = [one(one(a, "arguments", "write_state"), "name", "write_state")
                         for e in get(op, "inputs") if one(e, "key", "write_state") == "input"
                         for a in [one(e, "value", "write_state")]]
                if len(bound) != 1 or bound[0] not in state_inputs:
                    raise Failure(f"write_state writes {bound}, which is not a state of function {name}")
        returned = get(block, "outputs")
        produced = {}
        for op in get(block, "operations"):
            for out in get(op, "outputs"):
                produced[one(out, "name", "op output")] = tensor_of(one(out, "type", "op output"), "op output")
        for kind, features, values in (("input", inputs, declared), ("output", outputs, None)):
            for feature in features:
                fname = one(feature, "name", kind)
                array = one(one(feature, "type", fname), "multiArrayType", fname)
                dtype = one(array, "dataType", fname)
                if dtype == "FLOAT16" and spec < 7:
                    raise Failure(f"{kind} {fname}: FLOAT16 I/O needs spec 7, this is {spec}")
                shape = [int(s) for s in get(array, "shape")]
                if kind == "input" and not shape:
                    raise Failure(f"input {fname} has no shape")
                source = declared if kind == "input" else {**declared, **produced}
                if kind == "output" and fname not in returned:
                    raise Failure(f"output {fname} is not returned by function {name}")
                if fname not in source:
                    raise Failure(f"{kind} {fname} is not a value of function {name}")
                mil_dtype, mil_shape = source[fname]
                if ARRAY_OF_MIL.get(mil_dtype) != dtype or (shape and shape != mil_shape):
                    raise Failure(f"{kind} {fname}: described {dtype} {shape}, the program has {mil_dtype} {mil_shape}")
        if len(inputs) != len(declared):
            raise Failure(f"function {name}: {len(declared)} inputs, {len(inputs)} described")

    blobs = []
    walk_values(model, blobs)
    files = {}
    referenced = {}
    for value in blobs:
        blob = one(value, "blobFileValue", "Value")
        file_name, offset = one(blob, "fileName", "blob"), int(one(blob, "offset", "blob"))
        dtype, shape = tensor_of(one(value, "type", "blob Value"), "blob Value")
        if not file_name.startswith("@model_path/weights/"):
            raise Failure(f"blob file {file_name} is not under @model_path/weights/")
        path = model_path.parent / file_name[len("@model_path/"):]
        if file_name not in files:
            try:
                files[file_name] = path.read_bytes()
            except OSError as e:
                raise Failure(f"blob file {file_name}: {e}")
        data = files[file_name]
        where = f"{file_name} offset {offset}"
        if dtype not in BLOB_CODE:
            raise Failure(f"{where}: {dtype} cannot live in a blob")
        code, bits = BLOB_CODE[dtype]
        if offset < 64 or offset % 64 or offset + 64 > len(data):
            raise Failure(f"{where}: not a 64-byte aligned record inside the {len(data)}-byte file")
        sentinel, stored_code, nbytes, payload, padding = struct.unpack_from("<IIQQQ", data, offset)
        if sentinel != 0xDEADBEEF:
            raise Failure(f"{where}: sentinel 0x{sentinel:08X}")
        if stored_code != code:
            raise Failure(f"{where}: dtype code {stored_code}, {dtype} needs {code}")
        elements = 1
        for d in shape:
            elements *= d
        # Sub-byte values are packed LSB first; padding_size_in_bits is what the last byte leaves unused.
        need_bytes, need_padding = (elements * bits + 7) // 8, (8 - elements * bits % 8) % 8
        if nbytes != need_bytes or payload != offset + 64 or padding != need_padding:
            raise Failure(f"{where}: {nbytes} bytes at {payload} (padding {padding}); {dtype} {shape} needs "
                          f"{need_bytes} at {offset + 64} (padding {need_padding})")
        if payload + nbytes > len(data):
            raise Failure(f"{where}: the payload runs past the end of the file")
        if any(struct.unpack_from("<4Q", data, offset + 32)):
            raise Failure(f"{where}: reserved fields are not zero")
        referenced.setdefault(file_name, set()).add(offset)
    for file_name, data in files.items():
        count, version = struct.unpack_from("<II", data, 0)
        if version != 2:
            raise Failure(f"{file_name}: storage version {version}, expected 2")
        records, at = [], 64
        while at + 64 <= len(data):
            sentinel, _, nbytes, _, _ = struct.unpack_from("<IIQQQ", data, at)
            if sentinel != 0xDEADBEEF:
                raise Failure(f"{file_name}: no record at {at}")
            records.append(at)
            at = (at + 64 + nbytes + 63) // 64 * 64
        if count != len(records):
            raise Failure(f"{file_name}: the header counts {count} blobs, the file holds {len(records)}")
        unused = set(records) - referenced.get(file_name, set())
        if unused:
            raise Failure(f"{file_name}: records at {sorted(unused)} are referenced by no const")
    for path in (model_path.parent / "weights").glob("*"):
        if f"@model_path/weights/{path.name}" not in files and path.stat().st_size > 64:
            raise Failure(f"weights/{path.name} holds blobs nothing references")
    return spec, len(blobs), checked_ops


def self_test(protoc, good):
    """Each corruption of a good package must be refused, naming the fault: the checker can fail."""
    import tempfile
    corruptions = {
        "sentinel": ("weights", lambda b: b[:64] + b"\0" + b[65:]),
        "count": ("weights", lambda b: b"\x02" + b[1:]),
        "version": ("weights", lambda b: b[:4] + b"\x01" + b[5:]),
        "truncated weights": ("weights", lambda b: b[:-1]),
        "unknown field": ("model", lambda b: b + bytes([0xF8, 0x01, 0x01])),  # field 31, varint
        "truncated model": ("model", lambda b: b[:-3]),
        "opset": ("model", lambda b: b.replace(b"CoreML6", b"CoreML7")),
        "spec": ("model", lambda b: bytes([0x08, 0x06]) + b[2:]),
        "manifest": ("manifest", lambda b: b.replace(b"1.0.0", b"2.0.0")),
        "op type": ("model", lambda b: b.replace(b"linear", b"linezr")),
    }
    failures = 0
    # The op walk on its own: gather without validate_indices (iOS17 and later), or with it before iOS17.
    for opset, given in (("CoreML8", ["x", "indices", "axis", "batch_dims"]),
                         ("CoreML6", ["x", "indices", "axis", "batch_dims", "validate_indices"]),
                         ("CoreML6", ["x", "indices", "axis"]),
                         ("CoreML8", ["x", "y", "transpose_x"])):
        op = "matmul" if "y" in given else "gather"
        try:
            check_op(op, given, opset, "self-test")
            print(f"check_mlpackage --self-test: {op} {given} in {opset} was accepted", file=sys.stderr)
            failures += 1
        except Failure as e:
            print(f"check_mlpackage --self-test: {op} in {opset}: refused ({e})")
    try:
        check_op("gather", ["x", "indices", "axis", "batch_dims", "validate_indices"], "CoreML8", "self-test")
        check_op("gather", ["x", "indices", "axis", "batch_dims"], "CoreML6", "self-test")
    except Failure as e:
        print(f"check_mlpackage --self-test: a complete gather was refused: {e}", file=sys.stderr)
        failures += 1
    for name, (target, corrupt) in corruptions.items():
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / good.name
            shutil.copytree(good, copy)
            for path in copy.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            path = {"weights": next(copy.rglob("weight.bin")), "model": next(copy.rglob("model.mlmodel")),
                    "manifest": copy / "Manifest.json"}[target]
            path.write_bytes(corrupt(path.read_bytes()))
            try:
                check_package(copy, protoc)
                print(f"check_mlpackage --self-test: the {name} corruption was accepted", file=sys.stderr)
                failures += 1
            except Failure as e:
                print(f"check_mlpackage --self-test: {name}: refused ({e})")
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--self-test":
        protoc = shutil.which("protoc")
        if protoc is None:
            print("check_mlpackage: protoc is not installed; skipped", file=sys.stderr)
            return 77
        return self_test(protoc, pathlib.Path(sys.argv[2]))
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    protoc = shutil.which("protoc")
    if protoc is None:
        print("check_mlpackage: protoc is not installed (Debian: apt-get install protobuf-compiler); skipped",
              file=sys.stderr)
        return 77
    status = 0
    for arg in sys.argv[1:]:
        package = pathlib.Path(arg)
        try:
            spec, blobs, ops = check_package(package, protoc)
            print(f"check_mlpackage: {package.name}: ok (spec {spec}, {blobs} blob consts, {ops} ops checked "
                  "against mil_ops.json)")
        except Failure as e:
            print(f"check_mlpackage: {package}: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
