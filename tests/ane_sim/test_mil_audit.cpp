// The ANE simulator's MIL part against the rules CONSTRAINTS.md added from the second audit (RUNTIME.md §0):
// what fails at compile (matmul/sdpa on H13/H14, pooling, conv kernels 16 wide, injected failures), the
// epsilon warning, the new op signatures; and the citation table every rule message ends with.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "citations.hpp"
#include "mil_harness.hpp"

#ifndef ANVIL_ANE_SIM_CONSTRAINTS
#error "ANVIL_ANE_SIM_CONSTRAINTS must name tools/ane-sim/CONSTRAINTS.md"
#endif

namespace test_mil_audit {

using namespace ane_sim_mil;
using anvil_sim::rule_mode;

// The warning line of `warnings` that contains `what`, or "".
std::string warning_with(const std::string& warnings, const std::string& what) {
    const std::size_t at = warnings.find(what);
    if (at == std::string::npos) return "";
    const std::size_t start = warnings.rfind('\n', at);
    const std::size_t from = start == std::string::npos ? 0 : start + 1;
    return warnings.substr(from, warnings.find('\n', at) - from);
}

std::string warnings_of(const std::string& text, const rules& options = {}) {
    return mil_program::compile(text, {}, options)->warnings();
}

std::string zeros(int count) {
    std::string list;
    for (int i = 0; i < count; ++i)
        list += i == 0 ? "0.0" : ", 0.0";
    return list;
}

TEST_CASE("ane sim audit: every citation points at the rulebook line that states the rule") {
    std::ifstream file(ANVIL_ANE_SIM_CONSTRAINTS);
    REQUIRE(file.good());
    std::vector<std::string> lines;
    for (std::string line; std::getline(file, line);)
        lines.push_back(line);
    std::size_t index = 0;
    for (const anvil_sim::citation& c : anvil_sim::citations) {
        INFO("citation " << index << " (line " << c.line << "): " << std::string(c.phrase));
        CHECK(static_cast<std::size_t>(c.id) == index);  // in the order of the enum, one each
        REQUIRE(c.line >= 1);
        REQUIRE(static_cast<std::size_t>(c.line) <= lines.size());
        CHECK(lines[static_cast<std::size_t>(c.line) - 1].find(c.phrase) != std::string::npos);
        ++index;
    }
    CHECK(anvil_sim::cite(anvil_sim::rule::anchor) == " [CONSTRAINTS.md:76]");
}

TEST_CASE("ane sim audit: max_pool and avg_pool are rejected at compile unless pooling=allow") {
    const std::string head = ints("k", {1, 2}) + ints("s", {1, 2}) + scalar("string", "v", "\"valid\"");
    for (const std::string op : {"max_pool", "avg_pool"}) {
        INFO(op);
        const std::string text = program_of(head + "tensor<fp16, [1, 4, 1, 4]> y = " + op +
                                            "(kernel_sizes = k, pad_type = v, strides = s, x = x)" + nm);
        const std::string message = error_of(text);
        CHECK(message.rfind("line 7: " + op + " is rejected by the ANE compiler", 0) == 0);
        CHECK(message.find("pooling") != std::string::npos);
        CHECK(cites(message, 75));
        rules allow;
        allow.pooling = rule_mode::allow;
        CHECK(error_of(text, allow) == "(compiled)");
    }
}

TEST_CASE("ane sim audit: matmul and scaled_dot_product_attention fail to compile on h13/h14") {
    const std::string matmul =
        program_of(scalar("bool", "tr", "true") +
                   "tensor<fp16, [1, 4, 1, 1]> y = matmul(transpose_y = tr, x = x, y = x)" + nm);
    const std::string attention =
        program_of(t48 + "y = scaled_dot_product_attention(query = x, key = x, value = x)" + nm, "ios18");
    for (const char* chip : {"h13", "h13g", "h14", "h14g"}) {
        INFO(chip);
        rules old_chip;
        old_chip.architecture = chip;
        const std::string message = error_of(matmul, old_chip);
        CHECK(message.rfind("line 5: matmul fails to compile on " + std::string(chip) + " (H13/H14", 0) == 0);
        CHECK(cites(message, 74));
        const std::string sdpa = error_of(attention, old_chip);
        CHECK(sdpa.rfind("line 4: scaled_dot_product_attention fails to compile on " + std::string(chip),
                         0) == 0);
        CHECK(cites(sdpa, 74));
    }
    for (const char* chip : {"h15g", "h16g", "h17"}) {
        INFO(chip);
        rules newer;
        newer.architecture = chip;
        CHECK(error_of(matmul, newer) == "(compiled)");
        CHECK(error_of(attention, newer) == "(compiled)");
    }
}

TEST_CASE(
    "ane sim audit: einsum is refused on h13/h14 unless einsum_m1_m2=allow, and kept in Core ML programs") {
    const std::string einsum =
        program_of(scalar("string", "eq", "\"nchw,nwhu->nchu\"") +
                       "tensor<fp16, [1, 4, 1, 4]> y = einsum(equation = eq, values = (x, x))" + nm,
                   "ios17", "tensor<fp16, [1, 4, 1, 4]> x");
    for (const char* chip : {"h13g", "h14"}) {
        INFO(chip);
        rules old_chip;
        old_chip.architecture = chip;
        const std::string message = error_of(einsum, old_chip);
        CHECK(message.rfind("line 5: einsum is refused on " + std::string(chip) + " (H13/H14", 0) == 0);
        CHECK(message.find("einsum_m1_m2") != std::string::npos);
        CHECK(cites(message, 74));
        old_chip.einsum_m1_m2 = rule_mode::allow;
        CHECK(error_of(einsum, old_chip) == "(compiled)");
        rules core_ml;
        core_ml.architecture = chip;
        core_ml.coreml_program = true;
        CHECK(error_of(einsum, core_ml) == "(compiled)");
    }
    rules newer;
    newer.architecture = "h15g";
    CHECK(error_of(einsum, newer) == "(compiled)");
}

TEST_CASE("ane sim audit: a conv whose kernel is 16 or more wide fails to compile") {
    auto conv = [](int width) {
        const std::string weight = "tensor<fp16, [4, 4, 1, " + std::to_string(width) + "]>";
        return program_of("    " + weight + " w = const()[name = tensor<string, []>(\"w\"), val = " + weight +
                              "([" + zeros(4 * 4 * width) + "])];\n" + "tensor<fp16, [1, 4, 1, " +
                              std::to_string(33 - width) + "]> y = conv(weight = w, x = x)" + nm,
                          "ios17", "tensor<fp16, [1, 4, 1, 32]> x");
    };
    const std::string message = error_of(conv(16));
    CHECK(message.rfind("line 5: conv: kernel width 16 (weight 'w' [4, 4, 1, 16])", 0) == 0);
    CHECK(cites(message, 77));
    CHECK(error_of(conv(17)).find("kernel width 17") != std::string::npos);
    CHECK(error_of(conv(15)) == "(compiled)");
}

TEST_CASE("ane sim audit: log, rsqrt and inverse with an epsilon of 0 in fp16 warn") {
    const std::string a = t48 + "a = abs(x = x)" + nm;  // line 4
    auto with = [&](const std::string& op, const std::string& epsilon) {
        return program_of(a + (epsilon.empty() ? "" : scalar("fp16", "e", epsilon)) + t48 + "y = " + op +
                          "(" + (epsilon.empty() ? "" : "epsilon = e, ") + "x = a)" + nm);
    };
    rules quiet;
    quiet.rsqrt = rule_mode::allow;  // its own "reported to fail" warning is another rule
    struct expectation {
        std::string op, epsilon, warning;  // "" = no epsilon warning
    };
    const std::vector<expectation> cases = {
        {"log", "", "line 5: log: epsilon is omitted and its default 1e-45 is 0 in fp16"},
        {"log", "0x0p+0", "line 6: log: epsilon is 0 in fp16"},
        {"log", "0x1.0cp-17", ""},  // what working code passes (RUNTIME.md §0 #10)
        {"rsqrt", "", "line 5: rsqrt: epsilon is omitted and its default 1e-12 is 0 in fp16"},
        {"rsqrt", "0x0p+0", "line 6: rsqrt: epsilon is 0 in fp16"},
        {"inverse", "", ""},  // its default, 1e-4, survives fp16
        {"inverse", "0x0p+0", "line 6: inverse: epsilon is 0 in fp16"},
    };
    for (const expectation& c : cases) {
        INFO(c.op << " epsilon '" << c.epsilon << "'");
        const std::string warnings = warnings_of(with(c.op, c.epsilon), quiet);
        if (c.warning.empty()) {
            CHECK(warnings.find("epsilon") == std::string::npos);
        } else {
            const std::string line = warning_with(warnings, c.warning);
            CHECK(line.rfind(c.warning, 0) == 0);
            CHECK(cites(line, 79));
        }
    }
    // fp32 epsilons are held in fp16 too.
    const std::string fp32 =
        program_of(a + scalar("fp32", "e", "0x1p-30") + t48 + "y = log(epsilon = e, x = a)" + nm);
    CHECK(warnings_of(fp32).find("line 6: log: epsilon is 0 in fp16") != std::string::npos);
}

TEST_CASE("ane sim audit: inverse, sin and cos are in the op table and match naive loops") {
    const auto x = ramp(32, 0.1f, 0.5f);  // positive, away from 0
    const std::vector<std::pair<std::string, std::function<float(float)>>> cases = {
        {t48 + "y = inverse(x = x)" + nm, [](float v) { return 1.0f / (v + 1e-4f); }},
        {scalar("fp16", "e", "0x1p-2") + t48 + "y = inverse(epsilon = e, x = x)" + nm,
         [](float v) { return 1.0f / (v + 0.25f); }},
        {t48 + "y = sin(x = x)" + nm, [](float v) { return std::sin(v); }},
        {t48 + "y = cos(x = x)" + nm, [](float v) { return std::cos(v); }},
    };
    for (const auto& c : cases) {
        INFO(c.first);
        std::vector<float> expected;
        for (float v : x)
            expected.push_back(c.second(v));
        check_close(run_body(c.first, {4, 1, 8}, {4, 1, 8}, x), expected, 3e-3f);
    }
    CHECK(error_of(program_of(t48 + "y = inverse(x = x)" + nm, "ios15")) == "(compiled)");
}

TEST_CASE("ane sim audit: fail_compile_op fails the program that contains the op, naming its line") {
    const std::string text = program_of(t48 + "r = relu(x = x)" + nm + t48 +
                                        "y = softmax(axis = tensor<int32, []>(1), x = r)" + nm);
    rules inject;
    inject.fail_compile_op = "softmax";
    CHECK(error_of(text, inject) ==
          "line 5: softmax: failure injected by the simulator (fail_compile_op=softmax) [CONSTRAINTS.md:82]");
    inject.fail_compile_op = "const";  // any statement's op
    CHECK(
        error_of(program_of(scalar("int32", "ax", "1") + t48 + "y = softmax(axis = ax, x = x)" + nm), inject)
            .rfind("line 4: const: failure injected", 0) == 0);
    inject.fail_compile_op = "matmul";  // not in the program
    CHECK(error_of(text, inject) == "(compiled)");
    CHECK(error_of(text) == "(compiled)");
}

TEST_CASE("ane sim audit: a compiled program lists its statements with their lines") {
    const std::string text = program_of(scalar("int32", "ax", "1") + t48 + "r = relu(x = x)" + nm + t48 +
                                        "y = softmax(axis = ax, x = r)" + nm);
    const auto program = mil_program::compile(text, {}, {});
    const auto& statements = program->statements();
    REQUIRE(statements.size() == 3);
    CHECK(statements[0].op == "const");
    CHECK(statements[0].line == 4);
    CHECK(statements[1].op == "relu");
    CHECK(statements[1].line == 5);
    CHECK(statements[2].op == "softmax");
    CHECK(statements[2].line == 6);
    CHECK(anvil_sim::is_known_op("softmax"));
    CHECK(anvil_sim::is_known_op("const"));
    CHECK_FALSE(anvil_sim::is_known_op("frobnicate"));
}

}  // namespace test_mil_audit
