// anvil: what this x86 CPU can run, detected once for every kernel that picks an instruction set (fp16
// conversion, GEMM, elementwise). CPUID rather than __builtin_cpu_supports, which Clang 14 lacks for some
// features; the OS must also save the AVX (XCR0 bits 1-2) and AVX-512 (bits 5-7) register state. Elsewhere
// every feature reads false.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define ANVIL_DETAIL_CPUID 1
#include <cpuid.h>
#endif

namespace anvil::detail {

struct cpu_features {
    bool f16c = false;         // F16C with AVX state saved
    bool avx2_fma = false;     // AVX2 and FMA
    bool avx512 = false;       // AVX-512F with its state saved (implies avx2_fma here)
    bool avx512_vnni = false;  // AVX-512 BW, VL and VNNI (integer dot products of bytes) besides avx512
};

[[nodiscard]] inline cpu_features detect_cpu_features() noexcept {
    cpu_features features;
#if defined(ANVIL_DETAIL_CPUID)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return features;
    if ((ecx & (bit_OSXSAVE | bit_AVX)) != (bit_OSXSAVE | bit_AVX)) return features;
    const unsigned leaf1_ecx = ecx;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & 0x6u) != 0x6u) return features;
    features.f16c = (leaf1_ecx & bit_F16C) != 0;
    if ((leaf1_ecx & bit_FMA) == 0) return features;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return features;
    features.avx2_fma = (ebx & bit_AVX2) != 0;
    features.avx512 = features.avx2_fma && (ebx & bit_AVX512F) != 0 && (xcr0_low & 0xE6u) == 0xE6u;
    // CPUID.7.0: EBX bit 30 AVX512BW, bit 31 AVX512VL; ECX bit 11 AVX512_VNNI.
    features.avx512_vnni = features.avx512 && features.f16c && (ebx & (1u << 30)) != 0 &&
                           (ebx & (1u << 31)) != 0 && (ecx & (1u << 11)) != 0;
#endif
    return features;
}

// Detected on first use.
[[nodiscard]] inline const cpu_features& host_cpu_features() noexcept {
    static const cpu_features features = detect_cpu_features();
    return features;
}

}  // namespace anvil::detail
