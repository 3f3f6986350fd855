// anvil: the one mechanism every model recipe loads its weights with. Each tensor is looked up by its Hugging
// Face name and checked against the shape the config implies, so a folder that does not fit the architecture
// fails at load naming the tensor and both shapes. Weights become graph constants that point into the mapped
// checkpoint (nothing is copied) and enter the graph as f32 values: a cast of the stored f16/bf16 data that
// the CPU backend folds into the GEMM's packing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "anvil/compilation.hpp"
#include "anvil/expr/tensor.hpp"
#include "anvil/fwd.hpp"
#include "anvil/graph/graph.hpp"

namespace anvil::models {

// The checks every recipe applies to a weight it reads, with one wording: `view` has shape `expected`
// (anvil::shape_error "...: tensor 'x': expected shape [64], got [32]"; `layout` follows the expected
// shape, as in " (Conv1D [in, out])") and is floating-point (anvil::type_error).
const tensor_view& checked_weight(const tensor_view& view, const dims& expected,
                                  std::string_view layout = {});

// The same for tensor `name` of `weights`, which must be present (anvil::format_error "...: the tensor 'x'
// is missing (expected shape [64])").
[[nodiscard]] const tensor_view& checked_tensor(const checkpoint& weights, std::string_view name,
                                                const dims& expected, std::string_view layout = {});

// What a recipe loads a tensor as: a linear layer's matrix [out, in] (load_linear), or anything else.
// Training reads it: LoRA adapts linear layers only.
enum class weight_role : std::uint8_t { other, linear_weight };

// What the graph reads in place of a stored tensor. Called for every floating-point tensor a recipe loads,
// after its presence and shape are checked, with `stored` building the usual constant: nullopt keeps that
// constant, a value replaces it. Training (train/fine_tune.hpp) makes trainable tensors program inputs and
// adds LoRA's low-rank update to the adapted matrices this way, so every recipe trains without a copy of its
// forward pass.
using weight_substitute = std::function<std::optional<tensor<float>>(
    graph& g, std::string_view name, weight_role role, const dims& shape,
    const std::function<tensor<float>()>& stored)>;

// Dropout as training applies it at one site of a model: x times a multiplier of x's shape, 0 where an
// element is dropped (with probability `probability`) and 1 / (1 - probability) where kept, drawn afresh each
// step (train/trainer.hpp draws it and feeds it as a program input: the Neural Engine has no random numbers,
// and a program compiled once serves every step). Recipes apply it where their Hugging Face class has an
// nn.Dropout, through models::dropout_layer (blocks.hpp); inference has no hook and leaves x as it is.
using dropout_hook = std::function<tensor<float>(const tensor<float>& x, double probability)>;

class weight_loader {
public:
    weight_loader(graph g, std::shared_ptr<const checkpoint> weights, weight_substitute substitute = {},
                  dropout_hook dropout = {});

    [[nodiscard]] bool contains(std::string_view name) const;

    // The tensor `name`, which must have shape `expected`, as an f32 graph value.
    [[nodiscard]] tensor<float> load(std::string_view name, const dims& expected,
                                     weight_role role = weight_role::other);

    // The same for a tensor the architecture may or may not have (a bias, say).
    [[nodiscard]] std::optional<tensor<float>> load_optional(std::string_view name, const dims& expected,
                                                             weight_role role = weight_role::other);

    [[nodiscard]] graph& target() noexcept { return graph_; }
    [[nodiscard]] const checkpoint& source() const noexcept { return *weights_; }
    // Training's dropout (empty for inference): what models::load_dropout gives the layers it loads.
    [[nodiscard]] const dropout_hook& dropout() const noexcept { return dropout_; }

private:
    // A view checked_weight has passed, as a graph constant (cast to f32 when stored narrower).
    tensor<float> from_view(const tensor_view& view, const dims& expected);
    // from_view, or what the substitute gives in its place.
    tensor<float> from_float_view(const tensor_view& view, const dims& expected, weight_role role);
    // An int8 matrix stored with `<name>_scale` (and optionally `<name>_zero_point`) beside it, one value per
    // output channel, as compressed-tensors' int-quantized checkpoints (llm-compressor's W8A16) store them:
    // dequantize_int8 of the stored values, which the CPU GEMM reads as int8 rows and the Neural Engine
    // programs keep as constexpr ops.
    tensor<float> from_int8_view(const tensor_view& view, const dims& expected);
    // A matrix `<prefix>.weight` stored palettised as SqueezeLLM's checkpoints hold it (vLLM's squeezellm
    // layout): `<prefix>.qweight` i32 [in / 8, out], eight 4-bit indices a word along the input axis, input
    // 8r + j in bits 4j..4j+3 of word (r, c); `<prefix>.lookup_table` [out, 16], one palette per output
    // channel. Loaded as dequantize_lut of u8 indices [out, in] (the words unpacked to a byte each, the
    // layout the CPU GEMM and the Neural Engine lowering read) and the palettes as f32.
    tensor<float> from_squeezellm(std::string_view prefix, const dims& expected);
    // `<name without .weight>` when `name` is absent and that prefix's SqueezeLLM tensors are present.
    [[nodiscard]] std::optional<std::string> squeezellm_prefix(std::string_view name) const;

    graph graph_;
    std::shared_ptr<const checkpoint> weights_;
    weight_substitute substitute_;
    dropout_hook dropout_;
};

}  // namespace anvil::models

#if ANVIL_DEFINITIONS
#include "anvil/models/common/weights-inl.hpp"
#endif
