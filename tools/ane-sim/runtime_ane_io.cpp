// anvil's ANE simulator: a compiled program's I/O symbols as the framework describes and binds them.
// modelAttributes reports each symbol's layout (RUNTIME.md §3 "the rigorous method"; §0 #1: output symbols
// carry "@output"; §0 #8: PlaneStride, which may exceed Height * RowStride, and the batch/depth keys);
// evaluate binds the request's surfaces to symbols in alphabetical order of the MIL names and checks each
// surface against that layout (CONSTRAINTS.md "I/O surfaces").
#include <cstdint>
#include <string>
#include <vector>

#include "runtime_ane.hpp"

namespace anvil_sim {

namespace {

std::size_t element_size(element_type type) {
    return type == element_type::fp16 ? 2 : 4;
}

const char* const output_suffix = "@output";

object* live_list(const std::vector<io_tensor>& symbols, const char* suffix) {
    const rules& options = sim().options;
    std::vector<object*> entries;
    for (const io_tensor& symbol : symbols) {
        const auto plane = static_cast<std::int64_t>(plane_stride_of(symbol));
        std::vector<std::pair<std::string, object*>> keys = {
            {"Channels", make_integer(symbol.channels)},
            {"Width", make_integer(symbol.width)},
            {"Height", make_integer(symbol.height)},
            {"RowStride", make_integer(static_cast<std::int64_t>(row_stride_of(symbol)))},
            {"PlaneStride", make_integer(plane)},
            {"PlaneCount", make_integer(symbol.channels)},
            {"Interleave", make_integer(1)},
            {"Depth", make_integer(1)},
            {"DepthStride", make_integer(symbol.channels * plane)},
            {"Batches", make_integer(1)},
            {"BatchStride", make_integer(symbol.channels * plane)},
            {"Type", make_string(symbol.type == element_type::fp16 ? "Float16" : "Float32")},
        };
        if (options.live_names) {
            keys.emplace_back("Name", make_string(symbol.name + suffix));
            keys.emplace_back("Symbol", make_string(symbol.name + suffix));
        }
        entries.push_back(make_dictionary(std::move(keys)));
    }
    return make_array(std::move(entries));
}

object* symbol_names(const std::vector<io_tensor>& symbols, const char* suffix) {
    std::vector<object*> names;
    for (const io_tensor& symbol : symbols)
        names.push_back(make_string(symbol.name + suffix));
    return make_array(std::move(names));
}

object* index_array(std::size_t count) {
    std::vector<object*> indices;
    for (std::size_t i = 0; i < count; ++i)
        indices.push_back(make_integer(static_cast<std::int64_t>(i)));
    return make_array(std::move(indices));
}

}  // namespace

std::size_t row_stride_of(const io_tensor& tensor) {
    return (static_cast<std::size_t>(tensor.width) * element_size(tensor.type) + 63) / 64 * 64;
}

std::size_t plane_stride_of(const io_tensor& tensor) {
    return row_stride_of(tensor) * static_cast<std::size_t>(tensor.height) +
           static_cast<std::size_t>(sim().options.plane_stride_pad);
}

object* model_attributes_of(const mil_program& program) {
    object* status = make_dictionary({{"LiveInputList", live_list(program.inputs(), "")},
                                      {"LiveOutputList", live_list(program.outputs(), output_suffix)}});
    object* procedure =
        make_dictionary({{"ANEFModelInputSymbolIndexArray", index_array(program.inputs().size())},
                         {"ANEFModelOutputSymbolIndexArray", index_array(program.outputs().size())},
                         {"ANEFModelProcedureID", make_integer(0)}});
    object* description = make_dictionary({
        {"kANEFModelInputSymbolsArrayKey", symbol_names(program.inputs(), "")},
        {"kANEFModelOutputSymbolsArrayKey", symbol_names(program.outputs(), output_suffix)},
        {"ANEFModelProcedures", make_array({procedure})},
        {"kANEFModelProcedureNameToIDMapKey", make_dictionary({{"main", make_integer(0)}})},
    });
    return make_dictionary(
        {{"NetworkStatusList", make_array({status})}, {"ANEFModelDescription", description}});
}

std::string bind_surfaces(const array_object& wrappers, const array_object& indices,
                          const std::vector<io_tensor>& symbols, const char* kind,
                          std::vector<surface_object*>& bound) {
    bound.assign(symbols.size(), nullptr);
    for (std::size_t i = 0; i < wrappers.elements.size(); ++i) {
        auto* index = as<number_object>(indices.elements[i]);
        auto* wrapper = as<surface_wrapper_object>(wrappers.elements[i]);
        if (index == nullptr || wrapper == nullptr || !wrapper->surface->alive)
            return "bad request contents" + cite(rule::request_selector);
        std::int64_t symbol = index->integer_value;
        if (symbol < 0 || symbol >= static_cast<std::int64_t>(symbols.size()))
            return std::string(kind) + " index " + std::to_string(symbol) +
                   " is not a symbol of the program (it has " + std::to_string(symbols.size()) + " " + kind +
                   "s)" + cite(rule::symbol_order);
        auto slot = static_cast<std::size_t>(symbol);
        if (bound[slot] != nullptr)
            return std::string(kind) + " symbol " + std::to_string(symbol) + " ('" + symbols[slot].name +
                   "') is bound twice" + cite(rule::symbol_order);
        bound[slot] = wrapper->surface;
    }
    for (std::size_t i = 0; i < symbols.size(); ++i)
        if (bound[i] == nullptr)
            return std::string(kind) + " symbol " + std::to_string(i) + " ('" + symbols[i].name +
                   "') has no surface (symbols are the MIL names in alphabetical order, RUNTIME.md §3)" +
                   cite(rule::symbol_order);
    return "";
}

std::string check_surfaces(const std::vector<surface_object*>& bound, const std::vector<io_tensor>& symbols,
                           const char* kind, std::vector<surface_view>& views) {
    const rules& options = sim().options;
    for (std::size_t i = 0; i < bound.size(); ++i) {
        const surface_object& surface = *bound[i];
        const io_tensor& symbol = symbols[i];
        std::string which = std::string(kind) + " '" + symbol.name + "' (symbol " + std::to_string(i) + ")";
        std::size_t row = row_stride_of(symbol);
        std::size_t plane = plane_stride_of(symbol);
        std::size_t needed = plane * static_cast<std::size_t>(symbol.channels);
        if (surface.lock_count > 0) {
            record_violation("evaluateWithQoS: the surface of " + which +
                             " is locked; unlock surfaces before evaluate (RUNTIME.md §3 \"Locking\")" +
                             cite(rule::surface_locking));
            return "the surface of " + which + " is locked during evaluate" + cite(rule::surface_locking);
        }
        if (surface.bytes_per_row % 64 != 0)
            return "the surface of " + which + " has bytes per row " + std::to_string(surface.bytes_per_row) +
                   ", not a multiple of 64" + cite(rule::row_stride);
        if (surface.height > 1 && surface.bytes_per_row != row)
            return "the surface of " + which + " has rows " + std::to_string(surface.bytes_per_row) +
                   " bytes apart but the program reads them RowStride = round_up(Width * elemsize, 64) = " +
                   std::to_string(row) + " bytes apart (RUNTIME.md §3)" + cite(rule::row_stride);
        if (surface.alloc_size < needed) {
            const bool padded = options.plane_stride_pad > 0;
            return "the surface of " + which + " holds " + std::to_string(surface.alloc_size) +
                   " bytes; [1, " + std::to_string(symbol.channels) + ", " + std::to_string(symbol.height) +
                   ", " + std::to_string(symbol.width) +
                   "] needs Channels * PlaneStride = " + std::to_string(needed) + " bytes (RowStride " +
                   std::to_string(row) + ", PlaneStride " + std::to_string(plane) +
                   (padded
                        ? " = Height * RowStride + " + std::to_string(options.plane_stride_pad) +
                              ": read PlaneStride from modelAttributes, simulator option plane_stride_pad)" +
                              cite(rule::live_entries)
                        : ")" + cite(rule::surface_size));
        }
        if (static_cast<std::int64_t>(surface.alloc_size) < options.min_surface_bytes)
            return "the surface of " + which + " holds " + std::to_string(surface.alloc_size) +
                   " bytes, below the minimum of " + std::to_string(options.min_surface_bytes) +
                   " (RUNTIME.md §3 \"Sizes\"; simulator option min_surface_bytes)" +
                   cite(rule::surface_size);
        if (options.equal_surface_sizes && surface.alloc_size != bound[0]->alloc_size)
            return "the " + std::string(kind) + " surfaces differ in size (" +
                   std::to_string(bound[0]->alloc_size) + " and " + std::to_string(surface.alloc_size) +
                   " bytes); several " + kind +
                   "s need equal allocation sizes (RUNTIME.md §3; simulator option equal_surface_sizes)" +
                   cite(rule::equal_surface_sizes);
        views.push_back({surface.base, surface.alloc_size, row, plane});
    }
    return "";
}

std::vector<std::byte> gather_data(const surface_view& view, const io_tensor& symbol) {
    std::vector<std::byte> data;
    std::size_t row_bytes = static_cast<std::size_t>(symbol.width) * element_size(symbol.type);
    for (std::int64_t c = 0; c < symbol.channels; ++c)
        for (std::int64_t h = 0; h < symbol.height; ++h) {
            const std::byte* row = view.base + static_cast<std::size_t>(c) * view.plane_stride +
                                   static_cast<std::size_t>(h) * view.row_stride;
            data.insert(data.end(), row, row + row_bytes);
        }
    return data;
}

}  // namespace anvil_sim
