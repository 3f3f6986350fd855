// anvil: image_transforms's definitions (see image_transforms.hpp; compilation.hpp says when this file is
// compiled).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json.hpp"
#include "anvil/io/image.hpp"
#include "anvil/io/image_transforms.hpp"

namespace anvil {

ANVIL_INLINE image_size shortest_edge_size(image_size input, std::int64_t shortest_edge) {
    if (input.height < 1 || input.width < 1 || shortest_edge < 1) {
        throw shape_error(detail::message("shortest_edge_size: image ", input.height, " x ", input.width,
                                          " and shortest edge ", shortest_edge, " must all be positive"));
    }
    const bool portrait = input.width <= input.height;
    const std::int64_t shorter = portrait ? input.width : input.height;
    const std::int64_t longer = portrait ? input.height : input.width;
    // Both operands are exact in double and the division is correctly rounded, like Python's int / int.
    const auto other =
        static_cast<std::int64_t>(static_cast<double>(shortest_edge * longer) / static_cast<double>(shorter));
    return portrait ? image_size{other, shortest_edge} : image_size{shortest_edge, other};
}

}  // namespace anvil

namespace anvil::detail {

ANVIL_INLINE resample_axis resample_weights(std::int64_t input, std::int64_t output, resample filter,
                                            bool antialias) {
    resample_axis axis;
    const auto out_count = static_cast<std::size_t>(output);
    const double scale = static_cast<double>(input) / static_cast<double>(output);
    const auto set = [&axis](std::int64_t i, std::int64_t k, std::int64_t index, double weight) {
        const auto at = static_cast<std::size_t>(i * axis.taps + k);
        axis.index[at] = index;
        axis.weight[at] = static_cast<float>(weight);
    };
    const auto allocate = [&](std::int64_t taps) {
        axis.taps = taps;
        axis.index.assign(out_count * static_cast<std::size_t>(taps), 0);
        axis.weight.assign(out_count * static_cast<std::size_t>(taps), 0.0f);
    };

    if (filter == resample::nearest) {
        // torch's "nearest": floor(i * scale) with the scale in float.
        allocate(1);
        const float nearest_scale = static_cast<float>(input) / static_cast<float>(output);
        for (std::int64_t i = 0; i < output; ++i) {
            const auto source = static_cast<std::int64_t>(std::floor(static_cast<float>(i) * nearest_scale));
            set(i, 0, std::min(source, input - 1), 1.0);
        }
        return axis;
    }

    if (antialias) {
        // PIL's resampling: a filter of support `half_width` (in output pixels) around each output centre.
        const double half_width = filter == resample::bilinear ? 1.0 : 2.0;
        const double support = scale >= 1.0 ? half_width * scale : half_width;
        const double inverse = scale >= 1.0 ? 1.0 / scale : 1.0;
        allocate(static_cast<std::int64_t>(std::ceil(support)) * 2 + 1);
        std::vector<double> w(static_cast<std::size_t>(axis.taps));
        for (std::int64_t i = 0; i < output; ++i) {
            const double center = scale * (static_cast<double>(i) + 0.5);
            const std::int64_t first =
                std::max<std::int64_t>(static_cast<std::int64_t>(center - support + 0.5), 0);
            const std::int64_t count = std::clamp<std::int64_t>(
                std::min<std::int64_t>(static_cast<std::int64_t>(center + support + 0.5), input) - first, 0,
                axis.taps);
            double total = 0.0;
            for (std::int64_t k = 0; k < count; ++k) {
                const double x = (static_cast<double>(k + first) - center + 0.5) * inverse;
                const double v = filter == resample::bilinear ? triangle_filter(x) : cubic_filter(x, -0.5);
                w[static_cast<std::size_t>(k)] = v;
                total += v;
            }
            for (std::int64_t k = 0; k < count; ++k) {
                set(i, k, first + k, total != 0.0 ? w[static_cast<std::size_t>(k)] / total : 0.0);
            }
            for (std::int64_t k = count; k < axis.taps; ++k)
                set(i, k, first, 0.0);
        }
        return axis;
    }

    if (filter == resample::bilinear) {
        allocate(2);
        for (std::int64_t i = 0; i < output; ++i) {
            const double source = std::max(scale * (static_cast<double>(i) + 0.5) - 0.5, 0.0);
            const auto i0 = static_cast<std::int64_t>(source);
            const std::int64_t i1 = i0 < input - 1 ? i0 + 1 : i0;
            const double lambda = source - static_cast<double>(i0);
            set(i, 0, i0, 1.0 - lambda);
            set(i, 1, i1, lambda);
        }
        return axis;
    }

    allocate(4);
    for (std::int64_t i = 0; i < output; ++i) {
        const double source = scale * (static_cast<double>(i) + 0.5) - 0.5;
        const double floor_source = std::floor(source);
        const double t = source - floor_source;
        const auto base = static_cast<std::int64_t>(floor_source);
        for (std::int64_t k = 0; k < 4; ++k) {
            const std::int64_t index = std::clamp<std::int64_t>(base - 1 + k, 0, input - 1);
            set(i, k, index, cubic_filter(t + 1.0 - static_cast<double>(k), -0.75));
        }
    }
    return axis;
}

ANVIL_INLINE void resample_columns(std::span<const float> in, std::span<float> out, std::int64_t planes,
                                   std::int64_t rows, std::int64_t in_columns, std::int64_t out_columns,
                                   const resample_axis& axis) {
    for (std::int64_t r = 0; r < planes * rows; ++r) {
        const float* source = in.data() + r * in_columns;
        float* target = out.data() + r * out_columns;
        for (std::int64_t o = 0; o < out_columns; ++o) {
            const std::int64_t* index = axis.index.data() + o * axis.taps;
            const float* weight = axis.weight.data() + o * axis.taps;
            float sum = 0.0f;
            for (std::int64_t k = 0; k < axis.taps; ++k)
                sum += weight[k] * source[index[k]];
            target[o] = sum;
        }
    }
}

ANVIL_INLINE void resample_rows(std::span<const float> in, std::span<float> out, std::int64_t planes,
                                std::int64_t in_rows, std::int64_t out_rows, std::int64_t columns,
                                const resample_axis& axis) {
    for (std::int64_t p = 0; p < planes; ++p) {
        const float* plane = in.data() + p * in_rows * columns;
        for (std::int64_t o = 0; o < out_rows; ++o) {
            float* target = out.data() + (p * out_rows + o) * columns;
            std::fill(target, target + columns, 0.0f);
            for (std::int64_t k = 0; k < axis.taps; ++k) {
                const float w = axis.weight[static_cast<std::size_t>(o * axis.taps + k)];
                if (w == 0.0f) continue;
                const float* source =
                    plane + axis.index[static_cast<std::size_t>(o * axis.taps + k)] * columns;
                for (std::int64_t c = 0; c < columns; ++c)
                    target[c] += w * source[c];
            }
        }
    }
}

ANVIL_INLINE void require_planar_image(const host_tensor& t, std::string_view what) {
    if (t.type() != dtype::f32) {
        throw type_error(detail::message(what, ": expected an f32 image tensor, got ", dtype_name(t.type())));
    }
    if (t.rank() != 3 || t.shape()[1] < 1 || t.shape()[2] < 1) {
        throw shape_error(detail::message(what,
                                          ": expected an image tensor [channels, height, width] with a ",
                                          "nonempty image, got ", t.shape()));
    }
}

ANVIL_INLINE std::int64_t crop_offset(std::int64_t size, std::int64_t crop, crop_rounding rounding) {
    if (crop > size) return -((crop - size) / 2);
    const std::int64_t difference = size - crop;
    std::int64_t offset = difference / 2;
    if (rounding == crop_rounding::half_to_even && difference % 2 == 1 && offset % 2 == 1) ++offset;
    return offset;
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE host_tensor to_tensor(const image& img, double scale) {
    if (img.width < 1 || img.height < 1 || img.channels < 1 ||
        img.pixels.size() != static_cast<std::size_t>(img.width * img.height * img.channels)) {
        throw shape_error(detail::message("to_tensor: image ", img.width, " x ", img.height, " x ",
                                          img.channels, " has ", img.pixels.size(), " bytes of pixels"));
    }
    host_tensor out(dtype::f32, dims{img.channels, img.height, img.width});
    const auto values = out.values<float>();
    const auto plane = static_cast<std::size_t>(img.width * img.height);
    const auto channels = static_cast<std::size_t>(img.channels);
    for (std::size_t p = 0; p < plane; ++p) {
        for (std::size_t c = 0; c < channels; ++c) {
            values[c * plane + p] =
                static_cast<float>(static_cast<double>(img.pixels[p * channels + c]) * scale);
        }
    }
    return out;
}

ANVIL_INLINE host_tensor resize(const host_tensor& chw, image_size size, resample filter, bool antialias) {
    detail::require_planar_image(chw, "resize");
    if (size.height < 1 || size.width < 1) {
        throw shape_error(
            detail::message("resize: the output size ", size.height, " x ", size.width, " must be positive"));
    }
    const std::int64_t channels = chw.shape()[0];
    const std::int64_t height = chw.shape()[1];
    const std::int64_t width = chw.shape()[2];
    host_tensor current = chw;
    if (size.width != width) {
        host_tensor next(dtype::f32, dims{channels, height, size.width});
        detail::resample_columns(current.values<float>(), next.values<float>(), channels, height, width,
                                 size.width, detail::resample_weights(width, size.width, filter, antialias));
        current = next;
    }
    if (size.height != height) {
        host_tensor next(dtype::f32, dims{channels, size.height, size.width});
        detail::resample_rows(current.values<float>(), next.values<float>(), channels, height, size.height,
                              size.width, detail::resample_weights(height, size.height, filter, antialias));
        current = next;
    }
    return current;
}

ANVIL_INLINE host_tensor center_crop(const host_tensor& chw, image_size size, crop_rounding rounding) {
    detail::require_planar_image(chw, "center_crop");
    if (size.height < 1 || size.width < 1) {
        throw shape_error(
            detail::message("center_crop: the crop ", size.height, " x ", size.width, " must be positive"));
    }
    const std::int64_t channels = chw.shape()[0];
    const std::int64_t height = chw.shape()[1];
    const std::int64_t width = chw.shape()[2];
    const std::int64_t top = detail::crop_offset(height, size.height, rounding);
    const std::int64_t left = detail::crop_offset(width, size.width, rounding);
    host_tensor out(dtype::f32, dims{channels, size.height, size.width});
    const auto in = chw.values<float>();
    const auto values = out.values<float>();
    const std::int64_t first_column = std::max<std::int64_t>(0, -left);
    const std::int64_t last_column = std::min(size.width, width - left);
    for (std::int64_t c = 0; c < channels; ++c) {
        for (std::int64_t y = 0; y < size.height; ++y) {
            const std::int64_t source_row = y + top;
            if (source_row < 0 || source_row >= height || first_column >= last_column) continue;
            const float* source = in.data() + (c * height + source_row) * width + left;
            float* target = values.data() + (c * size.height + y) * size.width;
            std::copy(source + first_column, source + last_column, target + first_column);
        }
    }
    return out;
}

}  // namespace anvil

namespace anvil::detail {

ANVIL_INLINE preprocessor_fields::preprocessor_fields(const json::value& config, std::string_view source)
    : config_(config), source_(source) {
    if (!config_.is_object()) throw format_error(message(source_, ": expected a JSON object"));
}

ANVIL_INLINE const json::value* preprocessor_fields::find(std::string_view key) const {
    const json::value* v = config_.find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
}

ANVIL_INLINE bool preprocessor_fields::boolean(std::string_view key, bool fallback) const {
    const json::value* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_bool()) fail(key, "must be true or false", *v);
    return v->as_bool();
}

ANVIL_INLINE double preprocessor_fields::positive_number(std::string_view key, double fallback) const {
    const json::value* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->as_double() > 0.0) || !std::isfinite(v->as_double())) {
        fail(key, "must be a positive number", *v);
    }
    return v->as_double();
}

ANVIL_INLINE std::array<float, 3> preprocessor_fields::three_numbers(std::string_view key,
                                                                     std::array<float, 3> fallback) const {
    const json::value* v = find(key);
    if (v == nullptr) return fallback;
    if (v->is_number()) {
        const auto x = static_cast<float>(v->as_double());
        return {x, x, x};
    }
    if (!v->is_array() || v->as_array().size() != 3) fail(key, "must be a list of 3 numbers", *v);
    std::array<float, 3> out{};
    for (std::size_t i = 0; i < 3; ++i) {
        const json::value& item = v->as_array()[i];
        if (!item.is_number()) fail(key, "must be a list of 3 numbers", *v);
        out[i] = static_cast<float>(item.as_double());
    }
    return out;
}

ANVIL_INLINE resample preprocessor_fields::resample_filter(resample fallback) const {
    const json::value* v = find("resample");
    if (v == nullptr) return fallback;
    if (!v->is_integer()) fail("resample", "must be a PIL resampling code (an integer)", *v);
    switch (v->as_int()) {
        case 0:
            return resample::nearest;
        case 2:
            return resample::bilinear;
        case 3:
            return resample::bicubic;
        case 1:
        case 4:
        case 5: {
            constexpr std::array<std::string_view, 6> names = {"", "Lanczos", "", "", "box", "Hamming"};
            throw unsupported_error(message(source_, ": 'resample' ", v->as_int(), " (PIL's ",
                                            names[static_cast<std::size_t>(v->as_int())],
                                            " filter) is not supported: anvil resizes with 0 (nearest), ",
                                            "2 (bilinear) or 3 (bicubic)"));
        }
        default:
            fail("resample", "must be a PIL resampling code: 0 nearest, 2 bilinear or 3 bicubic", *v);
    }
}

ANVIL_INLINE void preprocessor_fields::size(std::string_view key, bool int_is_square,
                                            std::int64_t& shortest_edge, image_size& exact) const {
    const json::value* v = find(key);
    if (v == nullptr) return;
    const auto positive = [&](const json::value& n) {
        if (!n.is_integer() || n.as_int() < 1 || n.as_int() > max_image_side) {
            fail(key, message("sizes must be integers in 1..", max_image_side), *v);
        }
        return n.as_int();
    };
    if (v->is_integer()) {
        const std::int64_t n = positive(*v);
        if (int_is_square) {
            shortest_edge = 0;
            exact = {n, n};
        } else {
            shortest_edge = n;
            exact = {};
        }
        return;
    }
    if (!v->is_object()) fail(key, "must be an integer or an object", *v);
    const json::value* height = v->find("height");
    const json::value* width = v->find("width");
    const json::value* shortest = v->find("shortest_edge");
    if (v->find("longest_edge") != nullptr) {
        throw unsupported_error(message(source_, ": '", key, "' has a 'longest_edge', which anvil does not ",
                                        "support, got ", json::dump(*v)));
    }
    if (height != nullptr && width != nullptr && shortest == nullptr) {
        shortest_edge = 0;
        exact = {positive(*height), positive(*width)};
    } else if (shortest != nullptr && height == nullptr && width == nullptr) {
        shortest_edge = positive(*shortest);
        exact = {};
    } else {
        fail(key, "must hold either 'height' and 'width' or 'shortest_edge'", *v);
    }
}

ANVIL_INLINE void preprocessor_fields::fail(std::string_view key, std::string_view what,
                                            const json::value& got) const {
    throw format_error(message(source_, ": '", key, "' ", what, ", got ", json::dump(got)));
}

ANVIL_INLINE std::string image_processor_family(const preprocessor_fields& fields) {
    for (const std::string_view key : {"image_processor_type", "feature_extractor_type"}) {
        const json::value* v = fields.find(key);
        if (v == nullptr) continue;
        if (!v->is_string()) fields.fail(key, "must be a string", *v);
        std::string name = v->as_string();
        for (const std::string_view suffix : {"ImageProcessorFast", "ImageProcessor", "FeatureExtractor"}) {
            if (name.size() > suffix.size() && name.ends_with(suffix)) {
                name.resize(name.size() - suffix.size());
                break;
            }
        }
        return name;
    }
    throw format_error(message(fields.source(),
                               ": neither 'image_processor_type' nor 'feature_extractor_type' ",
                               "says which image processor this is"));
}

}  // namespace anvil::detail

namespace anvil {

ANVIL_INLINE image_preprocessing image_preprocessing::from_timm(const json::value& pretrained_cfg,
                                                                std::string_view source) {
    const detail::preprocessor_fields fields(pretrained_cfg, source);
    image_preprocessing p;
    p.antialias = true;                        // timm's eval transforms resize PIL images
    p.rounding = crop_rounding::half_to_even;  // torchvision's CenterCrop: int(round((h - th) / 2))
    p.rescale_factor = 1.0 / 255.0;            // ToTensor
    p.normalize = true;
    std::int64_t height = 224, width = 224;
    if (const json::value* size = fields.find("input_size")) {
        const bool ok =
            size->is_array() && size->as_array().size() == 3 &&
            std::all_of(size->as_array().begin(), size->as_array().end(),
                        [](const json::value& v) { return v.is_number() && v.as_double() >= 1.0; });
        if (!ok) fields.fail("input_size", "three positive integers [channels, height, width]", *size);
        const auto& dims = size->as_array();
        if (dims[0].as_double() != 3.0) fields.fail("input_size", "3 channels", *size);
        height = static_cast<std::int64_t>(dims[1].as_double());
        width = static_cast<std::int64_t>(dims[2].as_double());
        if (height > detail::max_image_side || width > detail::max_image_side)
            fields.fail("input_size", "sides the image reader accepts", *size);
    }
    // Settings anvil does not implement are recorded, not thrown: a model given pixels resizes nothing.
    std::string mode = "center";
    if (const json::value* m = fields.find("crop_mode")) {
        if (!m->is_string()) fields.fail("crop_mode", "must be a string", *m);
        mode = m->as_string();
        if (mode != "center" && mode != "squash") {
            p.refused = detail::message(source, ": crop_mode ", json::dump(*m),
                                        " is not supported (\"center\" and \"squash\" are)");
        }
    }
    p.filter = resample::bilinear;  // timm's default
    if (const json::value* interpolation = fields.find("interpolation")) {
        const std::string name = interpolation->is_string() ? interpolation->as_string() : std::string();
        if (name == "bilinear") {
            p.filter = resample::bilinear;
        } else if (name == "bicubic") {
            p.filter = resample::bicubic;
        } else if (name == "nearest") {
            p.filter = resample::nearest;
        } else if (p.refused.empty()) {
            p.refused = detail::message(source, ": interpolation ", json::dump(*interpolation),
                                        " is not supported (bilinear, bicubic or nearest)");
        }
    }
    const double crop_pct = fields.positive_number("crop_pct", 0.875);  // timm's DEFAULT_CROP_PCT
    const auto scale_size = [&](std::int64_t side) {
        const double scaled = std::floor(static_cast<double>(side) / crop_pct);
        if (!(scaled < static_cast<double>(detail::max_image_side))) {
            throw format_error(
                detail::message(source, ": crop_pct ", crop_pct, " makes the resize ", scaled, " pixels"));
        }
        return std::max<std::int64_t>(static_cast<std::int64_t>(scaled), 1);
    };
    p.resize_shortest_edge = p.resize_height = p.resize_width = 0;
    if (mode == "squash") {
        // Each side to its scale size, the aspect not kept, then the crop.
        p.resize_height = scale_size(height);
        p.resize_width = scale_size(width);
    } else if (height == width) {
        p.resize_shortest_edge = scale_size(height);  // torchvision's Resize(int): the shorter side
    } else {
        // ResizeKeepRatio(scale_size): timm passes it no interpolation, so it is its default, bilinear.
        p.cover_height = scale_size(height);
        p.cover_width = scale_size(width);
        p.filter = resample::bilinear;
    }
    p.crop_height = height;
    p.crop_width = width;
    p.mean = fields.three_numbers("mean", {0.485f, 0.456f, 0.406f});
    p.std = fields.three_numbers("std", {0.229f, 0.224f, 0.225f});
    p.validate(source);
    return p;
}

ANVIL_INLINE image_preprocessing image_preprocessing::from_json(const json::value& preprocessor_config,
                                                                std::string_view source) {
    const detail::preprocessor_fields fields(preprocessor_config, source);
    const std::string family = detail::image_processor_family(fields);
    constexpr std::array<float, 3> imagenet_mean{0.485f, 0.456f, 0.406f};
    constexpr std::array<float, 3> imagenet_std{0.229f, 0.224f, 0.225f};
    constexpr std::array<float, 3> half{0.5f, 0.5f, 0.5f};
    constexpr std::array<float, 3> clip_mean{0.48145466f, 0.4578275f, 0.40821073f};
    constexpr std::array<float, 3> clip_std{0.26862954f, 0.26130258f, 0.27577711f};

    image_preprocessing p;
    p.antialias = true;  // PIL filters always widen when downscaling
    p.rounding = crop_rounding::down;
    std::int64_t shortest_edge = 0;
    image_size exact{};
    image_size crop{};
    bool center_crop = false;
    // The defaults of each processor's __init__ (transformers' image_processing_<family>.py).
    if (family == "ViT") {
        exact = {224, 224};
        p.filter = resample::bilinear;
        p.mean = p.std = half;
        fields.size("size", true, shortest_edge, exact);
    } else if (family == "DeiT") {
        exact = {256, 256};
        crop = {224, 224};
        center_crop = true;
        p.filter = resample::bicubic;
        p.mean = imagenet_mean;
        p.std = imagenet_std;
        fields.size("size", true, shortest_edge, exact);
    } else if (family == "Bit" || family == "CLIP") {  // BitImageProcessor is a copy of CLIPImageProcessor
        shortest_edge = 224;
        crop = {224, 224};
        center_crop = true;
        p.filter = resample::bicubic;
        p.mean = clip_mean;
        p.std = clip_std;
        fields.size("size", false, shortest_edge, exact);
    } else if (family == "ConvNext") {
        // size < 384: resize the short side to int(size / crop_pct), then crop size x size; else warp to a
        // size x size square.
        shortest_edge = 384;
        p.filter = resample::bicubic;
        p.mean = p.std = half;
        fields.size("size", false, shortest_edge, exact);
        if (shortest_edge == 0) {
            throw format_error(detail::message(source, ": ConvNextImageProcessor's 'size' must be ",
                                               "{\"shortest_edge\": N} or an integer"));
        }
        const double crop_pct = fields.positive_number("crop_pct", 224.0 / 256.0);
        if (shortest_edge < 384) {
            crop = {shortest_edge, shortest_edge};
            center_crop = true;
            const double resized = static_cast<double>(shortest_edge) / crop_pct;
            if (!(resized < static_cast<double>(detail::max_image_side))) {
                throw format_error(detail::message(source, ": 'crop_pct' ", crop_pct, " makes the resize ",
                                                   resized, " pixels"));
            }
            shortest_edge = std::max<std::int64_t>(static_cast<std::int64_t>(resized), 1);
        } else {
            exact = {shortest_edge, shortest_edge};
            shortest_edge = 0;
        }
    } else {
        throw unsupported_error(detail::message(
            source, ": image processor '", family, "' is not supported: anvil reads ViTImageProcessor, ",
            "DeiTImageProcessor, ConvNextImageProcessor, BitImageProcessor and CLIPImageProcessor configs"));
    }
    if (family == "DeiT" || family == "Bit" || family == "CLIP") {
        center_crop = fields.boolean("do_center_crop", center_crop);
        std::int64_t crop_shortest = 0;
        fields.size("crop_size", true, crop_shortest, crop);
        if (crop_shortest != 0) {
            throw format_error(
                detail::message(source, ": 'crop_size' must be {\"height\", \"width\"} or an integer"));
        }
    }
    p.filter = fields.resample_filter(p.filter);

    // ConvNext's crop belongs to its resize step: do_resize = false skips both.
    const bool do_resize = fields.boolean("do_resize", true);
    p.resize_shortest_edge = do_resize ? shortest_edge : 0;
    p.resize_height = do_resize ? exact.height : 0;
    p.resize_width = do_resize ? exact.width : 0;
    const bool crop_now = center_crop && (do_resize || family != "ConvNext");
    p.crop_height = crop_now ? crop.height : 0;
    p.crop_width = crop_now ? crop.width : 0;

    p.rescale_factor =
        fields.boolean("do_rescale", true) ? fields.positive_number("rescale_factor", 1.0 / 255.0) : 1.0;
    p.normalize = fields.boolean("do_normalize", true);
    p.mean = fields.three_numbers("image_mean", p.mean);
    p.std = fields.three_numbers("image_std", p.std);
    p.validate(source);
    return p;
}

ANVIL_INLINE image_preprocessing image_preprocessing::load(const std::filesystem::path& model_folder) {
    const std::filesystem::path path = model_folder / "preprocessor_config.json";
    if (!std::filesystem::exists(path)) return imagenet();
    return from_json(json::parse_file(path), path.string());
}

ANVIL_INLINE void image_preprocessing::validate(std::string_view source) const {
    const auto fail = [source](const auto&... parts) {
        throw format_error(detail::message(source, ": ", parts...));
    };
    const auto check_size = [&](std::string_view name, std::int64_t v) {
        if (v < 0 || v > detail::max_image_side)
            fail(name, " is ", v, ", expected 0..", detail::max_image_side);
    };
    check_size("resize_shortest_edge", resize_shortest_edge);
    check_size("resize_height", resize_height);
    check_size("resize_width", resize_width);
    check_size("crop_height", crop_height);
    check_size("crop_width", crop_width);
    if ((resize_height == 0) != (resize_width == 0)) {
        fail("resize_height ", resize_height, " and resize_width ", resize_width,
             " must both be set or both 0");
    }
    if ((crop_height == 0) != (crop_width == 0)) {
        fail("crop_height ", crop_height, " and crop_width ", crop_width, " must both be set or both 0");
    }
    check_size("cover_height", cover_height);
    check_size("cover_width", cover_width);
    if ((cover_height == 0) != (cover_width == 0)) {
        fail("cover_height ", cover_height, " and cover_width ", cover_width, " must both be set or both 0");
    }
    if (cover_height > 0 && (resize_shortest_edge > 0 || resize_height > 0)) {
        fail("cover_height and cover_width are one resize, resize_shortest_edge ", resize_shortest_edge,
             " and resize_height ", resize_height, " others: set one");
    }
    if (!std::isfinite(rescale_factor)) fail("rescale_factor ", rescale_factor, " is not finite");
    if (normalize) {
        for (std::size_t c = 0; c < 3; ++c) {
            if (!std::isfinite(mean[c])) fail("image mean ", mean[c], " is not finite");
            if (!(std[c] != 0.0f) || !std::isfinite(std[c]))
                fail("image std ", std[c], " must be finite and nonzero");
        }
    }
}

ANVIL_INLINE image_size image_preprocessing::resized_size(image_size input) const {
    if (cover_height > 0) {
        if (input.height < 1 || input.width < 1)
            throw shape_error(detail::message("resized_size: image ", input.height, " x ", input.width,
                                              " must be positive"));
        // timm's ResizeKeepRatio.get_params with longest = 0, in doubles as Python computes it; nearbyint
        // rounds half to even, as Python's round.
        const double ratio = std::min(static_cast<double>(input.height) / static_cast<double>(cover_height),
                                      static_cast<double>(input.width) / static_cast<double>(cover_width));
        const auto side = [&](std::int64_t n) {
            return std::max<std::int64_t>(
                static_cast<std::int64_t>(std::nearbyint(static_cast<double>(n) / ratio)), 1);
        };
        return {side(input.height), side(input.width)};
    }
    if (resize_shortest_edge > 0) return shortest_edge_size(input, resize_shortest_edge);
    if (resize_height > 0) return {resize_height, resize_width};
    return input;
}

ANVIL_INLINE image_size image_preprocessing::output_size(image_size input) const {
    if (crop_height > 0) return {crop_height, crop_width};
    return resized_size(input);
}

ANVIL_INLINE std::int64_t image_preprocessing::output_height() const {
    if (crop_height > 0) return crop_height;
    return resize_shortest_edge == 0 && cover_height == 0 ? resize_height : 0;
}

ANVIL_INLINE std::int64_t image_preprocessing::output_width() const {
    if (crop_width > 0) return crop_width;
    return resize_shortest_edge == 0 && cover_width == 0 ? resize_width : 0;
}

ANVIL_INLINE host_tensor preprocess(const image& img, const image_preprocessing& p) {
    if (!p.refused.empty()) throw unsupported_error(p.refused);
    p.validate();
    if (img.channels != 3) {
        throw shape_error(
            detail::message("preprocess: expected an RGB image (3 channels), got ", img.channels));
    }
    host_tensor x = to_tensor(img, p.rescale_factor);
    const image_size input{img.height, img.width};
    const image_size resized = p.resized_size(input);
    if (resized != input) x = resize(x, resized, p.filter, p.antialias);
    if (p.crop_height > 0) x = center_crop(x, {p.crop_height, p.crop_width}, p.rounding);
    if (p.normalize) {
        const auto values = x.values<float>();
        const std::size_t plane = values.size() / 3;
        for (std::size_t c = 0; c < 3; ++c) {
            for (std::size_t i = c * plane; i < (c + 1) * plane; ++i)
                values[i] = (values[i] - p.mean[c]) / p.std[c];
        }
    }
    return x;
}

ANVIL_INLINE host_tensor preprocess(std::span<const image> images, const image_preprocessing& p) {
    if (images.empty()) throw shape_error("preprocess: the batch has no images");
    std::vector<host_tensor> each;
    each.reserve(images.size());
    for (const image& img : images) {
        each.push_back(preprocess(img, p));
        if (each.back().shape() != each.front().shape()) {
            throw shape_error(
                detail::message("preprocess: image ", each.size() - 1, " (", img.width, " x ", img.height,
                                ") gives ", each.back().shape(), " but image 0 gives ", each.front().shape(),
                                "; a batch needs one size (use a crop or an ", "exact resize)"));
        }
    }
    const dims& shape = each.front().shape();
    host_tensor out(dtype::f32, dims{static_cast<std::int64_t>(images.size()), shape[0], shape[1], shape[2]});
    const auto values = out.values<float>();
    const std::size_t stride = each.front().element_count();
    for (std::size_t n = 0; n < each.size(); ++n) {
        const auto one = each[n].values<float>();
        std::copy(one.begin(), one.end(), values.begin() + static_cast<std::ptrdiff_t>(n * stride));
    }
    return out;
}

}  // namespace anvil
