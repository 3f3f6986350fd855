// anvil: the losses' definitions (see loss.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <cstdint>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/train/loss.hpp"

namespace anvil::detail::losses {

ANVIL_INLINE value sum_all(graph& g, const value& v) {
    return g.apply(op::reduce_sum, {v});
}

ANVIL_INLINE value mean_all(graph& g, const value& v) {
    return g.apply(op::reduce_mean, {v});
}

ANVIL_INLINE void require_same_shape(const char* loss, const value& a, const value& b) {
    if (!(a.shape() == b.shape()) || a.type() != b.type()) {
        throw shape_error(message(loss, ": the prediction ", a.shape(), " ", dtype_name(a.type()),
                                  " and the target ", b.shape(), " ", dtype_name(b.type()),
                                  " must have one shape and type"));
    }
}

}  // namespace anvil::detail::losses

namespace anvil::train {

ANVIL_INLINE value cross_entropy(const value& logits, const value& labels, std::int64_t ignore_index) {
    using anvil::detail::message;
    if (!is_floating(logits.type()) || logits.rank() != 2) {
        throw shape_error(message("cross_entropy: the logits must be floating point [N, C], got ",
                                  logits.shape(), " ", dtype_name(logits.type())));
    }
    if (is_floating(labels.type()) || labels.type() == dtype::boolean || labels.rank() != 1 ||
        labels.shape()[0] != logits.shape()[0]) {
        throw shape_error(message("cross_entropy: the labels must be integers [", logits.shape()[0],
                                  "], got ", labels.shape(), " ", dtype_name(labels.type())));
    }
    graph g = graph::of(logits);
    const dtype t = logits.type();
    const std::int64_t classes = logits.shape()[1];
    attributes last;
    last.axes = {1};
    last.keep_dims = true;
    // logsumexp, shifted by the row's maximum so exp never overflows (the shift's own gradient cancels).
    const value top = g.apply(op::reduce_max, {logits}, last);
    const value shifted = g.apply(op::sub, {logits, top});
    const value lse = g.apply(
        op::add, {g.apply(op::log, {g.apply(op::reduce_sum, {g.apply(op::exp, {shifted})}, last)}), top});
    // The label's logit, picked by a one-hot row (an ignored label matches no class).
    std::vector<float> positions;
    for (std::int64_t c = 0; c < classes; ++c)
        positions.push_back(static_cast<float>(c));
    attributes to_labels;
    to_labels.to = labels.type();
    const value classes_row = g.apply(
        op::cast, {g.constant(host_tensor::from(positions, dims{1, classes}), "class numbers")}, to_labels);
    attributes column;
    column.sizes = {logits.shape()[0], 1};
    const value label_column = g.apply(op::reshape, {labels}, column);
    attributes to_t;
    to_t.to = t;
    const value one_hot = g.apply(op::cast, {g.apply(op::equal, {label_column, classes_row})}, to_t);
    const value picked = g.apply(op::reduce_sum, {g.apply(op::mul, {logits, one_hot})}, last);
    // Per example: lse - picked, weighted 1 unless ignored; the mean over the counted examples.
    attributes to_label_type;
    to_label_type.to = labels.type();
    host_tensor ignore(dtype::i64, dims{});
    ignore.values<std::int64_t>()[0] = ignore_index;
    const value ignored = g.apply(op::cast, {g.constant(ignore, "ignore_index")}, to_label_type);
    const value counted =
        g.apply(op::cast, {g.apply(op::logical_not, {g.apply(op::equal, {label_column, ignored})})}, to_t);
    const value per_example = g.apply(op::mul, {g.apply(op::sub, {lse, picked}), counted});
    return g.apply(op::div, {anvil::detail::losses::sum_all(g, per_example),
                             anvil::detail::losses::sum_all(g, counted)});
}

ANVIL_INLINE value mse_loss(const value& prediction, const value& target) {
    anvil::detail::losses::require_same_shape("mse_loss", prediction, target);
    graph g = graph::of(prediction);
    const value difference = g.apply(op::sub, {prediction, target});
    return anvil::detail::losses::mean_all(g, g.apply(op::mul, {difference, difference}));
}

ANVIL_INLINE value binary_cross_entropy_with_logits(const value& logits, const value& targets) {
    anvil::detail::losses::require_same_shape("binary_cross_entropy_with_logits", logits, targets);
    graph g = graph::of(logits);
    const dtype t = logits.type();
    // maximum (not relu): its gradient at a tie is half, which makes the whole gradient at x = 0 exactly
    // sigmoid(0) - z, as PyTorch's.
    const value positive = g.apply(op::maximum, {logits, g.scalar(0.0, t)});
    const value softplus_tail = g.apply(
        op::log, {g.apply(op::add, {g.scalar(1.0, t),
                                    g.apply(op::exp, {g.apply(op::neg, {g.apply(op::abs, {logits})})})})});
    const value per_element =
        g.apply(op::add, {g.apply(op::sub, {positive, g.apply(op::mul, {logits, targets})}), softplus_tail});
    return anvil::detail::losses::mean_all(g, per_element);
}

}  // namespace anvil::train
