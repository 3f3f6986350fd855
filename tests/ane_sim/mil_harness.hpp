// Helpers for the ANE simulator's MIL tests: the MIL half is linked in and driven through mil_program, with
// surfaces as plain byte vectors with explicit strides.
#pragma once

#include <doctest/doctest.h>
#include <anvil/core/half.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mil_program.hpp"

namespace ane_sim_mil {

using anvil_sim::mil_program;
using anvil_sim::rules;
using anvil_sim::sim_failure;
using anvil_sim::surface_view;
using anvil_sim::weight_file;

inline float to_fp16(float x) {
    return anvil::half_bits_to_float(anvil::float_to_half_bits(x));
}

template <class T>
inline void put(std::vector<std::byte>& file, std::size_t at, T v) {
    if (file.size() < at + sizeof v) file.resize(at + sizeof v);
    std::memcpy(file.data() + at, &v, sizeof v);
}

// An fp16 surface [C, H, W] with explicit strides; `read`/`write` in (c, h, w) order.
struct surface {
    std::int64_t c, h, w;
    std::size_t row_stride, plane_stride;
    std::vector<std::byte> bytes;
    surface(std::int64_t channels, std::int64_t height, std::int64_t width, std::size_t row = 0)
        : c(channels), h(height), w(width) {
        row_stride = row ? row : static_cast<std::size_t>(width) * 2;
        plane_stride = row_stride * static_cast<std::size_t>(height);
        bytes.assign(plane_stride * static_cast<std::size_t>(channels), std::byte{0x7f});
    }
    std::size_t at(std::int64_t ci, std::int64_t hi, std::int64_t wi) const {
        return static_cast<std::size_t>(ci) * plane_stride + static_cast<std::size_t>(hi) * row_stride +
               static_cast<std::size_t>(wi) * 2;
    }
    void write(const std::vector<float>& values) {
        std::size_t i = 0;
        for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t hi = 0; hi < h; ++hi)
                for (std::int64_t wi = 0; wi < w; ++wi)
                    put<std::uint16_t>(bytes, at(ci, hi, wi), anvil::float_to_half_bits(values[i++]));
    }
    std::vector<float> read() const {
        std::vector<float> values;
        for (std::int64_t ci = 0; ci < c; ++ci)
            for (std::int64_t hi = 0; hi < h; ++hi)
                for (std::int64_t wi = 0; wi < w; ++wi) {
                    std::uint16_t bits;
                    std::memcpy(&bits, bytes.data() + at(ci, hi, wi), 2);
                    values.push_back(anvil::half_bits_to_float(bits));
                }
        return values;
    }
    surface_view view() { return {bytes.data(), bytes.size(), row_stride, plane_stride}; }
};

inline std::vector<float> ramp(std::size_t n, float scale = 0.1f, float offset = -1.0f) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = to_fp16(offset + scale * static_cast<float>((i * 7) % 23));
    return v;
}

inline std::string error_of(const std::string& text, const rules& options = {},
                            std::vector<weight_file> weights = {}) {
    try {
        (void)mil_program::compile(text, weights, options);
    } catch (const sim_failure& e) {
        return e.what();
    }
    return "(compiled)";
}

// Runs a one-input one-output ios17 program: `body` computes `y` from `x` [1, C, H, W].
inline std::vector<float> run_body(const std::string& body, std::vector<std::int64_t> in,
                                   std::vector<std::int64_t> out, const std::vector<float>& input,
                                   std::string* warnings = nullptr, const rules& options = {}) {
    const std::string text = "program(1.0)\n{\n    func main<ios17>(tensor<fp16, [1, " +
                             std::to_string(in[0]) + ", " + std::to_string(in[1]) + ", " +
                             std::to_string(in[2]) + "]> x) {\n" + body + "    } -> (y);\n}\n";
    auto program = mil_program::compile(text, {}, options);
    surface a(in[0], in[1], in[2]), b(out[0], out[1], out[2]);
    a.write(input);
    const surface_view iv = a.view(), ov = b.view();
    program->evaluate({&iv, 1}, {&ov, 1});
    if (warnings) *warnings = program->warnings();
    return b.read();
}

inline void check_close(const std::vector<float>& got, const std::vector<float>& expected,
                        float tolerance = 2e-3f) {
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i);
        CHECK(std::fabs(got[i] - expected[i]) <= tolerance * (1.0f + std::fabs(expected[i])));
    }
}

// Const declarations in program(1.0) spelling.
inline std::string ints(const std::string& name, const std::vector<int>& v) {
    std::string list;
    for (int i : v)
        list += (list.empty() ? "" : ", ") + std::to_string(i);
    return "tensor<int32, [" + std::to_string(v.size()) + "]> " + name +
           " = const()[name = tensor<string, []>(\"" + name + "\"), val = tensor<int32, [" +
           std::to_string(v.size()) + "]>([" + list + "])];\n";
}
inline std::string scalar(const std::string& type, const std::string& name, const std::string& v) {
    return "tensor<" + type + ", []> " + name + " = const()[name = tensor<string, []>(\"" + name +
           "\"), val = tensor<" + type + ", []>(" + v + ")];\n";
}

inline const std::string nm = "[name = tensor<string, []>(\"n\")];\n";
inline const std::string t48 = "tensor<fp16, [1, 4, 1, 8]> ";

inline std::string program_of(const std::string& body, const std::string& opset = "ios17",
                              const std::string& params = "tensor<fp16, [1, 4, 1, 8]> x",
                              const std::string& ret = "y") {
    return "program(1.0)\n{\n    func main<" + opset + ">(" + params + ") {\n" + body + "    } -> (" + ret +
           ");\n}\n";
}

// NN of the citation " [CONSTRAINTS.md:NN]" that ends `text`, or -1 when it does not end with one.
inline int cited_line(const std::string& text) {
    const std::string marker = " [CONSTRAINTS.md:";
    const std::size_t at = text.rfind(marker);
    if (at == std::string::npos || text.back() != ']') return -1;
    const std::string digits = text.substr(at + marker.size(), text.size() - 1 - at - marker.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(digits);
}

// Whether `text` ends with the citation " [CONSTRAINTS.md:<line>]".
inline bool cites(const std::string& text, int line) {
    const std::string citation = " [CONSTRAINTS.md:" + std::to_string(line) + "]";
    return text.size() >= citation.size() &&
           text.compare(text.size() - citation.size(), citation.size(), citation) == 0;
}

}  // namespace ane_sim_mil
