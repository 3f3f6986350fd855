// anvil: the CPU backend's fast elementwise kernels — unary, binary and where ops with numpy broadcasting,
// and fused_elementwise chains — plus what the other fast kernels share: a small SIMD layer on GCC/Clang
// vector extensions, vectorised exp/log/tanh/erf, and a runner that gives each thread its own slice of
// scratch.
//
// Every kernel body is a template over the vector width, always inlined into two entry points: a portable
// one (4 lanes: SSE2 or NEON, the baseline of every compiler target) and, on x86-64, an AVX2+FMA one
// (8 lanes) selected at run time from CPUID, so no -march flag is needed. Vectors are wrapped in a struct and
// passed by const reference: a bare 32-byte vector crossing a function boundary in a non-AVX function draws
// GCC's -Wpsabi warning, which no pragma silences.
//
// The transcendentals are within 2 ulp of the exact result over all of float (measured against
// double-precision libm on every 64th bit pattern: exp 0.99, log 0.79, tanh 1.32, erf 1.76 ulp; sigmoid 2 ulp
// where its result is a normal float); tests/test_cpu_kernels.cpp checks the 2 ulp bound on a sweep of every
// exponent. sin and cos call libm per lane (within 1 ulp); floor, ceil, round and sign are exact.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "anvil/backend/cpu/reference/elementwise.hpp"
#include "anvil/backend/cpu/tensor_span.hpp"
#include "anvil/core/cpu_features.hpp"
#include "anvil/core/error.hpp"
#include "anvil/core/thread_pool.hpp"
#include "anvil/graph/graph.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ANVIL_DETAIL_KERNELS_X86 1
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define ANVIL_DETAIL_KERNELS_NEON 1
#include <arm_neon.h>
#endif

// Kernel bodies must be inlined into each ISA entry point to be compiled for its instruction set.
#define ANVIL_DETAIL_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace anvil::detail::cpu {

namespace simd {

template <int W>
struct vec {
    typedef float native __attribute__((vector_size(W * sizeof(float))));
    native v;
};

template <int W>
struct mask {
    typedef std::int32_t native __attribute__((vector_size(W * sizeof(float))));
    native v;
};

// GCC 12 at -O0 sees these memcpys inlined (always_inline) into loops over register arrays and warns of a
// read "from a region of size 0" that cannot happen (-Wstringop-overread, a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> load(const float* p) {
    vec<W> r;
    std::memcpy(&r.v, p, sizeof r.v);
    return r;
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void store(float* p, const vec<W>& x) {
    std::memcpy(p, &x.v, sizeof x.v);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> splat(float x) {
    return {typename vec<W>::native{} + x};
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE mask<W> bits(const vec<W>& x) {
    return {__builtin_bit_cast(typename mask<W>::native, x.v)};
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> from_bits(const typename mask<W>::native& x) {
    return {__builtin_bit_cast(typename vec<W>::native, x)};
}

// clang-format off
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator+(const vec<W>& a, const vec<W>& b) { return {a.v + b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator-(const vec<W>& a, const vec<W>& b) { return {a.v - b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator*(const vec<W>& a, const vec<W>& b) { return {a.v * b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator/(const vec<W>& a, const vec<W>& b) { return {a.v / b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator+(const vec<W>& a, float b) { return {a.v + b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator-(const vec<W>& a, float b) { return {a.v - b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator*(const vec<W>& a, float b) { return {a.v * b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator+(float a, const vec<W>& b) { return {a + b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator-(float a, const vec<W>& b) { return {a - b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator*(float a, const vec<W>& b) { return {a * b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator/(float a, const vec<W>& b) { return {a / b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE vec<W> operator-(const vec<W>& a) { return {-a.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator<(const vec<W>& a, const vec<W>& b) { return {a.v < b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator<(const vec<W>& a, float b) { return {a.v < b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator>(const vec<W>& a, float b) { return {a.v > b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator<=(const vec<W>& a, float b) { return {a.v <= b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator==(const vec<W>& a, float b) { return {a.v == b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator!=(const vec<W>& a, float b) { return {a.v != b}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator<=(const vec<W>& a, const vec<W>& b) { return {a.v <= b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator==(const vec<W>& a, const vec<W>& b) { return {a.v == b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator|(const mask<W>& a, const mask<W>& b) { return {a.v | b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator&(const mask<W>& a, const mask<W>& b) { return {a.v & b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> operator^(const mask<W>& a, const mask<W>& b) { return {a.v ^ b.v}; }
template <int W> ANVIL_DETAIL_ALWAYS_INLINE mask<W> is_nan(const vec<W>& a) { return {a.v != a.v}; }
// clang-format on

// m ? a : b per lane.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> select(const mask<W>& m, const vec<W>& a, const vec<W>& b) {
    return from_bits<W>((m.v & bits(a).v) | (~m.v & bits(b).v));
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> select(const mask<W>& m, float a, const vec<W>& b) {
    return select(m, splat<W>(a), b);
}
// a < b ? b : a, and a NaN in `a` stays; the callers that must propagate NaN from either side check both.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> max(const vec<W>& a, const vec<W>& b) {
    return select(a < b, b, a);
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> min(const vec<W>& a, const vec<W>& b) {
    return select(b < a, b, a);
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> abs(const vec<W>& x) {
    return from_bits<W>(bits(x).v & 0x7fffffff);
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> copy_sign(const vec<W>& magnitude, const vec<W>& sign) {
    return from_bits<W>((bits(magnitude).v & 0x7fffffff) | (bits(sign).v & std::int32_t{-0x7fffffff - 1}));
}

// Round to nearest even for |x| < 2^22: adding and removing 1.5 * 2^23 leaves no fraction bits.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> round(const vec<W>& x) {
    return (x + 12582912.0f) - 12582912.0f;
}

// 1 where m is true, else 0: how the CPU holds a boolean.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> ones_where(const mask<W>& m) {
    return from_bits<W>(m.v & bits(splat<W>(1.0f)).v);
}

// Round to nearest even over all of float: |x| + 2^23 - 2^23 rounds |x| < 2^23 to an integer (in the default
// rounding mode, which the vector units use), and x's sign goes back on, so -0.3 gives -0 as rint does.
// Larger magnitudes, infinities and NaN are already whole (or NaN) and pass unchanged.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> round_half_even(const vec<W>& x) {
    const vec<W> magnitude = abs(x);
    const vec<W> rounded = copy_sign((magnitude + 8388608.0f) - 8388608.0f, x);
    return select(magnitude < 8388608.0f, rounded, x);
}

// floor and ceil from the nearest integer, stepped down (up) when it overshoots x; the sign of x goes back
// on, so floor(-0) and ceil(-0.5) are -0 as in libm.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> floor(const vec<W>& x) {
    const vec<W> r = round_half_even(x);
    return copy_sign(r - ones_where(x < r), x);
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> ceil(const vec<W>& x) {
    const vec<W> r = round_half_even(x);
    return copy_sign(r + ones_where(r < x), x);
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE float horizontal_sum(const vec<W>& x) {
    float total = 0.0f;
    for (int i = 0; i < W; ++i)
        total += x.v[i];
    return total;
}
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE float horizontal_max(const vec<W>& x) {
    float largest = x.v[0];
    for (int i = 1; i < W; ++i)
        largest = x.v[i] > largest ? x.v[i] : largest;
    return largest;
}

// Correctly rounded, like std::sqrt: SSE's and NEON's square roots are, 4 lanes at a time.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> sqrt(const vec<W>& x) {
    vec<W> r;
#if defined(ANVIL_DETAIL_KERNELS_X86)
    for (int i = 0; i < W; i += 4) {
        __m128 part;
        std::memcpy(&part, reinterpret_cast<const float*>(&x.v) + i, sizeof part);
        part = _mm_sqrt_ps(part);
        std::memcpy(reinterpret_cast<float*>(&r.v) + i, &part, sizeof part);
    }
#elif defined(ANVIL_DETAIL_KERNELS_NEON)
    for (int i = 0; i < W; i += 4) {
        float32x4_t part = vld1q_f32(reinterpret_cast<const float*>(&x.v) + i);
        vst1q_f32(reinterpret_cast<float*>(&r.v) + i, vsqrtq_f32(part));
    }
#else
    for (int i = 0; i < W; ++i)
        r.v[i] = std::sqrt(x.v[i]);
#endif
    return r;
}

// e^x (Cephes expf): x = n ln2 + r with ln2 split in two (Cody-Waite), e^r by a degree-6 polynomial, and 2^n
// applied as two factors 2^(n/2) so that n from -150 to 128 needs no special case (overflow gives inf, deep
// underflow 0, denormal results round once).
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> exp(const vec<W>& x) {
    using ints = typename mask<W>::native;
    const mask<W> nan = is_nan(x);
    const vec<W> clamped = select(nan, 0.0f, min(max(x, splat<W>(-104.0f)), splat<W>(88.7228394f)));
    const vec<W> n = round(clamped * 1.44269504088896341f);
    vec<W> r = clamped - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vec<W> p = splat<W>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const ints whole = __builtin_convertvector(n.v, ints);
    const ints first = whole >> 1;
    const ints second = whole - first;
    const vec<W> result = p * from_bits<W>((first + 127) << 23) * from_bits<W>((second + 127) << 23);
    return select(nan, x, result);
}

// ln x (Cephes logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln(m) by a degree-9 polynomial in m - 1.
// Denormals are scaled into the normal range first; 0 gives -inf, negatives NaN, inf inf.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> log(const vec<W>& x) {
    using ints = typename mask<W>::native;
    const mask<W> tiny = x < std::numeric_limits<float>::min();
    const vec<W> scaled = select(tiny, x * 8388608.0f, x);  // 2^23
    const ints raw = bits(scaled).v;
    const ints exponent = ((raw >> 23) & 0xff) - 126 - (tiny.v & 23);
    vec<W> m = from_bits<W>((raw & 0x007fffff) | 0x3f000000);  // [0.5, 1)
    const mask<W> low = m < 0.707106781186547524f;
    const vec<W> e = vec<W>{__builtin_convertvector(exponent, typename vec<W>::native)} -
                     from_bits<W>(low.v & bits(splat<W>(1.0f)).v);
    m = select(low, m + m - 1.0f, m - 1.0f);
    const vec<W> z = m * m;
    vec<W> y = splat<W>(7.0376836292e-2f);
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y = y + e * -2.12194440e-4f;
    y = y - z * 0.5f;
    vec<W> result = m + y + e * 0.693359375f;
    result = select(x == std::numeric_limits<float>::infinity(), x, result);
    result = select(x == 0.0f, -std::numeric_limits<float>::infinity(), result);
    return select((x < 0.0f) | is_nan(x), std::numeric_limits<float>::quiet_NaN(), result);
}

// tanh (Cephes tanhf): an odd polynomial below 0.625, 1 - 2 / (e^2|x| + 1) above, with x's sign.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> tanh(const vec<W>& x) {
    const vec<W> z = x * x;
    vec<W> p = splat<W>(-5.70498872745e-3f);
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const vec<W> small = p * z * x + x;
    const vec<W> magnitude = abs(x);
    const vec<W> large = copy_sign(1.0f - 2.0f / (exp(magnitude + magnitude) + 1.0f), x);
    return select(magnitude < 0.625f, small, large);
}

// erf: erf(x) = x + x P(x^2) below 0.921875, 1 - e^(-x^2) Q(|x| - 2.4234375) above (Q fitted to
// erfc(x) e^(x^2) up to 3.925, past which erf rounds to 1 in float), with x's sign. Fitted for this file by
// weighted least squares on Chebyshev nodes; 1 ulp and 1.7 ulp on the two pieces.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> erf(const vec<W>& x) {
    const vec<W> z = x * x;
    vec<W> p = splat<W>(8.410998998e-05f);
    p = p * z - 8.153776289e-04f;
    p = p * z + 5.202175584e-03f;
    p = p * z - 2.685995772e-02f;
    p = p * z + 1.128370836e-01f;
    p = p * z - 3.761263490e-01f;
    p = p * z + 1.283791661e-01f;
    const vec<W> small = x + x * p;
    const vec<W> magnitude = min(abs(x), splat<W>(3.925f));
    const vec<W> u = magnitude - 2.4234375f;
    vec<W> q = splat<W>(1.870257051e-06f);
    q = q * u - 7.824553904e-06f;
    q = q * u + 1.835893636e-05f;
    q = q * u - 6.321698311e-05f;
    q = q * u + 2.454415662e-04f;
    q = q * u - 8.445225540e-04f;
    q = q * u + 2.767934231e-03f;
    q = q * u - 8.799574338e-03f;
    q = q * u + 2.686577663e-02f;
    q = q * u - 7.831151783e-02f;
    q = q * u + 2.166484594e-01f;
    const vec<W> large = copy_sign(1.0f - q * exp(-(magnitude * magnitude)), x);
    return select((abs(x) < 0.921875f) | is_nan(x), small, large);
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE vec<W> sigmoid(const vec<W>& x) {
    return 1.0f / (1.0f + exp(-x));
}

}  // namespace simd

// Which SIMD entry points run: AVX2+FMA where the CPU (and OS) has it, else the portable ones. Tests set
// force_portable_kernels to compare both on one machine; it is read at each kernel call.
inline bool force_portable_kernels = false;

[[nodiscard]] inline bool use_avx2_kernels() noexcept {
#if defined(ANVIL_DETAIL_KERNELS_X86)
    return host_cpu_features().avx2_fma && !force_portable_kernels;
#else
    return false;
#endif
}

// Runs body(scratch, begin, end) over chunks of [0, count) of `grain` items, each thread with its own
// `per_thread` floats of scratch taken from `workspace` (as many threads as the workspace has room for, at
// most the pool's). Chunks are handed out one at a time, so uneven work (causal attention) balances.
template <class Body>
void run_with_scratch(thread_pool& pool, std::span<float> workspace, std::size_t per_thread,
                      std::size_t count, std::size_t grain, std::string_view what, Body&& body) {
    if (count == 0) return;
    const std::size_t room = per_thread == 0 ? pool.size() : workspace.size() / per_thread;
    if (room == 0) {
        throw error(message(what, ": the workspace holds ", workspace.size(),
                            " floats, but one thread needs ", per_thread, " (size it with ", what,
                            "_workspace(node) per thread)"));
    }
    grain = std::max<std::size_t>(grain, 1);
    const std::size_t chunks = (count + grain - 1) / grain;
    const std::size_t threads = std::min({room, pool.size(), chunks});
    std::atomic<std::size_t> next{0};
    pool.parallel_for(0, threads, 1, [&](std::size_t first, std::size_t last) {
        for (std::size_t slot = first; slot < last; ++slot) {
            float* scratch = per_thread == 0 ? nullptr : workspace.data() + slot * per_thread;
            for (;;) {
                const std::size_t chunk = next.fetch_add(1, std::memory_order_relaxed);
                if (chunk >= chunks) break;
                body(scratch, chunk * grain, std::min(count, (chunk + 1) * grain));
            }
        }
    });
}

// numpy broadcasting of operands to an output, with the output's size-1 axes dropped and neighbouring axes
// merged wherever every operand allows: a bias [N] on [M, N] stays two axes, same shapes become one. Every
// operand then reads its innermost axis with stride 1 or 0.
struct broadcast_layout {
    std::size_t rank = 1;
    std::array<std::int64_t, max_rank> extents{};
    std::vector<stride_array> strides;  // per operand, over the merged axes
    std::vector<bool> contiguous;       // the operand has the output's shape: element i is at i
};

[[nodiscard]] inline broadcast_layout make_broadcast_layout(const dims& out,
                                                            std::span<const const_tensor_span> operands) {
    broadcast_layout layout;
    std::vector<stride_array> full;
    for (const auto& operand : operands) {
        full.push_back(broadcast_strides(operand.shape, out));
        layout.contiguous.push_back(operand.shape.element_count() == out.element_count());
    }
    layout.strides.assign(operands.size(), stride_array{});
    std::size_t rank = 0;
    for (std::size_t axis = 0; axis < out.rank(); ++axis) {
        if (out[axis] == 1) continue;
        bool merges = rank > 0;
        for (std::size_t i = 0; merges && i < operands.size(); ++i) {
            merges = layout.strides[i][rank - 1] == full[i][axis] * out[axis];
        }
        if (merges) {
            layout.extents[rank - 1] *= out[axis];
            for (std::size_t i = 0; i < operands.size(); ++i)
                layout.strides[i][rank - 1] = full[i][axis];
        } else {
            layout.extents[rank] = out[axis];
            for (std::size_t i = 0; i < operands.size(); ++i)
                layout.strides[i][rank] = full[i][axis];
            ++rank;
        }
    }
    if (rank == 0) layout.extents[rank++] = 1;
    layout.rank = rank;
    return layout;
}

// Elements [first, first + count) of operand i as broadcast to the output: a pointer into its data when they
// lie there in order, else gathered into `tile` (runs copied, broadcast values repeated).
[[nodiscard]] inline const float* read_broadcast(const broadcast_layout& layout, std::size_t i,
                                                 const float* data, std::int64_t first, std::int64_t count,
                                                 float* tile) {
    if (layout.contiguous[i]) return data + first;
    const std::size_t inner_axis = layout.rank - 1;
    const stride_array& strides = layout.strides[i];
    index_array index{};
    std::int64_t rest = first, offset = 0;
    for (std::size_t axis = layout.rank; axis-- > 0;) {
        index[axis] = rest % layout.extents[axis];
        rest /= layout.extents[axis];
        offset += index[axis] * strides[axis];
    }
    const std::int64_t inner = layout.extents[inner_axis];
    const bool repeated = strides[inner_axis] == 0;
    if (!repeated && index[inner_axis] + count <= inner) return data + offset;
    for (std::int64_t done = 0; done < count;) {
        const std::int64_t piece = std::min(count - done, inner - index[inner_axis]);
        if (repeated) {
            std::fill(tile + done, tile + done + piece, data[offset]);
        } else {
            std::memcpy(tile + done, data + offset, static_cast<std::size_t>(piece) * sizeof(float));
            offset += piece;
        }
        done += piece;
        index[inner_axis] += piece;
        if (index[inner_axis] < inner) continue;
        offset -= inner * strides[inner_axis];
        index[inner_axis] = 0;
        for (std::size_t axis = inner_axis; axis-- > 0;) {
            offset += strides[axis];
            if (++index[axis] < layout.extents[axis]) break;
            offset -= layout.extents[axis] * strides[axis];
            index[axis] = 0;
        }
    }
    return tile;
}

namespace elementwise {

[[nodiscard]] constexpr int arity_of(op kind) noexcept {
    switch (info(kind).category) {
        case op_category::unary:
            return 1;
        case op_category::binary:
            return 2;
        case op_category::ternary:
            return 3;
        default:
            return 0;
    }
}

// The ops as vector functions of their operands (alpha, beta: clamp's bounds), each computing exactly the
// formula of apply_unary / apply_binary / apply_ternary in reference/elementwise.hpp.
template <op Kind, int W>
ANVIL_DETAIL_ALWAYS_INLINE simd::vec<W> apply(const simd::vec<W>& a, const simd::vec<W>& b,
                                              const simd::vec<W>& c, float alpha, float beta) {
    using namespace simd;
    if constexpr (Kind == op::relu) return select(a <= 0.0f, 0.0f, a);  // NaN passes
    if constexpr (Kind == op::gelu) return 0.5f * a * (1.0f + erf(a * 0.70710678118654752f));
    if constexpr (Kind == op::gelu_tanh) {
        const vec<W> inner = 0.79788456080286536f * (a + 0.044715f * a * a * a);
        return 0.5f * a * (1.0f + tanh(inner));
    }
    if constexpr (Kind == op::quick_gelu) return a / (1.0f + exp(-1.702f * a));
    if constexpr (Kind == op::silu) return a / (1.0f + exp(-a));
    if constexpr (Kind == op::sigmoid) return sigmoid(a);
    if constexpr (Kind == op::tanh) return tanh(a);
    if constexpr (Kind == op::exp) return exp(a);
    if constexpr (Kind == op::log) return log(a);
    if constexpr (Kind == op::sqrt) return sqrt(a);
    if constexpr (Kind == op::rsqrt) return 1.0f / sqrt(a);
    if constexpr (Kind == op::abs) return abs(a);
    if constexpr (Kind == op::neg) return -a;
    if constexpr (Kind == op::erf) return erf(a);
    if constexpr (Kind == op::floor) return floor(a);
    if constexpr (Kind == op::ceil) return ceil(a);
    if constexpr (Kind == op::round) return round_half_even(a);
    if constexpr (Kind == op::sign) return select(is_nan(a), a, ones_where(a > 0.0f) - ones_where(a < 0.0f));
    // sin and cos per lane through libm's sinf and cosf (within 1 ulp on glibc and Apple's libm), like pow: a
    // vector polynomial would need Payne-Hanek argument reduction to stay within a few ulp for large |x|.
    if constexpr (Kind == op::sin || Kind == op::cos) {
        vec<W> r;
        for (int i = 0; i < W; ++i)
            r.v[i] = Kind == op::sin ? std::sin(a.v[i]) : std::cos(a.v[i]);
        return r;
    }
    if constexpr (Kind == op::logical_not) return ones_where(a == 0.0f);
    if constexpr (Kind == op::clamp) {
        const vec<W> low = select(a < alpha, alpha, a);
        return select(low > beta, beta, low);
    }
    if constexpr (Kind == op::add) return a + b;
    if constexpr (Kind == op::sub) return a - b;
    if constexpr (Kind == op::mul) return a * b;
    if constexpr (Kind == op::div) return a / b;
    if constexpr (Kind == op::pow) {
        vec<W> r;
        for (int i = 0; i < W; ++i)
            r.v[i] = std::pow(a.v[i], b.v[i]);
        return r;
    }
    // a + b is NaN when either is: torch.maximum and torch.minimum propagate NaN.
    if constexpr (Kind == op::maximum) return select(is_nan(a) | is_nan(b), a + b, select(a < b, b, a));
    if constexpr (Kind == op::minimum) return select(is_nan(a) | is_nan(b), a + b, select(b < a, b, a));
    // Booleans as 1 and 0; NaN compares false, and counts as true in the logical ops.
    if constexpr (Kind == op::equal) return ones_where(a == b);
    if constexpr (Kind == op::less) return ones_where(a < b);
    if constexpr (Kind == op::less_equal) return ones_where(a <= b);
    if constexpr (Kind == op::greater) return ones_where(b < a);
    if constexpr (Kind == op::greater_equal) return ones_where(b <= a);
    if constexpr (Kind == op::logical_and) return ones_where((a != 0.0f) & (b != 0.0f));
    if constexpr (Kind == op::logical_or) return ones_where((a != 0.0f) | (b != 0.0f));
    if constexpr (Kind == op::logical_xor) return ones_where((a != 0.0f) ^ (b != 0.0f));
    if constexpr (Kind == op::where) return select(a != 0.0f, b, c);  // NaN counts as true
}

// One op over `count` elements of its operands.
template <op Kind, int W>
ANVIL_DETAIL_ALWAYS_INLINE void run_op(const fused_step& step, const float* const* operands, float* out,
                                       std::int64_t count) {
    constexpr int arity = arity_of(Kind);
    const float* a = operands[0];
    const float* b = arity > 1 ? operands[1] : operands[0];
    const float* c = arity > 2 ? operands[2] : operands[0];
    std::int64_t i = 0;
    for (; i + W <= count; i += W) {
        simd::store(out + i, apply<Kind, W>(simd::load<W>(a + i), simd::load<W>(b + i), simd::load<W>(c + i),
                                            step.alpha, step.beta));
    }
    if (i == count) return;
    // The tail through zero-padded vectors: every op is defined on the padding, which is never stored.
    float padded[3][static_cast<std::size_t>(W)] = {};
    const auto rest = static_cast<std::size_t>(count - i) * sizeof(float);
    std::memcpy(padded[0], a + i, rest);
    std::memcpy(padded[1], b + i, rest);
    std::memcpy(padded[2], c + i, rest);
    float result[static_cast<std::size_t>(W)];
    simd::store(result, apply<Kind, W>(simd::load<W>(padded[0]), simd::load<W>(padded[1]),
                                       simd::load<W>(padded[2]), step.alpha, step.beta));
    std::memcpy(out + i, result, rest);
}

template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void run_step(const fused_step& step, const float* const* operands, float* out,
                                         std::int64_t count) {
    switch (step.kind) {
            // clang-format off
    case op::relu: return run_op<op::relu, W>(step, operands, out, count);
    case op::gelu: return run_op<op::gelu, W>(step, operands, out, count);
    case op::gelu_tanh: return run_op<op::gelu_tanh, W>(step, operands, out, count);
    case op::quick_gelu: return run_op<op::quick_gelu, W>(step, operands, out, count);
    case op::silu: return run_op<op::silu, W>(step, operands, out, count);
    case op::sigmoid: return run_op<op::sigmoid, W>(step, operands, out, count);
    case op::tanh: return run_op<op::tanh, W>(step, operands, out, count);
    case op::exp: return run_op<op::exp, W>(step, operands, out, count);
    case op::log: return run_op<op::log, W>(step, operands, out, count);
    case op::sqrt: return run_op<op::sqrt, W>(step, operands, out, count);
    case op::rsqrt: return run_op<op::rsqrt, W>(step, operands, out, count);
    case op::abs: return run_op<op::abs, W>(step, operands, out, count);
    case op::neg: return run_op<op::neg, W>(step, operands, out, count);
    case op::erf: return run_op<op::erf, W>(step, operands, out, count);
    case op::floor: return run_op<op::floor, W>(step, operands, out, count);
    case op::ceil: return run_op<op::ceil, W>(step, operands, out, count);
    case op::round: return run_op<op::round, W>(step, operands, out, count);
    case op::sign: return run_op<op::sign, W>(step, operands, out, count);
    case op::sin: return run_op<op::sin, W>(step, operands, out, count);
    case op::cos: return run_op<op::cos, W>(step, operands, out, count);
    case op::logical_not: return run_op<op::logical_not, W>(step, operands, out, count);
    case op::clamp: return run_op<op::clamp, W>(step, operands, out, count);
    case op::add: return run_op<op::add, W>(step, operands, out, count);
    case op::sub: return run_op<op::sub, W>(step, operands, out, count);
    case op::mul: return run_op<op::mul, W>(step, operands, out, count);
    case op::div: return run_op<op::div, W>(step, operands, out, count);
    case op::pow: return run_op<op::pow, W>(step, operands, out, count);
    case op::maximum: return run_op<op::maximum, W>(step, operands, out, count);
    case op::minimum: return run_op<op::minimum, W>(step, operands, out, count);
    case op::equal: return run_op<op::equal, W>(step, operands, out, count);
    case op::less: return run_op<op::less, W>(step, operands, out, count);
    case op::less_equal: return run_op<op::less_equal, W>(step, operands, out, count);
    case op::greater: return run_op<op::greater, W>(step, operands, out, count);
    case op::greater_equal: return run_op<op::greater_equal, W>(step, operands, out, count);
    case op::logical_and: return run_op<op::logical_and, W>(step, operands, out, count);
    case op::logical_or: return run_op<op::logical_or, W>(step, operands, out, count);
    case op::logical_xor: return run_op<op::logical_xor, W>(step, operands, out, count);
    case op::where: return run_op<op::where, W>(step, operands, out, count);
        // clang-format on
        default:
            return;  // the chain was checked before any loop ran
    }
}

inline constexpr std::int64_t tile = 256;            // elements per tile: a chain's live tiles stay in L1
inline constexpr std::size_t tiles_per_chunk = 128;  // 32K elements (~10 us) per hand-out to a thread
inline constexpr std::size_t stack_tiles = 8;        // chains needing more scratch use the workspace
inline constexpr std::size_t no_tile = static_cast<std::size_t>(-1);

// A chain of steps over a register file of tiles: a value frees its tile after its last read, so a chain
// needs one tile per value alive at once, plus one per broadcast input to gather into. The last step writes
// the output directly.
struct chain_plan {
    std::span<const fused_step> steps;
    std::size_t input_count = 0;
    std::vector<std::size_t> tile_of;  // per value (inputs, then steps); no_tile: read in place / the output
    std::size_t tile_count = 0;
};

[[nodiscard]] inline chain_plan make_chain_plan(std::span<const fused_step> steps,
                                                const broadcast_layout& layout) {
    chain_plan plan;
    plan.steps = steps;
    plan.input_count = layout.contiguous.size();
    const std::size_t values = plan.input_count + steps.size();
    plan.tile_of.assign(values, no_tile);
    std::vector<std::size_t> last_read(values, 0);
    for (std::size_t s = 0; s < steps.size(); ++s) {
        last_read[plan.input_count + s] = s;
        for (int k = 0; k < arity_of(steps[s].kind); ++k)
            last_read[steps[s].operands[static_cast<std::size_t>(k)]] = s;
    }
    for (std::size_t i = 0; i < plan.input_count; ++i) {
        if (!layout.contiguous[i]) plan.tile_of[i] = plan.tile_count++;
    }
    std::vector<bool> released(values, false);
    std::vector<std::size_t> free_tiles;
    const auto release = [&](std::size_t value) {
        if (value < plan.input_count || released[value] || plan.tile_of[value] == no_tile) return;
        released[value] = true;
        free_tiles.push_back(plan.tile_of[value]);
    };
    for (std::size_t s = 0; s + 1 < steps.size(); ++s) {
        // A step may overwrite an operand it reads for the last time: each element is read before written.
        for (int k = 0; k < arity_of(steps[s].kind); ++k) {
            const std::size_t operand = steps[s].operands[static_cast<std::size_t>(k)];
            if (last_read[operand] == s) release(operand);
        }
        const std::size_t value = plan.input_count + s;
        if (free_tiles.empty()) {
            plan.tile_of[value] = plan.tile_count++;
        } else {
            plan.tile_of[value] = free_tiles.back();
            free_tiles.pop_back();
        }
        if (last_read[value] == s) release(value);  // never read
    }
    return plan;
}

// Output elements [first, last) of the chain, tile by tile; `scratch` holds plan.tile_count tiles.
template <int W>
ANVIL_DETAIL_ALWAYS_INLINE void run_chain(const chain_plan& plan, const broadcast_layout& layout,
                                          std::span<const const_tensor_span> inputs, float* out,
                                          std::int64_t first, std::int64_t last, float* scratch,
                                          const float** values) {
    const std::size_t step_count = plan.steps.size();
    // A one-element input (a chain's constants: GELU's derivative has five) is the same whole tile
    // everywhere: filled once here rather than for every tile. No step writes an input's tile.
    const auto splat = [&](std::size_t i) {
        return plan.tile_of[i] != no_tile && inputs[i].shape.element_count() == 1;
    };
    for (std::size_t i = 0; i < plan.input_count; ++i) {
        if (!splat(i)) continue;
        float* own = scratch + plan.tile_of[i] * tile;
        std::fill(own, own + tile, inputs[i].data[0]);
        values[i] = own;
    }
    for (std::int64_t start = first; start < last; start += tile) {
        const std::int64_t count = std::min(tile, last - start);
        for (std::size_t i = 0; i < plan.input_count; ++i) {
            if (splat(i)) continue;
            float* own = plan.tile_of[i] == no_tile ? nullptr : scratch + plan.tile_of[i] * tile;
            values[i] = read_broadcast(layout, i, inputs[i].data, start, count, own);
        }
        for (std::size_t s = 0; s < step_count; ++s) {
            const fused_step& step = plan.steps[s];
            const std::size_t value = plan.input_count + s;
            float* result = s + 1 == step_count ? out + start : scratch + plan.tile_of[value] * tile;
            const int arity = arity_of(step.kind);
            const float* operands[3] = {values[step.operands[0]], values[step.operands[arity > 1 ? 1 : 0]],
                                        values[step.operands[arity > 2 ? 2 : 0]]};
            run_step<W>(step, operands, result, count);
            values[value] = result;
        }
    }
}

inline void run_chain_portable(const chain_plan& plan, const broadcast_layout& layout,
                               std::span<const const_tensor_span> inputs, float* out, std::int64_t first,
                               std::int64_t last, float* scratch, const float** values) {
    run_chain<4>(plan, layout, inputs, out, first, last, scratch, values);
}

#if defined(ANVIL_DETAIL_KERNELS_X86)
__attribute__((target("avx2,fma"))) inline void run_chain_avx2(
    const chain_plan& plan, const broadcast_layout& layout, std::span<const const_tensor_span> inputs,
    float* out, std::int64_t first, std::int64_t last, float* scratch, const float** values) {
    run_chain<8>(plan, layout, inputs, out, first, last, scratch, values);
}
#endif

// Runs `steps` over the inputs broadcast to `output`, threaded over chunks of tiles.
inline void evaluate_chain(std::span<const fused_step> steps, std::span<const const_tensor_span> inputs,
                           tensor_span output, thread_pool& pool, std::span<float> workspace) {
    reference::check_fused_steps(steps, inputs.size());
    const std::int64_t count = count_of(output.shape);
    if (count == 0) return;
    const broadcast_layout layout = make_broadcast_layout(output.shape, inputs);
    const chain_plan plan = make_chain_plan(steps, layout);
    const bool on_stack = plan.tile_count <= stack_tiles;
    const std::size_t per_thread = on_stack ? 0 : plan.tile_count * static_cast<std::size_t>(tile);
    const auto tiles = static_cast<std::size_t>((count + tile - 1) / tile);
    const bool avx2 = use_avx2_kernels();
    run_with_scratch(
        pool, workspace, per_thread, tiles, tiles_per_chunk, "fused_elementwise",
        [&](float* scratch, std::size_t first_tile, std::size_t last_tile) {
            alignas(64) float stack[stack_tiles * tile];
            std::vector<const float*> values(plan.input_count + steps.size());
            const auto first = static_cast<std::int64_t>(first_tile) * tile;
            const std::int64_t last = std::min(count, static_cast<std::int64_t>(last_tile) * tile);
            float* tiles_at = on_stack ? stack : scratch;
#if defined(ANVIL_DETAIL_KERNELS_X86)
            if (avx2) {
                run_chain_avx2(plan, layout, inputs, output.data, first, last, tiles_at, values.data());
                return;
            }
#endif
            run_chain_portable(plan, layout, inputs, output.data, first, last, tiles_at, values.data());
        });
    (void)avx2;
}

}  // namespace elementwise

// The kernels. Each reads its operands broadcast to the output (numpy's rule) and runs as a one-step chain,
// so the one tiled loop above serves every elementwise op.

inline void elementwise_unary(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                              thread_pool& pool, std::span<float> workspace) {
    if (n.kind == op::cast) {
        const dtype to = n.attrs.to;
        const std::int64_t count = count_of(output.shape);
        const float* x = inputs[0].data;
        if (to == dtype::f32 || to == dtype::f64) {
            if (count != 0 && x != output.data) {
                std::memcpy(output.data, x, static_cast<std::size_t>(count) * sizeof(float));
            }
            return;
        }
        pool.parallel_for(0, static_cast<std::size_t>(count), 32768,
                          [&](std::size_t first, std::size_t last) {
                              for (std::size_t i = first; i < last; ++i)
                                  output.data[i] = cast_value(x[i], to);
                          });
        return;
    }
    const fused_step step{n.kind, {0, 0, 0}, n.attrs.min, n.attrs.max};
    elementwise::evaluate_chain(std::span(&step, 1), inputs, output, pool, workspace);
}

inline void elementwise_binary(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                               thread_pool& pool, std::span<float> workspace) {
    const fused_step step{n.kind, {0, 1, 0}, 0.0f, 0.0f};
    elementwise::evaluate_chain(std::span(&step, 1), inputs, output, pool, workspace);
}

inline void elementwise_where(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                              thread_pool& pool, std::span<float> workspace) {
    const fused_step step{n.kind, {0, 1, 2}, 0.0f, 0.0f};
    elementwise::evaluate_chain(std::span(&step, 1), inputs, output, pool, workspace);
}

inline void fused_elementwise(const node& n, std::span<const const_tensor_span> inputs, tensor_span output,
                              thread_pool& pool, std::span<float> workspace) {
    elementwise::evaluate_chain(n.attrs.steps, inputs, output, pool, workspace);
}

// Scratch floats per thread fused_elementwise needs from the workspace, given its operands' shapes (0 when
// its tiles fit on the stack). The workspace passed to the kernel holds this many floats per thread that
// should run it; unary, binary and where never need any.
[[nodiscard]] inline std::size_t fused_elementwise_workspace(const node& n,
                                                             std::span<const dims> input_shapes) {
    reference::check_fused_steps(n.attrs.steps, input_shapes.size());
    std::vector<const_tensor_span> operands;
    for (const dims& shape : input_shapes)
        operands.push_back({nullptr, shape});
    const broadcast_layout layout = make_broadcast_layout(n.result.shape, operands);
    const auto plan = elementwise::make_chain_plan(n.attrs.steps, layout);
    if (plan.tile_count <= elementwise::stack_tiles) return 0;
    return plan.tile_count * static_cast<std::size_t>(elementwise::tile);
}

}  // namespace anvil::detail::cpu
