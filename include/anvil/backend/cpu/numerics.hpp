// anvil: the CPU backend's ane_numerics mode. The Neural Engine stores every intermediate in fp16 and flushes
// denormals, so a model that is fine in fp32 can overflow to inf (or lose small values) there. Rounding every
// op's output the same way on the CPU shows that on any machine, and the report names the ops whose values
// left the fp16 range on the inputs given — before the model is shipped.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "anvil/core/half.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil {

// One op whose output left the fp16 range during a run.
struct fp16_overflow {
    std::uint32_t node = 0;  // the node's id in the compiled graph (program::dump shows it)
    op kind = op::add;
    std::string label;             // the node's name, if it has one
    dims shape;                    // the output's shape
    std::uint64_t overflowed = 0;  // finite values beyond the largest half (65504): inf on the ANE
    std::uint64_t elements = 0;
    float max_abs = 0.0f;  // the largest finite magnitude computed before rounding
};

struct numerics_report {
    std::vector<fp16_overflow> overflows;  // in execution order

    [[nodiscard]] bool clean() const noexcept { return overflows.empty(); }

    // One line per op: "%12 gelu [1, 128, 3072]: 37 of 393216 values beyond fp16 (max |x| 1.2e+05)".
    [[nodiscard]] std::string to_string() const {
        std::ostringstream out;
        for (const auto& o : overflows) {
            out << '%' << o.node << ' ' << op_name(o.kind);
            if (!o.label.empty()) out << " \"" << o.label << '"';
            out << ' ' << o.shape << ": " << o.overflowed << " of " << o.elements
                << " values beyond fp16 (max |x| " << o.max_abs << ")\n";
        }
        return out.str();
    }
};

namespace detail::cpu {

inline constexpr float fp16_max = 65504.0f;
inline constexpr float fp16_min_normal = 6.103515625e-05f;  // 2^-14

struct fp16_rounding_result {
    std::uint64_t overflowed = 0;
    float max_abs = 0.0f;
};

// Rounds values to fp16 in place (round to nearest even, overflow to inf) and flushes fp16 denormals to zero,
// as the Neural Engine stores them; counts the finite values that overflowed.
inline fp16_rounding_result round_to_fp16(float* values, std::size_t count) {
    fp16_rounding_result result;
    for (std::size_t i = 0; i < count; ++i) {
        const float x = values[i];
        const float magnitude = std::fabs(x);
        if (std::isfinite(x)) {
            if (magnitude > result.max_abs) result.max_abs = magnitude;
        }
        float rounded = static_cast<float>(half(x));
        if (std::isinf(rounded) && std::isfinite(x)) ++result.overflowed;
        if (std::fabs(rounded) < fp16_min_normal) rounded = std::copysign(0.0f, rounded);
        values[i] = rounded;
    }
    return result;
}

}  // namespace detail::cpu
}  // namespace anvil
