// anvil: the CPU kernels that are matrix products — linear, matmul and conv2d — all through the one packed
// GEMM (gemm.hpp). Constant weights are read from their own storage: f32 weights are packed once when the
// program is compiled; f16, bf16, int8, palette-index and ggml-block weights are decoded as each call reads
// them (by rows when decoding, block by block while packing otherwise), so they are never expanded whole in
// memory.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "anvil/backend/cpu/gemm.hpp"
#include "anvil/backend/cpu/gemm_int8.hpp"
#include "anvil/backend/cpu/kernel.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::detail::cpu {

// A weight matrix B[k, n] for the GEMM, kept in its stored dtype (or prepacked when it is f32) together with
// what keeps its bytes alive.
struct weight_operand {
    matrix_operand operand;
    std::shared_ptr<packed_matrix> packed;               // f32 constants only
    host_tensor storage;                                 // the constant (keeps mapped weights alive)
    std::vector<float> scale_values, zero_point_values;  // i8: one per column, as operand.scale points at
    std::vector<float> palettes;  // palette indices: each palette padded to operand.lut_length values

    // What the GEMM reads: the packed panels, or the weight as stored and its scales.
    [[nodiscard]] std::vector<std::pair<const void*, std::size_t>> buffers() const {
        std::vector<std::pair<const void*, std::size_t>> read;
        if (packed) {
            read.emplace_back(packed->data(), packed->byte_size());
            return read;
        }
        read.emplace_back(storage.raw(), storage.byte_size());
        read.emplace_back(scale_values.data(), scale_values.size() * sizeof(float));
        read.emplace_back(zero_point_values.data(), zero_point_values.size() * sizeof(float));
        read.emplace_back(palettes.data(), palettes.size() * sizeof(float));
        return read;
    }
};

// The constant a value is, looking through a cast to f32 (an f16 or bf16 weight used with f32 activations:
// the kernel converts it while packing instead). Null when the value is computed at run time.
inline const node* constant_behind(const graph_body& body, value_id id) {
    const node* producer = &body.nodes[id];
    if (producer->kind == op::cast &&
        (producer->attrs.to == dtype::f32 || producer->attrs.to == dtype::f64) &&
        body.nodes[producer->inputs[0]].kind == op::constant &&
        is_floating(body.nodes[producer->inputs[0]].result.type)) {
        producer = &body.nodes[producer->inputs[0]];
    }
    return producer->kind == op::constant ? producer : nullptr;
}

// The constant behind operand `index` of node n, also looking through the dequantisation of constants the
// GEMM reads as stored: dequantize_int8 along the output-channel axis, dequantize_lut and dequantize_ggml of
// a matrix.
inline const node* constant_weight(const graph_body& body, const node& n, std::size_t index,
                                   const node** dequantize = nullptr) {
    const node& producer = body.nodes[n.inputs[index]];
    const bool of_constants =
        std::all_of(producer.inputs.begin(), producer.inputs.end(),
                    [&](value_id input) { return body.nodes[input].kind == op::constant; });
    if ((producer.kind == op::dequantize_ggml || producer.kind == op::dequantize_lut) &&
        producer.result.shape.rank() == 2 && of_constants) {
        if (dequantize != nullptr) *dequantize = &producer;
        return &body.nodes[producer.inputs[0]];
    }
    if (producer.kind == op::dequantize_int8 && producer.attrs.axis == 0 &&
        producer.result.shape.rank() == 2) {
        if (!of_constants) return nullptr;
        if (dequantize != nullptr) *dequantize = &producer;
        return &body.nodes[producer.inputs[0]];
    }
    return constant_behind(body, n.inputs[index]);
}

// A packed f32 weight is shared by every program built from the same constant: a recipe compiles one program
// per input shape, and each would otherwise hold its own packed copy of every weight (90 MB for a MiniLM, per
// shape). Entries are keyed by the weight's address and extents; a live entry keeps its constant's storage
// alive, so no other data can appear at that address while the entry is used.
inline std::shared_ptr<weight_operand> shared_packed_weight(std::shared_ptr<weight_operand> w, std::int64_t k,
                                                            std::int64_t n) {
    using key = std::tuple<const void*, std::int64_t, std::int64_t>;
    static std::mutex mutex;
    static std::map<key, std::weak_ptr<weight_operand>> cache;
    const key id{w->operand.data, k, n};
    const std::lock_guard lock(mutex);
    if (auto found = cache.find(id); found != cache.end()) {
        if (auto shared = found->second.lock()) return shared;
    }
    std::erase_if(cache, [](const auto& entry) { return entry.second.expired(); });
    w->packed = std::make_shared<packed_matrix>(k, n, w->operand);
    cache[id] = w;
    return w;
}

// B = weightᵀ for a weight stored [n, k] row-major (nn.Linear's [out, in]; a conv weight viewed as
// [out, in * kh * kw] is the A operand instead, see conv2d).
inline std::shared_ptr<weight_operand> transposed_weight(const graph_body& body, const node& weight,
                                                         const node* dequantize) {
    auto w = std::make_shared<weight_operand>();
    w->storage = weight.data;
    const std::int64_t n = weight.result.shape[0];
    const std::int64_t k = weight.result.shape[1];
    w->operand = {weight.data.raw(), weight.data.type(), 1, k};
    if (dequantize != nullptr && dequantize->kind == op::dequantize_lut) {
        // Palette indices [n, k], a palette [L] or one per group of rows [G, L]: each palette is padded to 64
        // (or 256) values, the width the GEMM's decoders read, and every index is checked against its
        // palette once, here, so the decoders can index without checks.
        const node& table = body.nodes[dequantize->inputs[1]];
        const std::vector<float> values = table.data.to_f32();
        const dims& lut_shape = table.result.shape;
        const std::int64_t length = lut_shape[lut_shape.rank() - 1];
        const std::int64_t groups = lut_shape.rank() == 2 ? lut_shape[0] : 1;
        const std::int64_t stride = length <= 64 ? 64 : 256;
        w->palettes.assign(static_cast<std::size_t>(groups * stride), 0.0f);
        for (std::int64_t g = 0; g < groups; ++g)
            std::copy_n(values.begin() + g * length, length, w->palettes.begin() + g * stride);
        const auto* indices = static_cast<const unsigned char*>(weight.data.raw());
        for (std::int64_t i = 0; i < n * k; ++i) {
            if (indices[i] >= length) {
                throw error(message("dequantize_lut: index ", static_cast<int>(indices[i]), " (element ", i,
                                    " of the weight '", weight.name, "') is out of range for its palette of ",
                                    length, " values"));
            }
        }
        w->operand.lut = w->palettes.data();
        w->operand.lut_length = length;
        w->operand.lut_stride = stride;
        w->operand.lut_columns_per_group = n / groups;
    } else if (dequantize != nullptr && dequantize->kind == op::dequantize_ggml) {
        // Rows of ggml blocks: [n, bytes per row] stored, [n, k] meant.
        w->operand.blocks = static_cast<ggml_type>(dequantize->attrs.ggml_type);
        w->operand.block_row_bytes = k;
        w->operand.col_stride = dequantize->result.shape[1];
    } else if (dequantize != nullptr) {
        w->scale_values = body.nodes[dequantize->inputs[1]].data.to_f32();
        w->operand.scale = w->scale_values.data();
        if (dequantize->inputs.size() == 3) {
            w->zero_point_values = body.nodes[dequantize->inputs[2]].data.to_f32();
            w->operand.zero_point = w->zero_point_values.data();
        }
    } else if (weight.data.type() == dtype::f32) {
        return shared_packed_weight(std::move(w), k, n);
    }
    return w;
}

// int8_activations: products with Q8_0, Q4_0 and int8 weights round the activations to 8 bits
// (gemm_int8.hpp) where k is whole blocks of 32; the others stay exact.
inline prepared_kernel linear_kernel(const graph_body& body, const node& n, bool int8_activations = false) {
    const node* dequantize = nullptr;
    const node* weight = constant_weight(body, n, 1, &dequantize);
    const node* bias_node = n.inputs.size() == 3 ? constant_behind(body, n.inputs[2]) : nullptr;
    std::shared_ptr<weight_operand> w;
    if (weight != nullptr && (weight->data.type() == dtype::f32 || weight->data.type() == dtype::f16 ||
                              weight->data.type() == dtype::bf16 || dequantize != nullptr)) {
        w = transposed_weight(body, *weight, dequantize);
    }
    auto bias = std::make_shared<std::vector<float>>();
    if (bias_node != nullptr) *bias = bias_node->data.to_f32();
    prepared_kernel parts;
    parts.reads_natively = {false, w != nullptr, bias_node != nullptr};
    if (w) parts.weight_buffers = w->buffers();
    if (!bias->empty()) parts.weight_buffers.emplace_back(bias->data(), bias->size() * sizeof(float));
    const dims& x_shape = body.nodes[n.inputs[0]].result.shape;
    const bool integer = int8_activations && w && !w->packed && x_shape.rank() > 0 &&
                         int8_products_take(w->operand, x_shape[x_shape.rank() - 1]);
    parts.run = [w, bias, integer, has_bias = n.inputs.size() == 3](std::span<const const_tensor_span> in,
                                                                    tensor_span out, thread_pool& pool,
                                                                    std::span<float>) {
        const dims& x = in[0].shape;
        const std::int64_t k = x[x.rank() - 1];
        const std::int64_t n_out = out.shape[out.shape.rank() - 1];
        const std::int64_t m =
            k == 0 ? static_cast<std::int64_t>(out.shape.element_count()) / std::max<std::int64_t>(n_out, 1)
                   : static_cast<std::int64_t>(x.element_count()) / k;
        gemm_epilogue epilogue;
        if (has_bias) epilogue.bias = bias->empty() ? in[2].data : bias->data();
        const matrix_operand a{in[0].data, dtype::f32, k, 1};
        if (integer) {
            gemm_int8(m, n_out, k, in[0].data, k, w->operand, out.data, n_out, epilogue, &pool);
        } else if (w && w->packed) {
            gemm(m, a, *w->packed, out.data, n_out, epilogue, &pool);
        } else if (w) {
            gemm(m, n_out, k, a, w->operand, out.data, n_out, epilogue, &pool);
        } else {
            const matrix_operand b{in[1].data, dtype::f32, 1, k};
            gemm(m, n_out, k, a, b, out.data, n_out, epilogue, &pool);
        }
    };
    return parts;
}

// Batched matmul with numpy broadcasting of the batch axes: one GEMM per batch element, the batch spread
// over the threads when there are enough elements (each GEMM then runs on its thread), else each GEMM
// threaded itself.
inline prepared_kernel matmul_kernel(const node& n) {
    prepared_kernel parts;
    parts.run = [transpose_a = n.attrs.transpose_a, transpose_b = n.attrs.transpose_b](
                    std::span<const const_tensor_span> in, tensor_span out, thread_pool& pool,
                    std::span<float>) {
        const dims& a = in[0].shape;
        const dims& b = in[1].shape;
        const dims& c = out.shape;
        const std::size_t rank = c.rank();
        const std::int64_t m = c[rank - 2], n_out = c[rank - 1];
        const std::int64_t k = transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
        const std::int64_t a_rows = a[a.rank() - 2], a_cols = a[a.rank() - 1];
        const std::int64_t b_rows = b[b.rank() - 2], b_cols = b[b.rank() - 1];
        // Element strides of each operand's batch axes, aligned to the output's (0 where broadcast).
        std::array<std::int64_t, max_rank> a_stride{}, b_stride{}, c_extent{};
        std::int64_t sa = a_rows * a_cols, sb = b_rows * b_cols;
        const std::size_t batch_rank = rank - 2;
        for (std::size_t i = batch_rank; i-- > 0;) {
            const std::size_t from_right = batch_rank - i;
            c_extent[i] = c[i];
            if (from_right <= a.rank() - 2) {
                const std::int64_t extent = a[a.rank() - 2 - from_right];
                a_stride[i] = extent == 1 ? 0 : sa;
                sa *= extent;
            }
            if (from_right <= b.rank() - 2) {
                const std::int64_t extent = b[b.rank() - 2 - from_right];
                b_stride[i] = extent == 1 ? 0 : sb;
                sb *= extent;
            }
        }
        std::int64_t batch = 1;
        for (std::size_t i = 0; i < batch_rank; ++i)
            batch *= c_extent[i];
        auto one = [&](std::int64_t index) {
            std::int64_t a_offset = 0, b_offset = 0, rest = index;
            for (std::size_t i = batch_rank; i-- > 0;) {
                const std::int64_t coordinate = rest % c_extent[i];
                rest /= c_extent[i];
                a_offset += coordinate * a_stride[i];
                b_offset += coordinate * b_stride[i];
            }
            const matrix_operand ma = transpose_a
                                          ? matrix_operand{in[0].data + a_offset, dtype::f32, 1, a_cols}
                                          : matrix_operand{in[0].data + a_offset, dtype::f32, a_cols, 1};
            const matrix_operand mb = transpose_b
                                          ? matrix_operand{in[1].data + b_offset, dtype::f32, 1, b_cols}
                                          : matrix_operand{in[1].data + b_offset, dtype::f32, b_cols, 1};
            gemm(m, n_out, k, ma, mb, out.data + index * m * n_out, n_out, {}, &pool);
        };
        if (batch >= static_cast<std::int64_t>(pool.size())) {
            pool.parallel_for(0, static_cast<std::size_t>(batch), 1, [&](std::size_t begin, std::size_t end) {
                for (std::size_t i = begin; i < end; ++i)
                    one(static_cast<std::int64_t>(i));
            });
        } else {
            for (std::int64_t i = 0; i < batch; ++i)
                one(i);
        }
    };
    return parts;
}

// conv2d as GEMMs: per image and group, out[o, p] = W[o, (c, i, j)] · columns[(c, i, j), p] where the
// columns matrix gathers the receptive field of output pixel p (im2col, in the workspace). A 1x1 convolution
// with stride 1 and no padding reads the input directly as the columns matrix.
inline prepared_kernel conv2d_kernel(const graph_body& body, const node& n) {
    const node* weight_node = constant_behind(body, n.inputs[1]);
    const dims& w_shape = body.nodes[n.inputs[1]].result.shape;
    const bool constant_weight_data = weight_node != nullptr && (weight_node->data.type() == dtype::f32 ||
                                                                 weight_node->data.type() == dtype::f16 ||
                                                                 weight_node->data.type() == dtype::bf16);
    host_tensor weight = constant_weight_data ? weight_node->data : host_tensor();
    const node* bias_node = n.inputs.size() == 3 ? constant_behind(body, n.inputs[2]) : nullptr;
    auto bias = std::make_shared<std::vector<float>>(bias_node != nullptr ? bias_node->data.to_f32()
                                                                          : std::vector<float>());
    const attributes attrs = n.attrs;
    const bool pointwise = attrs.kernel == std::array<std::int64_t, 2>{1, 1} &&
                           attrs.stride == std::array<std::int64_t, 2>{1, 1} &&
                           attrs.padding == std::array<std::int64_t, 4>{0, 0, 0, 0};
    prepared_kernel parts;
    parts.reads_natively = {false, constant_weight_data, bias_node != nullptr};
    if (constant_weight_data) parts.weight_buffers.emplace_back(weight.raw(), weight.byte_size());
    if (!bias->empty()) parts.weight_buffers.emplace_back(bias->data(), bias->size() * sizeof(float));
    parts.workspace_floats = pointwise
                                 ? 0
                                 : static_cast<std::size_t>(w_shape[1] * attrs.kernel[0] * attrs.kernel[1] *
                                                            n.result.shape[2] * n.result.shape[3]);
    parts.run = [weight, bias, attrs, pointwise, has_bias = n.inputs.size() == 3](
                    std::span<const const_tensor_span> in, tensor_span out, thread_pool& pool,
                    std::span<float> workspace) {
        const dims& x = in[0].shape;
        const dims& w = in[1].shape;
        const std::int64_t batch = x[0], channels = x[1], height = x[2], width = x[3];
        const std::int64_t out_channels = out.shape[1], out_h = out.shape[2], out_w = out.shape[3];
        const std::int64_t groups = attrs.groups;
        const std::int64_t group_in = channels / groups, group_out = out_channels / groups;
        const std::int64_t kh = w[2], kw = w[3];
        const std::int64_t depth = group_in * kh * kw;
        const std::int64_t pixels = out_h * out_w;
        const void* weight_data = weight.raw() != nullptr ? weight.raw() : in[1].data;
        const dtype weight_type = weight.raw() != nullptr ? weight.type() : dtype::f32;
        const std::size_t weight_element = dtype_size(weight_type);
        const float* bias_data = has_bias ? (bias->empty() ? in[2].data : bias->data()) : nullptr;
        for (std::int64_t image = 0; image < batch; ++image) {
            for (std::int64_t g = 0; g < groups; ++g) {
                const float* source = in[0].data + (image * channels + g * group_in) * height * width;
                const float* columns = source;
                if (!pointwise) {
                    float* buffer = workspace.data();
                    pool.parallel_for(
                        0, static_cast<std::size_t>(depth), [&](std::size_t begin, std::size_t end) {
                            for (std::size_t row = begin; row < end; ++row) {
                                const auto r = static_cast<std::int64_t>(row);
                                const std::int64_t c = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
                                const float* plane = source + c * height * width;
                                float* line = buffer + r * pixels;
                                for (std::int64_t oy = 0; oy < out_h; ++oy) {
                                    const std::int64_t y =
                                        oy * attrs.stride[0] - attrs.padding[0] + i * attrs.dilation[0];
                                    float* dst = line + oy * out_w;
                                    if (y < 0 || y >= height) {
                                        std::fill(dst, dst + out_w, 0.0f);
                                        continue;
                                    }
                                    for (std::int64_t ox = 0; ox < out_w; ++ox) {
                                        const std::int64_t xx =
                                            ox * attrs.stride[1] - attrs.padding[2] + j * attrs.dilation[1];
                                        dst[ox] = xx >= 0 && xx < width ? plane[y * width + xx] : 0.0f;
                                    }
                                }
                            }
                        });
                    columns = buffer;
                }
                const matrix_operand a{static_cast<const std::byte*>(weight_data) +
                                           static_cast<std::size_t>(g * group_out * depth) * weight_element,
                                       weight_type, depth, 1};
                const matrix_operand b{columns, dtype::f32, pixels, 1};
                float* target = out.data + (image * out_channels + g * group_out) * pixels;
                gemm(group_out, pixels, depth, a, b, target, pixels, {}, &pool);
                if (bias_data != nullptr) {
                    for (std::int64_t o = 0; o < group_out; ++o) {
                        const float add = bias_data[g * group_out + o];
                        float* row = target + o * pixels;
                        for (std::int64_t p = 0; p < pixels; ++p)
                            row[p] += add;
                    }
                }
            }
        }
    };
    return parts;
}

}  // namespace anvil::detail::cpu
