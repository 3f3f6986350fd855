// anvil's ANE simulator: what the device refuses after the compiler has accepted a program (CONSTRAINTS.md
// "Rules added from the second audit"): a load without an anchor op (RUNTIME.md §0 #6), an evaluate with I/O
// widths the dispatcher rejects (§0 #3) or with ops the simulated M5 / macOS 26 profile cannot run (§0 #9),
// and the failures injected by op name to test the backend's CPU fallback. Also the op:<type> counters.
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime_ane.hpp"

namespace anvil_sim {

namespace {

// "line N: op: failure injected by the simulator (option=op)" for the first statement of that op.
std::string injected(const mil_program& program, const std::string& op, const char* option) {
    if (op.empty()) return "";
    for (const op_statement& statement : program.statements())
        if (statement.op == op)
            return "line " + std::to_string(statement.line) + ": " + op +
                   ": failure injected by the simulator (" + option + "=" + op + ")" +
                   cite(rule::fault_injection);
    return "";
}

std::string width_problem(const std::vector<io_tensor>& symbols, const char* kind) {
    for (const io_tensor& symbol : symbols) {
        if (symbol.width >= 32 && symbol.width % 32 == 0) continue;
        return std::string(kind) + " '" + symbol.name + "' has width " + std::to_string(symbol.width) +
               " (the innermost dimension of [1, " + std::to_string(symbol.channels) + ", " +
               std::to_string(symbol.height) + ", " + std::to_string(symbol.width) +
               "]); I/O widths below 32 or not a multiple of 32 fail at dispatch: pad the width to a "
               "multiple "
               "of 32 on the host and slice inside the MIL (simulator option io_width)" +
               cite(rule::io_width);
    }
    return "";
}

bool is_transcendental(const std::string& op) {
    return op == "reduce_mean" || op == "exp" || op == "log" || op == "sqrt" || op == "sin" || op == "cos";
}

}  // namespace

std::string load_problem(const mil_program& program) {
    const rules& options = sim().options;
    if (std::string problem = injected(program, options.fail_load_op, "fail_load_op"); !problem.empty())
        return problem;
    if (options.anchor != rule_mode::error) return "";
    std::string ops;
    for (const op_statement& statement : program.statements()) {
        if (statement.op == "conv" || statement.op == "matmul" || statement.op == "linear") return "";
        if (statement.op != "const" && ops.find(" " + statement.op + ",") == std::string::npos)
            ops += " " + statement.op + ",";
    }
    if (!ops.empty()) ops.pop_back();
    return "the program has no conv, matmul or linear op (its ops:" + (ops.empty() ? " none" : ops) +
           "); a program without such an anchor can be refused at load: anchor it with a conv, linear or "
           "matmul, or run it on the CPU (simulator option anchor)" +
           cite(rule::anchor);
}

std::string evaluate_problem(const mil_program& program) {
    const rules& options = sim().options;
    if (options.io_width == rule_mode::error) {
        if (std::string problem = width_problem(program.inputs(), "input"); !problem.empty()) return problem;
        if (std::string problem = width_problem(program.outputs(), "output"); !problem.empty())
            return problem;
    }
    if (options.transcendentals == rule_mode::error)
        for (const op_statement& statement : program.statements())
            if (is_transcendental(statement.op))
                return "line " + std::to_string(statement.line) + ": " + statement.op +
                       ": compiles and loads but fails at dispatch on the simulated profile " +
                       options.profile +
                       " (reduce_mean, exp, log, sqrt, sin and cos are unusable on M5 / macOS 26.5; "
                       "simulator "
                       "option transcendentals=error): decompose it or run it on the CPU" +
                       cite(rule::transcendentals);
    return injected(program, options.fail_eval_op, "fail_eval_op");
}

// libSystem's sysctlbyname, for the names the backend reads: kern.osproductversion is "<macos>.0" (simulator
// option macos; RUNTIME.md §0b #18: the ios18 dialect needs macOS 15). Any other name fails with ENOENT, as
// an unknown name does; writing is refused with EPERM.
ANVIL_SIM_EXPORT int sysctlbyname(const char* name, void* old_value, std::size_t* old_length,
                                  const void* new_value, std::size_t new_length) {
    if (new_value != nullptr || new_length != 0) {
        errno = EPERM;
        return -1;
    }
    if (name == nullptr || std::string_view(name) != "kern.osproductversion") {
        errno = ENOENT;
        return -1;
    }
    std::string text;
    {
        lock_guard lock(sim().mutex);
        text = std::to_string(sim().options.macos) + ".0";
    }
    if (old_length == nullptr) {
        errno = EINVAL;
        return -1;
    }
    if (old_value == nullptr) {  // a size query
        *old_length = text.size() + 1;
        return 0;
    }
    if (*old_length < text.size() + 1) {
        errno = ENOMEM;
        return -1;
    }
    std::memcpy(old_value, text.c_str(), text.size() + 1);
    *old_length = text.size() + 1;
    return 0;
}

void count_ops(const mil_program& program) {
    for (const op_statement& statement : program.statements())
        add_counter("op:" + statement.op, 1);
}

}  // namespace anvil_sim
