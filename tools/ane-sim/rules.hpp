// anvil's ANE simulator: the options that choose how strictly each rule of CONSTRAINTS.md is enforced. One
// process-wide set, changed through anvil_ane_sim_set_option (or ANVIL_ANE_SIM_OPTIONS); the defaults are the
// stricter reading of each conflict between sources, so the backend is tested against the harder case.
#pragma once

#include <cstdint>
#include <string>

namespace anvil_sim {

enum class rule_mode : std::uint8_t { allow, warn, error };

struct rules {
    std::string architecture = "h16g";    // what _ANEDeviceInfo reports (M4 class); h13*/h14* = M1/M2
    std::int64_t compile_budget = 119;    // compiles per process before they fail
    std::int64_t max_live_programs = 15;  // loaded programs alive at once before a compile fails with 0x50004
    std::int64_t max_dimension = 16384;   // per axis, every tensor in a program
    std::int64_t min_surface_bytes = 49152;
    bool equal_surface_sizes = true;        // all inputs one allocation size; all outputs one
    std::int64_t softmax_max_axis = 8192;   // a longer softmax axis is an error (the ANE normalises per tile)
    std::int64_t blobfile_limit = 0;        // BLOBFILE-backed consts per program; 0 = not enforced (counted)
    std::int64_t inject_load_failures = 0;  // the next N loadWithQoS calls fail with the transient error
    // Each compile takes this long, the simulator's lock released meanwhile: a test can make another thread's
    // calls land during a compile (the program cache's lock, RUNTIME.md §0b #22).
    std::int64_t compile_delay_ms = 0;
    rule_mode conv_bias = rule_mode::error;           // `bias` on conv
    rule_mode const_broadcast = rule_mode::error;     // a broadcast const operand that is not [1, C, 1, 1]
    rule_mode named_matmul_flags = rule_mode::error;  // transpose_x/y and keep_dims not bound to named consts
    rule_mode gelu = rule_mode::warn;
    rule_mode rsqrt = rule_mode::warn;
    rule_mode reduce_prod = rule_mode::warn;
    // Rules added from the second audit (CONSTRAINTS.md, RUNTIME.md §0).
    bool live_names = true;                 // Live entries carry Name/Symbol (live_names=present|omit)
    std::int64_t plane_stride_pad = 0;      // PlaneStride = Height * RowStride + this (a multiple of 64)
    rule_mode io_width = rule_mode::error;  // I/O widths below 32 or not a multiple of 32 at evaluate
    rule_mode pooling = rule_mode::error;   // max_pool / avg_pool at compile
    rule_mode anchor = rule_mode::error;    // no conv/matmul/linear at load
    // einsum on h13/h14 through the private path. No source shows it either way; Core ML's split-einsum
    // models run on M1's Neural Engine (ml-stable-diffusion's README), but Core ML rewrites ops, and the
    // private path's matmul fails there (RUNTIME.md §0 #4). The stricter reading refuses it like matmul.
    rule_mode einsum_m1_m2 = rule_mode::error;
    rule_mode transcendentals = rule_mode::allow;  // reduce_mean/exp/log/sqrt/sin/cos at evaluate
    std::string profile = "default";     // "m5-macos26" sets transcendentals=error, architecture h17g
    bool compute_plan = true;            // objc_getClass("MLComputePlan") finds the class (macOS 14.4+)
    bool states = true;                  // objc_getClass("MLState") finds the class (macOS 15+)
    bool device_info = true;             // objc_getClass("_ANEDeviceInfo") finds the class
    std::string fail_compile_op;         // a program with this op fails to compile ("" = off)
    std::string fail_load_op;            // ... to load
    std::string fail_eval_op;            // ... to evaluate
    std::int64_t coreml_fail_loads = 0;  // the next N Core ML model loads fail (a device Core ML refuses)
    // Rules added from the third audit (CONSTRAINTS.md, RUNTIME.md §0b).
    std::int64_t macos = 15;  // kern.osproductversion's major; below 15, program(1.3)/ios18 fails to compile
    rule_mode sub_byte_constexpr = rule_mode::error;  // sub-byte constexpr weights in a private ios18 program
    std::int64_t max_program_weight_bytes = 0;        // a program with more weight bytes fails (0 = off)
    bool identity_by_text = true;  // a program's compiled identity is its MIL text's (identity=text|weights)
    std::string hang_eval_op;      // the first evaluation of a program with this op never completes
    std::string wrong_eval_op;     // evaluations of a program with this op return other numbers (1 - y)
    // Set by the Core ML classes on their copy (not an option): the program is a Core ML one, whose I/O may
    // have any rank and int32 elements, and whose ops the Neural Engine's rules place rather than refuse.
    bool coreml_program = false;
};

// The process-wide options (defined in the runtime part; read by the MIL part at compile time).
rules& current_rules();

}  // namespace anvil_sim
