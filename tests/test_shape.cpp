#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_shape {

namespace {

using anvil::dims;
using anvil::dyn;
using anvil::shape;

enum class test_op { add };

// Static shapes: everything below is checked by the compiler; the must-fail twins live in
// tests/compile_fail/.
static_assert(shape<1, 64, 1, 32>::rank == 4);
static_assert(shape<>::rank == 0);
static_assert(shape<1, 64, 1, 32>::extents[1] == 64);
static_assert(shape<1, 64, 1, 32>::is_static);
static_assert(!shape<1, dyn, 32>::is_static);
static_assert(shape<1, 64, 1, 32>::element_count() == 2048);
static_assert(shape<>::element_count() == 1);
static_assert(shape<3, 0, 5>::element_count() == 0);
// 2^32 * (2^32 - 1) = 2^64 - 2^32 still fits in 64 bits.
static_assert(shape<4294967296, 4294967295>::element_count() == 18446744069414584320ull);

static_assert(std::is_convertible_v<shape<2, 3>, anvil::dims>);
static_assert(anvil::is_shape_v<shape<2, dyn>> && !anvil::is_shape_v<dims>);

// numpy's broadcasting rule (numpy.broadcast_shapes, numpy 1.24), written out by hand.
static_assert(std::is_same_v<anvil::broadcast_t<shape<8, 1, 6, 1>, shape<7, 1, 5>>, shape<8, 7, 6, 5>>);
static_assert(std::is_same_v<anvil::broadcast_t<shape<15, 3, 5>, shape<3, 1>>, shape<15, 3, 5>>);
static_assert(std::is_same_v<anvil::broadcast_t<shape<>, shape<3>>, shape<3>>);
static_assert(std::is_same_v<anvil::broadcast_t<shape<1, 0>, shape<3, 1>>, shape<3, 0>>);
static_assert(
    std::is_same_v<anvil::broadcast_t<shape<1, 64, 1, 32>, shape<64, 64, 1, 1>>, shape<64, 64, 1, 32>>);
// dyn against 1 stays dyn; against n it becomes n (the runtime check then requires 1 or n).
static_assert(std::is_same_v<anvil::broadcast_t<shape<dyn, 1>, shape<1, 768>>, shape<dyn, 768>>);
static_assert(std::is_same_v<anvil::broadcast_t<shape<dyn, 4>, shape<5, 1>>, shape<5, 4>>);
static_assert(std::is_same_v<anvil::broadcast_t<shape<dyn>, shape<dyn>>, shape<dyn>>);

template <class A, class B>
concept broadcastable = requires {
    typename anvil::broadcast_t<A, B>;
};
static_assert(!broadcastable<shape<3>, shape<4>>);
static_assert(!broadcastable<shape<2, 1>, shape<8, 4, 3>>);
static_assert(!broadcastable<shape<0>, shape<2>>);
static_assert(broadcastable<shape<dyn, 3>, shape<7, 3>>);

static_assert(
    anvil::detail::shape_rule<test_op::add, anvil::detail::broadcastable, shape<2, 1>, shape<3>>::holds);
static_assert(
    std::is_same_v<anvil::detail::checked_broadcast_t<test_op::add, shape<2, 1>, shape<1, 3>>, shape<2, 3>>);
static_assert(anvil::detail::compatible<shape<2, dyn>, shape<dyn, 3>>::value);
static_assert(!anvil::detail::compatible<shape<2, 3>, shape<2, 4>>::value);
static_assert(!anvil::detail::compatible<shape<2, 3>, shape<2, 3, 1>>::value);

// dims is usable in constant expressions.
static_assert(dims{2, 3, 4}.element_count() == 24);
static_assert(dims{}.element_count() == 1);
static_assert(dims(shape<1, 64>{}) == dims{1, 64});
static_assert(shape<2, dyn>::matches(dims{2, 9}));

template <class Function>
std::string shape_error_message(Function&& function) {
    try {
        function();
    } catch (const anvil::shape_error& e) {
        return e.what();
    }
    return "(no shape_error)";
}

std::string text(const std::optional<dims>& value) {
    return value ? value->to_string() : "none";
}

}  // namespace

TEST_CASE("shape: dims holds its extents and counts its elements") {
    const dims d{1, 64, 1, 32};
    CHECK(d.rank() == 4);
    CHECK(d[1] == 64);
    CHECK(d.at(3) == 32);
    CHECK(d.element_count() == 2048);
    CHECK(std::vector<std::int64_t>(d.begin(), d.end()) == std::vector<std::int64_t>{1, 64, 1, 32});
    CHECK(d.extents().size() == 4);

    const dims scalar;
    CHECK(scalar.rank() == 0);
    CHECK(scalar.element_count() == 1);
    CHECK(scalar.to_string() == "[]");
    CHECK(dims{0, 5}.element_count() == 0);

    CHECK(dims{2, 3} == dims{2, 3});
    CHECK(dims{2, 3} != dims{3, 2});
    CHECK(dims{2, 3} != dims{2, 3, 1});
    CHECK(dims{} != dims{1});
}

TEST_CASE("shape: dims is built from any integer type and from ranges") {
    const std::size_t seq = 7;
    const int hidden = 384;
    CHECK(dims{seq, hidden} == dims{7, 384});
    const std::vector<std::uint64_t> from_npy{2, 3};
    CHECK(dims(from_npy) == dims{2, 3});
    const std::vector<std::int64_t> empty;
    CHECK(dims(empty) == dims{});
    CHECK(dims(shape<4, 5>{}) == dims{4, 5});
    const dims max_rank{1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(max_rank.rank() == anvil::max_rank);
    CHECK(dims(std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}) == max_rank);
}

TEST_CASE("shape: dims rejects negative, oversized and too many extents with exact messages") {
    CHECK(
        shape_error_message([] {
            (void)dims{2, -3};
        }) ==
        "dims: extent -3 at axis 1 is negative; extents must be >= 0 (anvil::dyn is for static shapes only)");
    CHECK(
        shape_error_message([] { (void)dims{dyn}; }) ==
        "dims: extent -1 at axis 0 is negative; extents must be >= 0 (anvil::dyn is for static shapes only)");
    CHECK(shape_error_message([] { (void)dims{std::numeric_limits<std::uint64_t>::max()}; }) ==
          "dims: extent 18446744073709551615 at axis 0 does not fit in int64");
    CHECK(shape_error_message([] { (void)dims{1, 2, 3, 4, 5, 6, 7, 8, 9}; }) ==
          "dims: rank 9 exceeds anvil's maximum rank of 8");
    CHECK(shape_error_message([] { (void)dims(std::vector<int>(9, 1)); }) ==
          "dims: rank 9 exceeds anvil's maximum rank of 8");
    CHECK(shape_error_message([] {
              (void)dims{2, 3}.at(2);
          }) == "dims [2, 3]: axis 2 is out of range for rank 2");
}

TEST_CASE("shape: element_count reports overflow instead of wrapping") {
    // 2^32 * 2^32 = 2^64, one past the largest 64-bit count; 2^32 * (2^32 - 1) fits.
    const dims overflowing{4294967296, 4294967296};
    CHECK(shape_error_message([&] { (void)overflowing.element_count(); }) ==
          "dims [4294967296, 4294967296]: the element count does not fit in 64 bits");
    CHECK(dims{4294967296, 4294967295}.element_count() == 18446744069414584320ull);
    CHECK(shape_error_message([] {
              (void)dims{0, 4294967296, 4294967296}.element_count();
          }) == "(no shape_error)");
}

TEST_CASE("shape: dims and static shapes print as [a, b, ...]") {
    CHECK(dims{1, 64, 1, 32}.to_string() == "[1, 64, 1, 32]");
    CHECK(anvil::to_string(dims{7}) == "[7]");
    std::ostringstream out;
    out << dims{2, 3} << ' ' << shape<1, dyn, 32>{} << ' ' << shape<>{};
    CHECK(out.str() == "[2, 3] [1, ?, 32] []");
    CHECK(shape<dyn, 768>::to_string() == "[?, 768]");
}

TEST_CASE("shape: runtime broadcasting agrees with numpy.broadcast_shapes") {
    struct row {
        dims a, b;
        const char* expected;  // numpy 1.24's result, "none" where it raises ValueError
    };
    const row table[] = {
        {dims{}, dims{}, "[]"},
        {dims{}, dims{3}, "[3]"},
        {dims{3}, dims{}, "[3]"},
        {dims{1}, dims{5}, "[5]"},
        {dims{5}, dims{1}, "[5]"},
        {dims{2, 3}, dims{3}, "[2, 3]"},
        {dims{2, 3}, dims{2}, "none"},
        {dims{8, 1, 6, 1}, dims{7, 1, 5}, "[8, 7, 6, 5]"},
        {dims{5, 4}, dims{1}, "[5, 4]"},
        {dims{15, 3, 5}, dims{15, 1, 5}, "[15, 3, 5]"},
        {dims{15, 3, 5}, dims{3, 1}, "[15, 3, 5]"},
        {dims{3}, dims{4}, "none"},
        {dims{2, 1}, dims{8, 4, 3}, "none"},
        {dims{0}, dims{1}, "[0]"},
        {dims{0}, dims{0}, "[0]"},
        {dims{0}, dims{2}, "none"},
        {dims{1, 0}, dims{3, 1}, "[3, 0]"},
        {dims{1, 64, 1, 32}, dims{64, 64, 1, 1}, "[64, 64, 1, 32]"},
        {dims{1, 64, 1, 32}, dims{1, 32, 1, 64}, "none"},
        {dims{4, 1, 3}, dims{1, 2, 1, 1}, "none"},
        {dims{1, 1, 1, 1, 1, 1, 1, 7}, dims{3, 1}, "[1, 1, 1, 1, 1, 1, 3, 7]"},
        {dims{2, 3, 4}, dims{2, 1, 5}, "none"},
    };
    for (const row& r : table) {
        CAPTURE(r.a);
        CAPTURE(r.b);
        CHECK(text(anvil::broadcast(r.a, r.b)) == r.expected);
        CHECK(text(anvil::broadcast(r.b, r.a)) == r.expected);  // the rule is symmetric
    }
}

TEST_CASE("shape: broadcast_or_throw names the op, both shapes and the failing axis") {
    CHECK(anvil::broadcast_or_throw("add", dims{8, 1, 6, 1}, dims{7, 1, 5}) == dims{8, 7, 6, 5});
    CHECK(shape_error_message([] {
              (void)anvil::broadcast_or_throw("add", dims{1, 64, 1, 32}, dims{1, 32, 1, 64});
          }) ==
          "add: shapes [1, 64, 1, 32] and [1, 32, 1, 64] do not broadcast (axis -1: 32 vs 64; aligned from "
          "the right, "
          "extents must match or be 1)");
    CHECK(shape_error_message([] {
              (void)anvil::broadcast_or_throw("mul", dims{2, 1}, dims{8, 4, 3});
          }) ==
          "mul: shapes [2, 1] and [8, 4, 3] do not broadcast (axis -2: 2 vs 4; aligned from the right, "
          "extents must "
          "match or be 1)");
}

TEST_CASE("shape: a static shape with dyn extents matches runtime dims") {
    using pattern = shape<dyn, 768>;
    CHECK(pattern::matches(dims{7, 768}));
    CHECK(pattern::matches(dims{0, 768}));
    CHECK_FALSE(pattern::matches(dims{7, 512}));
    CHECK_FALSE(pattern::matches(dims{768}));
    CHECK(shape<>::matches(dims{}));
    CHECK_NOTHROW(anvil::detail::require_matches<pattern>("input 'h'", dims{3, 768}));
    CHECK(shape_error_message([] {
              anvil::detail::require_matches<pattern>("input 'h'", dims{3, 512});
          }) == "input 'h': shape [3, 512] does not match the static shape [?, 768]");
    // The static result of a broadcast with dyn is refined by the runtime check on the real extents.
    using result = anvil::broadcast_t<shape<dyn, 4>, shape<5, 1>>;
    CHECK(result::matches(anvil::broadcast_or_throw("add", dims{1, 4}, dims{5, 1})));
    CHECK(result::matches(anvil::broadcast_or_throw("add", dims{5, 4}, dims{5, 1})));
    CHECK_THROWS_AS((void)anvil::broadcast_or_throw("add", dims{3, 4}, dims{5, 1}), anvil::shape_error);
}

TEST_CASE("shape: a shape_error is an anvil::error") {
    CHECK_THROWS_AS((void)dims{-1}, anvil::error);
}

}  // namespace test_shape
