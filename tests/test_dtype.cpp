#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_dtype {

TEST_CASE("dtype: sizes and spellings round-trip") {
    using anvil::dtype;
    CHECK(anvil::dtype_size(dtype::f32) == 4);
    CHECK(anvil::dtype_size(dtype::bf16) == 2);
    CHECK(anvil::dtype_size(dtype::f8_e5m2) == 1);
    CHECK(anvil::dtype_size(dtype::boolean) == 1);
    CHECK(anvil::dtype_name(dtype::boolean) == "bool");
    for (const auto& entry : anvil::detail::dtype_table) {
        CHECK(anvil::dtype_from_safetensors_name(entry.safetensors_name) == entry.type);
        CHECK(anvil::dtype_from_name(entry.name) == entry.type);
    }
    CHECK_FALSE(anvil::dtype_from_safetensors_name("F128").has_value());
    CHECK_FALSE(anvil::dtype_from_safetensors_name("f32").has_value());
}

TEST_CASE("error: the hierarchy is catchable at every level and json_error keeps its offset") {
    try {
        throw anvil::json_error("config.json: byte 7: expected ':'", 7);
    } catch (const anvil::format_error& e) {
        CHECK(std::string(e.what()) == "config.json: byte 7: expected ':'");
        CHECK(dynamic_cast<const anvil::json_error&>(e).offset() == 7);
    }
    CHECK(anvil::detail::message("tensor '", "w", "': ", 3, " dims") == "tensor 'w': 3 dims");
}

}  // namespace test_dtype
