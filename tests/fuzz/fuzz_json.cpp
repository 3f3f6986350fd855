// libFuzzer target for anvil::json. Any input may be rejected with an anvil::error; one that parses must also
// survive the writer: parse(dump(v)) is v again, bit for bit and in member order, compact and indented, and
// dump is a fixed point. Errors must point inside the input and name it.
#include <anvil/core/json.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

namespace json = anvil::json;

// Stricter than operator==: doubles compare by bits (so -0.0 differs from 0.0) and kinds must match.
bool identical(const json::value& a, const json::value& b) {
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case json::kind::null:
            return true;
        case json::kind::boolean:
            return a.as_bool() == b.as_bool();
        case json::kind::integer:
            return a.as_int() == b.as_int();
        case json::kind::number:
            return std::bit_cast<std::uint64_t>(a.as_double()) == std::bit_cast<std::uint64_t>(b.as_double());
        case json::kind::string:
            return a.as_string() == b.as_string();
        case json::kind::array: {
            const json::array& x = a.as_array();
            const json::array& y = b.as_array();
            if (x.size() != y.size()) return false;
            for (std::size_t i = 0; i < x.size(); ++i)
                if (!identical(x[i], y[i])) return false;
            return true;
        }
        case json::kind::object: {
            const json::object& x = a.as_object();
            const json::object& y = b.as_object();
            if (x.size() != y.size()) return false;
            for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j) {
                if (i->first != j->first || !identical(i->second, j->second)) return false;
                if (y.find(i->first) != &j->second)
                    return false;  // keys are unique, so lookup finds this one
            }
            return true;
        }
    }
    return false;
}

void require(bool condition) {
    if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    json::value parsed;
    try {
        parsed = json::parse(text, "fuzz.json");
    } catch (const anvil::json_error& e) {
        require(e.offset() <= size);
        require(
            std::string_view(e.what()).starts_with("fuzz.json: byte " + std::to_string(e.offset()) + ": "));
        return 0;
    }
    // From here on nothing may throw: the writer's output must always be valid JSON.
    const std::string compact = json::dump(parsed);
    const json::value back = json::parse(compact, "compact");
    require(identical(parsed, back));
    require(json::dump(back) == compact);
    require(identical(parsed, json::parse(json::dump(parsed, 2), "indented")));
    require(back == parsed);

    // Allowing duplicate keys accepts everything the default accepts, with the same result.
    json::parse_options lenient;
    lenient.allow_duplicate_keys = true;
    require(identical(parsed, json::parse(text, "lenient", lenient)));
    return 0;
}
