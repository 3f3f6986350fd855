// anvil's ANE simulator: executes a validated MIL program with fp16 storage (CONSTRAINTS.md "Numerics"):
// every float result is rounded to fp16 with subnormals flushed and overflow to infinity, and the first op
// whose finite inputs overflowed is reported. Elementwise, reduction and data-movement kernels live here; the
// neural-network ones in mil_kernels_nn.cpp.
#include "mil_executor.hpp"

#include <algorithm>
#include <anvil/core/half.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "citations.hpp"

namespace anvil_sim::mil {

std::size_t tensor::count() const {
    return static_cast<std::size_t>(element_count(shape));
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape)
        n *= std::max<std::int64_t>(d, 0);
    return n;
}

float round_fp16(float x) {
    const float r = anvil::half_bits_to_float(anvil::float_to_half_bits(x));
    return std::fabs(r) < 6.103515625e-05f ? std::copysign(0.0f, r) : r;  // 2^-14: below it is subnormal
}

// ---- op_context
// ---------------------------------------------------------------------------------------------

const tensor* op_context::find(std::string_view name) const {
    for (const auto& [input, bound] : step_.inputs)
        if (input == name && bound.value >= 0) return &values_[static_cast<std::size_t>(bound.value)];
    return nullptr;
}
tensor& op_context::state(std::string_view name) {
    for (const auto& [input, bound] : step_.inputs)
        if (input == name && bound.value >= 0) return values_[static_cast<std::size_t>(bound.value)];
    fail("needs input '" + std::string(name) + "'");
}
bool op_context::has(std::string_view name) const {
    for (const auto& [input, bound] : step_.inputs)
        if (input == name) return true;
    return false;
}
const tensor& op_context::in(std::string_view name) const {
    const tensor* t = find(name);
    if (!t) fail("needs input '" + std::string(name) + "'");
    return *t;
}
std::vector<const tensor*> op_context::tuple(std::string_view name) const {
    for (const auto& [input, bound] : step_.inputs)
        if (input == name) {
            std::vector<const tensor*> result;
            for (int v : bound.tuple)
                result.push_back(&values_[static_cast<std::size_t>(v)]);
            if (bound.value >= 0) result.push_back(&values_[static_cast<std::size_t>(bound.value)]);
            return result;
        }
    fail("needs input '" + std::string(name) + "'");
}
const tensor& op_context::constant(std::string_view name) const {
    const tensor& t = in(name);
    if (!t.has_data) throw needs_data{};
    return t;
}
std::int64_t op_context::integer(std::string_view name, std::int64_t fallback) const {
    if (!find(name)) return fallback;
    const tensor& t = constant(name);
    if (t.data.size() != 1) fail("input '" + std::string(name) + "' must be a scalar");
    return static_cast<std::int64_t>(t.data[0]);
}
double op_context::number(std::string_view name, double fallback) const {
    if (!find(name)) return fallback;
    const tensor& t = constant(name);
    if (t.data.size() != 1) fail("input '" + std::string(name) + "' must be a scalar");
    return t.data[0];
}
bool op_context::boolean(std::string_view name, bool fallback) const {
    return number(name, fallback ? 1.0 : 0.0) != 0.0;
}
std::string op_context::text(std::string_view name, std::string_view fallback) const {
    if (!find(name)) return std::string(fallback);
    return constant(name).text;
}
std::vector<std::int64_t> op_context::integers(std::string_view name) const {
    if (!find(name)) return {};
    const tensor& t = constant(name);
    std::vector<std::int64_t> result;
    for (float v : t.data)
        result.push_back(static_cast<std::int64_t>(v));
    return result;
}
const std::vector<float>& op_context::data(const tensor& t) const {
    if (!shape_only_ && !t.has_data) fail("an input has no value (not computed)");
    if (!t.decodable)
        throw sim_failure(codes::program_inference, "line " + std::to_string(step_.line) + ": " + op() +
                                                        ": the simulator cannot unpack a " +
                                                        std::string(dtype_name(t.type)) + " blob");
    return t.data;
}
tensor& op_context::output(std::size_t i, dtype type, std::vector<std::int64_t> shape) {
    if (i >= step_.outputs.size())
        fail("produces " + std::to_string(i + 1) + " results, the statement names " +
             std::to_string(step_.outputs.size()));
    for (std::int64_t d : shape)
        if (d < 0 || d > (std::int64_t{1} << 24))
            fail("result dimension " + std::to_string(d) + " is out of range");
    if (element_count(shape) > (std::int64_t{1} << 28)) fail("result is too large to simulate");
    tensor& t = values_[static_cast<std::size_t>(step_.outputs[i])];
    if (!shape_only_) {  // types were fixed at compile time
        if (t.shape != shape) fail("computed a result of another shape than the one declared");
        t.data.assign(t.count(), 0.0f);
        t.has_data = true;
        return t;
    }
    t.type = type;
    t.shape = std::move(shape);
    return t;
}
void op_context::fail(const std::string& what) const {
    const std::string message = "line " + std::to_string(step_.line) + ": " + op() + ": " + what;
    // At compile, a kernel fails while inferring the result type from the inputs.
    if (shape_only_) throw sim_failure(codes::invalid_mil, message + cite(rule::result_types));
    throw sim_failure(codes::program_inference, message);
}

std::int64_t normalize_axis(const op_context& c, std::int64_t axis, std::size_t rank) {
    const auto r = static_cast<std::int64_t>(rank);
    if (axis < -r || axis >= r)
        c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    return axis < 0 ? axis + r : axis;
}

namespace {

using shape_t = std::vector<std::int64_t>;

shape_t strides_of(const shape_t& shape) {
    shape_t strides(shape.size(), 1);
    for (std::size_t i = shape.size(); i-- > 1;)
        strides[i - 1] = strides[i] * shape[i];
    return strides;
}

// For each element of `out` (row-major), the offset of the element of `in` that broadcasts onto it.
std::vector<std::int64_t> broadcast_offsets(const shape_t& in, const shape_t& out) {
    const std::size_t rank = out.size();
    shape_t in_strides(rank, 0);
    const shape_t own = strides_of(in);
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::size_t at = rank - in.size() + i;
        in_strides[at] = in[i] == 1 ? 0 : own[i];
    }
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(element_count(out)));
    shape_t index(rank, 0);
    std::int64_t offset = 0;
    for (auto& o : offsets) {
        o = offset;
        for (std::size_t d = rank; d-- > 0;) {
            offset += in_strides[d];
            if (++index[d] < out[d]) break;
            offset -= in_strides[d] * out[d];
            index[d] = 0;
        }
    }
    return offsets;
}

shape_t broadcast_shape(const op_context& c, const shape_t& a, const shape_t& b) {
    shape_t out(std::max(a.size(), b.size()), 1);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
        const std::int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
        if (da != db && da != 1 && db != 1)
            c.fail("shapes do not broadcast: dimension " + std::to_string(da) + " against " +
                   std::to_string(db));
        out[i] = da == 1 ? db : da;
    }
    return out;
}

// Calls f(index, linear) for every index of `shape` in row-major order.
template <class F>
void for_each_index(const shape_t& shape, F&& f) {
    const std::int64_t n = element_count(shape);
    shape_t index(shape.size(), 0);
    for (std::int64_t linear = 0; linear < n; ++linear) {
        f(index, linear);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++index[d] < shape[d]) break;
            index[d] = 0;
        }
    }
}

bool is_comparison(std::string_view op) {
    return op == "equal" || op == "not_equal" || op == "less" || op == "less_equal" || op == "greater" ||
           op == "greater_equal";
}

std::function<float(float, float)> binary_function(std::string_view op) {
    if (op == "add") return [](float a, float b) { return a + b; };
    if (op == "sub") return [](float a, float b) { return a - b; };
    if (op == "mul") return [](float a, float b) { return a * b; };
    if (op == "real_div") return [](float a, float b) { return a / b; };
    if (op == "pow") return [](float a, float b) { return std::pow(a, b); };
    if (op == "maximum") return [](float a, float b) { return std::max(a, b); };
    if (op == "minimum") return [](float a, float b) { return std::min(a, b); };
    if (op == "equal") return [](float a, float b) { return a == b ? 1.0f : 0.0f; };
    if (op == "not_equal") return [](float a, float b) { return a != b ? 1.0f : 0.0f; };
    if (op == "less") return [](float a, float b) { return a < b ? 1.0f : 0.0f; };
    if (op == "less_equal") return [](float a, float b) { return a <= b ? 1.0f : 0.0f; };
    if (op == "greater") return [](float a, float b) { return a > b ? 1.0f : 0.0f; };
    if (op == "greater_equal") return [](float a, float b) { return a >= b ? 1.0f : 0.0f; };
    return nullptr;
}

void run_binary(op_context& c) {
    const tensor& x = c.in("x");
    const tensor& y = c.in("y");
    const shape_t shape = broadcast_shape(c, x.shape, y.shape);
    tensor& out = c.output(0, is_comparison(c.op()) ? dtype::boolean : x.type, shape);
    if (c.shape_only()) return;
    const auto f = binary_function(c.op());
    const auto& xd = c.data(x);
    const auto& yd = c.data(y);
    const bool integral = out.type == dtype::int32;
    // Operands of the result's own shape, or a scalar, need no offset tables (most elementwise ops are one
    // of these; the tables cost a large attention's scores two allocations of their size per op).
    const bool direct = (x.shape == shape || xd.size() == 1) && (y.shape == shape || yd.size() == 1);
    if (direct) {
        for (std::size_t i = 0; i < out.data.size(); ++i) {
            const float v = f(xd[xd.size() == 1 ? 0 : i], yd[yd.size() == 1 ? 0 : i]);
            out.data[i] = integral ? std::trunc(v) : v;
        }
        return;
    }
    // Row by row over the innermost axis: each operand's row start from a table of one entry per row, and
    // its step along the row (0 where it broadcasts there).
    const std::size_t inner = shape.empty() ? 1 : static_cast<std::size_t>(shape.back());
    const auto rows_of = [&](const shape_t& in) {
        shape_t row_shape = shape, in_rows = in;
        if (!row_shape.empty()) row_shape.back() = 1;
        if (!in_rows.empty()) in_rows.back() = 1;
        std::vector<std::int64_t> starts = broadcast_offsets(in_rows, row_shape);
        const std::int64_t row_length = in.empty() ? 1 : in.back();
        for (auto& start : starts)
            start *= row_length;  // offsets counted in rows of `in_rows`, one element each
        return starts;
    };
    const std::vector<std::int64_t> xr = rows_of(x.shape), yr = rows_of(y.shape);
    const std::size_t xs = !x.shape.empty() && x.shape.back() != 1 ? 1 : 0;
    const std::size_t ys = !y.shape.empty() && y.shape.back() != 1 ? 1 : 0;
    for (std::size_t r = 0; r < xr.size(); ++r) {
        const auto xb = static_cast<std::size_t>(xr[r]), yb = static_cast<std::size_t>(yr[r]);
        float* row = out.data.data() + r * inner;
        for (std::size_t j = 0; j < inner; ++j) {
            const float v = f(xd[xb + j * xs], yd[yb + j * ys]);
            row[j] = integral ? std::trunc(v) : v;
        }
    }
}

void run_select(op_context& c) {
    const tensor& cond = c.in("cond");
    const tensor& a = c.in("a");
    const tensor& b = c.in("b");
    const shape_t shape = broadcast_shape(c, broadcast_shape(c, cond.shape, a.shape), b.shape);
    tensor& out = c.output(0, a.type, shape);
    if (c.shape_only()) return;
    const auto co = broadcast_offsets(cond.shape, shape);
    const auto ao = broadcast_offsets(a.shape, shape);
    const auto bo = broadcast_offsets(b.shape, shape);
    const auto &cd = c.data(cond), &ad = c.data(a), &bd = c.data(b);
    for (std::size_t i = 0; i < out.data.size(); ++i)
        out.data[i] = cd[static_cast<std::size_t>(co[i])] != 0.0f ? ad[static_cast<std::size_t>(ao[i])]
                                                                  : bd[static_cast<std::size_t>(bo[i])];
}

float erf_f(float x) {
    return std::erf(x);
}
float sigmoid_f(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

bool run_unary(op_context& c) {
    const std::string& op = c.op();
    std::function<float(float)> f;
    if (op == "sqrt") f = [](float x) { return std::sqrt(x); };
    if (op == "exp") f = [](float x) { return std::exp(x); };
    if (op == "sin") f = [](float x) { return std::sin(x); };
    if (op == "cos") f = [](float x) { return std::cos(x); };
    if (op == "tanh") f = [](float x) { return std::tanh(x); };
    if (op == "sigmoid") f = sigmoid_f;
    if (op == "relu") f = [](float x) { return std::max(x, 0.0f); };
    if (op == "silu") f = [](float x) { return x * sigmoid_f(x); };
    if (op == "erf") f = erf_f;
    if (op == "abs") f = [](float x) { return std::fabs(x); };
    if (op == "square") f = [](float x) { return x * x; };
    if (op == "rsqrt" || op == "log" || op == "inverse" || op == "clip" || op == "leaky_relu" ||
        op == "gelu") {
        if (op == "inverse") {
            const auto eps = static_cast<float>(c.number("epsilon", 1e-4));
            f = [eps](float x) { return 1.0f / (x + eps); };
        } else if (op == "rsqrt") {
            const auto eps = static_cast<float>(c.number("epsilon", 1e-12));
            f = [eps](float x) { return 1.0f / std::sqrt(x + eps); };
        } else if (op == "log") {
            const auto eps = static_cast<float>(c.number("epsilon", 1e-45));
            f = [eps](float x) { return std::log(x + eps); };
        } else if (op == "clip") {
            const auto lo = static_cast<float>(c.number("alpha", 0.0));
            const auto hi = static_cast<float>(c.number("beta", 0.0));
            f = [lo, hi](float x) { return std::min(std::max(x, lo), hi); };
        } else if (op == "leaky_relu") {
            const auto alpha = static_cast<float>(c.number("alpha", 0.01));
            f = [alpha](float x) { return x >= 0.0f ? x : alpha * x; };
        } else {
            const std::string mode = c.text("mode", "EXACT");
            if (mode == "EXACT")
                f = [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678f)); };
            else if (mode == "TANH_APPROXIMATION")
                f = [](float x) {
                    return 0.5f * x * (1.0f + std::tanh(0.79788456f * (x + 0.044715f * x * x * x)));
                };
            else if (mode == "SIGMOID_APPROXIMATION")
                f = [](float x) { return x * sigmoid_f(1.702f * x); };
            else
                c.fail("mode '" + mode + "' is not EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION");
        }
    }
    if (!f) return false;
    const tensor& x = c.in("x");
    tensor& out = c.output(0, x.type, x.shape);
    if (c.shape_only()) return true;
    const auto& xd = c.data(x);
    for (std::size_t i = 0; i < xd.size(); ++i)
        out.data[i] = f(xd[i]);
    return true;
}

std::vector<bool> axis_set(const op_context& c, std::vector<std::int64_t> axes, std::size_t rank) {
    std::vector<bool> reduced(rank, axes.empty());
    for (std::int64_t a : axes)
        reduced[static_cast<std::size_t>(normalize_axis(c, a, rank))] = true;
    return reduced;
}

void run_reduce(op_context& c) {
    const tensor& x = c.in("x");
    const bool argmax = c.op() == "reduce_argmax";
    const std::vector<bool> reduced = argmax ? axis_set(c, {c.integer("axis", -1)}, x.shape.size())
                                             : axis_set(c, c.integers("axes"), x.shape.size());
    const bool keep = c.boolean("keep_dims", false);
    shape_t kept_shape = x.shape, result_shape;
    for (std::size_t i = 0; i < x.shape.size(); ++i) {
        if (reduced[i]) kept_shape[i] = 1;
        if (!reduced[i] || keep) result_shape.push_back(kept_shape[i]);
    }
    const dtype type =
        argmax ? (c.text("output_dtype", "int32") == "uint16" ? dtype::uint16 : dtype::int32) : x.type;
    tensor& out = c.output(0, type, result_shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    // The output element of each input element, walked as an odometer: a table of one offset per input
    // element cost a large reduction (a matmul as mul + reduce_sum over 54 million products) 432 MB.
    const shape_t kept_strides = strides_of(kept_shape);
    shape_t step(x.shape.size(), 0), index(x.shape.size(), 0);
    for (std::size_t d = 0; d < x.shape.size(); ++d)
        step[d] = reduced[d] ? 0 : kept_strides[d];
    std::int64_t slot = 0;
    const std::string& op = c.op();
    // The op is read once: comparing its name per element cost a fifth of a 1500-position attention.
    enum class reduction : std::uint8_t { max, min, prod, index_of_max, sum };
    const reduction kind = op == "reduce_max"    ? reduction::max
                           : op == "reduce_min"  ? reduction::min
                           : op == "reduce_prod" ? reduction::prod
                           : argmax              ? reduction::index_of_max
                                                 : reduction::sum;
    const float start = kind == reduction::max || kind == reduction::index_of_max
                            ? -std::numeric_limits<float>::infinity()
                        : kind == reduction::min  ? std::numeric_limits<float>::infinity()
                        : kind == reduction::prod ? 1.0f
                                                  : 0.0f;
    std::vector<float> best(out.data.size(), start);
    std::vector<std::int64_t> position(out.data.size(), 0), seen(out.data.size(), 0);
    for (std::size_t i = 0; i < xd.size(); ++i) {
        const auto o = static_cast<std::size_t>(slot);
        for (std::size_t d = x.shape.size(); d-- > 0;) {
            slot += step[d];
            if (++index[d] < x.shape[d]) break;
            slot -= step[d] * x.shape[d];
            index[d] = 0;
        }
        const float v = xd[i];
        switch (kind) {
            case reduction::max:
                best[o] = std::max(best[o], v);
                break;
            case reduction::min:
                best[o] = std::min(best[o], v);
                break;
            case reduction::prod:
                best[o] *= v;
                break;
            case reduction::index_of_max:
                if (v > best[o] || seen[o] == 0) {
                    best[o] = v;
                    position[o] = seen[o];
                }
                ++seen[o];
                break;
            case reduction::sum:
                best[o] += v;
                break;
        }
    }
    const auto reduced_count = static_cast<float>(xd.size() / std::max<std::size_t>(out.data.size(), 1));
    const bool mean = op == "reduce_mean";
    for (std::size_t o = 0; o < out.data.size(); ++o)
        out.data[o] = argmax ? static_cast<float>(position[o]) : mean ? best[o] / reduced_count : best[o];
}

// ---- data movement
// ------------------------------------------------------------------------------------------

void gather_into(tensor& out, const std::vector<float>& in, const shape_t& in_shape,
                 const shape_t& view_shape, const shape_t& starts, const shape_t& steps) {
    const shape_t in_strides = strides_of(in_shape);
    for_each_index(view_shape, [&](const shape_t& index, std::int64_t linear) {
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < index.size(); ++d)
            offset += (starts[d] + index[d] * steps[d]) * in_strides[d];
        out.data[static_cast<std::size_t>(linear)] = in[static_cast<std::size_t>(offset)];
    });
}

void run_reshape(op_context& c) {
    const tensor& x = c.in("x");
    shape_t shape = c.integers("shape");
    std::int64_t known = 1;
    int infer = -1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0) {
            const std::size_t from = shape.size() == x.shape.size() ? i : x.shape.size() - shape.size() + i;
            if (shape.size() > x.shape.size() + i || from >= x.shape.size())
                c.fail("0 in shape has no dimension to copy");
            shape[i] = x.shape[from];
        }
        if (shape[i] == -1) {
            if (infer >= 0) c.fail("shape has more than one -1");
            infer = static_cast<int>(i);
        } else if (shape[i] < 0) {
            c.fail("shape entry " + std::to_string(shape[i]) + " is negative");
        } else {
            known *= shape[i];
        }
    }
    const std::int64_t total = element_count(x.shape);
    if (infer >= 0) {
        if (known == 0 || total % known != 0)
            c.fail("cannot infer -1 for " + std::to_string(total) + " elements");
        shape[static_cast<std::size_t>(infer)] = total / known;
    }
    if (element_count(shape) != total)
        c.fail("shape has " + std::to_string(element_count(shape)) + " elements, x has " +
               std::to_string(total));
    tensor& out = c.output(0, x.type, shape);
    if (!c.shape_only()) out.data = c.data(x);
}

void run_transpose(op_context& c) {
    const tensor& x = c.in("x");
    const shape_t perm = c.integers("perm");
    if (perm.size() != x.shape.size())
        c.fail("perm has " + std::to_string(perm.size()) + " entries for rank " +
               std::to_string(x.shape.size()));
    shape_t shape(perm.size()), steps(perm.size());
    std::vector<bool> used(perm.size(), false);
    const shape_t in_strides = strides_of(x.shape);
    for (std::size_t i = 0; i < perm.size(); ++i) {
        const auto p = static_cast<std::size_t>(normalize_axis(c, perm[i], perm.size()));
        if (used[p]) c.fail("perm repeats axis " + std::to_string(p));
        used[p] = true;
        shape[i] = x.shape[p];
        steps[i] = in_strides[p];
    }
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    for_each_index(shape, [&](const shape_t& index, std::int64_t linear) {
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < index.size(); ++d)
            offset += index[d] * steps[d];
        out.data[static_cast<std::size_t>(linear)] = xd[static_cast<std::size_t>(offset)];
    });
}

void run_concat(op_context& c) {
    const auto parts = c.tuple("values");
    if (parts.empty()) c.fail("values is empty");
    if (c.boolean("interleave", false)) c.fail("interleave = true is not simulated");
    const std::size_t rank = parts[0]->shape.size();
    const auto axis = static_cast<std::size_t>(normalize_axis(c, c.integer("axis", 0), rank));
    shape_t shape = parts[0]->shape;
    shape[axis] = 0;
    for (const tensor* p : parts) {
        if (p->shape.size() != rank || p->type != parts[0]->type) c.fail("values differ in rank or dtype");
        for (std::size_t d = 0; d < rank; ++d)
            if (d != axis && p->shape[d] != parts[0]->shape[d])
                c.fail("values differ outside the concat axis");
        shape[axis] += p->shape[axis];
    }
    tensor& out = c.output(0, parts[0]->type, shape);
    if (c.shape_only()) return;
    const std::int64_t outer = element_count(shape_t(shape.begin(), shape.begin() + static_cast<long>(axis)));
    const std::int64_t inner =
        element_count(shape_t(shape.begin() + static_cast<long>(axis) + 1, shape.end()));
    std::int64_t at = 0;
    for (std::int64_t o = 0; o < outer; ++o)
        for (const tensor* p : parts) {
            const std::int64_t block = p->shape[axis] * inner;
            const auto& pd = c.data(*p);
            std::copy_n(pd.begin() + o * block, block, out.data.begin() + at);
            at += block;
        }
}

void run_split(op_context& c) {
    const tensor& x = c.in("x");
    const auto axis = static_cast<std::size_t>(normalize_axis(c, c.integer("axis", 0), x.shape.size()));
    shape_t sizes = c.integers("split_sizes");
    if (sizes.empty()) {
        const std::int64_t n = c.integer("num_splits", 0);
        if (n <= 0 || x.shape[axis] % n != 0) c.fail("num_splits does not divide the axis");
        sizes.assign(static_cast<std::size_t>(n), x.shape[axis] / n);
    }
    if (std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}) != x.shape[axis])
        c.fail("split sizes do not add up to " + std::to_string(x.shape[axis]));
    if (sizes.size() != c.output_count())
        c.fail("produces " + std::to_string(sizes.size()) + " results, the statement names " +
               std::to_string(c.output_count()));
    std::int64_t begin = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        shape_t shape = x.shape;
        shape[axis] = sizes[i];
        tensor& out = c.output(i, x.type, shape);
        if (!c.shape_only()) {
            shape_t starts(shape.size(), 0), steps(shape.size(), 1);
            starts[axis] = begin;
            gather_into(out, c.data(x), x.shape, shape, starts, steps);
        }
        begin += sizes[i];
    }
}

void run_slice(op_context& c) {
    const tensor& x = c.in("x");
    const std::size_t rank = x.shape.size();
    shape_t begin = c.integers("begin"), end, stride(rank, 1);
    const bool by_size = c.op() == "slice_by_size";
    if (by_size)
        end = c.integers("size");
    else
        end = c.integers("end");
    if (!by_size && c.has("stride")) stride = c.integers("stride");
    auto mask = [&](std::string_view name) {
        std::vector<bool> m(rank, false);
        if (c.has(name)) {
            const auto v = c.integers(name);
            if (v.size() != rank) c.fail(std::string(name) + " needs one entry per dimension");
            for (std::size_t i = 0; i < rank; ++i)
                m[i] = v[i] != 0;
        }
        return m;
    };
    if (begin.size() != rank || end.size() != rank || stride.size() != rank)
        c.fail("begin/end/stride need one entry per dimension (rank " + std::to_string(rank) + ")");
    const auto begin_mask = mask("begin_mask"), end_mask = mask("end_mask"),
               squeeze_mask = mask("squeeze_mask");
    shape_t view(rank), result;
    for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t n = x.shape[d];
        if (stride[d] == 0) c.fail("stride 0");
        std::int64_t b = begin_mask[d] ? (stride[d] > 0 ? 0 : n - 1) : begin[d];
        if (b < 0) b += n;
        if (by_size) {
            const std::int64_t size = end[d] == -1 ? n - b : end[d];
            if (b < 0 || size < 0 || b + size > n)
                c.fail("slice is out of range on dimension " + std::to_string(d));
            view[d] = size;
        } else {
            std::int64_t e = end_mask[d] ? (stride[d] > 0 ? n : -1) : end[d];
            if (!end_mask[d] && e < 0) e += n;
            b = std::clamp<std::int64_t>(b, stride[d] > 0 ? 0 : -1, stride[d] > 0 ? n : n - 1);
            e = std::clamp<std::int64_t>(e, stride[d] > 0 ? 0 : -1, stride[d] > 0 ? n : n - 1);
            view[d] = stride[d] > 0 ? std::max<std::int64_t>(0, (e - b + stride[d] - 1) / stride[d])
                                    : std::max<std::int64_t>(0, (b - e - stride[d] - 1) / -stride[d]);
            if (squeeze_mask[d]) view[d] = 1;
        }
        begin[d] = b;
        if (!squeeze_mask[d]) result.push_back(view[d]);
    }
    tensor& out = c.output(0, x.type, result);
    if (!c.shape_only()) gather_into(out, c.data(x), x.shape, view, begin, stride);
}

void run_squeeze_expand(op_context& c) {
    const tensor& x = c.in("x");
    shape_t shape;
    if (c.op() == "squeeze") {
        const auto axes = c.integers("axes");
        const auto drop = axis_set(c, axes, x.shape.size());
        for (std::size_t d = 0; d < x.shape.size(); ++d)
            if (!(drop[d] && x.shape[d] == 1)) shape.push_back(x.shape[d]);
    } else {
        const auto axes = c.integers("axes");
        const std::size_t rank = x.shape.size() + axes.size();
        const auto add = axis_set(c, axes, rank);
        if (axes.empty()) c.fail("axes is empty");
        std::size_t from = 0;
        for (std::size_t d = 0; d < rank; ++d)
            shape.push_back(add[d] ? 1 : x.shape[from++]);
    }
    tensor& out = c.output(0, x.type, shape);
    if (!c.shape_only()) out.data = c.data(x);
}

void run_tile(op_context& c) {
    const tensor& x = c.in("x");
    const shape_t reps = c.integers("reps");
    if (reps.size() != x.shape.size()) c.fail("reps needs one entry per dimension");
    shape_t shape(reps.size());
    for (std::size_t d = 0; d < reps.size(); ++d) {
        if (reps[d] < 1) c.fail("reps entries must be positive");
        shape[d] = x.shape[d] * reps[d];
    }
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const shape_t in_strides = strides_of(x.shape);
    for_each_index(shape, [&](const shape_t& index, std::int64_t linear) {
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < index.size(); ++d)
            offset += (index[d] % x.shape[d]) * in_strides[d];
        out.data[static_cast<std::size_t>(linear)] = xd[static_cast<std::size_t>(offset)];
    });
}

void run_pad(op_context& c) {
    const tensor& x = c.in("x");
    const shape_t pad = c.integers("pad");
    const std::string mode = c.text("mode", "constant");
    if (pad.size() % 2 != 0 || pad.size() / 2 > x.shape.size()) c.fail("pad needs [before, after] pairs");
    const std::size_t rank = x.shape.size(), first = rank - pad.size() / 2;
    shape_t shape = x.shape, before(rank, 0);
    for (std::size_t d = first; d < rank; ++d) {
        before[d] = pad[2 * (d - first)];
        shape[d] += pad[2 * (d - first)] + pad[2 * (d - first) + 1];
        if (pad[2 * (d - first)] < 0 || pad[2 * (d - first) + 1] < 0) c.fail("negative padding");
    }
    if (mode != "constant" && mode != "reflect" && mode != "replicate")
        c.fail("mode '" + mode + "' is unknown");
    const auto value = static_cast<float>(c.number("constant_val", 0.0));
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const shape_t in_strides = strides_of(x.shape);
    for_each_index(shape, [&](const shape_t& index, std::int64_t linear) {
        std::int64_t offset = 0;
        for (std::size_t d = 0; d < rank; ++d) {
            std::int64_t i = index[d] - before[d];
            const std::int64_t n = x.shape[d];
            if (i < 0 || i >= n) {
                if (mode == "constant") {
                    out.data[static_cast<std::size_t>(linear)] = value;
                    return;
                }
                if (mode == "replicate")
                    i = std::clamp<std::int64_t>(i, 0, n - 1);
                else
                    i = n == 1 ? 0 : (i < 0 ? -i : 2 * (n - 1) - i);
                i = std::clamp<std::int64_t>(i, 0, n - 1);
            }
            offset += i * in_strides[d];
        }
        out.data[static_cast<std::size_t>(linear)] = xd[static_cast<std::size_t>(offset)];
    });
}

// gather (batch_dims 0): x.shape[:axis] + indices.shape + x.shape[axis+1:]; an index outside the axis is an
// error (validate_indices), negative ones count from the end.
void run_gather(op_context& c) {
    const tensor& x = c.in("x");
    const tensor& indices = c.in("indices");
    const auto rank = static_cast<std::int64_t>(x.shape.size());
    std::int64_t axis = c.integer("axis", 0);
    if (axis < 0) axis += rank;
    if (rank == 0 || axis < 0 || axis >= rank) c.fail("axis is outside the rank of x");
    if (c.integer("batch_dims", 0) != 0) c.fail("the simulator executes batch_dims = 0 only");
    shape_t shape(x.shape.begin(), x.shape.begin() + axis);
    shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
    shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
    tensor& out = c.output(0, x.type, shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    const auto& id = c.data(indices);
    const std::int64_t extent = x.shape[static_cast<std::size_t>(axis)];
    std::int64_t outer = 1, inner = 1;
    for (std::int64_t i = 0; i < axis; ++i)
        outer *= x.shape[static_cast<std::size_t>(i)];
    for (std::int64_t i = axis + 1; i < rank; ++i)
        inner *= x.shape[static_cast<std::size_t>(i)];
    const auto count = static_cast<std::int64_t>(id.size());
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t k = 0; k < count; ++k) {
            auto index = static_cast<std::int64_t>(id[static_cast<std::size_t>(k)]);
            if (index < 0) index += extent;
            if (index < 0 || index >= extent)
                c.fail("index " + std::to_string(static_cast<std::int64_t>(id[static_cast<std::size_t>(k)])) +
                       " is outside the axis of " + std::to_string(extent));
            std::copy_n(xd.begin() + (o * extent + index) * inner, inner,
                        out.data.begin() + (o * count + k) * inner);
        }
}

// read_state: a copy of the state's value; write_state: replaces it (no result).
void run_state(op_context& c) {
    if (c.op() == "read_state") {
        const tensor& s = c.in("input");
        tensor& out = c.output(0, s.type, s.shape);
        if (!c.shape_only()) out.data = c.data(s);
        return;
    }
    const tensor& data = c.in("data");
    tensor& s = c.state("input");
    if (data.type != s.type || data.shape != s.shape) c.fail("data does not have the state's type");
    if (!c.shape_only()) s.data = c.data(data);
}

void run_cast(op_context& c) {
    const tensor& x = c.in("x");
    const std::string name = c.text("dtype", "");
    const auto type = dtype_from_name(name);
    if (!type ||
        (*type != dtype::fp16 && *type != dtype::fp32 && *type != dtype::int32 && *type != dtype::boolean &&
         *type != dtype::int8 && *type != dtype::uint8 && *type != dtype::int16 && *type != dtype::uint16))
        c.fail("dtype '" + name + "' is not a cast target");
    tensor& out = c.output(0, *type, x.shape);
    if (c.shape_only()) return;
    const auto& xd = c.data(x);
    for (std::size_t i = 0; i < xd.size(); ++i)
        out.data[i] = *type == dtype::boolean ? (xd[i] != 0.0f ? 1.0f : 0.0f)
                      : is_float(*type)       ? xd[i]
                                              : std::trunc(xd[i]);
}

void run_affine_dequantize(op_context& c) {
    const tensor& q = c.in("quantized_data");
    const tensor& zero = c.in("zero_point");
    const tensor& scale = c.in("scale");
    const auto axis = static_cast<std::size_t>(normalize_axis(c, c.integer("axis", 0), q.shape.size()));
    for (const tensor* p : {&zero, &scale})
        if (p->count() != 1 && (p->shape.size() != 1 || p->shape[0] != q.shape[axis]))
            c.fail("scale and zero_point must be scalars or have shape [" + std::to_string(q.shape[axis]) +
                   "]");
    tensor& out = c.output(0, scale.type, q.shape);
    if (c.shape_only()) return;
    const auto &qd = c.data(q), &zd = c.data(zero), &sd = c.data(scale);
    const shape_t strides = strides_of(q.shape);
    for (std::size_t i = 0; i < qd.size(); ++i) {
        const auto channel =
            static_cast<std::size_t>((static_cast<std::int64_t>(i) / strides[axis]) % q.shape[axis]);
        const float z = zd.size() == 1 ? zd[0] : zd[channel];
        const float s = sd.size() == 1 ? sd[0] : sd[channel];
        out.data[i] = s * (qd[i] - z);
    }
}

// The table entry of each output element for per-block tables (blockwise shift-scale, grouped palettes):
// `table_shape` divides `shape` axis by axis, each table covering a block of shape[k] / table_shape[k].
std::vector<std::size_t> block_of_each(const shape_t& shape, const shape_t& table_shape) {
    const shape_t strides = strides_of(shape);
    const shape_t table_strides = strides_of(table_shape);
    std::vector<std::size_t> blocks(static_cast<std::size_t>(element_count(shape)));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        std::int64_t rest = static_cast<std::int64_t>(i), block = 0;
        for (std::size_t k = 0; k < shape.size(); ++k) {
            const std::int64_t coordinate = rest / strides[k];
            rest %= strides[k];
            block += coordinate / (shape[k] / table_shape[k]) * table_strides[k];
        }
        blocks[i] = static_cast<std::size_t>(block);
    }
    return blocks;
}

// constexpr_blockwise_shift_scale (iOS 18): out = scale * (data - offset), scale (and offset) one per block
// of data.shape / scale.shape.
void run_blockwise_shift_scale(op_context& c) {
    const tensor& data = c.in("data");
    const tensor& scale = c.in("scale");
    const tensor* offset = c.has("offset") ? &c.in("offset") : nullptr;
    if (data.shape.empty() || scale.shape.size() != data.shape.size())
        c.fail("scale must have data's rank (at least 1), got " + shape_text(scale.shape) + " for " +
               shape_text(data.shape));
    for (std::size_t k = 0; k < data.shape.size(); ++k)
        if (scale.shape[k] < 1 || data.shape[k] % scale.shape[k] != 0)
            c.fail("scale " + shape_text(scale.shape) + " does not divide data " + shape_text(data.shape) +
                   " into blocks");
    if (offset != nullptr && offset->shape != scale.shape)
        c.fail("offset " + shape_text(offset->shape) + " must have scale's shape " + shape_text(scale.shape));
    if (offset != nullptr && !is_float(offset->type) && offset->type != data.type)
        c.fail("an integer offset must have data's type");
    tensor& out = c.output(0, scale.type, data.shape);
    if (c.shape_only()) return;
    const auto &dd = c.data(data), &sd = c.data(scale);
    const std::vector<float>* od = offset != nullptr ? &c.data(*offset) : nullptr;
    const std::vector<std::size_t> blocks = block_of_each(data.shape, scale.shape);
    for (std::size_t i = 0; i < dd.size(); ++i)
        out.data[i] = sd[blocks[i]] * (dd[i] - (od != nullptr ? (*od)[blocks[i]] : 0.0f));
}

// constexpr_lut_to_dense. The iOS 16 form: indices packed LSB first into uint8 bytes, one table lut
// [2^bits], the output's shape given (uint32). The iOS 18 form: indices of a sub-byte type (uint1..uint8)
// in the output's shape, lut [G0, ..., G(K-1), 2^bits, 1] with one table per block (vector palettes,
// VECTOR_SIZE > 1, are not simulated).
void run_lut_to_dense(op_context& c) {
    const tensor& indices = c.in("indices");
    const tensor& lut = c.in("lut");
    const auto bits_for = [&](std::int64_t entries) {
        for (const int bits : {1, 2, 3, 4, 6, 8})
            if (std::int64_t{1} << bits == entries) return bits;
        c.fail("the palette has " + std::to_string(entries) +
               " entries; it must be 2^bits for 1, 2, 3, 4, 6 or 8 bits");
    };
    if (c.has("shape")) {
        const std::vector<std::int64_t> shape = c.integers("shape");
        if (lut.shape.size() != 1) c.fail("lut must be [2^bits] (iOS 16 form), got " + shape_text(lut.shape));
        const int bits = bits_for(lut.shape[0]);
        if (bits == 3) c.fail("3-bit palettes need iOS 18");
        const auto count = static_cast<std::uint64_t>(element_count(shape));
        const std::uint64_t bytes = (count * static_cast<std::uint64_t>(bits) + 7) / 8;
        if (indices.type != dtype::uint8 || indices.shape.size() != 1 ||
            static_cast<std::uint64_t>(indices.shape[0]) != bytes)
            c.fail("indices must be tensor<uint8, [" + std::to_string(bytes) + "]> (" +
                   std::to_string(count) + " values of " + std::to_string(bits) + " bits, packed)");
        tensor& out = c.output(0, lut.type, shape);
        if (c.shape_only()) return;
        const auto &packed = c.data(indices), &table = c.data(lut);
        for (std::uint64_t i = 0; i < count; ++i) {
            const std::uint64_t bit = i * static_cast<std::uint64_t>(bits);
            const auto low = static_cast<unsigned>(packed[bit / 8]);
            const auto high = bit / 8 + 1 < bytes ? static_cast<unsigned>(packed[bit / 8 + 1]) : 0u;
            const unsigned index = ((low | (high << 8)) >> (bit % 8)) & ((1u << bits) - 1u);
            out.data[i] = table[index];
        }
        return;
    }
    const std::size_t rank = indices.shape.size();
    if (rank == 0 || lut.shape.size() != rank + 2)
        c.fail("lut must have rank " + std::to_string(rank + 2) + " (indices' rank + 2), got " +
               shape_text(lut.shape));
    const int bits = bits_for(lut.shape[rank]);
    static constexpr std::pair<dtype, int> index_types[] = {{dtype::uint1, 1}, {dtype::uint2, 2},
                                                            {dtype::uint3, 3}, {dtype::uint4, 4},
                                                            {dtype::uint6, 6}, {dtype::uint8, 8}};
    const auto type = std::find_if(std::begin(index_types), std::end(index_types),
                                   [&](const auto& entry) { return entry.first == indices.type; });
    if (type == std::end(index_types) || type->second != bits)
        c.fail("indices must be uint" + std::to_string(bits) + " for a palette of " +
               std::to_string(lut.shape[rank]) + " entries");
    if (lut.shape[rank + 1] != 1) c.fail("vector palettization (VECTOR_SIZE > 1) is not simulated");
    const shape_t tables(lut.shape.begin(), lut.shape.begin() + static_cast<std::ptrdiff_t>(rank));
    for (std::size_t k = 0; k < rank; ++k)
        if (tables[k] < 1 || indices.shape[k] % tables[k] != 0)
            c.fail("lut " + shape_text(lut.shape) + " does not divide indices " + shape_text(indices.shape) +
                   " into blocks");
    tensor& out = c.output(0, lut.type, indices.shape);
    if (c.shape_only()) return;
    const auto &id = c.data(indices), &table = c.data(lut);
    const std::vector<std::size_t> blocks = block_of_each(indices.shape, tables);
    const auto entries = static_cast<std::size_t>(lut.shape[rank]);
    for (std::size_t i = 0; i < id.size(); ++i)
        out.data[i] = table[blocks[i] * entries + static_cast<std::size_t>(id[i])];
}

const std::set<std::string, std::less<>>& executable_ops() {
    static const std::set<std::string, std::less<>> ops = {"conv",
                                                           "matmul",
                                                           "einsum",
                                                           "linear",
                                                           "add",
                                                           "sub",
                                                           "mul",
                                                           "real_div",
                                                           "pow",
                                                           "maximum",
                                                           "minimum",
                                                           "equal",
                                                           "not_equal",
                                                           "less",
                                                           "less_equal",
                                                           "greater",
                                                           "greater_equal",
                                                           "select",
                                                           "sqrt",
                                                           "rsqrt",
                                                           "exp",
                                                           "log",
                                                           "inverse",
                                                           "sin",
                                                           "cos",
                                                           "tanh",
                                                           "sigmoid",
                                                           "relu",
                                                           "gelu",
                                                           "silu",
                                                           "erf",
                                                           "abs",
                                                           "square",
                                                           "clip",
                                                           "leaky_relu",
                                                           "softmax",
                                                           "layer_norm",
                                                           "batch_norm",
                                                           "instance_norm",
                                                           "reduce_sum",
                                                           "reduce_mean",
                                                           "reduce_max",
                                                           "reduce_min",
                                                           "reduce_prod",
                                                           "reduce_argmax",
                                                           "reshape",
                                                           "transpose",
                                                           "concat",
                                                           "split",
                                                           "slice_by_index",
                                                           "slice_by_size",
                                                           "squeeze",
                                                           "expand_dims",
                                                           "tile",
                                                           "pad",
                                                           "avg_pool",
                                                           "max_pool",
                                                           "upsample_nearest_neighbor",
                                                           "upsample_bilinear",
                                                           "cast",
                                                           "gather",
                                                           "read_state",
                                                           "write_state",
                                                           "constexpr_affine_dequantize",
                                                           "constexpr_blockwise_shift_scale",
                                                           "constexpr_lut_to_dense"};
    return ops;
}

}  // namespace

bool can_execute(std::string_view op) {
    return executable_ops().contains(op);
}

void run_op(op_context& c) {
    const std::string& op = c.op();
    if (binary_function(op)) return run_binary(c);
    if (run_unary(c)) return;
    if (op == "select") return run_select(c);
    if (op.rfind("reduce_", 0) == 0) return run_reduce(c);
    if (op == "reshape") return run_reshape(c);
    if (op == "transpose") return run_transpose(c);
    if (op == "concat") return run_concat(c);
    if (op == "split") return run_split(c);
    if (op == "slice_by_index" || op == "slice_by_size") return run_slice(c);
    if (op == "squeeze" || op == "expand_dims") return run_squeeze_expand(c);
    if (op == "tile") return run_tile(c);
    if (op == "pad") return run_pad(c);
    if (op == "cast") return run_cast(c);
    if (op == "gather") return run_gather(c);
    if (op == "read_state" || op == "write_state") return run_state(c);
    if (op == "constexpr_affine_dequantize") return run_affine_dequantize(c);
    if (op == "constexpr_blockwise_shift_scale") return run_blockwise_shift_scale(c);
    if (op == "constexpr_lut_to_dense") return run_lut_to_dense(c);
    if (op == "conv") return run_conv(c);
    if (op == "matmul") return run_matmul(c);
    if (op == "einsum") return run_einsum(c);
    if (op == "linear") return run_linear(c);
    if (op == "softmax") return run_softmax(c);
    if (op == "layer_norm") return run_layer_norm(c);
    if (op == "batch_norm") return run_batch_norm(c);
    if (op == "instance_norm") return run_instance_norm(c);
    if (op == "avg_pool" || op == "max_pool") return run_pool(c);
    if (op == "upsample_nearest_neighbor" || op == "upsample_bilinear") return run_upsample(c);
    throw sim_failure(codes::program_inference, "the simulator cannot execute " + op);
}

}  // namespace anvil_sim::mil
