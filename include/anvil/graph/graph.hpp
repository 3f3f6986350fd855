// anvil: the graph IR — a list of nodes in topological order, each producing one value — and `value`, the
// untyped handle the expression front end and model recipes build it with. A graph is a handle too: copies
// share the nodes, so values stay valid however the graph object moves. Building only appends nodes (shape
// inference runs at once and throws on a mismatch); compiling copies them, so one graph can be compiled
// many times with different outputs.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/graph/op.hpp"
#include "anvil/graph/shape_inference.hpp"

namespace anvil {

using value_id = std::uint32_t;

struct node {
    op kind = op::input;
    value_type result;
    std::vector<value_id> inputs;
    attributes attrs;
    std::string name;  // an input's binding name; a constant's label (the weight name); empty otherwise
    host_tensor data;  // op::constant only
    // The stage the recipe was building when it appended the node (graph::begin_stage; 0 when it marked
    // none). Passes copy it; a node a pass creates may leave it 0, and then counts as in the latest stage of
    // its operands (effective_stages, graph/stages.hpp).
    std::uint32_t stage = 0;
};

// A graph's nodes with the values a program must produce: what passes transform and backends compile.
struct graph_body {
    std::vector<node> nodes;
    std::vector<value_id> outputs;
    // The label of each stage a recipe marked ("embedding", "layer 0", ..., "head"), by stage number; empty
    // when it marked none (every node is stage 0). Passes that rebuild a body may drop it: a backend reads
    // it from the body compile() was given.
    std::vector<std::string> stage_labels = {};
    // The inputs graph::parameter made (trainable tensors), in the order they were made. Passes drop it.
    std::vector<value_id> parameters = {};
};

class graph;

// The expression front end's typed handle (anvil/expr/tensor.hpp), for graph's typed leaves below.
struct any_shape;
template <class T, class Shape>
class tensor;

// A value in a graph: the result of one node.
class value {
public:
    value() = default;
    value(std::shared_ptr<graph_body> owner, value_id id) : owner_(std::move(owner)), id_(id) {}

    [[nodiscard]] value_id id() const noexcept { return id_; }
    [[nodiscard]] bool valid() const noexcept { return owner_ != nullptr; }
    [[nodiscard]] const node& producer() const { return owner_->nodes.at(id_); }
    [[nodiscard]] dtype type() const { return producer().result.type; }
    // By value: a reference into the node list would dangle once the graph grows.
    [[nodiscard]] dims shape() const { return producer().result.shape; }
    [[nodiscard]] std::size_t rank() const { return shape().rank(); }
    [[nodiscard]] const std::shared_ptr<graph_body>& owner() const noexcept { return owner_; }

private:
    std::shared_ptr<graph_body> owner_;
    value_id id_ = 0;
};

class graph {
public:
    graph() : body_(std::make_shared<graph_body>()) {}

    // A named input the program is run with.
    value input(std::string name, dtype type, dims shape);

    // A trainable tensor: an input the program is run with — weights that change every training step then
    // never recompile it — listed by parameters() for gradients() (graph/autodiff.hpp) and the optimizers.
    value parameter(std::string name, dtype type, dims shape);
    [[nodiscard]] std::vector<value> parameters() const;

    // The input named `name`; throws error when the graph has none.
    [[nodiscard]] value input_named(std::string_view name) const;

    // Host data baked into the program (weights); `label` names it in dumps and errors.
    value constant(host_tensor data, std::string label = {});

    // Typed leaves for the expression front end, defined in anvil/expr/tensor.hpp:
    // input<T>(name, shape<2, 3>{}) gives a tensor<T, shape<2, 3>>; input<T>(name, dims) a tensor<T> whose
    // shape is known at run time (or, with Shape given, one checked against it); constant<T> checks the
    // data's dtype (and static shape).
    template <class T, std::int64_t... Extents>
    tensor<T, shape<Extents...>> input(std::string name, shape<Extents...> static_shape);
    template <class T, class Shape = any_shape>
    tensor<T, Shape> input(std::string name, dims extents);
    template <class T>
    tensor<T, any_shape> constant(host_tensor data, std::string label = {});
    template <class T, std::int64_t... Extents>
    tensor<T, shape<Extents...>> constant(host_tensor data, shape<Extents...> static_shape,
                                          std::string label = {});

    // A scalar constant of `type`: the right operand of `x * 0.5`.
    value scalar(double number, dtype type = dtype::f32);

    // Starts a stage: the nodes appended from now on belong to it, until the next call. Stages are the units
    // a recipe repeats (a decoder layer) or sets apart (the embedding, the head); the Neural Engine backend
    // splits a model whose weights pass one program's limit only between stages where it can
    // (backend/ane/partition.hpp), so each program holds whole layers. Returns the stage's number (the
    // nodes appended before the first call are stage 0, labelled "").
    std::uint32_t begin_stage(std::string label);

    // Appends `kind` applied to `inputs`; infers the result's type and shape (throwing shape_error or
    // type_error that name the op and the operands) and canonicalises the attributes.
    value apply(op kind, std::span<const value> inputs, attributes attrs = {});
    value apply(op kind, std::initializer_list<value> inputs, attributes attrs = {}) {
        return apply(kind, std::span<const value>(inputs.begin(), inputs.size()), std::move(attrs));
    }

    [[nodiscard]] std::size_t size() const noexcept { return body_->nodes.size(); }
    [[nodiscard]] const node& operator[](value_id id) const { return body_->nodes.at(id); }
    [[nodiscard]] const std::vector<node>& nodes() const noexcept { return body_->nodes; }
    [[nodiscard]] const std::shared_ptr<graph_body>& body() const noexcept { return body_; }
    // The graph a value belongs to.
    [[nodiscard]] static graph of(const value& v);

private:
    explicit graph(std::shared_ptr<graph_body> body) : body_(std::move(body)) {}

    value append(node n);

    static host_tensor convert_scalar(const host_tensor& number, dtype type);

    std::shared_ptr<graph_body> body_;
};

// The nodes of the graph `outputs` belong to, with `outputs` as the body's outputs: what compile and export
// hand to the passes. Throws error, prefixed by `caller`, when there are none, one is empty or they come
// from different graphs.
[[nodiscard]] graph_body body_of(std::span<const value> outputs, std::string_view caller);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/graph/graph-inl.hpp"
#endif
