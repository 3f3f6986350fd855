// anvil: the ggml types' layouts and naive dequantisers (see ggml_types.hpp; compilation.hpp says when this
// file is compiled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include "anvil/core/bfloat16.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/ggml_types.hpp"
#include "anvil/core/half.hpp"

namespace anvil {

using detail::message;

ANVIL_INLINE std::optional<ggml_type_layout> ggml_layout(std::uint32_t type) {
    switch (static_cast<ggml_type>(type)) {
        case ggml_type::F32:
            return ggml_type_layout{"F32", 1, 4, true};
        case ggml_type::F16:
            return ggml_type_layout{"F16", 1, 2, true};
        case ggml_type::BF16:
            return ggml_type_layout{"BF16", 1, 2, true};
        case ggml_type::Q4_0:
            return ggml_type_layout{"Q4_0", 32, 18, true};  // f16 d, 16 bytes of nibbles
        case ggml_type::Q4_1:
            return ggml_type_layout{"Q4_1", 32, 20, true};  // f16 d, f16 m, 16 bytes
        case ggml_type::Q5_0:
            return ggml_type_layout{"Q5_0", 32, 22, true};  // f16 d, u32 high bits, 16 bytes
        case ggml_type::Q5_1:
            return ggml_type_layout{"Q5_1", 32, 24, true};  // f16 d, f16 m, u32 high bits, 16 bytes
        case ggml_type::Q8_0:
            return ggml_type_layout{"Q8_0", 32, 34, true};  // f16 d, 32 int8
        case ggml_type::Q8_1:
            return ggml_type_layout{"Q8_1", 32, 36, false};  // f16 d, f16 s, 32 int8
        case ggml_type::Q2_K:
            return ggml_type_layout{"Q2_K", 256, 84, false};
        case ggml_type::Q3_K:
            return ggml_type_layout{"Q3_K", 256, 110, false};
        case ggml_type::Q4_K:
            return ggml_type_layout{"Q4_K", 256, 144, true};  // f16 d, dmin, 12 scale bytes, 128 bytes
        case ggml_type::Q5_K:
            return ggml_type_layout{"Q5_K", 256, 176, true};  // ... and 32 bytes of high bits
        case ggml_type::Q6_K:
            return ggml_type_layout{"Q6_K", 256, 210, true};  // 128 low, 64 high, 16 int8 scales, f16 d
        case ggml_type::Q8_K:
            return ggml_type_layout{"Q8_K", 256, 292, true};  // f32 d, 256 int8, 16 int16 sums
        case ggml_type::IQ4_NL:
            return ggml_type_layout{"IQ4_NL", 32, 18, true};  // f16 d, 16 bytes of table indices
    }
    return std::nullopt;
}

namespace detail {

inline float ggml_f16(const std::byte* at) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, at, 2);
    return static_cast<float>(half::from_bits(bits));
}

// One block of each type: `in` its bytes, `out` its values.
inline void dequantize_block(ggml_type type, const std::byte* in, float* out) {
    const auto* u = reinterpret_cast<const std::uint8_t*>(in);
    switch (type) {
        case ggml_type::F32:
            std::memcpy(out, in, 4);
            return;
        case ggml_type::F16:
            *out = ggml_f16(in);
            return;
        case ggml_type::BF16: {
            std::uint16_t bits = 0;
            std::memcpy(&bits, in, 2);
            *out = static_cast<float>(bfloat16::from_bits(bits));
            return;
        }
        case ggml_type::Q4_0: {  // x = (nibble - 8) * d; low nibbles are values 0..15, high 16..31
            const float d = ggml_f16(in);
            for (int j = 0; j < 16; ++j) {
                out[j] = static_cast<float>((u[2 + j] & 0x0F) - 8) * d;
                out[j + 16] = static_cast<float>((u[2 + j] >> 4) - 8) * d;
            }
            return;
        }
        case ggml_type::Q4_1: {  // x = nibble * d + m
            const float d = ggml_f16(in), m = ggml_f16(in + 2);
            for (int j = 0; j < 16; ++j) {
                out[j] = static_cast<float>(u[4 + j] & 0x0F) * d + m;
                out[j + 16] = static_cast<float>(u[4 + j] >> 4) * d + m;
            }
            return;
        }
        case ggml_type::Q5_0:
        case ggml_type::Q5_1: {  // a fifth bit per value from the u32 qh: bit j for value j
            const bool offset = type == ggml_type::Q5_1;
            const float d = ggml_f16(in), m = offset ? ggml_f16(in + 2) : 0.0f;
            const std::size_t at = offset ? 4 : 2;
            std::uint32_t high = 0;
            std::memcpy(&high, in + at, 4);
            const std::uint8_t* qs = u + at + 4;
            for (int j = 0; j < 16; ++j) {
                const int low = (qs[j] & 0x0F) | static_cast<int>(((high >> j) << 4) & 0x10);
                const int upper = (qs[j] >> 4) | static_cast<int>((high >> (j + 12)) & 0x10);
                if (offset) {
                    out[j] = static_cast<float>(low) * d + m;
                    out[j + 16] = static_cast<float>(upper) * d + m;
                } else {
                    out[j] = static_cast<float>(low - 16) * d;
                    out[j + 16] = static_cast<float>(upper - 16) * d;
                }
            }
            return;
        }
        case ggml_type::Q8_0: {
            const float d = ggml_f16(in);
            for (int j = 0; j < 32; ++j)
                out[j] = static_cast<float>(static_cast<std::int8_t>(u[2 + j])) * d;
            return;
        }
        case ggml_type::Q4_K:
        case ggml_type::Q5_K: {
            // 8 sub-blocks of 32: x = d * scale_j * q - dmin * min_j, q a nibble (plus a fifth bit from qh
            // for Q5_K: bit 2i of qh[l] for the low nibbles of the i-th 64, bit 2i + 1 for the high ones).
            const bool five = type == ggml_type::Q5_K;
            const float d = ggml_f16(in), dmin = ggml_f16(in + 2);
            const std::uint8_t* scales = u + 4;
            const std::uint8_t* high = u + 16;
            const std::uint8_t* qs = u + (five ? 48 : 16);
            for (int group = 0; group < 4; ++group) {
                int scale = 0, min = 0;
                ggml_scale_min_k4(2 * group, scales, scale, min);
                const float d1 = d * static_cast<float>(scale), m1 = dmin * static_cast<float>(min);
                ggml_scale_min_k4(2 * group + 1, scales, scale, min);
                const float d2 = d * static_cast<float>(scale), m2 = dmin * static_cast<float>(min);
                const std::uint8_t* q = qs + 32 * group;
                float* y = out + 64 * group;
                for (int l = 0; l < 32; ++l) {
                    const int bit_low = five && (high[l] & (1u << (2 * group))) ? 16 : 0;
                    const int bit_high = five && (high[l] & (2u << (2 * group))) ? 16 : 0;
                    y[l] = d1 * static_cast<float>((q[l] & 0xF) + bit_low) - m1;
                    y[l + 32] = d2 * static_cast<float>((q[l] >> 4) + bit_high) - m2;
                }
            }
            return;
        }
        case ggml_type::Q6_K: {
            // Two halves of 128: 6-bit q = low nibble (ql) | two bits of qh << 4, minus 32; 16 int8 scales,
            // one per 16 values.
            const std::uint8_t* ql = u;
            const std::uint8_t* qh = u + 128;
            const auto* sc = reinterpret_cast<const std::int8_t*>(u + 192);
            const float d = ggml_f16(in + 208);
            for (int half_block = 0; half_block < 2; ++half_block) {
                float* y = out + 128 * half_block;
                const std::uint8_t* l_bits = ql + 64 * half_block;
                const std::uint8_t* h_bits = qh + 32 * half_block;
                const std::int8_t* s = sc + 8 * half_block;
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = ((l_bits[l] & 0xF) | (((h_bits[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((l_bits[l + 32] & 0xF) | (((h_bits[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((l_bits[l] >> 4) | (((h_bits[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((l_bits[l + 32] >> 4) | (((h_bits[l] >> 6) & 3) << 4)) - 32;
                    y[l] = d * static_cast<float>(s[is] * q1);
                    y[l + 32] = d * static_cast<float>(s[is + 2] * q2);
                    y[l + 64] = d * static_cast<float>(s[is + 4] * q3);
                    y[l + 96] = d * static_cast<float>(s[is + 6] * q4);
                }
            }
            return;
        }
        case ggml_type::Q8_K: {
            float d = 0.0f;
            std::memcpy(&d, in, 4);
            for (int j = 0; j < 256; ++j)
                out[j] = d * static_cast<float>(static_cast<std::int8_t>(u[4 + j]));
            return;
        }
        case ggml_type::IQ4_NL: {  // a 16-entry non-linear table (ggml's kvalues_iq4nl) times d
            const float d = ggml_f16(in);
            for (int j = 0; j < 16; ++j) {
                out[j] = d * detail::ggml_iq4_nl_values[u[2 + j] & 0x0F];
                out[j + 16] = d * detail::ggml_iq4_nl_values[u[2 + j] >> 4];
            }
            return;
        }
        default:
            break;
    }
    throw unsupported_error(message("ggml: no dequantiser for ggml type ", static_cast<std::uint32_t>(type)));
}

}  // namespace detail

ANVIL_INLINE std::string ggml_type_name(ggml_type type) {
    const auto layout = ggml_layout(static_cast<std::uint32_t>(type));
    return layout ? std::string(layout->name) : message("ggml type ", static_cast<std::uint32_t>(type));
}

ANVIL_INLINE void dequantize_ggml(ggml_type type, std::span<const std::byte> bytes, std::span<float> out) {
    const auto layout = ggml_layout(static_cast<std::uint32_t>(type));
    if (!layout) throw format_error(message("ggml: unknown ggml type ", static_cast<std::uint32_t>(type)));
    if (!layout->dequantizes)
        throw unsupported_error(
            message("ggml: ggml type ", layout->name, " has no dequantiser in anvil yet"));
    if (out.size() % layout->block != 0)
        throw format_error(message("ggml: ", out.size(), " values of ", layout->name,
                                   " are not whole blocks of ", layout->block));
    const std::size_t blocks = out.size() / layout->block;
    if (bytes.size() != blocks * layout->bytes)
        throw format_error(message("ggml: ", out.size(), " values of ", layout->name, " take ",
                                   blocks * layout->bytes, " bytes; got ", bytes.size()));
    for (std::size_t b = 0; b < blocks; ++b)
        detail::dequantize_block(type, bytes.data() + b * layout->bytes, out.data() + b * layout->block);
}

}  // namespace anvil
