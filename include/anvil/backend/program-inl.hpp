// anvil: program's definitions (see program.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/backend/program.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"

namespace anvil::detail {

ANVIL_INLINE std::string input_names(std::span<const io_info> declared, bool resident_only) {
    std::string list;
    for (const auto& input : declared) {
        if (!resident_only || input.resident) list += (list.empty() ? "" : ", ") + input.name;
    }
    return list.empty() ? std::string("none") : list;
}

ANVIL_INLINE std::vector<std::size_t> match_inputs(std::span<const named_tensor> given,
                                                   std::span<const io_info> declared) {
    std::vector<std::size_t> order(declared.size(), unbound_input);
    for (std::size_t g = 0; g < given.size(); ++g) {
        const named_tensor& input = given[g];
        std::size_t index = 0;
        while (index < declared.size() && declared[index].name != input.name)
            ++index;
        if (index == declared.size()) {
            throw error(message("program::run: there is no input named '", input.name,
                                "' (inputs: ", input_names(declared), ")"));
        }
        const io_info& expected = declared[index];
        if (expected.resident) {
            throw error(message("program::run: input '", input.name,
                                "' is resident: update it with program::write_input, not run()"));
        }
        if (order[index] != unbound_input)
            throw error(message("program::run: input '", input.name, "' is given twice"));
        order[index] = g;
        if (!(input.tensor.shape() == expected.shape)) {
            throw shape_error(message("program::run: input '", input.name, "' has shape ",
                                      input.tensor.shape(), ", expected ", expected.shape));
        }
        if (is_floating(input.tensor.type()) != is_floating(expected.type)) {
            throw type_error(message(
                "program::run: input '", input.name, "' is ", dtype_name(input.tensor.type()), ", expected ",
                dtype_name(expected.type),
                is_floating(expected.type) ? " (or another floating type)" : " (or another integer type)"));
        }
    }
    for (std::size_t i = 0; i < declared.size(); ++i) {
        if (order[i] == unbound_input && !declared[i].resident)
            throw error(message("program::run: input '", declared[i].name, "' is missing"));
    }
    return order;
}

ANVIL_INLINE void mark_resident(std::vector<io_info>& declared, std::span<const std::string> resident) {
    for (std::size_t r = 0; r < resident.size(); ++r) {
        const std::string& name = resident[r];
        const auto it = std::find_if(declared.begin(), declared.end(),
                                     [&](const io_info& input) { return input.name == name; });
        if (it == declared.end()) {
            throw error(message("compile: resident input '", name,
                                "' is not an input of the graph (inputs: ", input_names(declared), ")"));
        }
        if (it->resident) throw error(message("compile: resident input '", name, "' is listed twice"));
        it->resident = true;
    }
}

ANVIL_INLINE std::size_t find_resident(std::span<const io_info> declared, std::string_view name,
                                       std::string_view what) {
    const auto it = std::find_if(declared.begin(), declared.end(),
                                 [&](const io_info& input) { return input.name == name; });
    if (it == declared.end()) {
        throw error(message(what, ": there is no input named '", name,
                            "' (resident inputs: ", input_names(declared, true), ")"));
    }
    if (!it->resident) {
        throw error(message(what, ": input '", name,
                            "' is not resident: it is given to run() (name it in compile_options::"
                            "resident_inputs to keep it bound to the program)"));
    }
    return static_cast<std::size_t>(it - declared.begin());
}

ANVIL_INLINE std::vector<std::size_t> write_region::run_starts() const {
    std::vector<std::size_t> starts;
    const std::size_t length = run_length();
    if (length == 0 || element_count() == 0) return starts;
    starts.reserve(element_count() / length);
    std::vector<std::size_t> index(extent.size(), 0);  // within the box; the last axis stays 0
    for (;;) {
        std::size_t flat = 0;
        for (std::size_t d = 0; d < shape.size(); ++d)
            flat = flat * shape[d] + offset[d] + index[d];
        starts.push_back(flat);
        std::size_t d = extent.empty() ? 0 : extent.size() - 1;
        while (d > 0 && ++index[d - 1] == extent[d - 1])
            index[--d] = 0;
        if (d == 0) return starts;
    }
}

ANVIL_INLINE write_region check_write(std::span<const io_info> declared, std::string_view name,
                                      std::span<const std::int64_t> offsets, const host_tensor& part) {
    constexpr std::string_view what = "program::write_input";
    write_region region;
    region.input = find_resident(declared, name, what);
    const io_info& input = declared[region.input];
    const dims& shape = part.shape();
    const std::size_t rank = input.shape.rank();
    if (shape.rank() != rank) {
        throw shape_error(message(what, ": part ", shape, " for input '", name, "' ", input.shape,
                                  " has rank ", shape.rank(), ", expected ", rank));
    }
    if (offsets.size() != rank) {
        throw shape_error(message(what, ": ", offsets.size(), " offsets for input '", name, "' ", input.shape,
                                  " of rank ", rank));
    }
    for (std::size_t d = 0; d < rank; ++d) {
        if (offsets[d] < 0 || offsets[d] > input.shape[d] || shape[d] > input.shape[d] - offsets[d]) {
            throw shape_error(message(what, ": part ", shape, " at offset ", offsets[d], " of axis ", d,
                                      " is outside input '", name, "' ", input.shape, " (positions [",
                                      offsets[d], ", ", offsets[d] + shape[d], ") of 0 to ", input.shape[d],
                                      ")"));
        }
        region.shape.push_back(static_cast<std::size_t>(input.shape[d]));
        region.offset.push_back(static_cast<std::size_t>(offsets[d]));
        region.extent.push_back(static_cast<std::size_t>(shape[d]));
    }
    if (is_floating(part.type()) != is_floating(input.type)) {
        throw type_error(
            message(what, ": the part for input '", name, "' is ", dtype_name(part.type()), ", expected ",
                    dtype_name(input.type),
                    is_floating(input.type) ? " (or another floating type)" : " (or another integer type)"));
    }
    return region;
}

ANVIL_INLINE std::vector<std::int64_t> axis_offsets(std::span<const io_info> declared, std::string_view name,
                                                    std::int64_t axis, std::int64_t begin,
                                                    const host_tensor& part) {
    constexpr std::string_view what = "program::write_input";
    const io_info& input = declared[find_resident(declared, name, what)];
    const auto rank = static_cast<std::int64_t>(input.shape.rank());
    if (axis < -rank || axis >= rank) {
        throw shape_error(message(what, ": axis ", axis, " is out of range for input '", name, "' ",
                                  input.shape, " (rank ", rank, ")"));
    }
    const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    const dims& shape = part.shape();
    if (shape.rank() != input.shape.rank()) {
        throw shape_error(message(what, ": part ", shape, " for input '", name, "' ", input.shape,
                                  " has rank ", shape.rank(), ", expected ", rank));
    }
    for (std::size_t d = 0; d < shape.rank(); ++d) {
        if (d != a && shape[d] != input.shape[d]) {
            throw shape_error(message(what, ": part ", shape, " for input '", name, "' ", input.shape,
                                      " along axis ", a, ": axis ", d, " is ", shape[d], ", expected ",
                                      input.shape[d]));
        }
    }
    const std::int64_t extent = input.shape[a];
    const std::int64_t length = shape[a];
    if (begin < 0 || begin > extent || length > extent - begin) {
        throw shape_error(message(what, ": positions [", begin, ", ", begin + length, ") along axis ", a,
                                  " are outside input '", name, "' ", input.shape, " (0 to ", extent, ")"));
    }
    std::vector<std::int64_t> offsets(input.shape.rank(), 0);
    offsets[a] = begin;
    return offsets;
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE std::size_t placement_report::refused() const noexcept {
    return static_cast<std::size_t>(std::count_if(
        segments.begin(), segments.end(), [](const placement_segment& s) { return !s.refused_at.empty(); }));
}

ANVIL_INLINE void placement_journal::add(placement_report report) {
    const std::lock_guard<std::mutex> guard(mutex_);
    reports_.push_back(std::move(report));
}

ANVIL_INLINE std::vector<placement_report> placement_journal::reports() const {
    const std::lock_guard<std::mutex> guard(mutex_);
    return reports_;
}

ANVIL_INLINE placement_report detail::program_impl::placement() const {
    placement_report report;
    report.backend = "cpu";
    return report;
}

ANVIL_INLINE program::program() noexcept = default;
ANVIL_INLINE program::program(std::unique_ptr<detail::program_impl> impl) noexcept : impl_(std::move(impl)) {}
ANVIL_INLINE program::program(program&&) noexcept = default;
ANVIL_INLINE program& program::operator=(program&&) noexcept = default;
ANVIL_INLINE program::~program() = default;

ANVIL_INLINE std::vector<host_tensor> program::run(std::span<const named_tensor> inputs) {
    return checked().run(inputs);
}
ANVIL_INLINE std::vector<host_tensor> program::run(std::initializer_list<named_tensor> inputs) {
    return checked().run(std::span<const named_tensor>(inputs.begin(), inputs.size()));
}

ANVIL_INLINE void program::write_input(std::string_view name, std::int64_t axis, std::int64_t begin,
                                       const host_tensor& part) {
    detail::program_impl& impl = checked();
    impl.write_input(name, detail::axis_offsets(impl.inputs(), name, axis, begin, part), part);
}
ANVIL_INLINE void program::write_input(std::string_view name, std::span<const std::int64_t> offsets,
                                       const host_tensor& part) {
    checked().write_input(name, offsets, part);
}
ANVIL_INLINE void program::write_input(std::string_view name, std::initializer_list<std::int64_t> offsets,
                                       const host_tensor& part) {
    write_input(name, std::span<const std::int64_t>(offsets.begin(), offsets.size()), part);
}

ANVIL_INLINE host_tensor program::read_input(std::string_view name) const {
    return checked().read_input(name);
}
ANVIL_INLINE const std::vector<io_info>& program::inputs() const {
    return checked().inputs();
}
ANVIL_INLINE const std::vector<io_info>& program::outputs() const {
    return checked().outputs();
}
ANVIL_INLINE numerics_report program::numerics() const {
    return checked().numerics();
}
ANVIL_INLINE std::string program::dump() const {
    return checked().dump();
}
ANVIL_INLINE placement_report program::placement() const {
    return checked().placement();
}

ANVIL_INLINE detail::program_impl& program::checked() const {
    if (!impl_) throw error("program: this program is empty (default-constructed or moved from)");
    return *impl_;
}

}  // namespace anvil
