// anvil: the MIL op inputs coremltools writes when a caller leaves them out, with their defaults.
// Core ML's ML Program parser refuses ops without them although its documentation calls them
// optional (RUNTIME.md §0b #17), so mil_writer adds each one a lowering leaves out, on both routes.
// Do not edit: rerun `python3 tools/make_mil_op_defaults.py` (from tools/ane-sim/mil_ops.json); its
// `--check` (a test) fails when this is stale.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace anvil::detail::ane {

// How a defaulted input's value is made.
enum class mil_default_kind : std::uint8_t {
    int32,                   // a scalar int32: `number`
    boolean,                 // a scalar bool: `number` is 0 or 1
    string,                  // a scalar string: `text`
    floating,                // a scalar of the op's float type (its `x`'s): `number`
    ones_per_spatial_axis,   // int32 [1] * (rank(x) - 2): strides and dilations
    zeros_per_spatial_side,  // int32 [0] * 2 (rank(x) - 2): pads
    every_axis,              // int32 range(rank(x)): layer_norm's axes
};

struct mil_default_input {
    std::string_view op;
    std::string_view name;
    int since;  // the first opset (15 = ios15, ..., 18 = ios18) whose definition has the input
    mil_default_kind kind;
    double number;
    std::string_view text;
};

inline constexpr std::array<mil_default_input, 60> mil_default_inputs{{
    {"conv", "strides", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"conv", "pad_type", 15, mil_default_kind::string, 0, "valid"},
    {"conv", "pad", 15, mil_default_kind::zeros_per_spatial_side, 0, ""},
    {"conv", "dilations", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"conv", "groups", 15, mil_default_kind::int32, 1, ""},
    {"conv_transpose", "pad", 15, mil_default_kind::zeros_per_spatial_side, 0, ""},
    {"conv_transpose", "pad_type", 15, mil_default_kind::string, 0, "valid"},
    {"conv_transpose", "strides", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"conv_transpose", "dilations", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"conv_transpose", "groups", 15, mil_default_kind::int32, 1, ""},
    {"matmul", "transpose_x", 15, mil_default_kind::boolean, 0, ""},
    {"matmul", "transpose_y", 15, mil_default_kind::boolean, 0, ""},
    {"rsqrt", "epsilon", 15, mil_default_kind::floating, 1e-12, ""},
    {"log", "epsilon", 15, mil_default_kind::floating, 1e-45, ""},
    {"inverse", "epsilon", 15, mil_default_kind::floating, 0.0001, ""},
    {"gelu", "mode", 15, mil_default_kind::string, 0, "EXACT"},
    {"softmax", "axis", 15, mil_default_kind::int32, -1, ""},
    {"layer_norm", "axes", 15, mil_default_kind::every_axis, 0, ""},
    {"layer_norm", "epsilon", 15, mil_default_kind::floating, 1e-05, ""},
    {"batch_norm", "epsilon", 15, mil_default_kind::floating, 1e-05, ""},
    {"instance_norm", "epsilon", 15, mil_default_kind::floating, 1e-05, ""},
    {"l2_norm", "epsilon", 15, mil_default_kind::floating, 1e-06, ""},
    {"reduce_mean", "keep_dims", 15, mil_default_kind::boolean, 0, ""},
    {"reduce_sum", "keep_dims", 15, mil_default_kind::boolean, 0, ""},
    {"reduce_max", "keep_dims", 15, mil_default_kind::boolean, 0, ""},
    {"reduce_min", "keep_dims", 15, mil_default_kind::boolean, 0, ""},
    {"reduce_argmax", "axis", 15, mil_default_kind::int32, -1, ""},
    {"reduce_argmax", "keep_dims", 15, mil_default_kind::boolean, 0, ""},
    {"reduce_argmax", "output_dtype", 17, mil_default_kind::string, 0, "int32"},
    {"concat", "interleave", 15, mil_default_kind::boolean, 0, ""},
    {"pad", "mode", 15, mil_default_kind::string, 0, "constant"},
    {"pad", "constant_val", 15, mil_default_kind::floating, 0.0, ""},
    {"avg_pool", "exclude_padding_from_average", 15, mil_default_kind::boolean, 0, ""},
    {"avg_pool", "strides", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"avg_pool", "pad", 15, mil_default_kind::zeros_per_spatial_side, 0, ""},
    {"avg_pool", "ceil_mode", 15, mil_default_kind::boolean, 0, ""},
    {"max_pool", "strides", 15, mil_default_kind::ones_per_spatial_axis, 0, ""},
    {"max_pool", "pad", 15, mil_default_kind::zeros_per_spatial_side, 0, ""},
    {"max_pool", "ceil_mode", 15, mil_default_kind::boolean, 0, ""},
    {"upsample_nearest_neighbor", "scale_factor_height", 15, mil_default_kind::int32, 1, ""},
    {"upsample_nearest_neighbor", "scale_factor_width", 15, mil_default_kind::int32, 1, ""},
    {"upsample_bilinear", "scale_factor_height", 15, mil_default_kind::int32, 1, ""},
    {"upsample_bilinear", "scale_factor_width", 15, mil_default_kind::int32, 1, ""},
    {"upsample_bilinear", "align_corners", 15, mil_default_kind::boolean, 1, ""},
    {"gather", "axis", 15, mil_default_kind::int32, 0, ""},
    {"gather", "batch_dims", 16, mil_default_kind::int32, 0, ""},
    {"gather", "validate_indices", 17, mil_default_kind::boolean, 0, ""},
    {"gather_along_axis", "axis", 15, mil_default_kind::int32, 0, ""},
    {"gather_along_axis", "validate_indices", 17, mil_default_kind::boolean, 0, ""},
    {"band_part", "lower", 15, mil_default_kind::int32, -1, ""},
    {"band_part", "upper", 15, mil_default_kind::int32, -1, ""},
    {"cumsum", "axis", 15, mil_default_kind::int32, 0, ""},
    {"cumsum", "exclusive", 15, mil_default_kind::boolean, 0, ""},
    {"cumsum", "reverse", 15, mil_default_kind::boolean, 0, ""},
    {"topk", "k", 15, mil_default_kind::int32, 1, ""},
    {"topk", "axis", 15, mil_default_kind::int32, -1, ""},
    {"topk", "ascending", 15, mil_default_kind::boolean, 0, ""},
    {"topk", "sort", 16, mil_default_kind::boolean, 1, ""},
    {"topk", "return_indices", 16, mil_default_kind::boolean, 1, ""},
    {"topk", "output_indices_dtype", 17, mil_default_kind::string, 0, "int32"},
}};

}  // namespace anvil::detail::ane
