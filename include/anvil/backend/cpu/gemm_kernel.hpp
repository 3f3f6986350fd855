// anvil: the GEMM micro-kernel, written once with GCC/Clang vector extensions and instantiated per
// instruction set: AVX2+FMA (8 floats), AVX-512 (16 floats), NEON (4 floats) and a portable 4-float version
// that the compiler lowers to the baseline (SSE2 on x86-64, scalar elsewhere). The x86 versions are
// functions with a target attribute, so they build without -mavx2 and are chosen at run time (gemm.hpp).
// Also the macro-kernel (gemm_block) that runs them over one cache block.
//
// Layout the kernel reads: A packed in panels of mr rows, interleaved (element (i, p) at a[p*mr + i], also
// when the panel has fewer rows); B as panels of nr columns, row p of a panel at b + p*ldb (ldb = nr when
// packed, the row stride when B is read in place). It keeps a rows x nr tile of C in registers and writes it
// once, adding the bias and the old C as asked.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace anvil::detail {

#if defined(__GNUC__) || defined(__clang__)
#define ANVIL_DETAIL_GEMM_INLINE __attribute__((always_inline)) inline
#define ANVIL_DETAIL_GEMM_UNROLL _Pragma("GCC unroll 32")
#else
#error "anvil's CPU GEMM needs GCC or Clang (vector extensions)"
#endif

#if defined(__x86_64__) || defined(__i386__)
#define ANVIL_DETAIL_GEMM_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define ANVIL_DETAIL_GEMM_NEON 1
#endif

// One instruction set: its vector type, the register tile (mr x nr), how many independent accumulators hide
// the FMA latency (pipes x latency) and how many the register file holds.
struct gemm_isa_portable {
    typedef float vec __attribute__((vector_size(16)));
    static constexpr int width = 4, mr = 4, nr = 8, min_chains = 8, max_accumulators = 8;
};

#if defined(ANVIL_DETAIL_GEMM_X86)
// 6x16: 12 accumulators + 2 B vectors + 1 broadcast of 16 ymm registers, as in BLIS's Haswell/Zen kernel.
struct gemm_isa_avx2 {
    typedef float vec __attribute__((vector_size(32)));
    static constexpr int width = 8, mr = 6, nr = 16, min_chains = 8, max_accumulators = 12;
};
// 12x32: 24 accumulators of 32 zmm registers.
struct gemm_isa_avx512 {
    typedef float vec __attribute__((vector_size(64)));
    static constexpr int width = 16, mr = 12, nr = 32, min_chains = 8, max_accumulators = 24;
};
#endif

#if defined(ANVIL_DETAIL_GEMM_NEON)
// 8x12: 24 accumulators of 32 q registers, as in BLIS's ARMv8 kernel.
struct gemm_isa_neon {
    typedef float vec __attribute__((vector_size(16)));
    static constexpr int width = 4, mr = 8, nr = 12, min_chains = 16, max_accumulators = 24;
};
#endif

// A tile of rows < mr has too few accumulators to cover the FMA latency; splitting k into `split`
// interleaved partial sums (added at the end) gives it more independent chains.
template <class Isa>
constexpr int gemm_k_split(int rows) {
    const int per_step = rows * (Isa::nr / Isa::width);
    int split = 1;
    while (split < 4 && per_step * split < Isa::min_chains && per_step * (split + 1) <= Isa::max_accumulators)
        ++split;
    return split;
}

// One call of the micro-kernel: C[rows, cols] (+)= A_panel[rows, depth] * B_panel[depth, nr], cols <= nr.
struct gemm_tile {
    std::int64_t depth;
    const float* a;
    const float* b;
    std::int64_t ldb;
    float* c;
    std::int64_t ldc;
    std::int64_t cols;
    const float* bias;  // the tile's first column's bias, or null
    bool load_c;        // add the old C (later k blocks, or accumulate)
    float* b_copy;      // CopyB kernels: B_panel is also written here, packed (depth x nr)
};

// CopyB: the kernel also stores the B panel it reads (in place, rows far apart) as a packed panel, for the
// other row panels of the same columns to read from L1 instead of from memory again.
template <class Isa, int Rows, bool CopyB>
ANVIL_DETAIL_GEMM_INLINE void gemm_micro_kernel(const gemm_tile& tile) {
    using vec = typename Isa::vec;
    constexpr int width = Isa::width;
    constexpr int vectors = Isa::nr / width;
    constexpr int split = gemm_k_split<Isa>(Rows);
    constexpr auto vector_count = static_cast<std::size_t>(vectors);

    vec acc[static_cast<std::size_t>(split)][static_cast<std::size_t>(Rows)][vector_count];
    ANVIL_DETAIL_GEMM_UNROLL for (int s = 0; s < split; ++s) {
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) acc[s][i][j] = vec{};
        }
    }
    // C is read and written once per tile, after the loop: ask for it now, so the misses overlap the loop.
    ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
        __builtin_prefetch(tile.c + i * tile.ldc, 1);
        __builtin_prefetch(tile.c + i * tile.ldc + Isa::nr - 1, 1);
    }
    const float* a = tile.a;
    const float* b = tile.b;
    float* b_copy = tile.b_copy;
    const std::int64_t ldb = tile.ldb;
    std::int64_t p = 0;
    // `acc += scalar * vector` contracts to one FMA (GCC's C++ default -ffp-contract=fast, Clang's "on").
    for (; p + split <= tile.depth; p += split) {
        ANVIL_DETAIL_GEMM_UNROLL for (int s = 0; s < split; ++s) {
            vec b_row[vector_count];
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) {
                std::memcpy(&b_row[j], b + s * ldb + j * width, sizeof(vec));
                if constexpr (CopyB) std::memcpy(b_copy + s * Isa::nr + j * width, &b_row[j], sizeof(vec));
            }
            ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
                const float a_value = a[s * Isa::mr + i];
                ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) acc[s][i][j] += a_value * b_row[j];
            }
        }
        a += split * Isa::mr;
        b += split * ldb;
        if constexpr (CopyB) b_copy += split * Isa::nr;
    }
    for (; p < tile.depth; ++p) {
        vec b_row[vector_count];
        ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) {
            std::memcpy(&b_row[j], b + j * width, sizeof(vec));
            if constexpr (CopyB) std::memcpy(b_copy + j * width, &b_row[j], sizeof(vec));
        }
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            const float a_value = a[i];
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) acc[0][i][j] += a_value * b_row[j];
        }
        a += Isa::mr;
        b += ldb;
        if constexpr (CopyB) b_copy += Isa::nr;
    }
    ANVIL_DETAIL_GEMM_UNROLL for (int s = 1; s < split; ++s) {
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) acc[0][i][j] += acc[s][i][j];
        }
    }

    if (tile.bias != nullptr) {
        vec bias[vector_count];
        if (tile.cols == Isa::nr) {
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) {
                std::memcpy(&bias[j], tile.bias + j * width, sizeof(vec));
            }
        } else {
            float padded[Isa::nr] = {};
            std::memcpy(padded, tile.bias, static_cast<std::size_t>(tile.cols) * sizeof(float));
            std::memcpy(bias, padded, sizeof padded);
        }
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) acc[0][i][j] += bias[j];
        }
    }

    if (tile.cols == Isa::nr) {
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            float* c_row = tile.c + i * tile.ldc;
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) {
                vec result = acc[0][i][j];
                if (tile.load_c) {
                    vec old;
                    std::memcpy(&old, c_row + j * width, sizeof(vec));
                    result += old;
                }
                std::memcpy(c_row + j * width, &result, sizeof(vec));
            }
        }
    } else {
        // A partial tile at the right edge of C: through a buffer, so nothing past column `cols` is touched.
        ANVIL_DETAIL_GEMM_UNROLL for (int i = 0; i < Rows; ++i) {
            float row[Isa::nr];
            ANVIL_DETAIL_GEMM_UNROLL for (int j = 0; j < vectors; ++j) {
                std::memcpy(row + j * width, &acc[0][i][j], sizeof(vec));
            }
            float* c_row = tile.c + i * tile.ldc;
            for (std::int64_t j = 0; j < tile.cols; ++j)
                c_row[j] = tile.load_c ? c_row[j] + row[j] : row[j];
        }
    }
}

// The kernels, one function per instruction set, tile height and CopyB (the bottom edge of C gets a kernel
// of its own height, not a padded one). Each is a separate function so that the register allocator sees one
// loop at a time; the x86 ones carry a target attribute and are only called where the CPU has the feature.
using gemm_tile_function = void (*)(const gemm_tile&);

// tiles[copy_b][rows - 1] for rows = 1..mr.
template <template <int, bool> class Tile, int... Rows>
constexpr auto gemm_tile_table(std::integer_sequence<int, Rows...>) {
    return std::array<std::array<gemm_tile_function, sizeof...(Rows)>, 2>{
        {{Tile<Rows + 1, false>::run...}, {Tile<Rows + 1, true>::run...}}};
}

template <int Rows, bool CopyB>
struct gemm_tile_portable {
    static void run(const gemm_tile& tile) { gemm_micro_kernel<gemm_isa_portable, Rows, CopyB>(tile); }
};
inline constexpr auto gemm_tiles_portable =
    gemm_tile_table<gemm_tile_portable>(std::make_integer_sequence<int, gemm_isa_portable::mr>{});

#if defined(ANVIL_DETAIL_GEMM_X86)
template <int Rows, bool CopyB>
struct gemm_tile_avx2 {
    __attribute__((target("avx2,fma"))) static void run(const gemm_tile& tile) {
        gemm_micro_kernel<gemm_isa_avx2, Rows, CopyB>(tile);
    }
};
inline constexpr auto gemm_tiles_avx2 =
    gemm_tile_table<gemm_tile_avx2>(std::make_integer_sequence<int, gemm_isa_avx2::mr>{});

template <int Rows, bool CopyB>
struct gemm_tile_avx512 {
    __attribute__((target("avx512f,avx2,fma"))) static void run(const gemm_tile& tile) {
        gemm_micro_kernel<gemm_isa_avx512, Rows, CopyB>(tile);
    }
};
inline constexpr auto gemm_tiles_avx512 =
    gemm_tile_table<gemm_tile_avx512>(std::make_integer_sequence<int, gemm_isa_avx512::mr>{});
#endif

#if defined(ANVIL_DETAIL_GEMM_NEON)
template <int Rows, bool CopyB>
struct gemm_tile_neon {
    static void run(const gemm_tile& tile) { gemm_micro_kernel<gemm_isa_neon, Rows, CopyB>(tile); }
};
inline constexpr auto gemm_tiles_neon =
    gemm_tile_table<gemm_tile_neon>(std::make_integer_sequence<int, gemm_isa_neon::mr>{});
#endif

// The micro-kernel versions. `automatic` picks the best this CPU runs; tests force the others.
enum class gemm_isa : unsigned char { automatic, portable, avx2, avx512, neon };

[[nodiscard]] inline const char* gemm_isa_name(gemm_isa isa) noexcept {
    switch (isa) {
        case gemm_isa::automatic:
            return "automatic";
        case gemm_isa::portable:
            return "portable";
        case gemm_isa::avx2:
            return "avx2";
        case gemm_isa::avx512:
            return "avx512";
        case gemm_isa::neon:
            return "neon";
    }
    return "unknown";
}

// One runnable kernel and its cache blocking: KC x NR B panels stay in L1 (16 KiB for AVX2), MC x KC A
// blocks in L2 (144 KiB of Zen's 512 KiB), KC x NC B blocks in L3.
struct gemm_kernel_info {
    gemm_isa isa;
    std::int64_t mr, nr, kc, mc, nc;
    const gemm_tile_function* tiles;          // tiles[r - 1] computes r rows, for r = 1..mr
    const gemm_tile_function* copying_tiles;  // the same, also copying the B panel (gemm_micro_kernel)
};

template <class Isa, std::size_t Mr>
constexpr gemm_kernel_info make_gemm_kernel_info(
    gemm_isa isa, std::int64_t kc, std::int64_t mc, std::int64_t nc,
    const std::array<std::array<gemm_tile_function, Mr>, 2>& tiles) {
    static_assert(Mr == Isa::mr, "one tile function per row count");
    return {isa,
            Isa::mr,
            Isa::nr,
            kc,
            mc / Isa::mr * Isa::mr,
            nc / Isa::nr * Isa::nr,
            tiles[0].data(),
            tiles[1].data()};
}

// One cache block: C[rows, cols] (+)= A_block * B_block, over panels of packed A (panel r at
// a + r*a_panel_stride) and of B (panel j at b + j*b_panel_stride, row p at + p*ldb).
struct gemm_block_args {
    std::int64_t rows, cols, depth;
    std::int64_t panel_rows;  // rows per A panel, at most mr
    const float* a;
    std::int64_t a_panel_stride;
    const float* b;
    std::int64_t b_panel_stride, ldb;
    float* c;
    std::int64_t ldc;
    const float* bias;  // bias of the block's first column, or null
    bool load_c;
    float* b_copy;  // B read in place with several A panels: room for one packed B panel (depth x nr)
};

// The B panel stays in L1 while the A panels stream past it from L2 (BLIS's loop order). A B panel read in
// place has its rows far apart, possibly all in one cache set: the first A panel's kernel copies it, and the
// others read the copy.
inline void gemm_block(const gemm_kernel_info& kernel, const gemm_block_args& block) {
    const bool copy = block.b_copy != nullptr && block.rows > block.panel_rows;
    for (std::int64_t col = 0; col < block.cols; col += kernel.nr) {
        gemm_tile tile{};
        tile.depth = block.depth;
        tile.b = block.b + (col / kernel.nr) * block.b_panel_stride;
        tile.ldb = block.ldb;
        tile.ldc = block.ldc;
        tile.cols = std::min(block.cols - col, kernel.nr);
        tile.bias = block.bias != nullptr ? block.bias + col : nullptr;
        tile.load_c = block.load_c;
        tile.b_copy = block.b_copy;
        for (std::int64_t row = 0; row < block.rows; row += block.panel_rows) {
            const std::int64_t rows = std::min(block.rows - row, block.panel_rows);
            tile.a = block.a + row / block.panel_rows * block.a_panel_stride;
            tile.c = block.c + row * block.ldc + col;
            if (copy && row == 0) {
                kernel.copying_tiles[rows - 1](tile);
                tile.b = block.b_copy;
                tile.ldb = kernel.nr;
            } else {
                kernel.tiles[rows - 1](tile);
            }
        }
    }
}

}  // namespace anvil::detail

#undef ANVIL_DETAIL_GEMM_INLINE
#undef ANVIL_DETAIL_GEMM_UNROLL
