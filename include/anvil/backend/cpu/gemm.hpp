// anvil: the CPU backend's single-precision matrix product, C = A*B (+ bias) (+ C), which every matmul,
// linear layer and convolution goes through. GotoBLAS/BLIS structure: B is packed into nr-column panels and A
// into mr-row panels (converting f16 / bf16 / i8 to f32 while packing, never the whole operand at once), in
// KC x NC and MC x KC cache blocks, and a register-tiled micro-kernel (gemm_kernel.hpp) chosen at run time
// for this CPU runs over them. With up to four rows of A (decoding) and B a weight stored by rows, the
// product is dot products over the weight's rows in its own format (gemm_rows.hpp: f16, int8 and ggml blocks
// decoded in registers); with a few more rows it is a stream over B, read in place where it can be and
// prefetched a block ahead. A B of ggml blocks (a GGUF weight) is dequantised while packing. Threads take
// rectangles of C from a queue, each packing its own operands. packed_matrix packs a constant B (weights)
// once for many calls.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "anvil/backend/cpu/gemm_kernel.hpp"
#include "anvil/backend/cpu/gemm_reference.hpp"
#include "anvil/backend/cpu/gemm_rows.hpp"
#include "anvil/core/convert.hpp"
#include "anvil/core/cpu_features.hpp"
#include "anvil/core/dtype.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/thread_pool.hpp"

namespace anvil::detail {

// The kernels this machine runs, best first; the last is always the portable one. Detected once.
[[nodiscard]] inline const std::vector<gemm_isa>& available_gemm_isas() {
    static const std::vector<gemm_isa> isas = [] {
        std::vector<gemm_isa> found;
#if defined(ANVIL_DETAIL_GEMM_X86)
        const cpu_features& features = host_cpu_features();
        if (features.avx512) found.push_back(gemm_isa::avx512);
        if (features.avx2_fma) found.push_back(gemm_isa::avx2);
#elif defined(ANVIL_DETAIL_GEMM_NEON)
        found.push_back(gemm_isa::neon);
#endif
        found.push_back(gemm_isa::portable);
        return found;
    }();
    return isas;
}

[[nodiscard]] inline gemm_isa best_gemm_isa() {
    return available_gemm_isas().front();
}

// The kernel for `isa` (automatic: the best); unsupported_error if this machine cannot run it. The blocking
// was measured on Zen 3 for AVX2; the AVX-512 and NEON values follow the same cache budget, untuned.
[[nodiscard]] inline const gemm_kernel_info& gemm_kernel(gemm_isa isa) {
    static constexpr gemm_kernel_info portable =
        make_gemm_kernel_info<gemm_isa_portable>(gemm_isa::portable, 256, 128, 4096, gemm_tiles_portable);
#if defined(ANVIL_DETAIL_GEMM_X86)
    static constexpr gemm_kernel_info avx2 =
        make_gemm_kernel_info<gemm_isa_avx2>(gemm_isa::avx2, 256, 144, 4080, gemm_tiles_avx2);
    static constexpr gemm_kernel_info avx512 =
        make_gemm_kernel_info<gemm_isa_avx512>(gemm_isa::avx512, 192, 144, 4096, gemm_tiles_avx512);
#elif defined(ANVIL_DETAIL_GEMM_NEON)
    static constexpr gemm_kernel_info neon =
        make_gemm_kernel_info<gemm_isa_neon>(gemm_isa::neon, 256, 128, 4080, gemm_tiles_neon);
#endif
    const std::vector<gemm_isa>& available = available_gemm_isas();
    if (isa == gemm_isa::automatic) isa = available.front();
    if (std::find(available.begin(), available.end(), isa) == available.end()) {
        std::string names;
        for (const gemm_isa each : available)
            names += std::string(names.empty() ? "" : ", ") + gemm_isa_name(each);
        throw unsupported_error(message("gemm: the ", gemm_isa_name(isa),
                                        " kernel cannot run on this CPU (available: ", names, ")"));
    }
    switch (isa) {
#if defined(ANVIL_DETAIL_GEMM_X86)
        case gemm_isa::avx2:
            return avx2;
        case gemm_isa::avx512:
            return avx512;
#elif defined(ANVIL_DETAIL_GEMM_NEON)
        case gemm_isa::neon:
            return neon;
#endif
        default:
            return portable;
    }
}

// A float buffer aligned to a cache line that only grows.
class gemm_buffer {
public:
    [[nodiscard]] float* reserve(std::size_t count) {
        if (count > capacity_) {
            data_.reset(static_cast<float*>(::operator new (count * sizeof(float), std::align_val_t{64})));
            capacity_ = count;
        }
        return data_.get();
    }
    [[nodiscard]] const float* data() const noexcept { return data_.get(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
    struct release {
        void operator()(float* data) const noexcept { ::operator delete (data, std::align_val_t{64}); }
    };
    std::unique_ptr<float, release> data_;
    std::size_t capacity_ = 0;
};

// Packing buffers, one set per thread: pool threads live as long as the process, so they are reused.
struct gemm_workspace {
    gemm_buffer a, b, lines;
};

[[nodiscard]] inline gemm_workspace& thread_gemm_workspace() {
    thread_local gemm_workspace workspace;
    return workspace;
}

[[nodiscard]] inline std::size_t gemm_count(std::int64_t value) noexcept {
    return static_cast<std::size_t>(value);
}

// out[j] = (q[j] - zero_point) * scale for j < count, with the scale and zero point (null: 0) of each
// element (per_element, along a row of B) or of the first for all (along a column). Sixteen at a time in
// vector registers (the compiler does not vectorise this at -O2): interleaving zeros below each byte twice
// (SSE2's punpckl/h) puts it at the top of a 32-bit lane, and an arithmetic shift brings it back down
// sign-extended.
inline void gemm_dequantize(const std::int8_t* q, std::int64_t count, const float* scale,
                            const float* zero_point, bool per_element, float* out) noexcept {
    typedef float quad __attribute__((vector_size(16)));
    typedef std::int32_t int_quad __attribute__((vector_size(16)));
    typedef std::int16_t int_octet __attribute__((vector_size(16)));
    typedef std::int8_t sixteen_bytes __attribute__((vector_size(16)));
    const sixteen_bytes zero_bytes{};
    const int_octet zero_halves{};
    quad scales = quad{} + scale[0], zeros = quad{} + (zero_point != nullptr ? zero_point[0] : 0.0f);
    std::int64_t j = 0;
    for (; j + 16 <= count; j += 16) {
        sixteen_bytes raw;
        std::memcpy(&raw, q + j, sizeof raw);
        const auto low = std::bit_cast<int_octet>(
            __builtin_shufflevector(zero_bytes, raw, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23));
        const auto high = std::bit_cast<int_octet>(__builtin_shufflevector(
            zero_bytes, raw, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
        const int_quad parts[4] = {
            std::bit_cast<int_quad>(__builtin_shufflevector(zero_halves, low, 0, 8, 1, 9, 2, 10, 3, 11)),
            std::bit_cast<int_quad>(__builtin_shufflevector(zero_halves, low, 4, 12, 5, 13, 6, 14, 7, 15)),
            std::bit_cast<int_quad>(__builtin_shufflevector(zero_halves, high, 0, 8, 1, 9, 2, 10, 3, 11)),
            std::bit_cast<int_quad>(__builtin_shufflevector(zero_halves, high, 4, 12, 5, 13, 6, 14, 7, 15))};
        for (int part = 0; part < 4; ++part) {
            if (per_element) {
                std::memcpy(&scales, scale + j + 4 * part, sizeof scales);
                if (zero_point != nullptr) std::memcpy(&zeros, zero_point + j + 4 * part, sizeof zeros);
            }
            const quad values = (__builtin_convertvector(parts[part] >> 24, quad) - zeros) * scales;
            std::memcpy(out + j + 4 * part, &values, sizeof values);
        }
    }
    for (; j < count; ++j) {
        const std::int64_t at = per_element ? j : 0;
        const float zero = zero_point != nullptr ? zero_point[at] : 0.0f;
        out[j] = (static_cast<float>(q[j]) - zero) * scale[at];
    }
}

// `count` elements of one row (step = col_stride) or column (step = row_stride) as f32, starting at element
// (row, col): a pointer into the operand itself when it is aligned contiguous f32, else converted into
// `scratch`. i8 along a row is dequantised with the scale of each column; along a column with one scale.
// Values [row, row + count) of column `col` of a B of ggml blocks (row `col` of the weight), dequantised
// into `out`: whole blocks straight in, a block the range cuts through by way of a copy.
inline void gemm_block_line(const matrix_operand& operand, std::int64_t row, std::int64_t col,
                            std::int64_t count, float* out) {
    const std::optional<ggml_type_layout> layout = ggml_layout(static_cast<std::uint32_t>(operand.blocks));
    const auto block = static_cast<std::int64_t>(layout->block),
               bytes = static_cast<std::int64_t>(layout->bytes);
    const std::byte* line = static_cast<const std::byte*>(operand.data) + col * operand.block_row_bytes;
    const auto decode = [&](std::int64_t first_block, std::int64_t blocks, float* to) {
        dequantize_ggml(operand.blocks,
                        std::span<const std::byte>(line + first_block * bytes, gemm_count(blocks * bytes)),
                        std::span<float>(to, gemm_count(blocks * block)));
    };
    std::int64_t at = row;
    const std::int64_t end = row + count;
    while (at < end) {
        const std::int64_t offset = at % block;
        const std::int64_t whole = offset == 0 ? (end - at) / block : 0;
        if (whole > 0) {
            decode(at / block, whole, out + (at - row));
            at += whole * block;
            continue;
        }
        float values[256];
        decode(at / block, 1, values);
        const std::int64_t taken = std::min(block - offset, end - at);
        std::memcpy(out + (at - row), values + offset, gemm_count(taken) * sizeof(float));
        at += taken;
    }
}

[[nodiscard]] inline const float* gemm_operand_line(const matrix_operand& operand, std::int64_t row,
                                                    std::int64_t col, std::int64_t count, bool along_row,
                                                    float* scratch) {
    if (operand.has_blocks()) {
        // Only along a column: check_gemm_operand admits blocks for B, which gemm packs by columns.
        gemm_block_line(operand, row, col, count, scratch);
        return scratch;
    }
    if (operand.lut != nullptr) {
        // Palette indices: the values of the column's palette (along a row, each column's own).
        const auto* indices = static_cast<const unsigned char*>(operand.data);
        for (std::int64_t j = 0; j < count; ++j) {
            const std::int64_t r = along_row ? row : row + j, c = along_row ? col + j : col;
            scratch[j] = operand.lut[c / operand.lut_columns_per_group * operand.lut_stride +
                                     indices[r * operand.row_stride + c * operand.col_stride]];
        }
        return scratch;
    }
    const std::int64_t step = along_row ? operand.col_stride : operand.row_stride;
    const auto* bytes = static_cast<const unsigned char*>(operand.data);
    const std::int64_t first = row * operand.row_stride + col * operand.col_stride;
    const std::size_t size = dtype_size(operand.type);
    if (step == 1) {
        const unsigned char* source = bytes + first * static_cast<std::int64_t>(size);
        if (operand.type == dtype::f32 && reinterpret_cast<std::uintptr_t>(source) % alignof(float) == 0) {
            return reinterpret_cast<const float*>(source);
        }
        if (operand.type == dtype::i8) {
            gemm_dequantize(reinterpret_cast<const std::int8_t*>(source), count, operand.scale + col,
                            operand.zero_point != nullptr ? operand.zero_point + col : nullptr, along_row,
                            scratch);
        } else {
            convert_to_f32(operand.type, source, gemm_count(count), scratch);
        }
        return scratch;
    }
    for (std::int64_t j = 0; j < count; ++j) {
        scratch[j] = along_row ? gemm_operand_element(operand, row, col + j)
                               : gemm_operand_element(operand, row + j, col);
    }
    return scratch;
}

// out[p*stride + j] = columns[j][p] for j < width, p < depth: a transposed B into a panel. In 4 x 4 blocks
// through vector registers; element by element, the stores 64 bytes apart and the loads from many columns
// stalled on each other (about 5 cycles an element).
inline void gemm_transpose(const float* const* columns, std::int64_t width, std::int64_t depth, float* out,
                           std::int64_t stride) noexcept {
    typedef float quad __attribute__((vector_size(16)));
    std::int64_t j = 0;
    for (; j + 4 <= width; j += 4) {
        std::int64_t p = 0;
        for (; p + 4 <= depth; p += 4) {
            quad c0, c1, c2, c3;
            std::memcpy(&c0, columns[j] + p, sizeof(quad));
            std::memcpy(&c1, columns[j + 1] + p, sizeof(quad));
            std::memcpy(&c2, columns[j + 2] + p, sizeof(quad));
            std::memcpy(&c3, columns[j + 3] + p, sizeof(quad));
            const quad low01 = __builtin_shufflevector(c0, c1, 0, 4, 1, 5);
            const quad low23 = __builtin_shufflevector(c2, c3, 0, 4, 1, 5);
            const quad high01 = __builtin_shufflevector(c0, c1, 2, 6, 3, 7);
            const quad high23 = __builtin_shufflevector(c2, c3, 2, 6, 3, 7);
            const quad r0 = __builtin_shufflevector(low01, low23, 0, 1, 4, 5);
            const quad r1 = __builtin_shufflevector(low01, low23, 2, 3, 6, 7);
            const quad r2 = __builtin_shufflevector(high01, high23, 0, 1, 4, 5);
            const quad r3 = __builtin_shufflevector(high01, high23, 2, 3, 6, 7);
            float* row = out + p * stride + j;
            std::memcpy(row, &r0, sizeof(quad));
            std::memcpy(row + stride, &r1, sizeof(quad));
            std::memcpy(row + 2 * stride, &r2, sizeof(quad));
            std::memcpy(row + 3 * stride, &r3, sizeof(quad));
        }
        for (; p < depth; ++p) {
            for (std::int64_t jj = j; jj < j + 4; ++jj)
                out[p * stride + jj] = columns[jj][p];
        }
    }
    // A remaining pair of columns (mr = 6 leaves one in every A panel): 2 x 4 blocks, each row of the panel
    // taking two neighbours. Element by element, this pair had cost as much as the four columns before it.
    if (j + 2 <= width) {
        typedef float pair __attribute__((vector_size(8)));
        std::int64_t p = 0;
        for (; p + 4 <= depth; p += 4) {
            quad c0, c1;
            std::memcpy(&c0, columns[j] + p, sizeof(quad));
            std::memcpy(&c1, columns[j + 1] + p, sizeof(quad));
            const quad low = __builtin_shufflevector(c0, c1, 0, 4, 1, 5);
            const quad high = __builtin_shufflevector(c0, c1, 2, 6, 3, 7);
            const pair r0 = __builtin_shufflevector(low, low, 0, 1),
                       r1 = __builtin_shufflevector(low, low, 2, 3);
            const pair r2 = __builtin_shufflevector(high, high, 0, 1),
                       r3 = __builtin_shufflevector(high, high, 2, 3);
            float* row = out + p * stride + j;
            std::memcpy(row, &r0, sizeof(pair));
            std::memcpy(row + stride, &r1, sizeof(pair));
            std::memcpy(row + 2 * stride, &r2, sizeof(pair));
            std::memcpy(row + 3 * stride, &r3, sizeof(pair));
        }
        for (; p < depth; ++p) {
            out[p * stride + j] = columns[j][p];
            out[p * stride + j + 1] = columns[j + 1][p];
        }
        j += 2;
    }
    for (; j < width; ++j) {
        for (std::int64_t p = 0; p < depth; ++p)
            out[p * stride + j] = columns[j][p];
    }
}

// A[row0 : row0+rows, col0 : col0+depth] into panels of panel_rows <= mr rows, panel r at out + r*mr*depth,
// element (i, p) at + p*mr + i; rows a panel lacks are left unwritten (its kernel does not read them).
// `scratch` holds mr*depth floats.
inline void gemm_pack_a(const matrix_operand& a, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                        std::int64_t depth, std::int64_t mr, std::int64_t panel_rows, float* out,
                        float* scratch) {
    for (std::int64_t panel = 0; panel < rows; panel += panel_rows) {
        const std::int64_t height = std::min(panel_rows, rows - panel);
        float* destination = out + panel / panel_rows * mr * depth;
        if (a.col_stride == 1 || a.row_stride != 1) {
            const float* lines[16];
            for (std::int64_t i = 0; i < height; ++i) {
                lines[i] = gemm_operand_line(a, row0 + panel + i, col0, depth, true, scratch + i * depth);
            }
            gemm_transpose(lines, height, depth, destination, mr);
        } else if (a.type == dtype::f32 && reinterpret_cast<std::uintptr_t>(a.data) % alignof(float) == 0) {
            // Column-major f32 A (a transposed operand, the dW = dY^T X of training): each column of the
            // panel is `height` contiguous floats, copied here inline; a call to gemm_operand_line and to
            // memcpy for every 6 floats had cost a tenth of such a product.
            const float* column = static_cast<const float*>(a.data) + (row0 + panel) + col0 * a.col_stride;
            for (std::int64_t p = 0; p < depth; ++p, column += a.col_stride) {
                float* to = destination + p * mr;
                for (std::int64_t i = 0; i < height; ++i)
                    to[i] = column[i];
            }
        } else {
            // Column-major A of another type: each column converted as a line.
            for (std::int64_t p = 0; p < depth; ++p) {
                const float* line = gemm_operand_line(a, row0 + panel, col0 + p, height, false, scratch);
                std::memcpy(destination + p * mr, line, gemm_count(height) * sizeof(float));
            }
        }
    }
}

// Distance between packed B panels: one row more than the panel holds. Packing writes one row of B across
// all panels; at a power-of-two distance those stores would all land in one L1 set (and alias the loads
// 4 KiB apart), which made packing several times slower.
[[nodiscard]] constexpr std::int64_t gemm_panel_stride(std::int64_t depth, std::int64_t nr) noexcept {
    return (depth + 1) * nr;
}

// One row of B into the full panels it crosses; returns the columns copied. A constant size lets the
// compiler copy with vector moves instead of calling memcpy for every panel.
template <int Nr>
std::int64_t gemm_copy_row_to_panels(const float* line, std::int64_t cols, float* destination,
                                     std::int64_t panel_size) noexcept {
    std::int64_t j = 0;
    for (; j + Nr <= cols; j += Nr, destination += panel_size)
        std::memcpy(destination, line + j, Nr * sizeof(float));
    return j;
}

// B[row0 : row0+depth, col0 : col0+cols] into panels of nr columns, panel j at out + j*panel_size (see
// gemm_panel_stride), row p of it at + p*nr; the last panel is padded with zeros. `scratch` holds
// max(cols, nr*depth) floats.
inline void gemm_pack_b(const matrix_operand& b, std::int64_t row0, std::int64_t depth, std::int64_t col0,
                        std::int64_t cols, std::int64_t nr, float* out, float* scratch) {
    const std::int64_t panel_size = gemm_panel_stride(depth, nr);
    const std::int64_t edge = cols % nr;
    if (edge != 0) {
        float* last = out + (cols / nr) * panel_size;
        for (std::int64_t p = 0; p < depth; ++p) {
            std::memset(last + p * nr + edge, 0, gemm_count(nr - edge) * sizeof(float));
        }
    }
    if (!b.has_blocks() && (b.col_stride == 1 || b.row_stride != 1)) {
        for (std::int64_t p = 0; p < depth; ++p) {
            const float* line = gemm_operand_line(b, row0 + p, col0, cols, true, scratch);
            float* destination = out + p * nr;
            std::int64_t j = 0;
            switch (nr) {
                case 8:
                    j = gemm_copy_row_to_panels<8>(line, cols, destination, panel_size);
                    break;
                case 12:
                    j = gemm_copy_row_to_panels<12>(line, cols, destination, panel_size);
                    break;
                case 16:
                    j = gemm_copy_row_to_panels<16>(line, cols, destination, panel_size);
                    break;
                case 32:
                    j = gemm_copy_row_to_panels<32>(line, cols, destination, panel_size);
                    break;
                default:
                    break;
            }
            for (destination += j / nr * panel_size; j < cols; j += nr, destination += panel_size)
                std::memcpy(destination, line + j, gemm_count(std::min(nr, cols - j)) * sizeof(float));
        }
    } else {
        // Column-major B (a transposed operand, e.g. a [n, k] weight): each column is contiguous. Converted
        // 256 rows at a time, so that the converted columns are still in L1 when they are transposed.
        const float* lines[64];
        for (std::int64_t j = 0; j < cols; j += nr) {
            const std::int64_t width = std::min(nr, cols - j);
            for (std::int64_t p = 0; p < depth; p += 256) {
                const std::int64_t strip = std::min<std::int64_t>(256, depth - p);
                for (std::int64_t jj = 0; jj < width; ++jj)
                    lines[jj] =
                        gemm_operand_line(b, row0 + p, col0 + j + jj, strip, false, scratch + jj * strip);
                gemm_transpose(lines, width, strip, out + j / nr * panel_size + p * nr, nr);
            }
        }
    }
}

// A B packed once, for a constant operand reused across calls (weights): K x N in the layout of one
// kernel's blocks, so gemm skips packing B. Holds f32, whatever the source type.
class packed_matrix {
public:
    packed_matrix() = default;

    // Packs B[k, n] for the kernel `isa` (automatic: the best this CPU runs).
    packed_matrix(std::int64_t k, std::int64_t n, const matrix_operand& b, gemm_isa isa = gemm_isa::automatic)
        : kernel_(&gemm_kernel(isa)), rows_(k), cols_(n) {
        if (k < 0 || n < 0) {
            throw shape_error(message("packed_matrix: sizes must not be negative, got k=", k, ", n=", n));
        }
        check_gemm_operand("packed_matrix", "B", b, k, n, true);
        panels_ = (n + kernel_->nr - 1) / kernel_->nr;
        const std::int64_t blocks = (k + kernel_->kc - 1) / kernel_->kc;
        float* out =
            data_.reserve(std::max<std::size_t>(1, gemm_count((k + blocks) * panels_ * kernel_->nr)));
        std::vector<float> scratch(gemm_count(std::max(kernel_->kc * kernel_->nr, n)) + 1);
        for (std::int64_t row = 0; row < k; row += kernel_->kc) {
            const std::int64_t depth = std::min(kernel_->kc, k - row);
            gemm_pack_b(b, row, depth, 0, n, kernel_->nr, out + block_offset(row), scratch.data());
        }
    }

    [[nodiscard]] std::int64_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::int64_t cols() const noexcept { return cols_; }
    [[nodiscard]] gemm_isa isa() const noexcept {
        return kernel_ != nullptr ? kernel_->isa : gemm_isa::automatic;
    }
    [[nodiscard]] const gemm_kernel_info* kernel() const noexcept { return kernel_; }
    // The packed panels' storage.
    [[nodiscard]] const float* data() const noexcept { return data_.data(); }
    [[nodiscard]] std::size_t byte_size() const noexcept { return data_.capacity() * sizeof(float); }

    // The panels of rows [row, row + kc) from column `col` (a multiple of nr), gemm_panel_stride apart.
    [[nodiscard]] const float* block(std::int64_t row, std::int64_t col) const noexcept {
        const std::int64_t depth = std::min(kernel_->kc, rows_ - row);
        return data_.data() + block_offset(row) + col / kernel_->nr * gemm_panel_stride(depth, kernel_->nr);
    }

private:
    // Every full block of kc rows takes (kc + 1) * nr floats per panel.
    [[nodiscard]] std::int64_t block_offset(std::int64_t row) const noexcept {
        return row / kernel_->kc * gemm_panel_stride(kernel_->kc, kernel_->nr) * panels_;
    }

    const gemm_kernel_info* kernel_ = nullptr;
    std::int64_t rows_ = 0, cols_ = 0, panels_ = 0;
    gemm_buffer data_;
};

// Everything one product needs, shared by the threads.
struct gemm_problem {
    std::int64_t m, n, k;
    matrix_operand a, b;
    const packed_matrix* packed_b;
    float* c;
    std::int64_t ldc;
    gemm_epilogue epilogue;
    const gemm_kernel_info* kernel;
};

// Up to this many rows of A, the product is a stream over B (LLM decoding): see gemm_rectangle_skinny.
inline constexpr std::int64_t gemm_skinny_rows = 16;
// Skinny blocks of B: about this many bytes (they and the next block's prefetch share L2), at most this
// many columns, and at least this deep when there are more rows than gemm_shallow_rows (deeper blocks
// amortise each tile's load and store of C; for 1-4 rows the stream of B is all that counts).
inline constexpr std::int64_t gemm_skinny_block_bytes = 128 << 10;
inline constexpr std::int64_t gemm_skinny_max_cols = 4096;
inline constexpr std::int64_t gemm_skinny_max_depth = 1024;
inline constexpr std::int64_t gemm_skinny_min_depth = 16;
inline constexpr std::int64_t gemm_shallow_rows = 4;
inline constexpr std::int64_t gemm_prefetch_chunks = 8;

// Rows per A panel: as even as mr allows (8 rows = 4 + 4, not 6 + 2: a short panel has too few accumulators
// to keep the FMA units busy).
[[nodiscard]] inline std::int64_t gemm_panel_rows(std::int64_t rows, std::int64_t mr) noexcept {
    const std::int64_t panels = (rows + mr - 1) / mr;
    return panels > 0 ? (rows + panels - 1) / panels : mr;
}

// Part `part` of `parts` of B[rows, cols] brought into the cache, a share of its contiguous lines (pieces
// of rows, or of columns for a transposed B) each.
inline void gemm_prefetch_b(const matrix_operand& b, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                            std::int64_t cols, std::int64_t part, std::int64_t parts) noexcept {
    const bool along_rows = b.col_stride == 1;
    const std::int64_t lines = along_rows ? rows : cols;
    const auto element_size = static_cast<std::int64_t>(dtype_size(b.type));
    const std::int64_t line_bytes = (along_rows ? cols : rows) * element_size;
    const auto* bytes = static_cast<const char*>(b.data);
    for (std::int64_t line = lines * part / parts; line < lines * (part + 1) / parts; ++line) {
        const std::int64_t row = along_rows ? row0 + line : row0, col = along_rows ? col0 : col0 + line;
        const char* start = bytes + (row * b.row_stride + col * b.col_stride) * element_size;
        for (std::int64_t offset = 0; offset < line_bytes; offset += 64)
            __builtin_prefetch(start + offset);
    }
}

// Few rows of A: each element of B is used by one or two A panels, so the product streams B from memory.
// A is packed once, whole. B goes in blocks that follow its memory order: shallow blocks of whole rows, or
// narrow blocks of long columns for a transposed B. The kernel reads a block where it lies when B is aligned
// f32 with unit column stride (else the block is packed, converting), and while it runs over one block the
// next block is prefetched, so reading B overlaps the arithmetic (the hardware prefetcher alone cannot
// follow row pieces this short).
inline void gemm_rectangle_skinny(const gemm_problem& problem, std::int64_t row0, std::int64_t rows,
                                  std::int64_t col0, std::int64_t cols, gemm_workspace& workspace) {
    const gemm_kernel_info& kernel = *problem.kernel;
    const matrix_operand& b = problem.b;
    const std::int64_t k = problem.k;
    const bool in_place = !b.has_blocks() && b.type == dtype::f32 && b.col_stride == 1 &&
                          reinterpret_cast<std::uintptr_t>(b.data) % alignof(float) == 0;
    const bool prefetch = !b.has_blocks() && (b.col_stride == 1 || b.row_stride == 1);
    const auto float_size = static_cast<std::int64_t>(sizeof(float));
    std::int64_t nc = 0, kc = 0;
    // The depth blocks (kc) follow the whole product's width, not this part's: each element's sum is then
    // split at the same depths however gemm_run cut the product.
    const std::int64_t width = problem.n;
    if (!b.has_blocks() && (b.col_stride == 1 || b.row_stride != 1)) {
        nc = std::min(width, gemm_skinny_max_cols);
        kc = std::clamp(gemm_skinny_block_bytes / (nc * float_size), std::int64_t{8}, kernel.kc);
        const std::int64_t min_depth = rows <= gemm_shallow_rows ? 8 : gemm_skinny_min_depth;
        if (kc < min_depth) {
            kc = min_depth;
            nc = std::max(4 * kernel.nr, gemm_skinny_block_bytes / (kc * float_size) / kernel.nr * kernel.nr);
        }
    } else {
        kc = std::min(k, gemm_skinny_max_depth);
        nc = std::max(kernel.nr, gemm_skinny_block_bytes / (kc * float_size) / kernel.nr * kernel.nr);
    }
    nc = std::min(nc, cols);
    // Rows a multiple of 4 KiB apart all fall in one L1 set (8 ways): deeper than 8, a panel read in place
    // evicts itself (N = 1024 ran at a third of the speed of N = 1040).
    if (rows <= gemm_shallow_rows && in_place && b.row_stride * float_size % 4096 == 0)
        kc = std::min<std::int64_t>(kc, 8);
    kc = std::min(kc, k);
    const std::int64_t panel_rows = gemm_panel_rows(rows, kernel.mr);
    const std::int64_t a_panels = (rows + panel_rows - 1) / panel_rows;
    float* a_packed = workspace.a.reserve(gemm_count(a_panels * kernel.mr * k));
    // In place, only a partial last panel is packed (zero-padded): the kernel reads whole panels.
    const std::int64_t b_panels = in_place ? 1 : (nc + kernel.nr - 1) / kernel.nr;
    // In place with several A panels, one more panel: the copy the first A panel's kernel makes.
    float* b_packed = workspace.b.reserve(gemm_count((b_panels + 1) * gemm_panel_stride(kc, kernel.nr)));
    float* b_copy = in_place && rows > panel_rows ? b_packed + gemm_panel_stride(kc, kernel.nr) : nullptr;
    float* scratch = workspace.lines.reserve(gemm_count(std::max({nc, k * kernel.mr, kc * kernel.nr})));
    gemm_pack_a(problem.a, row0, rows, 0, k, kernel.mr, panel_rows, a_packed, scratch);
    const auto* b_floats = static_cast<const float*>(b.data);

    for (std::int64_t col = col0; col < col0 + cols; col += nc) {
        const std::int64_t block_cols = std::min(nc, col0 + cols - col);
        const std::int64_t full_cols = in_place ? block_cols / kernel.nr * kernel.nr : 0;
        const std::int64_t block_panels = (block_cols + kernel.nr - 1) / kernel.nr;
        for (std::int64_t depth0 = 0; depth0 < k; depth0 += kc) {
            const std::int64_t depth = std::min(kc, k - depth0);
            if (full_cols < block_cols) {
                gemm_pack_b(b, depth0, depth, col + full_cols, block_cols - full_cols, kernel.nr, b_packed,
                            scratch);
            }
            // The next block: the rows below, or the top of the next columns.
            std::int64_t next_row = depth0 + kc, next_col = col, next_cols = block_cols;
            if (next_row >= k) {
                next_row = 0;
                next_col = col + nc;
                next_cols = std::min(nc, col0 + cols - next_col);
            }
            const std::int64_t next_rows = next_cols > 0 ? std::min(kc, k - next_row) : 0;
            gemm_block_args block{};
            block.rows = rows;
            block.depth = depth;
            block.panel_rows = panel_rows;
            block.a = a_packed + depth0 * kernel.mr;
            block.a_panel_stride = kernel.mr * k;
            block.ldc = problem.ldc;
            block.load_c = depth0 > 0 || problem.epilogue.accumulate;
            const auto run = [&](std::int64_t begin, std::int64_t end, const float* panels,
                                 std::int64_t panel_stride, std::int64_t ldb) {
                if (end <= begin) return;
                block.cols = end - begin;
                block.b = panels;
                block.b_panel_stride = panel_stride;
                block.ldb = ldb;
                block.c = problem.c + row0 * problem.ldc + col + begin;
                const bool first = depth0 == 0 && problem.epilogue.bias != nullptr;
                block.bias = first ? problem.epilogue.bias + col + begin : nullptr;
                gemm_block(kernel, block);
            };
            const std::int64_t chunks = prefetch ? std::min(gemm_prefetch_chunks, block_panels) : 1;
            for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
                if (prefetch) gemm_prefetch_b(b, next_row, next_rows, next_col, next_cols, chunk, chunks);
                const std::int64_t first = block_panels * chunk / chunks * kernel.nr;
                const std::int64_t last =
                    std::min(block_panels * (chunk + 1) / chunks * kernel.nr, block_cols);
                if (in_place) {
                    block.b_copy = b_copy;
                    run(first, std::min(last, full_cols), b_floats + depth0 * b.row_stride + col + first,
                        kernel.nr, b.row_stride);
                    block.b_copy = nullptr;
                    run(std::max(first, full_cols), last, b_packed, 0, kernel.nr);
                } else {
                    const std::int64_t panel_stride = gemm_panel_stride(depth, kernel.nr);
                    run(first, last, b_packed + first / kernel.nr * panel_stride, panel_stride, kernel.nr);
                }
            }
        }
    }
}

// C[row0 : row0+rows, col0 : col0+cols] on the calling thread: Goto's loops around the micro-kernel, with
// KC x NC blocks of B (packed here, or taken from a packed_matrix) and MC x KC blocks of A.
inline void gemm_rectangle(const gemm_problem& problem, std::int64_t row0, std::int64_t rows,
                           std::int64_t col0, std::int64_t cols, gemm_workspace& workspace) {
    if (problem.m <= gemm_skinny_rows && problem.packed_b == nullptr) {
        gemm_rectangle_skinny(problem, row0, rows, col0, cols, workspace);
        return;
    }
    const gemm_kernel_info& kernel = *problem.kernel;
    const std::int64_t nc = kernel.nc, kc = kernel.kc, mc = kernel.mc;
    const std::int64_t k = problem.k;
    const std::int64_t a_rows = (std::min(mc, rows) + kernel.mr - 1) / kernel.mr * kernel.mr;
    float* a_packed = workspace.a.reserve(gemm_count(a_rows * std::min(kc, k)));
    float* b_packed = nullptr;
    if (problem.packed_b == nullptr) {
        const std::int64_t panels = (std::min(nc, cols) + kernel.nr - 1) / kernel.nr;
        b_packed = workspace.b.reserve(gemm_count(panels * gemm_panel_stride(std::min(kc, k), kernel.nr)));
    }
    float* scratch = workspace.lines.reserve(gemm_count(std::max(nc, kc * kernel.nr)));

    for (std::int64_t col = col0; col < col0 + cols; col += nc) {
        const std::int64_t block_cols = std::min(nc, col0 + cols - col);
        for (std::int64_t depth0 = 0; depth0 < k; depth0 += kc) {
            const std::int64_t depth = std::min(kc, k - depth0);
            const float* b_block = b_packed;
            if (problem.packed_b != nullptr) {
                b_block = problem.packed_b->block(depth0, col);
            } else {
                gemm_pack_b(problem.b, depth0, depth, col, block_cols, kernel.nr, b_packed, scratch);
            }
            for (std::int64_t row = row0; row < row0 + rows; row += mc) {
                const std::int64_t block_rows = std::min(mc, row0 + rows - row);
                const std::int64_t panel_rows = gemm_panel_rows(block_rows, kernel.mr);
                gemm_pack_a(problem.a, row, block_rows, depth0, depth, kernel.mr, panel_rows, a_packed,
                            scratch);
                gemm_block_args block{};
                block.rows = block_rows;
                block.cols = block_cols;
                block.depth = depth;
                block.panel_rows = panel_rows;
                block.a = a_packed;
                block.a_panel_stride = kernel.mr * depth;
                block.b = b_block;
                block.b_panel_stride = gemm_panel_stride(depth, kernel.nr);
                block.ldb = kernel.nr;
                block.c = problem.c + row * problem.ldc + col;
                block.ldc = problem.ldc;
                const bool first = depth0 == 0 && problem.epilogue.bias != nullptr;
                block.bias = first ? problem.epilogue.bias + col : nullptr;
                block.load_c = depth0 > 0 || problem.epilogue.accumulate;
                gemm_block(kernel, block);
            }
        }
    }
}

// k = 0: the product is zero, so C is the bias (or 0), or gains the bias when accumulating.
inline void gemm_without_depth(const gemm_problem& problem) {
    for (std::int64_t i = 0; i < problem.m; ++i) {
        float* row = problem.c + i * problem.ldc;
        for (std::int64_t j = 0; j < problem.n; ++j) {
            const float bias = problem.epilogue.bias != nullptr ? problem.epilogue.bias[j] : 0.0f;
            row[j] = problem.epilogue.accumulate ? row[j] + bias : bias;
        }
    }
}

// Below this many multiply-adds per thread (about 20 us of arithmetic), waking another thread costs more
// than it saves. A skinny product streams B and does a multiply-add in about four times as long.
inline constexpr double gemm_min_work_per_thread = 1 << 20;
inline constexpr double gemm_skinny_work_weight = 4;
// A product that is shared is cut into several parts per thread, claimed as threads come free: a thread that
// another process keeps off its core then holds up the product by one part, not by its whole share (issue
// 41: 256x256x256 ran at half speed on 2 threads while a busy loop held one core). Every part packs its own A
// and B, so a part stays at least this big (packing is then a few percent of the arithmetic). A skinny
// product gets one part per thread: it streams B, and cutting B's rows shorter cost more than a late thread
// does (measured on one thread, M=1 768x3072 in 2, 4 and 8 column parts ran at 0.89, 0.65 and 0.57 of one).
inline constexpr std::int64_t gemm_min_part = 96 * 96;

// Cuts [0, tiles) into `parts` ranges of whole tiles, as evenly as they go; part `part` starts at the
// returned tile.
[[nodiscard]] inline std::int64_t gemm_part_start(std::int64_t tiles, std::int64_t parts,
                                                  std::int64_t part) noexcept {
    return tiles * part / parts;
}

inline void gemm_run(const gemm_problem& problem, thread_pool* pool) {
    if (problem.m == 0 || problem.n == 0) return;
    if (problem.k == 0) {
        gemm_without_depth(problem);
        return;
    }
    const gemm_kernel_info& kernel = *problem.kernel;
    thread_pool& threads = pool != nullptr ? *pool : thread_pool::global();
    const bool skinny = problem.m <= gemm_skinny_rows && problem.packed_b == nullptr;
    const bool dot_products = problem.m <= gemm_rows_max_m && problem.packed_b == nullptr &&
                              problem.a.type == dtype::f32 && (problem.a.col_stride == 1 || problem.k <= 1);
    const double work = static_cast<double>(problem.m) * static_cast<double>(problem.n) *
                        static_cast<double>(problem.k) * (skinny ? gemm_skinny_work_weight : 1.0);
    const std::int64_t col_tiles = (problem.n + kernel.nr - 1) / kernel.nr;
    // Rows are cut only between MC-row blocks, columns between NR-column tiles: every part then runs the
    // micro-kernels the whole product would run on its elements, with the same depth blocks, so C is the
    // same bits however the product is cut (the skinny path's depth blocks follow the whole product's width
    // for the same reason) and on any number of threads.
    const std::int64_t row_blocks = skinny ? 1 : (problem.m + kernel.mc - 1) / kernel.mc;
    std::int64_t thread_count = static_cast<std::int64_t>(threads.size());
    thread_count = std::min(thread_count, static_cast<std::int64_t>(work / gemm_min_work_per_thread) + 1);
    if (dot_products) {
        if (const std::optional<weight_rows> rows = weight_rows_of(problem.b, problem.k)) {
            const gemm_rows_problem dots{problem.m,
                                         problem.n,
                                         problem.k,
                                         static_cast<const float*>(problem.a.data),
                                         problem.a.row_stride,
                                         *rows,
                                         problem.c,
                                         problem.ldc,
                                         problem.epilogue};
            gemm_rows_run(dots, kernel.isa, threads, thread_count);
            return;
        }
    }
    const std::int64_t count =
        skinny ? std::min(thread_count, col_tiles)
               : std::min({thread_count * static_cast<std::int64_t>(thread_pool::chunks_per_thread),
                           std::max<std::int64_t>(1, problem.m * problem.n / gemm_min_part),
                           row_blocks * col_tiles});
    if (thread_count <= 1 || count <= 1) {
        gemm_rectangle(problem, 0, problem.m, 0, problem.n, thread_gemm_workspace());
        return;
    }
    // A grid of split_rows x split_cols parts (about `count`). Each packs all of B for its columns and all of
    // A for its rows, so take the split that packs least: split_cols * m*k + split_rows * k*n.
    std::int64_t split_rows = 1, split_cols = std::min(count, col_tiles);
    double best = -1;
    for (std::int64_t r = 1; r <= std::min(count, row_blocks); ++r) {
        const std::int64_t c = std::min(count / r, col_tiles);
        const double packing = static_cast<double>(c) * static_cast<double>(problem.m) +
                               static_cast<double>(r) * static_cast<double>(problem.n);
        if (r * c * 4 < count * 3) continue;  // too few parts to share well
        if (best < 0 || packing < best) {
            best = packing;
            split_rows = r;
            split_cols = c;
        }
    }
    threads.parallel_for(
        0, gemm_count(split_rows * split_cols), 1, gemm_count(thread_count),
        [&](std::size_t begin, std::size_t end) {
            gemm_workspace& workspace = thread_gemm_workspace();
            for (std::size_t index = begin; index < end; ++index) {
                const auto part = static_cast<std::int64_t>(index);
                const std::int64_t r = part / split_cols, c = part % split_cols;
                const std::int64_t row0 =
                    std::min(problem.m, gemm_part_start(row_blocks, split_rows, r) * kernel.mc);
                const std::int64_t row1 =
                    std::min(problem.m, gemm_part_start(row_blocks, split_rows, r + 1) * kernel.mc);
                const std::int64_t col0 =
                    std::min(problem.n, gemm_part_start(col_tiles, split_cols, c) * kernel.nr);
                const std::int64_t col1 =
                    std::min(problem.n, gemm_part_start(col_tiles, split_cols, c + 1) * kernel.nr);
                if (row1 > row0 && col1 > col0)
                    gemm_rectangle(problem, row0, row1 - row0, col0, col1 - col0, workspace);
            }
        });
}

// C[m, n] (row stride ldc, f32) = A[m, k] * B[k, n] (+ bias) (+ C), on `pool` (thread_pool::global() when
// null), with the kernel `isa` (automatic: the best this CPU runs). C must not overlap A or B.
inline void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const matrix_operand& a,
                 const matrix_operand& b, float* c, std::int64_t ldc, const gemm_epilogue& epilogue = {},
                 thread_pool* pool = nullptr, gemm_isa isa = gemm_isa::automatic) {
    check_gemm_arguments("gemm", m, n, k, a, b, c, ldc);
    const gemm_problem problem{m, n, k, a, b, nullptr, c, ldc, epilogue, &gemm_kernel(isa)};
    gemm_run(problem, pool);
}

// The same with B packed beforehand: k and n are the packed matrix's.
inline void gemm(std::int64_t m, const matrix_operand& a, const packed_matrix& b, float* c, std::int64_t ldc,
                 const gemm_epilogue& epilogue = {}, thread_pool* pool = nullptr) {
    if (b.kernel() == nullptr) {
        throw error("gemm: the packed B is empty (default-constructed packed_matrix); pack a matrix first");
    }
    const matrix_operand no_b{b.rows() > 0 && b.cols() > 0 ? &b : nullptr, dtype::f32, b.cols(), 1};
    check_gemm_arguments("gemm", m, b.cols(), b.rows(), a, no_b, c, ldc);
    const gemm_problem problem{m, b.cols(), b.rows(), a, no_b, &b, c, ldc, epilogue, b.kernel()};
    gemm_run(problem, pool);
}

}  // namespace anvil::detail
