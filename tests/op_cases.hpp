// The JSON spelling of graph nodes in tests/data/ops/cases.json (tools/fixtures/make_op_goldens.py): an op
// by its name and anvil::attributes by field name. Shared by the reference kernels' test and the autodiff
// test, which drive the same cases.
#pragma once

#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace op_cases {

using anvil::attributes;
using anvil::op;
namespace json = anvil::json;

// tests/data/ops/: the cases' inputs and goldens, and cases.json.
inline std::filesystem::path ops_folder() {
    return std::filesystem::path(ANVIL_TEST_DATA_DIR) / "ops";
}

inline std::optional<op> op_from_name(std::string_view name) {
    for (std::size_t i = 0; i < anvil::op_count; ++i) {
        const auto kind = static_cast<op>(i);
        if (anvil::op_name(kind) == name) return kind;
    }
    return std::nullopt;
}

inline std::vector<std::int64_t> integers(const json::value& list) {
    std::vector<std::int64_t> out;
    for (const auto& item : list.as_array())
        out.push_back(item.as_int());
    return out;
}

template <std::size_t N>
inline std::array<std::int64_t, N> fixed_integers(const json::value& list) {
    const auto values = integers(list);
    REQUIRE(values.size() == N);
    std::array<std::int64_t, N> out{};
    for (std::size_t i = 0; i < N; ++i)
        out[i] = values[i];
    return out;
}

inline anvil::fused_step parse_step(const json::value& object) {
    anvil::fused_step step;
    step.kind = op_from_name(object.at("kind").as_string()).value();
    const auto operands = integers(object.at("operands"));
    for (std::size_t i = 0; i < operands.size(); ++i)
        step.operands.at(i) = static_cast<std::uint16_t>(operands[i]);
    if (const auto* alpha = object.find("alpha")) step.alpha = static_cast<float>(alpha->as_double());
    if (const auto* beta = object.find("beta")) step.beta = static_cast<float>(beta->as_double());
    return step;
}

// The JSON spelling of anvil::attributes: each field by its name.
inline attributes parse_attributes(const json::value& object) {
    static const std::map<std::string_view, std::vector<std::int64_t> attributes::*> lists{
        {"axes", &attributes::axes},
        {"sizes", &attributes::sizes},
        {"begin", &attributes::begin},
        {"end", &attributes::end},
        {"step", &attributes::step}};
    static const std::map<std::string_view, std::int64_t attributes::*> integers_by_name{
        {"axis", &attributes::axis}, {"groups", &attributes::groups}};
    static const std::map<std::string_view, float attributes::*> scalars{{"epsilon", &attributes::epsilon},
                                                                         {"min", &attributes::min},
                                                                         {"max", &attributes::max},
                                                                         {"value", &attributes::value},
                                                                         {"scale", &attributes::scale}};
    static const std::map<std::string_view, bool attributes::*> flags{
        {"keep_dims", &attributes::keep_dims},
        {"ceil_mode", &attributes::ceil_mode},
        {"count_include_pad", &attributes::count_include_pad},
        {"transpose_a", &attributes::transpose_a},
        {"transpose_b", &attributes::transpose_b},
        {"align_corners", &attributes::align_corners},
        {"causal", &attributes::causal},
        {"interleaved", &attributes::interleaved},
        {"exclusive", &attributes::exclusive},
        {"reverse", &attributes::reverse}};
    attributes a;
    for (const auto& [key, v] : object.as_object()) {
        if (const auto list = lists.find(key); list != lists.end()) {
            a.*(list->second) = integers(v);
        } else if (const auto integer = integers_by_name.find(key); integer != integers_by_name.end()) {
            a.*(integer->second) = v.as_int();
        } else if (const auto scalar = scalars.find(key); scalar != scalars.end()) {
            a.*(scalar->second) = static_cast<float>(v.as_double());
        } else if (const auto flag = flags.find(key); flag != flags.end()) {
            a.*(flag->second) = v.as_bool();
        } else if (key == "ggml_type") {
            a.ggml_type = static_cast<std::uint32_t>(v.as_int());
        } else if (key == "to") {
            a.to = anvil::dtype_from_name(v.as_string()).value();
        } else if (key == "kernel") {
            a.kernel = fixed_integers<2>(v);
        } else if (key == "stride") {
            a.stride = fixed_integers<2>(v);
        } else if (key == "dilation") {
            a.dilation = fixed_integers<2>(v);
        } else if (key == "padding") {
            a.padding = fixed_integers<4>(v);
        } else if (key == "steps") {
            for (const auto& step : v.as_array())
                a.steps.push_back(parse_step(step));
        } else {
            FAIL("unknown attribute '", key, "' in cases.json");
        }
    }
    return a;
}

}  // namespace op_cases
