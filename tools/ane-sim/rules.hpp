// anvil's ANE simulator: the options that choose how strictly each rule of CONSTRAINTS.md is enforced. One
// process-wide set, changed through anvil_ane_sim_set_option; the defaults are the stricter reading of each
// conflict between sources, so the backend is tested against the harder case.
#pragma once

#include <cstdint>
#include <string>

namespace anvil_sim {

enum class rule_mode : std::uint8_t { allow, warn, error };

struct rules {
    std::string architecture = "h16g";    // what _ANEDeviceInfo reports (M4 class)
    std::int64_t compile_budget = 119;    // compiles per process before they fail
    std::int64_t max_live_programs = 15;  // loaded programs alive at once before a compile fails with 0x50004
    std::int64_t max_dimension = 16384;   // per axis, every tensor in a program
    std::int64_t min_surface_bytes = 49152;
    bool equal_surface_sizes = true;        // all inputs one allocation size; all outputs one
    std::int64_t softmax_max_axis = 8192;   // a longer softmax axis is an error (the ANE normalises per tile)
    std::int64_t blobfile_limit = 0;        // BLOBFILE-backed consts per program; 0 = not enforced (counted)
    std::int64_t inject_load_failures = 0;  // the next N loads fail once with a transient error
    rule_mode conv_bias = rule_mode::error;           // `bias` on conv
    rule_mode const_broadcast = rule_mode::error;     // a broadcast const operand that is not [1, C, 1, 1]
    rule_mode named_matmul_flags = rule_mode::error;  // transpose_x/y and keep_dims not bound to named consts
    rule_mode gelu = rule_mode::warn;
    rule_mode rsqrt = rule_mode::warn;
    rule_mode reduce_prod = rule_mode::warn;
};

// The process-wide options (defined in the runtime part; read by the MIL part at compile time).
rules& current_rules();

}  // namespace anvil_sim
