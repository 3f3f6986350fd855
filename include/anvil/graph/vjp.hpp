// anvil: the vector-Jacobian product of every op, in one table (vjp_of, beside op_table in graph/op.hpp), and
// the few graph-building helpers the rows share. A row receives the node, its operand values, its result and
// the cotangent of that result, and appends the nodes computing the cotangent of each operand it is asked
// for. Rows recompute what they need from the operands (softmax's probabilities, a norm's statistics) rather
// than keep forward intermediates, so the backward graph is an ordinary graph over the forward's values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::autodiff {

// Appends backward nodes to one graph: thin wrappers over graph::apply with the attributes each op reads.
class builder {
public:
    explicit builder(graph g) : graph_(std::move(g)) {}

    value apply(op kind, std::initializer_list<value> inputs, attributes attrs = {}) {
        return graph_.apply(kind, inputs, std::move(attrs));
    }
    value apply(op kind, std::span<const value> inputs, attributes attrs = {}) {
        return graph_.apply(kind, inputs, std::move(attrs));
    }
    value scalar(double number, dtype type) { return graph_.scalar(number, type); }
    // A constant of `type` from float data (masks, divisors, index maps); cast when `type` is not f32.
    value constant(std::vector<float> values, const dims& shape, dtype type, std::string label);
    value zeros(dtype type, const dims& shape);
    value ones_like_shape(dtype type, const dims& shape) {
        return constant(ones(shape), shape, type, "ones");
    }

    value add(const value& a, const value& b) { return apply(op::add, {a, b}); }
    value sub(const value& a, const value& b) { return apply(op::sub, {a, b}); }
    value mul(const value& a, const value& b) { return apply(op::mul, {a, b}); }
    value div(const value& a, const value& b) { return apply(op::div, {a, b}); }
    value mul(const value& a, double b) { return mul(a, scalar(b, a.type())); }
    value neg(const value& a) { return apply(op::neg, {a}); }
    value unary(op kind, const value& a) { return apply(kind, {a}); }
    value where(const value& condition, const value& a, const value& b) {
        return apply(op::where, {condition, a, b});
    }
    value cast(const value& a, dtype to);
    value matmul(const value& a, const value& b, bool transpose_a = false, bool transpose_b = false);
    value reshape(const value& a, const dims& shape);
    value permute(const value& a, std::vector<std::int64_t> axes);
    value slice(const value& a, std::vector<std::int64_t> begin, std::vector<std::int64_t> end,
                std::vector<std::int64_t> step);
    value pad(const value& a, std::vector<std::int64_t> begin, std::vector<std::int64_t> end);
    value reduce_sum(const value& a, std::vector<std::int64_t> axes, bool keep_dims);
    value reduce_mean(const value& a, std::vector<std::int64_t> axes, bool keep_dims);

    // Sums a broadcast cotangent back to the operand's shape (the transpose of numpy broadcasting).
    value sum_to(const value& a, const dims& shape);
    // Broadcasts `a` up to `shape` (multiplying by ones where `a` has extent 1).
    value broadcast_to(const value& a, const dims& shape);
    // Inserts step - 1 zeros after each element along each axis: the transpose of a strided slice's
    // selection (a strided convolution's or pooling window's reads), [n] -> [(n - 1) * step + 1].
    value dilate(const value& a, std::span<const std::int64_t> steps);
    // Reverses `a` along `axis` (a convolution kernel's flip).
    value flip(const value& a, std::int64_t axis);

    [[nodiscard]] graph& target() noexcept { return graph_; }

private:
    static std::vector<float> ones(const dims& shape);

    graph graph_;
};

// One row's call: the node (a copy: the node list grows while rows append), its operands and result, the
// cotangent of the result, and which operands need a cotangent. A row fills `operand_gradients` at those.
struct vjp_call {
    builder& build;
    node forward;
    std::vector<value> operands;
    value result;
    value gradient;
    std::vector<bool> wanted;
    std::vector<value> operand_gradients;
};

using vjp_rule = void (*)(vjp_call& call);

// An op's row: its rule, or why it has none.
struct vjp_entry {
    vjp_rule rule = nullptr;
    std::string_view no_gradient;
};

// The table: every op of the closed set has a row (an exhaustive switch, so a new op does not build until it
// has one).
[[nodiscard]] vjp_entry vjp_of(op kind);

}  // namespace anvil::detail::autodiff

#if ANVIL_DEFINITIONS
#include "anvil/graph/vjp-inl.hpp"
#endif
