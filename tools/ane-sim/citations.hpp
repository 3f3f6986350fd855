// anvil's ANE simulator: where each rule it enforces is stated. Every error and warning message of a rule
// ends with " [CONSTRAINTS.md:NN]", NN a line of the rulebook copy beside this file; the table also keeps a
// distinctive phrase of that line, and tests/ane_sim checks that each cited line still holds its phrase, so a
// citation cannot silently drift when the rulebook is edited.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil_sim {

enum class rule : std::uint8_t {
    classes_and_selectors,
    mil_text_as_data,
    weights_argument,
    weights_entries,
    temporary_directory,
    call_order,
    request_selector,
    ownership,
    live_programs,
    compile_budget,
    io_types,
    row_stride,
    surface_size,
    symbol_order,
    equal_surface_sizes,
    surface_locking,
    dialects,
    op_table,
    value_scoping,
    result_types,
    blobfile_records,
    conv_bias_and_broadcast,
    named_flags,
    rank_and_dimensions,
    reported_failing_ops,
    blobfile_limit,
    overflow,
    softmax_axis,
    mask_infinity,
    live_entries,
    model_url_staging,
    io_width,
    old_chip_ops,
    pooling,
    anchor,
    conv_kernel_width,
    transcendentals,
    epsilon_zero,
    load_transient,
    fault_injection,
    state_width,
    coreml_op_parameters,
    macos14_dialect,
    sub_byte_constexpr,
    program_weight_limit,
    identity_by_text,
    softmax_infinity,
    hung_evaluate,
    coreml_products_on_old_chips,
    wrong_numbers,
    inline_rank4_parameter,
};

struct citation {
    rule id;
    int line;                 // in tools/ane-sim/CONSTRAINTS.md
    std::string_view phrase;  // text that line contains
};

// In the order of `rule`, one entry each (the test checks both).
inline constexpr std::array citations = {
    citation{rule::classes_and_selectors, 15, "an unknown selector is reported with its name"},
    citation{rule::mil_text_as_data, 16, "MIL text passed as NSData (UTF-8), never as NSString"},
    citation{rule::weights_argument, 17, "weights argument is a dictionary"},
    citation{rule::weights_entries, 18, "key = the exact `BLOBFILE` path used in the MIL"},
    citation{rule::temporary_directory, 19, "is populated before `compileWithQoS:options:error:`"},
    citation{rule::call_order, 20, "evaluate before load, or after unload, fails"},
    citation{rule::request_selector, 21, "`_ANERequest` built with the 7-argument selector"},
    citation{rule::ownership, 28, "is released exactly once"},
    citation{rule::live_programs, 29, "at most ~15 live program instances"},
    citation{rule::compile_budget, 30, "at most ~119 compiles per process"},
    citation{rule::io_types, 35,
             "inputs and outputs are fp16 (or fp32 where the MIL function signature says so)"},
    citation{rule::row_stride, 36, "row stride (bytes per row) is a multiple of 64"},
    citation{rule::surface_size, 37, "surfaces smaller than the layout needs are rejected"},
    citation{rule::symbol_order, 38, "symbols bind in alphabetical order of the MIL names"},
    citation{rule::equal_surface_sizes, 39, "all input surfaces have the same allocation size"},
    citation{rule::surface_locking, 40, "IOSurfaces are locked for CPU access and unlocked before evaluate"},
    citation{rule::dialects, 45, "both dialects parse"},
    citation{rule::op_table, 46, "every op is in `mil_ops.json` for the function's opset"},
    citation{rule::value_scoping, 47, "every value is defined before use, names are unique"},
    citation{rule::result_types, 48,
             "the declared result type of each op equals the type inferred from its inputs"},
    citation{rule::blobfile_records, 49, "a 64-byte metadata header with sentinel `0xDEADBEEF`"},
    citation{rule::conv_bias_and_broadcast, 50, "no `bias` on `conv` (use `add`)"},
    citation{rule::named_flags, 51,
             "`transpose_x`/`transpose_y` and reductions' `keep_dims` bound to named consts"},
    citation{rule::rank_and_dimensions, 52, "every dimension ≤ 16,384"},
    citation{rule::reported_failing_ops, 53, "ops reported to fail through this path"},
    citation{rule::blobfile_limit, 54, "at most 16 BLOBFILE-backed constants per program"},
    citation{rule::overflow, 60, "the simulator reports the first op that overflowed"},
    citation{rule::softmax_axis, 61, "`softmax` over a very long axis normalises per tile"},
    citation{rule::mask_infinity, 62, "`-inf` in masks misbehaves in softmax"},
    citation{rule::live_entries, 71, "the simulator can report `PlaneStride > Height*RowStride`"},
    citation{rule::model_url_staging, 72,
             "compile reads `model.mil` and `weights/` from the model-URL directory"},
    citation{rule::io_width, 73, "not a multiple of 32, or below 32, fails at evaluate"},
    citation{rule::old_chip_ops, 74, "fail to compile on H13/H14 (M1/M2)"},
    citation{rule::pooling, 75, "`max_pool` / `avg_pool` rejected at compile"},
    citation{rule::anchor, 76, "a program with no `conv`/`matmul`/`linear` fails to load"},
    citation{rule::conv_kernel_width, 77, "`conv` with kernel width ≥ 16 fails to compile"},
    citation{rule::transcendentals, 78, "fail at evaluate on a simulated M5 / macOS 26 profile"},
    citation{rule::epsilon_zero, 79, "`log`, `rsqrt`, `inverse` with `epsilon = 0`"},
    citation{rule::load_transient, 80, "`loadWithQoS` can fail transiently N times in a row"},
    citation{rule::fault_injection, 82, "a compile or load can be made to fail for one chosen op or program"},
    citation{rule::state_width, 87, "a state whose last dimension (width) is not a multiple of 32 fails"},
    citation{rule::coreml_op_parameters, 92, "an op missing any input its coremltools definition lists"},
    citation{rule::macos14_dialect, 93, "fails to compile when the simulated OS is macOS 14"},
    citation{rule::sub_byte_constexpr, 94,
             "sub-byte constexpr weights (uint1–uint6 indices, int4/uint4 data)"},
    citation{rule::program_weight_limit, 95, "a program whose weights exceed a set size fails to compile"},
    citation{rule::identity_by_text, 96, "two programs with the same MIL text share one compiled identity"},
    citation{rule::softmax_infinity, 97, "a softmax whose input row holds -inf returns NaN for that row"},
    citation{rule::hung_evaluate, 98, "an evaluate that never completes"},
    citation{rule::coreml_products_on_old_chips, 99, "run on the Neural Engine on H13/H14 (M1/M2) too"},
    citation{rule::wrong_numbers, 100, "an evaluation can be made to return other numbers"},
    citation{rule::inline_rank4_parameter, 101,
             "parameter of rank 4 or more written inline (not a BLOBFILE)"},
};

// " [CONSTRAINTS.md:NN]", appended to the message of each rule.
inline std::string cite(rule id) {
    for (const citation& c : citations)
        if (c.id == id) return " [CONSTRAINTS.md:" + std::to_string(c.line) + "]";
    return " [CONSTRAINTS.md:?]";
}

}  // namespace anvil_sim
