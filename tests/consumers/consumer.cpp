// A user's program: proves that a way of bringing anvil into a build (find_package, add_subdirectory,
// FetchContent, a Meson subproject, the single header) gives a working `#include <anvil/anvil.hpp>`: it
// parses JSON, rounds to fp16, and where anvil is compiled separately compiles and runs a small graph.
#include <anvil/anvil.hpp>

#include <cstdio>
#include <vector>

int main() {
    const auto config =
        anvil::json::parse(R"({"hidden_size": 768, "torch_dtype": "float16"})", "config.json");
    const auto hidden = config.find("hidden_size");
    const anvil::half one_third(1.0f / 3.0f);
    if (hidden == nullptr || hidden->as_int() != 768 || static_cast<float>(one_third) != 0.333251953125f) {
        std::fputs("consumer: unexpected result\n", stderr);
        return 1;
    }
#if defined(ANVIL_SEPARATE_COMPILATION)
    // Linked against a compiled library (an installed anvil::compiled, or the single header stb-style): a
    // graph compiled and run through the declarations alone. Header-only, this would instantiate the whole
    // backend in every consumer (it doubled their build); the README demo runs a graph header-only already.
    anvil::graph g;
    auto x = g.input<float>("x", anvil::dims{2, 2});
    auto program = anvil::compile({anvil::relu(x) * 2.0f});
    const auto y =
        program.run({{"x", anvil::host_tensor::from(std::vector<float>{-1, 2, 3, -4}, anvil::dims{2, 2})}});
    const auto values = y[0].values<float>();
    if (values.size() != 4 || values[0] != 0.0f || values[1] != 4.0f || values[2] != 6.0f ||
        values[3] != 0.0f) {
        std::fputs("consumer: the graph gave unexpected values\n", stderr);
        return 1;
    }
#endif
    std::printf("consumer: anvil %s works\n", anvil::version_string);
    return 0;
}
