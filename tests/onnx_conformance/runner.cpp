// ONNX's own backend tests, run through anvil's importer and CPU backend.
//
// usage: anvil_onnx_conformance DATA_DIR [--expect FILE] [--write FILE] [--errata FILE] [--only SUBSTRING]
//
// DATA_DIR is the `data` folder of ONNX's test data (Debian: libonnx-testdata,
// /usr/share/libonnx-testdata/data): its suites node/, pytorch-converted/, pytorch-operator/ and simple/ hold
// one folder per test, a model.onnx and test_data_set_N/ folders of input_K.pb and output_K.pb tensors. Each
// test is imported with the inputs' shapes, compiled for the CPU, run on every data set and compared as
// ONNX's own runner compares (rtol 1e-3, atol 1e-7; integers and booleans exactly; NaN equals NaN; shapes and
// element types must match). Each test ends as
//   pass         every output of every data set matched;
//   unsupported  anvil refused it with an unsupported_error (an op, attribute, type or input it does not
//                import): the answer a user gets, named;
//   fail         anything else: a wrong value, a wrong shape, or another error;
//   bad data     it failed exactly as --errata FILE records for a test whose data contradicts ONNX's own
//                model or spec (ONNX 1.12's bfloat16 tests: data that truncates where Cast rounds, inputs of
//                another shape and type than the model declares). The errata line names what the failure
//                must say; a test that fails any other way, or passes, is reported as it is.
// A crash is none of these: it ends the run, and ctest reports it.
//
// One line per test goes to stdout: "suite/test<TAB>ops<TAB>status<TAB>reason". --write FILE writes those
// lines sorted (the expectation file, tests/onnx_conformance/expected.tsv, from which the README's table is
// made). --expect FILE compares the statuses against that file and exits 1 when any differs, so a test that
// stops passing fails CI, and one that starts passing asks for the file (and the README table) to be updated.
#include <anvil/anvil.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;
using anvil::detail::message;

struct outcome {
    std::string status;  // pass, fail, unsupported, bad data
    std::string reason;
};

struct test_result {
    std::string name;  // suite/test
    std::string ops;   // the model's op types, '+'-joined, sorted
    outcome result;
};

// An outcome's reason on one line, bounded: errors name files and can quote values.
std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::replace(text.begin(), text.end(), '\t', ' ');
    if (text.size() > 300) text = text.substr(0, 297) + "...";
    return text;
}

// ONNX 1.12 wrote its bfloat16 test tensors as uint16 (numpy has no bfloat16): the bits are bfloat16's, so
// a uint16 tensor where the model says bfloat16 is read as that.
anvil::host_tensor read_tensor(const fs::path& path, std::optional<anvil::dtype> declared = std::nullopt) {
    const anvil::mapped_file file = anvil::mapped_file::open(path);
    anvil::host_tensor t = anvil::onnx_host_tensor(anvil::parse_onnx_tensor(file.bytes(), path.string()));
    if (declared == anvil::dtype::bf16 && t.type() == anvil::dtype::u16) {
        anvil::host_tensor bits(anvil::dtype::bf16, t.shape());
        std::memcpy(bits.raw(), t.raw(), t.byte_size());
        return bits;
    }
    return t;
}

std::optional<anvil::dtype> declared_type(const anvil::onnx_value_info& v) {
    return anvil::onnx_dtype(v.elem_type);
}

void collect_ops(const anvil::onnx_graph& g, std::set<std::string>& ops) {
    for (const anvil::onnx_node& n : g.nodes) {
        ops.insert(n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "." + n.op_type);
        for (const anvil::onnx_attribute& a : n.attributes)
            for (const auto& sub : a.graphs)
                collect_ops(*sub, ops);
    }
}

// Element i of t as a double (every anvil dtype converts exactly, except 64-bit integers past 2^53, which
// the comparison of integers does not use).
double element(const anvil::host_tensor& t, std::size_t i) {
    const auto* bytes = static_cast<const std::byte*>(t.raw());
    const auto read = [&]<typename T>(T) {
        T v;
        std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
        return v;
    };
    switch (t.type()) {
        case anvil::dtype::f64:
            return read(double{});
        case anvil::dtype::f32:
            return read(float{});
        case anvil::dtype::f16:
            return static_cast<double>(anvil::half_bits_to_float(read(std::uint16_t{})));
        case anvil::dtype::bf16:
            return static_cast<double>(anvil::bfloat16_bits_to_float(read(std::uint16_t{})));
        case anvil::dtype::i64:
            return static_cast<double>(read(std::int64_t{}));
        case anvil::dtype::i32:
            return read(std::int32_t{});
        case anvil::dtype::i16:
            return read(std::int16_t{});
        case anvil::dtype::i8:
            return read(std::int8_t{});
        case anvil::dtype::u64:
            return static_cast<double>(read(std::uint64_t{}));
        case anvil::dtype::u32:
            return read(std::uint32_t{});
        case anvil::dtype::u16:
            return read(std::uint16_t{});
        case anvil::dtype::u8:
        case anvil::dtype::boolean:
            return read(std::uint8_t{});
        case anvil::dtype::f8_e4m3:
        case anvil::dtype::f8_e5m2:
            break;
    }
    throw anvil::unsupported_error(message("no comparison for ", anvil::dtype_name(t.type()), " outputs"));
}

// Empty when `got` matches `expected` as ONNX's runner requires, else what differs.
std::string compare(const anvil::host_tensor& got, const anvil::host_tensor& expected) {
    if (got.type() != expected.type())
        return message("element type ", anvil::dtype_name(got.type()), ", expected ",
                       anvil::dtype_name(expected.type()));
    if (got.shape() != expected.shape())
        return message("shape ", got.shape(), ", expected ", expected.shape());
    if (std::memcmp(got.raw(), expected.raw(), expected.byte_size()) == 0) return {};
    const bool floating = anvil::is_floating(expected.type());
    for (std::size_t i = 0; i < expected.element_count(); ++i) {
        const double a = element(got, i), b = element(expected, i);
        if (std::isnan(a) && std::isnan(b)) continue;
        const bool close = floating ? std::abs(a - b) <= 1e-7 + 1e-3 * std::abs(b) || a == b : a == b;
        if (!close) return message("element ", i, " is ", a, ", expected ", b);
    }
    return {};
}

outcome run_test(const fs::path& folder, std::string& ops_text) {
    const anvil::onnx_model model = anvil::onnx_model::open(folder / "model.onnx");
    std::set<std::string> ops;
    collect_ops(model.graph(), ops);
    for (const std::string& op : ops)
        ops_text += (ops_text.empty() ? "" : "+") + op;
    std::vector<fs::path> data_sets;
    for (const auto& entry : fs::directory_iterator(folder))
        if (entry.is_directory() && entry.path().filename().string().starts_with("test_data_set_"))
            data_sets.push_back(entry.path());
    std::sort(data_sets.begin(), data_sets.end());
    if (data_sets.empty()) return {"fail", "no test_data_set_N folders"};

    // The inputs that are not initializers, in order: input_K.pb is the K-th of them.
    std::set<std::string> initializers;
    for (const anvil::onnx_tensor& t : model.graph().initializers)
        initializers.insert(t.name);
    std::vector<const anvil::onnx_value_info*> inputs;
    for (const anvil::onnx_value_info& v : model.graph().inputs)
        if (!initializers.contains(v.name)) inputs.push_back(&v);
    for (const anvil::onnx_value_info* v : inputs)
        if (v->kind != "tensor")
            throw anvil::unsupported_error(message("unsupported input '", v->name, "': a ", v->kind));
    for (const anvil::onnx_value_info& v : model.graph().outputs)
        if (v.kind != "tensor")
            throw anvil::unsupported_error(message("unsupported output '", v.name, "': a ", v.kind));

    std::set<std::string> fixed;
    for (const fs::path& data : data_sets) {
        // Every input's value is given: the importer uses one only where an op needs it settled at import
        // (a shape given as an input), as `anvil run` does.
        std::map<std::string, anvil::host_tensor, std::less<>> values;
        for (std::size_t k = 0; k < inputs.size(); ++k) {
            const fs::path file = data / message("input_", k, ".pb");
            if (!fs::exists(file)) break;  // an optional input left out
            values.emplace(inputs[k]->name, read_tensor(file, declared_type(*inputs[k])));
        }
        const anvil::models::onnx_import imported = anvil::models::import_onnx(model, {}, values);
        fixed.insert(imported.fixed_inputs.begin(), imported.fixed_inputs.end());
        std::vector<anvil::named_tensor> feeds;
        for (const std::string& name : imported.input_names)
            feeds.push_back({name, values.at(name)});
        anvil::program program = anvil::compile(imported.outputs);
        const std::vector<anvil::host_tensor> outputs = program.run(feeds);
        for (std::size_t k = 0; k < outputs.size(); ++k) {
            const fs::path file = data / message("output_", k, ".pb");
            if (!fs::exists(file))
                return {"fail", message("no ", file.filename().string(), " in ", data.string())};
            const auto& declared = model.graph().outputs;
            const std::string differs =
                compare(outputs[k],
                        read_tensor(file, k < declared.size() ? declared_type(declared[k]) : std::nullopt));
            if (!differs.empty())
                return {"fail", message(data.filename().string(), " output '", imported.output_names[k],
                                        "': ", differs)};
        }
    }
    // A pass that built an input's value into the program (a shape given as an input) says which.
    std::string settled;
    for (const std::string& name : fixed)
        settled += (settled.empty() ? "inputs settled at import: " : ", ") + name;
    return {"pass", settled};
}

test_result run_one(const fs::path& folder, const std::string& name) {
    test_result r;
    r.name = name;
    try {
        r.result = run_test(folder, r.ops);
    } catch (const anvil::unsupported_error& e) {
        r.result = {"unsupported", one_line(e.what())};
    } catch (const std::exception& e) {
        r.result = {"fail", one_line(e.what())};
    }
    return r;
}

// A test whose data ONNX got wrong: what its failure says, and why the data is wrong.
struct erratum {
    std::string failure;
    std::string why;
};

// errata.tsv: test<TAB>a substring of the failure<TAB>why the data is wrong; '#' lines are comments.
std::map<std::string, erratum> read_errata(const fs::path& path) {
    std::ifstream in(path);
    if (!in) throw anvil::io_error(message(path.string(), ": cannot read"));
    std::map<std::string, erratum> errata;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> fields;
        std::stringstream split(line);
        for (std::string field; std::getline(split, field, '\t');)
            fields.push_back(field);
        if (fields.size() != 3 || fields[1].empty())
            throw anvil::format_error(message(path.string(), ": bad line '", line, "'"));
        errata[fields[0]] = {fields[1], fields[2]};
    }
    return errata;
}

std::map<std::string, std::string> read_expectations(const fs::path& path) {
    std::ifstream in(path);
    if (!in) throw anvil::io_error(message(path.string(), ": cannot read"));
    std::map<std::string, std::string> expected;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> fields;
        std::stringstream split(line);
        for (std::string field; std::getline(split, field, '\t');)
            fields.push_back(field);
        if (fields.size() < 3) throw anvil::format_error(message(path.string(), ": bad line '", line, "'"));
        expected[fields[0]] = fields[2];
    }
    return expected;
}

int run(int argc, char** argv) {
    if (argc < 2) {
        std::fputs(
            "usage: anvil_onnx_conformance DATA_DIR [--expect FILE] [--write FILE] [--only SUBSTRING]\n",
            stderr);
        return 2;
    }
    const fs::path root = argv[1];
    std::string expect_path, write_path, errata_path, only;
    for (int i = 2; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if ((arg == "--expect" || arg == "--write" || arg == "--only" || arg == "--errata") && i + 1 < argc) {
            (arg == "--expect"   ? expect_path
             : arg == "--write"  ? write_path
             : arg == "--errata" ? errata_path
                                 : only) = argv[++i];
        } else {
            std::fprintf(stderr, "anvil_onnx_conformance: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    const std::map<std::string, erratum> errata =
        errata_path.empty() ? std::map<std::string, erratum>{} : read_errata(errata_path);
    std::vector<test_result> results;
    for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
        if (!fs::is_directory(root / suite)) {
            std::fprintf(stderr, "anvil_onnx_conformance: %s has no %s folder\n", root.string().c_str(),
                         suite);
            return 1;
        }
        std::vector<fs::path> tests;
        for (const auto& entry : fs::directory_iterator(root / suite))
            if (fs::exists(entry.path() / "model.onnx")) tests.push_back(entry.path());
        std::sort(tests.begin(), tests.end());
        for (const fs::path& test : tests) {
            const std::string name = std::string(suite) + "/" + test.filename().string();
            if (!only.empty() && name.find(only) == std::string::npos) continue;
            results.push_back(run_one(test, name));
            test_result& r = results.back();
            if (const auto bad = errata.find(name);
                bad != errata.end() && r.result.status == "fail" &&
                r.result.reason.find(bad->second.failure) != std::string::npos) {
                r.result = {"bad data", bad->second.why};
            }
            std::printf("%s\t%s\t%s\t%s\n", r.name.c_str(), r.ops.c_str(), r.result.status.c_str(),
                        r.result.reason.c_str());
            std::fflush(stdout);
        }
    }
    std::map<std::string, int> counts;
    for (const test_result& r : results)
        ++counts[r.result.status];
    std::fprintf(stderr, "anvil_onnx_conformance: %zu tests: %d pass, %d fail, %d unsupported, %d bad data\n",
                 results.size(), counts["pass"], counts["fail"], counts["unsupported"], counts["bad data"]);
    if (!write_path.empty()) {
        std::ofstream out(write_path);
        out << "# ONNX backend tests through anvil's importer and CPU backend: test, ops, status, reason.\n"
               "# Written by anvil_onnx_conformance --write; tools/onnx_conformance_table.py makes the "
               "README's table from it.\n";
        for (const test_result& r : results)
            out << r.name << '\t' << r.ops << '\t' << r.result.status << '\t' << r.result.reason << '\n';
        if (!out) throw anvil::io_error(message(write_path, ": cannot write"));
    }
    if (expect_path.empty()) return 0;
    const std::map<std::string, std::string> expected = read_expectations(expect_path);
    int differences = 0;
    for (const test_result& r : results) {
        const auto found = expected.find(r.name);
        const std::string was = found == expected.end() ? "(not listed)" : found->second;
        if (was == r.result.status) continue;
        ++differences;
        std::fprintf(stderr, "anvil_onnx_conformance: %s is %s, expected %s%s%s\n", r.name.c_str(),
                     r.result.status.c_str(), was.c_str(), r.result.reason.empty() ? "" : ": ",
                     r.result.reason.c_str());
    }
    if (only.empty() && expected.size() != results.size()) {
        ++differences;
        std::fprintf(stderr, "anvil_onnx_conformance: %s lists %zu tests, the data holds %zu\n",
                     expect_path.c_str(), expected.size(), results.size());
    }
    if (differences != 0) {
        std::fprintf(stderr,
                     "anvil_onnx_conformance: %d tests changed status: if that is progress, rewrite the "
                     "expectations (--write %s) and the README table (tools/onnx_conformance_table.py)\n",
                     differences, expect_path.c_str());
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "anvil_onnx_conformance: error: %s\n", e.what());
        return 1;
    }
}
