// anvil: the preprocessing image classifiers expect, as torchvision's tensor transforms compute it:
// ToTensor (uint8 HWC -> float CHW, times 1/255) -> Resize -> CenterCrop -> Normalize, all in float32.
// Resize follows torch.nn.functional.interpolate (align_corners=False): with antialias (torchvision's
// antialias=True, aten::_upsample_{bilinear,bicubic}2d_aa) it is PIL's separable filter — support widened by
// the downscale factor, weights normalised per output pixel, bicubic a = -0.5; without it, plain
// interpolation with clamped borders (bicubic a = -0.75). Scaling by 1/255 before the resize or after it is
// the same linear map; we scale first, as ToTensor does, so the numbers follow torchvision's order.
//
// Hugging Face image processors resize 8-bit PIL images instead, so their pixel values are rounded to whole
// levels after the resize; this float pipeline differs from them by at most ~0.5 level / 255 / std (about
// 0.01 after ImageNet normalisation) — below what changes a classifier's answer.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anvil/compilation.hpp"
#include "anvil/core/host_tensor.hpp"
#include "anvil/core/json_value.hpp"
#include "anvil/io/image.hpp"

namespace anvil {

enum class resample : std::uint8_t { nearest, bilinear, bicubic };

[[nodiscard]] constexpr std::string_view resample_name(resample filter) noexcept {
    constexpr std::array<std::string_view, 3> names = {"nearest", "bilinear", "bicubic"};
    return names[static_cast<std::size_t>(filter)];
}

// How a center crop rounds its offset (size - crop) / 2 when that is a half: torchvision's CenterCrop uses
// Python's round (half to even), Hugging Face's center_crop floor division.
enum class crop_rounding : std::uint8_t { half_to_even, down };

struct image_size {
    std::int64_t height = 0;
    std::int64_t width = 0;
    friend bool operator==(const image_size&, const image_size&) = default;
};

// torchvision's Resize(int): the shorter side becomes `shortest_edge`, the other int(shortest_edge * long /
// short) (truncated); a square stays square.
[[nodiscard]] image_size shortest_edge_size(image_size input, std::int64_t shortest_edge);

namespace detail {

// For each output position along one axis, `taps` input positions and their weights (unused taps weigh 0).
struct resample_axis {
    std::int64_t taps = 0;
    std::vector<std::int64_t> index;  // output_size * taps
    std::vector<float> weight;        // output_size * taps
};

[[nodiscard]] inline double triangle_filter(double x) noexcept {
    x = std::fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution kernel; a = -0.5 is PIL's (and torch's antialiased) choice, -0.75 torch's plain
// one.
[[nodiscard]] inline double cubic_filter(double x, double a) noexcept {
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

// The weights torch computes for interpolate(..., align_corners=False) along one axis (UpSampleKernel.cpp).
[[nodiscard]] resample_axis resample_weights(std::int64_t input, std::int64_t output, resample filter,
                                             bool antialias);

// One separable pass over planar data: `planes` planes of rows x columns, resampled along the columns (the
// contiguous axis) when `along_rows` is false, along the rows otherwise.
void resample_columns(std::span<const float> in, std::span<float> out, std::int64_t planes, std::int64_t rows,
                      std::int64_t in_columns, std::int64_t out_columns, const resample_axis& axis);

void resample_rows(std::span<const float> in, std::span<float> out, std::int64_t planes, std::int64_t in_rows,
                   std::int64_t out_rows, std::int64_t columns, const resample_axis& axis);

// Checks that `t` is an f32 [C, H, W] tensor; `what` names the caller in the message.
void require_planar_image(const host_tensor& t, std::string_view what);

// Where a center crop starts along one axis; negative when the crop is larger (torchvision pads with zeros,
// the image starting (crop - size) / 2 rounded down into the output).
[[nodiscard]] std::int64_t crop_offset(std::int64_t size, std::int64_t crop, crop_rounding rounding);

}  // namespace detail

// uint8 HWC -> f32 [C, H, W], each level times `scale` (torchvision's ToTensor for the default 1/255).
[[nodiscard]] host_tensor to_tensor(const image& img, double scale = 1.0 / 255.0);

// Resizes an f32 [C, H, W] image to `size` as torch.nn.functional.interpolate(mode, align_corners=False,
// antialias) does (see the top of this file); `antialias` has no effect on nearest. Width first, then height,
// as torch's separable kernel; an axis whose size does not change is left alone (torch does the same).
[[nodiscard]] host_tensor resize(const host_tensor& chw, image_size size, resample filter, bool antialias);

// The central `size` window of an f32 [C, H, W] image; where the crop is larger than the image, the border is
// zeros (torchvision pads, then crops).
[[nodiscard]] host_tensor center_crop(const host_tensor& chw, image_size size,
                                      crop_rounding rounding = crop_rounding::half_to_even);

// What a classifier's input pipeline does; the defaults are torchvision's ImageNet evaluation transform.
struct image_preprocessing {
    // Resize so that the shorter side has this length (aspect kept); 0 = use resize_height/width, and when
    // those are 0 as well, no resize.
    std::int64_t resize_shortest_edge = 256;
    std::int64_t resize_height = 0;  // an exact size (ViTImageProcessor's {"height", "width"})
    std::int64_t resize_width = 0;
    // timm's ResizeKeepRatio (its eval transform for a non-square input_size): scale, aspect kept, so that
    // the image covers cover_height x cover_width — by ratio = min(H / cover_height, W / cover_width), each
    // side becoming round(side / ratio) (Python's round). 0 = not this resize; set only with the others 0.
    std::int64_t cover_height = 0;
    std::int64_t cover_width = 0;
    resample filter = resample::bilinear;
    bool antialias = true;                             // torchvision's antialias=True (what PIL always does)
    std::int64_t crop_height = 224, crop_width = 224;  // center crop; 0 = none
    crop_rounding rounding = crop_rounding::half_to_even;
    double rescale_factor = 1.0 / 255.0;  // applied to the 0..255 levels
    bool normalize = true;                // (x - mean) / std per channel, after rescaling
    std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
    std::array<float, 3> std{0.229f, 0.224f, 0.225f};
    // Why this pipeline cannot preprocess an image (a setting of the model's config anvil does not
    // implement), or empty. Settings are checked when an image is preprocessed, never when a model loads: a
    // model given pixels (`classify --pixels`, `anvil export`) resizes nothing. preprocess() throws
    // unsupported_error.
    std::string refused;

    // torchvision: Resize(256) + CenterCrop(224) + ToTensor + Normalize(ImageNet mean, std).
    [[nodiscard]] static image_preprocessing imagenet() { return {}; }

    // A Hugging Face preprocessor_config.json: ViTImageProcessor, DeiTImageProcessor, ConvNextImageProcessor
    // (microsoft/resnet-*), BitImageProcessor and CLIPImageProcessor, also under their older
    // *FeatureExtractor names, with each
    // processor's defaults for absent fields. Resizes antialias (PIL always does) and crops round down, as
    // Hugging Face's center_crop. `source` names the file in messages.
    [[nodiscard]] static image_preprocessing from_json(const json::value& preprocessor_config,
                                                       std::string_view source);

    // A timm folder's config.json "pretrained_cfg" (how timm's Hub models describe their eval transform):
    // input_size [3, H, W], interpolation, crop_pct, crop_mode, mean, std, read as timm's
    // transforms_imagenet_eval does: each side's scale size is floor(side / crop_pct); a square one resizes
    // the shorter side to it (antialiased, as PIL resizes, with `interpolation`), a non-square one resizes as
    // ResizeKeepRatio does (covering the scale size, bilinear: timm passes it no interpolation), crop_mode
    // "squash" resizes to the scale size exactly; then center-crop H x W, rescale to 0..1, normalize.
    // crop_mode "border" and unknown interpolations are recorded in `refused`; malformed fields are a
    // format_error naming the field. `source` names the file in messages.
    [[nodiscard]] static image_preprocessing from_timm(const json::value& pretrained_cfg,
                                                       std::string_view source);

    // <model_folder>/preprocessor_config.json when present, else imagenet().
    [[nodiscard]] static image_preprocessing load(const std::filesystem::path& model_folder);

    // anvil::format_error naming the field when a value is out of range (negative sizes, half an exact size,
    // a zero std, a rescale factor that is not finite).
    void validate(std::string_view source = "image_preprocessing") const;

    // The size after the resize / after the crop, for an input of `input`.
    [[nodiscard]] image_size resized_size(image_size input) const;
    [[nodiscard]] image_size output_size(image_size input) const;

    // The output height and width when they do not depend on the input (a crop, or an exact resize without
    // one); 0 when they do (a shortest-edge resize without a crop, or no resize at all): use output_size
    // then.
    [[nodiscard]] std::int64_t output_height() const;
    [[nodiscard]] std::int64_t output_width() const;
};

namespace detail {

// A field of preprocessor_config.json, with the messages every field shares.
class preprocessor_fields {
public:
    preprocessor_fields(const json::value& config, std::string_view source);

    // Absent and null read the same: Hugging Face's processors fall back to their defaults for both.
    [[nodiscard]] const json::value* find(std::string_view key) const;

    [[nodiscard]] bool boolean(std::string_view key, bool fallback) const;

    [[nodiscard]] double positive_number(std::string_view key, double fallback) const;

    // image_mean / image_std: three numbers, or one for every channel (as Hugging Face accepts).
    [[nodiscard]] std::array<float, 3> three_numbers(std::string_view key,
                                                     std::array<float, 3> fallback) const;

    [[nodiscard]] resample resample_filter(resample fallback) const;

    // A size field: an integer (a square when `int_is_square`, else the shortest edge, as get_size_dict reads
    // it), {"height", "width"} or {"shortest_edge"}. Sets exactly one of the two forms.
    void size(std::string_view key, bool int_is_square, std::int64_t& shortest_edge, image_size& exact) const;

    [[noreturn]] void fail(std::string_view key, std::string_view what, const json::value& got) const;

    [[nodiscard]] std::string_view source() const noexcept { return source_; }

private:
    const json::value& config_;
    std::string_view source_;
};

// The processor family: "ViTImageProcessor" / "ViTFeatureExtractor" -> "ViT" (the "Fast" variants too).
[[nodiscard]] std::string image_processor_family(const preprocessor_fields& fields);

}  // namespace detail

// One image -> f32 [3, H, W]: ToTensor (times rescale_factor), resize, center crop, normalise.
[[nodiscard]] host_tensor preprocess(const image& img, const image_preprocessing& p);

// A batch -> f32 [N, 3, H, W]; every image must come out the same size (anvil::shape_error otherwise).
[[nodiscard]] host_tensor preprocess(std::span<const image> images, const image_preprocessing& p);

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/io/image_transforms-inl.hpp"
#endif
