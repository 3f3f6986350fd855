// anvil: the ONNX ops that compute: elementwise arithmetic and activations, products (MatMul, Gemm,
// Einsum), softmaxes, reductions, losses and (de)quantisation, built from anvil's IR ops.
// Member definitions of onnx_detail::importer (importer-inl.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/models/import/onnx/importer-inl.hpp"

namespace anvil::models::onnx_detail {

// ONNX's Pow takes an exponent of another type (T1) and keeps the base's: computed in the base's type
// when it is floating, else in f32 and converted back, as the reference computes it in doubles.
inline value importer::power(const onnx_node& n) {
    const value base = input(n, 0), exponent = input(n, 1);
    if (base.type() == exponent.type()) return apply(op::pow, {base, exponent});
    if (is_floating(base.type())) return apply(op::pow, {base, cast(exponent, base.type())});
    return cast(apply(op::pow, {cast(base, dtype::f32), cast(exponent, dtype::f32)}), base.type());
}

inline value importer::variadic(const onnx_node& n) {
    const std::string& type = n.op_type;
    const op kind = type == "Max" ? op::maximum : type == "Min" ? op::minimum : op::add;
    value out = input(n, 0);
    for (std::size_t i = 1; i < n.inputs.size(); ++i)
        out = apply(kind, {out, input(n, i)});
    if (type == "Mean" && n.inputs.size() > 1)
        out = apply(op::div, {out, scalar_like(static_cast<double>(n.inputs.size()), out)});
    return out;
}

// A constant matrix [K, N] as a linear layer's weight [N, K] (transposed on the host once), or as it is
// when it is [N, K] already: a product with a constant weight is what the Neural Engine runs as a
// convolution (a matmul with a computed operand needs the matmul op, which an M1 lacks).
inline std::optional<value> importer::linear_weight(const onnx_node& n, std::size_t index,
                                                    bool stored_out_in) {
    const auto found = initializers_.find(n.inputs.at(index));
    if (found == initializers_.end() || found->second->dims.size() != 2) return std::nullopt;
    if (stored_out_in) return values_.at(n.inputs[index]);
    const host_tensor& stored = values_.at(n.inputs[index]).producer().data;
    const std::int64_t k = stored.shape()[0], columns = stored.shape()[1];
    host_tensor weight(stored.type(), dims{columns, k});
    const std::size_t size = dtype_size(stored.type());
    const auto* from = static_cast<const std::byte*>(stored.raw());
    auto* to = static_cast<std::byte*>(weight.raw());
    for (std::int64_t r = 0; r < k; ++r)
        for (std::int64_t c = 0; c < columns; ++c)
            std::memcpy(to + static_cast<std::size_t>(c * k + r) * size,
                        from + static_cast<std::size_t>(r * columns + c) * size, size);
    return constant(std::move(weight), n.inputs[index] + " (transposed)");
}

// numpy's matmul: a vector operand is a matrix for the product, its axis dropped afterwards.
inline value importer::matmul(const onnx_node& n) {
    value a = input(n, 0), b = input(n, 1);
    if (a.rank() >= 2 && b.rank() == 2) {
        if (const std::optional<value> w = linear_weight(n, 1, false)) return apply(op::linear, {a, *w});
    }
    const bool vector_a = a.rank() == 1, vector_b = b.rank() == 1;
    if (vector_a) a = reshape(a, {1, a.shape()[0]});
    if (vector_b) b = reshape(b, {b.shape()[0], 1});
    value y = apply(op::matmul, {a, b});
    if (vector_a || vector_b) {
        std::vector<std::int64_t> sizes = extents_of(y.shape());
        if (vector_b) sizes.erase(sizes.end() - 1);
        if (vector_a) sizes.erase(sizes.end() - 1 - (vector_b ? 0 : 1));
        y = reshape(y, sizes);
    }
    return y;
}

// Y = alpha * A' B' + beta * C, A' and B' transposed as transA and transB say.
inline value importer::gemm(const onnx_node& n) {
    const bool transpose_a = int_attribute(n, "transA", 0) != 0;
    const bool transpose_b = int_attribute(n, "transB", 0) != 0;
    const float alpha = float_attribute(n, "alpha", 1.0f), beta = float_attribute(n, "beta", 1.0f);
    std::optional<value> w;
    if (!transpose_a) w = linear_weight(n, 1, transpose_b);
    value y;
    bool bias_added = false;
    if (w) {
        std::vector<value> operands{input(n, 0), *w};
        // C as the linear layer's bias when it is one value per output and beta 1.
        if (has_input(n, 2) && beta == 1.0f && alpha == 1.0f && input(n, 2).rank() == 1 &&
            input(n, 2).shape()[0] == w->shape()[0]) {
            operands.push_back(input(n, 2));
            bias_added = true;
        }
        y = g_.apply(op::linear, operands);
    } else {
        attributes a;
        a.transpose_a = transpose_a;
        a.transpose_b = transpose_b;
        y = apply(op::matmul, {input(n, 0), input(n, 1)}, a);
    }
    if (alpha != 1.0f) y = apply(op::mul, {y, scalar_like(alpha, y)});
    if (has_input(n, 2) && !bias_added) {
        value c = input(n, 2);
        if (beta != 1.0f) c = apply(op::mul, {c, scalar_like(beta, c)});
        y = apply(op::add, {y, c});
    }
    return y;
}

// log softmax as x - max - log(sum(exp(x - max))): the log of softmax's result would lose the small
// probabilities to underflow.
inline value importer::log_softmax(const value& x, std::int64_t axis) {
    const value shifted = apply(op::sub, {x, reduce(op::reduce_max, x, {axis}, true)});
    const value total = reduce(op::reduce_sum, apply(op::exp, {shifted}), {axis}, true);
    return apply(op::sub, {shifted, apply(op::log, {total})});
}

// Opset 13 made Softmax (and LogSoftmax) one axis (default -1); before, the input was read as a matrix
// [d0..axis-1, axis..] (default axis 1) and normalised over its rows.
inline value importer::softmax(const onnx_node& n, bool log) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    const auto normalise = [&](const value& v, std::int64_t axis) {
        if (log) return log_softmax(v, axis);
        attributes a;
        a.axis = axis;
        return apply(op::softmax, {v}, a);
    };
    if (opset_ >= 13) return normalise(x, normalized_axis(int_attribute(n, "axis", -1), rank, where(n)));
    const std::int64_t axis = normalized_axis(int_attribute(n, "axis", 1), rank, where(n));
    if (axis == rank - 1) return normalise(x, axis);
    std::int64_t outer = 1, inner = 1;
    for (std::int64_t i = 0; i < rank; ++i)
        (i < axis ? outer : inner) *= x.shape()[static_cast<std::size_t>(i)];
    return reshape(normalise(reshape(x, {outer, inner}), 1), extents_of(x.shape()));
}

// The bounds: attributes before opset 11, optional inputs since. anvil's clamp is for floating types;
// integers go through maximum and minimum with constants of their type.
inline value importer::clip(const onnx_node& n) {
    const value x = input(n, 0);
    std::optional<double> low, high;
    if (opset_ < 11) {
        if (n.find("min") != nullptr) low = float_attribute(n, "min", 0.0f);
        if (n.find("max") != nullptr) high = float_attribute(n, "max", 0.0f);
    } else {
        low = optional_scalar(n, 1, "the minimum");
        high = optional_scalar(n, 2, "the maximum");
    }
    // Integers, and float64 (whose bounds clamp's float attributes would round), clip with maximum and
    // minimum against constants of x's type: the same answer, NaN and min > max included.
    if (!is_floating(x.type()) || x.type() == dtype::f64) {
        value y = x;
        if (low) y = apply(op::maximum, {y, scalar_like(*low, x)});
        if (high) y = apply(op::minimum, {y, scalar_like(*high, x)});
        return y;
    }
    attributes a;
    a.min = low ? static_cast<float>(*low) : -std::numeric_limits<float>::infinity();
    a.max = high ? static_cast<float>(*high) : std::numeric_limits<float>::infinity();
    return apply(op::clamp, {x}, a);
}

// The axes: an attribute, or (ReduceSum from opset 13, the others from 18) an input; none means all,
// unless noop_with_empty_axes. Min, the L1 and L2 norms, the sum of squares and the log-sums are
// built from anvil's sum, mean and max.
inline value importer::reduction(const onnx_node& n) {
    const std::string& type = n.op_type;
    value x = input(n, 0);
    std::vector<std::int64_t> axes;
    const bool axes_input = type == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
    if (axes_input) {
        if (has_input(n, 1)) axes = required_ints(n, 1, "the axes");
    } else if (const auto given = ints_attribute(n, "axes")) {
        axes = *given;
    }
    const bool keep = int_attribute(n, "keepdims", 1) != 0;
    if (axes.empty() && int_attribute(n, "noop_with_empty_axes", 0) != 0) return x;
    const auto rank = static_cast<std::int64_t>(x.rank());
    for (auto& axis : axes)
        axis = normalized_axis(axis, rank, where(n));
    if (type == "ReduceSum") return reduce(op::reduce_sum, x, axes, keep);
    if (type == "ReduceMean") return reduce(op::reduce_mean, x, axes, keep);
    if (type == "ReduceMax") return reduce(op::reduce_max, x, axes, keep);
    if (type == "ReduceMin") return reduce(op::reduce_min, x, axes, keep);
    if (type == "ReduceProd") return reduce(op::reduce_prod, x, axes, keep);
    if (type == "ReduceSumSquare") return reduce(op::reduce_sum, apply(op::mul, {x, x}), axes, keep);
    if (type == "ReduceL1") return reduce(op::reduce_sum, apply(op::abs, {x}), axes, keep);
    if (type == "ReduceL2")
        return apply(op::sqrt, {reduce(op::reduce_sum, apply(op::mul, {x, x}), axes, keep)});
    if (type == "ReduceLogSum") return apply(op::log, {reduce(op::reduce_sum, x, axes, keep)});
    if (type == "ReduceLogSumExp") {
        // log(sum(exp(x))) as m + log(sum(exp(x - m))): exp alone overflows from 89 on.
        const value m = reduce(op::reduce_max, x, axes, true);
        const value sum = reduce(op::reduce_sum, apply(op::exp, {apply(op::sub, {x, m})}), axes, true);
        value y = apply(op::add, {m, apply(op::log, {sum})});
        if (!keep) {
            std::vector<std::int64_t> sizes;
            const std::vector<std::int64_t> shape = extents_of(x.shape());
            for (std::int64_t i = 0; i < rank; ++i)
                if (axes.empty() ? false : std::find(axes.begin(), axes.end(), i) == axes.end())
                    sizes.push_back(shape[static_cast<std::size_t>(i)]);
            y = reshape(y, sizes);
        }
        return y;
    }
    unsupported(n, "no import for this reduction yet");
}

// The first index of the largest (ArgMin: smallest) value; select_last_index reads the axis reversed.
inline value importer::arg_extreme(const onnx_node& n, bool minimum) {
    value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    const std::int64_t axis = normalized_axis(int_attribute(n, "axis", 0), rank, where(n));
    const bool keep = int_attribute(n, "keepdims", 1) != 0;
    if (minimum) {
        if (!is_floating(x.type())) unsupported(n, message("ArgMin of ", dtype_name(x.type())));
        x = apply(op::neg, {x});
    }
    // The last extreme: the first of the axis read backwards, counted from the end.
    const bool last = int_attribute(n, "select_last_index", 0) != 0;
    const std::int64_t extent = x.shape()[static_cast<std::size_t>(axis)];
    if (last) x = reversed(x, static_cast<std::size_t>(axis));
    attributes a;
    a.axis = axis;
    a.keep_dims = keep;
    const value index = g_.apply(op::argmax, {x}, a);
    if (!last) return index;
    return apply(op::sub, {scalar_like(static_cast<double>(extent - 1), index), index});
}

inline value importer::inverse_hyperbolic(const onnx_node& n) {
    const value x = input(n, 0);
    const auto k = [&](double v) { return scalar_like(v, x); };
    const value square = apply(op::mul, {x, x});
    if (n.op_type == "Asinh") {
        // sign(x) log(|x| + sqrt(x^2 + 1)): the odd form, without cancellation for negative x.
        const value magnitude = apply(op::abs, {x});
        const value root = apply(op::sqrt, {apply(op::add, {square, k(1.0)})});
        return apply(op::mul, {apply(op::sign, {x}), apply(op::log, {apply(op::add, {magnitude, root})})});
    }
    if (n.op_type == "Acosh")
        return apply(op::log, {apply(op::add, {x, apply(op::sqrt, {apply(op::sub, {square, k(1.0)})})})});
    // Atanh: log((1 + x) / (1 - x)) / 2
    const value ratio = apply(op::div, {apply(op::add, {k(1.0), x}), apply(op::sub, {k(1.0), x})});
    return apply(op::mul, {apply(op::log, {ratio}), k(0.5)});
}

// a mod b: with the divisor's sign (fmod 0, integers: a - b floor(a / b)) or the dividend's (fmod 1:
// a - b trunc(a / b)), computed in f32 as anvil's CPU computes integers (exact below 2^24) and converted
// back to the operands' type.
inline value importer::modulo(const onnx_node& n) {
    const value a = input(n, 0), b = input(n, 1);
    const bool truncated = int_attribute(n, "fmod", 0) != 0;
    if (is_floating(a.type()) && !truncated)
        throw format_error(message(where(n), ": fmod must be 1 for floating-point operands"));
    const dtype compute = is_floating(a.type()) ? a.type() : dtype::f32;
    const value x = cast(a, compute), y = cast(b, compute);
    value q = apply(op::div, {x, y});
    if (truncated) {
        q = apply(op::where,
                  {apply(op::less, {q, scalar(0.0, compute)}), apply(op::ceil, {q}), apply(op::floor, {q})});
    } else {
        q = apply(op::floor, {q});
    }
    return cast(apply(op::sub, {x, apply(op::mul, {y, q})}), a.type());
}

// x << y (the bits shifted past the type's width dropped) or x >> y, for unsigned integers: x * 2^y
// modulo 2^bits, or floor(x / 2^y), computed in f32 as anvil's CPU computes integers (exact below 2^24).
inline value importer::bit_shift(const onnx_node& n) {
    const value x = input(n, 0), y = input(n, 1);
    const dtype type = x.type();
    const double bits = type == dtype::u8    ? 8
                        : type == dtype::u16 ? 16
                        : type == dtype::u32 ? 32
                        : type == dtype::u64 ? 64
                                             : 0;
    if (bits == 0) unsupported(n, message("shifting ", dtype_name(type), " (unsigned integers only)"));
    const std::string direction = string_attribute(n, "direction", "");
    const value a = cast(x, dtype::f32);
    const value factor = apply(op::pow, {scalar(2.0, dtype::f32), cast(y, dtype::f32)});
    if (direction == "RIGHT") return cast(apply(op::floor, {apply(op::div, {a, factor})}), type);
    if (direction != "LEFT") throw format_error(message(where(n), ": direction '", direction, "'"));
    const value shifted = apply(op::mul, {a, factor});
    const value modulus = scalar(std::ldexp(1.0, static_cast<int>(bits)), dtype::f32);
    const value wraps = apply(op::floor, {apply(op::div, {shifted, modulus})});
    return cast(apply(op::sub, {shifted, apply(op::mul, {wraps, modulus})}), type);
}

// Einsum of one or two operands without repeated letters within an operand (no diagonals): letters only
// in one operand and not in the output are summed first; then the shared ones are batch axes (kept) or
// contracted (summed by a batched product), and the rest are free. The product is a matmul of
// [batch, left, contracted] by [batch, contracted, right], permuted to the output's order.
inline value importer::einsum(const onnx_node& n) {
    std::string equation;
    for (const char ch : string_attribute(n, "equation", ""))
        if (ch != ' ') equation += ch;
    const auto arrow = equation.find("->");
    std::string output;
    if (arrow != std::string::npos) {
        output = equation.substr(arrow + 2);
    } else {
        // Implicit: the letters that appear once, in alphabetical order.
        for (const char letter : equation)
            if (letter != ',' && std::count(equation.begin(), equation.end(), letter) == 1) output += letter;
        std::sort(output.begin(), output.end());
    }
    std::vector<std::string> terms;
    for (std::size_t at = 0;;) {
        const auto comma = equation.find(',', at);
        terms.push_back(equation.substr(at, std::min(comma, arrow) - at));
        if (comma == std::string::npos || comma > arrow) break;
        at = comma + 1;
    }
    if (equation.find("...") != std::string::npos) unsupported(n, "ellipsis ('...') in the equation");
    if (terms.size() != n.inputs.size() || terms.size() > 2) unsupported(n, "more than two operands");
    std::vector<value> operands;
    for (std::size_t i = 0; i < terms.size(); ++i) {
        value v = input(n, i);
        std::string& term = terms[i];
        if (term.size() != v.rank())
            throw shape_error(message(where(n), ": '", term, "' does not fit ", v.shape()));
        for (std::size_t a = 0; a < term.size(); ++a)
            if (term.find(term[a], a + 1) != std::string::npos)
                unsupported(n, "a letter repeated within an operand (a diagonal)");
        // Letters nobody else reads are summed now.
        std::vector<std::int64_t> summed;
        std::string kept;
        for (std::size_t a = 0; a < term.size(); ++a) {
            const char letter = term[a];
            const bool elsewhere = output.find(letter) != std::string::npos ||
                                   (terms.size() == 2 && terms[1 - i].find(letter) != std::string::npos);
            if (elsewhere) {
                kept += letter;
            } else {
                summed.push_back(static_cast<std::int64_t>(a));
            }
        }
        if (!summed.empty()) v = reduce(op::reduce_sum, v, summed, false);
        term = kept;
        operands.push_back(v);
    }
    const auto extent = [&](std::size_t i, char letter) {
        return operands[i].shape()[terms[i].find(letter)];
    };
    const auto order = [&](const value& v, const std::string& from, const std::string& to) {
        std::vector<std::int64_t> axes;
        for (const char letter : to)
            axes.push_back(static_cast<std::int64_t>(from.find(letter)));
        bool identity = true;
        for (std::size_t a = 0; a < axes.size(); ++a)
            identity = identity && axes[a] == static_cast<std::int64_t>(a);
        return identity ? v : permute(v, axes);
    };
    if (operands.size() == 1) return order(operands[0], terms[0], output);
    std::string batch, contracted, left, right;
    for (const char letter : terms[0]) {
        const bool shared = terms[1].find(letter) != std::string::npos;
        const bool kept = output.find(letter) != std::string::npos;
        (shared ? (kept ? batch : contracted) : left) += letter;
    }
    for (const char letter : terms[1])
        if (terms[0].find(letter) == std::string::npos) right += letter;
    const auto product = [&](std::size_t i, const std::string& letters) {
        std::int64_t p = 1;
        for (const char letter : letters)
            p *= extent(i, letter);
        return p;
    };
    for (const char letter : batch + contracted)
        if (extent(0, letter) != extent(1, letter))
            throw shape_error(
                message(where(n), ": '", letter, "' is ", extent(0, letter), " and ", extent(1, letter)));
    const std::int64_t b = product(0, batch), m = product(0, left), k = product(0, contracted),
                       r = product(1, right);
    const value a3 = reshape(order(operands[0], terms[0], batch + left + contracted), {b, m, k});
    const value b3 = reshape(order(operands[1], terms[1], batch + contracted + right), {b, k, r});
    std::vector<std::int64_t> shape;
    for (const char letter : batch)
        shape.push_back(extent(0, letter));
    for (const char letter : left)
        shape.push_back(extent(0, letter));
    for (const char letter : right)
        shape.push_back(extent(1, letter));
    const value y = reshape(apply(op::matmul, {a3, b3}), shape);
    return order(y, batch + left + right, output);
}

// A per-axis parameter (scale, zero point) shaped to broadcast along `axis` of x; a scalar as it is.
inline value importer::along_axis(const onnx_node& n, const value& parameter, const value& x) {
    if (parameter.rank() == 0 || parameter.shape().element_count() == 1) return reshape(parameter, {});
    const auto axis = static_cast<std::size_t>(
        normalized_axis(int_attribute(n, "axis", 1), static_cast<std::int64_t>(x.rank()), where(n)));
    std::vector<std::int64_t> shape(x.rank(), 1);
    shape[axis] = static_cast<std::int64_t>(parameter.shape().element_count());
    return reshape(parameter, shape);
}

inline std::pair<double, double> importer::integer_range(dtype type) {
    switch (type) {
        case dtype::u8:
            return {0.0, 255.0};
        case dtype::i8:
            return {-128.0, 127.0};
        case dtype::u16:
            return {0.0, 65535.0};
        case dtype::i16:
            return {-32768.0, 32767.0};
        case dtype::i32:
            return {-2147483648.0, 2147483647.0};
        default:
            return {0.0, 0.0};
    }
}

// (x - zero_point) * scale, per tensor or per slice along `axis`.
inline value importer::dequantize_linear(const onnx_node& n) {
    const value x = input(n, 0);
    const value scale = input(n, 1);
    value centred = cast(x, dtype::f32);
    if (has_input(n, 2)) centred = apply(op::sub, {centred, along_axis(n, cast(input(n, 2), dtype::f32), x)});
    return cast(apply(op::mul, {centred, along_axis(n, cast(scale, dtype::f32), x)}), scale.type());
}

// saturate(round(x / scale) + zero_point), rounding half to even, in the zero point's type (uint8 when
// it is left out).
inline value importer::quantize_linear(const onnx_node& n) {
    const value x = input(n, 0);
    const dtype to = has_input(n, 2) ? input(n, 2).type() : dtype::u8;
    const auto [low, high] = integer_range(to);
    if (low == high) unsupported(n, message("quantising to ", dtype_name(to)));
    value q = apply(op::round,
                    {apply(op::div, {cast(x, dtype::f32), along_axis(n, cast(input(n, 1), dtype::f32), x)})});
    if (has_input(n, 2)) q = apply(op::add, {q, along_axis(n, cast(input(n, 2), dtype::f32), x)});
    attributes a;
    a.min = static_cast<float>(low);
    a.max = static_cast<float>(high);
    return cast(apply(op::clamp, {q}, a), to);
}

// uint8 quantisation with the scale and zero point of x's own range (widened to hold 0).
inline std::vector<value> importer::dynamic_quantize_linear(const onnx_node& n) {
    const value x = cast(input(n, 0), dtype::f32);
    const value zero = scalar(0.0, dtype::f32);
    const value high = apply(op::maximum, {reduce(op::reduce_max, x, {}, false), zero});
    const value low = apply(op::minimum, {reduce(op::reduce_min, x, {}, false), zero});
    const value scale = apply(op::div, {apply(op::sub, {high, low}), scalar(255.0, dtype::f32)});
    attributes byte;
    byte.min = 0.0f;
    byte.max = 255.0f;
    const value zero_point =
        apply(op::clamp, {apply(op::round, {apply(op::div, {apply(op::neg, {low}), scale})})}, byte);
    const value q = apply(op::add, {apply(op::round, {apply(op::div, {x, scale})}), zero_point});
    return {cast(apply(op::clamp, {q}, byte), dtype::u8), scale, cast(zero_point, dtype::u8)};
}

// 1 at the first largest value along the axis, 0 elsewhere (before opset 13: of the input read as a
// matrix, as Softmax).
inline value importer::hardmax(const onnx_node& n) {
    const value x = input(n, 0);
    const auto rank = static_cast<std::int64_t>(x.rank());
    const auto one_hot_max = [&](const value& v, std::int64_t axis) {
        attributes a;
        a.axis = axis;
        a.keep_dims = true;
        const value index = g_.apply(op::argmax, {v}, a);
        const auto at = static_cast<std::size_t>(axis);
        const value hit = apply(op::equal, {index, positions_along(v.shape()[at], at, v.rank())});
        return cast(hit, v.type());
    };
    if (opset_ >= 13) return one_hot_max(x, normalized_axis(int_attribute(n, "axis", -1), rank, where(n)));
    const std::int64_t axis = normalized_axis(int_attribute(n, "axis", 1), rank, where(n));
    std::int64_t outer = 1, inner = 1;
    for (std::int64_t i = 0; i < rank; ++i)
        (i < axis ? outer : inner) *= x.shape()[static_cast<std::size_t>(i)];
    return reshape(one_hot_max(reshape(x, {outer, inner}), 1), extents_of(x.shape()));
}

// -input[n, target[n, ...], ...] * weight[target], reduced as `reduction` says; a target equal to
// ignore_index counts for nothing (nor in the mean's total weight). The class is picked with a one-hot
// select (equal to each class position), which also drops targets outside [0, C).
inline value importer::negative_log_likelihood(const onnx_node& n, const value& x, const value& target,
                                               std::optional<value> weight) {
    if (x.rank() < 2) throw shape_error(message(where(n), ": the input ", x.shape(), " is not [N, C, ...]"));
    const std::int64_t classes = x.shape()[1];
    std::vector<std::int64_t> expanded = extents_of(target.shape());
    expanded.insert(expanded.begin() + 1, 1);
    const value hit = apply(
        op::equal, {reshape(cast(target, dtype::i64), expanded), positions_along(classes, 1, x.rank())});
    const value zero = scalar_like(0.0, x);
    const value picked = reduce(op::reduce_sum, apply(op::where, {hit, x, zero}), {1}, false);
    std::vector<float> kept(static_cast<std::size_t>(classes), 1.0f);
    if (const onnx_attribute* ignore = n.find("ignore_index");
        ignore != nullptr && ignore->i >= 0 && ignore->i < classes)
        kept[static_cast<std::size_t>(ignore->i)] = 0.0f;
    value w = cast(constant(host_tensor::from(kept, dims{classes})), x.type());
    if (weight) w = apply(op::mul, {*weight, w});
    std::vector<std::int64_t> along(x.rank(), 1);
    along[1] = classes;
    const value chosen_weight =
        reduce(op::reduce_sum, apply(op::where, {hit, reshape(w, along), zero}), {1}, false);
    const value loss = apply(op::neg, {apply(op::mul, {picked, chosen_weight})});
    const std::string reduction = string_attribute(n, "reduction", "mean");
    if (reduction == "none") return loss;
    const value total = reduce(op::reduce_sum, loss, {}, false);
    if (reduction == "sum") return total;
    if (reduction != "mean") throw format_error(message(where(n), ": reduction '", reduction, "'"));
    return apply(op::div, {total, reduce(op::reduce_sum, chosen_weight, {}, false)});
}

inline value importer::activation(const onnx_node& n) {
    const std::string& type = n.op_type;
    const value x = input(n, 0);
    const auto k = [&](double v) { return scalar_like(v, x); };
    const auto relu = [&](const value& v) { return apply(op::relu, {v}); };
    const auto negative_part = [&](const value& v) { return apply(op::minimum, {v, k(0.0)}); };
    // alpha * (exp(min(x, 0) / scale) - 1): Elu's and Celu's negative side, which never overflows.
    const auto exp_minus_one = [&](double alpha, double scale) {
        value inside = negative_part(x);
        if (scale != 1.0) inside = apply(op::div, {inside, k(scale)});
        return apply(op::mul, {k(alpha), apply(op::sub, {apply(op::exp, {inside}), k(1.0)})});
    };
    if (type == "Elu")
        return apply(op::add, {relu(x), exp_minus_one(float_attribute(n, "alpha", 1.0f), 1.0)});
    if (type == "Celu") {
        const double alpha = float_attribute(n, "alpha", 1.0f);
        return apply(op::add, {relu(x), exp_minus_one(alpha, alpha)});
    }
    if (type == "Selu") {
        const double alpha = float_attribute(n, "alpha", 1.67326319217681884765625f);
        const double gamma = float_attribute(n, "gamma", 1.05070102214813232421875f);
        return apply(op::mul, {k(gamma), apply(op::add, {relu(x), exp_minus_one(alpha, 1.0)})});
    }
    if (type == "LeakyRelu") {
        const double alpha = float_attribute(n, "alpha", 0.01f);
        return apply(op::add, {relu(x), apply(op::mul, {k(alpha), negative_part(x)})});
    }
    if (type == "PRelu") {
        value slope = input(n, 1);
        // Before opset 7 a slope [C] applied along the channel axis (axis 1), not numpy's last one.
        if (opset_ < 7 && slope.rank() == 1 && x.rank() > 2 && slope.shape()[0] == x.shape()[1]) {
            std::vector<std::int64_t> sizes(x.rank() - 1, 1);
            sizes[0] = slope.shape()[0];
            slope = reshape(slope, sizes);
        }
        return apply(op::add, {relu(x), apply(op::mul, {slope, negative_part(x)})});
    }
    if (type == "HardSigmoid" || type == "HardSwish") {
        const double alpha = type == "HardSwish" ? 1.0 / 6.0 : float_attribute(n, "alpha", 0.2f);
        const double beta = type == "HardSwish" ? 0.5 : float_attribute(n, "beta", 0.5f);
        attributes unit;
        unit.min = 0.0f;
        unit.max = 1.0f;
        const value h = apply(op::clamp, {apply(op::add, {apply(op::mul, {x, k(alpha)}), k(beta)})}, unit);
        return type == "HardSwish" ? apply(op::mul, {x, h}) : h;
    }
    if (type == "Softplus") return apply(op::log, {apply(op::add, {apply(op::exp, {x}), k(1.0)})});
    // Softsign
    return apply(op::div, {x, apply(op::add, {k(1.0), apply(op::abs, {x})})});
}

}  // namespace anvil::models::onnx_detail
