// anvil's ANE simulator: the op signatures of mil_ops.json (embedded by embed_ops.py), resolved for one
// opset: the newest definition at or below it, with the registry diffs of later re-registrations undone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mil_parser.hpp"

namespace anvil_sim::mil {

enum class input_form : std::uint8_t { tensor, scalar, tuple, state, attribute };

struct input_spec {
    std::string name;
    input_form form = input_form::tensor;
    bool must_be_const = false;
    bool optional = false;
    std::string type_id;                   // a shared id from "types" ("T"), empty when the dtype is fixed
    std::vector<dtype> dtypes;             // allowed dtypes; empty = not checked
    std::optional<double> default_number;  // the value coremltools materializes when omitted, if a number
    bool has_default = false;              // coremltools materializes a value when omitted (any kind)
};

struct op_spec {
    std::string name;
    int since = 15;  // first opset (15..18)
    std::vector<input_spec> inputs;
    [[nodiscard]] const input_spec* find(std::string_view input) const;
};

// The op as available in `opset_version` (15..18), nullopt when the table has no such op or it is newer.
// `not_equal`, `less_equal`, `greater_equal` use `equal`'s signature and `reduce_prod` uses `reduce_sum`'s
// (the table lists them only as aliases). Throws sim_failure if the embedded table itself is malformed.
[[nodiscard]] std::optional<op_spec> find_op(std::string_view op, int opset_version);

// The version the op first appears at (15..18), or 0 when the table does not have it.
[[nodiscard]] int op_since(std::string_view op);

}  // namespace anvil_sim::mil
