// A user's program: proves that a way of bringing anvil into a build (find_package, add_subdirectory,
// FetchContent, a Meson subproject) gives a working `#include <anvil/anvil.hpp>`.
#include <anvil/anvil.hpp>

#include <cstdio>

int main() {
    const auto config =
        anvil::json::parse(R"({"hidden_size": 768, "torch_dtype": "float16"})", "config.json");
    const auto hidden = config.find("hidden_size");
    const anvil::half one_third(1.0f / 3.0f);
    if (hidden == nullptr || hidden->as_int() != 768 || static_cast<float>(one_third) != 0.333251953125f) {
        std::fputs("consumer: unexpected result\n", stderr);
        return 1;
    }
    std::printf("consumer: anvil %s works\n", anvil::version_string);
    return 0;
}
