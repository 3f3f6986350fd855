// anvil's ANE simulator: the MIL text tokenizer and recursive-descent parser (grammar of MIL.md §1.3-§1.4).
#include "mil_parser.hpp"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace anvil_sim::mil {

namespace {

constexpr std::array<std::string_view, 19> dtype_names = {
    "fp16",  "fp32",  "fp64",  "int4",  "int8",   "int16",  "int32",  "int64", "uint1", "uint2",
    "uint3", "uint4", "uint6", "uint8", "uint16", "uint32", "uint64", "bool",  "string"};

}  // namespace

std::string_view dtype_name(dtype type) {
    return dtype_names[static_cast<std::size_t>(type)];
}

std::optional<dtype> dtype_from_name(std::string_view name) {
    for (std::size_t i = 0; i < dtype_names.size(); ++i)
        if (dtype_names[i] == name) return static_cast<dtype>(i);
    return std::nullopt;
}

bool is_float(dtype type) {
    return type == dtype::fp16 || type == dtype::fp32 || type == dtype::fp64;
}

std::string type_text(const tensor_type& type) {
    std::ostringstream out;
    if (type.is_state) out << "state<";
    out << "tensor<" << dtype_name(type.type) << ", [";
    for (std::size_t i = 0; i < type.shape.size(); ++i) {
        if (i) out << ", ";
        if (type.shape[i] < 0)
            out << '?';
        else
            out << type.shape[i];
    }
    out << "]>";
    if (type.is_state) out << '>';
    return out.str();
}

namespace {

enum class token_kind : std::uint8_t { identifier, number, string, punct, end };

struct token {
    token_kind kind = token_kind::end;
    std::string text;  // identifier, number spelling, decoded string, or the punctuation
    int line = 0;
};

[[noreturn]] void fail(int line, const std::string& what) {
    throw sim_failure(codes::invalid_mil, "line " + std::to_string(line) + ": " + what);
}

bool is_ident_start(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_ident_char(char c) {
    return is_ident_start(c) || is_digit(c) || c == '@';
}

std::vector<token> tokenize(std::string_view text) {
    std::vector<token> tokens;
    int line = 1;
    std::size_t at = 0;
    while (at < text.size()) {
        const char c = text[at];
        if (c == '\n') {
            ++line;
            ++at;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            ++at;
            continue;
        }
        if (c == '/' && at + 1 < text.size() && text[at + 1] == '/') {  // not in coremlc output; harmless
            while (at < text.size() && text[at] != '\n')
                ++at;
            continue;
        }
        token t;
        t.line = line;
        if (is_ident_start(c)) {
            std::size_t end = at;
            while (end < text.size() && is_ident_char(text[end]))
                ++end;
            t.kind = token_kind::identifier;
            t.text = std::string(text.substr(at, end - at));
            at = end;
        } else if (is_digit(c) || ((c == '-' || c == '+') && at + 1 < text.size() &&
                                   (is_digit(text[at + 1]) || text[at + 1] == 'i' || text[at + 1] == 'n'))) {
            // decimal, C99 hex float (0x1.5p-17), or a signed inf/nan
            std::size_t end = at + 1;
            const bool hex = is_digit(c)
                                 ? (c == '0' && end < text.size() && (text[end] == 'x' || text[end] == 'X'))
                                 : (text.substr(at + 1, 2) == "0x" || text.substr(at + 1, 2) == "0X");
            while (end < text.size()) {
                const char d = text[end];
                const char prev = text[end - 1];
                const bool exponent_sign = (d == '+' || d == '-') && (hex ? (prev == 'p' || prev == 'P')
                                                                          : (prev == 'e' || prev == 'E'));
                if (is_digit(d) || is_ident_start(d) || d == '.' || exponent_sign)
                    ++end;
                else
                    break;
            }
            t.kind = token_kind::number;
            t.text = std::string(text.substr(at, end - at));
            at = end;
        } else if (c == '"') {
            std::size_t end = at + 1;
            std::string decoded;
            while (true) {
                if (end >= text.size() || text[end] == '\n') fail(line, "unterminated string literal");
                if (text[end] == '"') break;
                if (text[end] == '\\') {
                    if (end + 1 >= text.size()) fail(line, "unterminated string literal");
                    const char e = text[end + 1];
                    decoded += e == 'n' ? '\n' : e == 't' ? '\t' : e;
                    end += 2;
                    continue;
                }
                decoded += text[end++];
            }
            t.kind = token_kind::string;
            t.text = std::move(decoded);
            at = end + 1;
        } else if (c == '-' && at + 1 < text.size() && text[at + 1] == '>') {
            t.kind = token_kind::punct;
            t.text = "->";
            at += 2;
        } else if (std::string_view("()[]{}<>,=;?").find(c) != std::string_view::npos) {
            t.kind = token_kind::punct;
            t.text = std::string(1, c);
            ++at;
        } else {
            std::ostringstream what;
            what << "unexpected character ";
            if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f)
                what << "'" << c << "'";
            else
                what << "0x" << std::hex << static_cast<int>(static_cast<unsigned char>(c));
            fail(line, what.str());
        }
        tokens.push_back(std::move(t));
    }
    token end;
    end.line = line;
    tokens.push_back(end);
    return tokens;
}

class parser {
public:
    explicit parser(std::string_view text) : tokens_(tokenize(text)) {}

    program_text run() {
        program_text program;
        expect_word("program");
        expect("(");
        const token& version = next();
        if (version.kind != token_kind::number || (version.text != "1.0" && version.text != "1.3"))
            fail(version.line,
                 "program version '" + version.text + "' is not supported (expected 1.0 or 1.3)");
        program.version = version.text;
        short_scalars_ = program.version == "1.3";
        expect(")");
        if (peek_is("[")) skip_attribute_list();
        expect("{");
        while (!peek_is("}")) {
            if (peek().kind == token_kind::end) fail(peek().line, "missing '}' at the end of the program");
            program.functions.push_back(parse_function());
        }
        expect("}");
        if (peek().kind != token_kind::end)
            fail(peek().line, "unexpected '" + peek().text + "' after the program");
        return program;
    }

private:
    static constexpr int max_nesting = 32;

    const token& peek(std::size_t ahead = 0) const {
        const std::size_t at = std::min(position_ + ahead, tokens_.size() - 1);
        return tokens_[at];
    }
    const token& next() {
        const token& t = peek();
        if (position_ + 1 < tokens_.size()) ++position_;
        return t;
    }
    bool peek_is(std::string_view punct, std::size_t ahead = 0) const {
        const token& t = peek(ahead);
        return t.kind == token_kind::punct && t.text == punct;
    }
    static std::string describe(const token& t) {
        switch (t.kind) {
            case token_kind::end:
                return "the end of the text";
            case token_kind::string:
                return "string \"" + t.text + "\"";
            default:
                return "'" + t.text + "'";
        }
    }
    void expect(std::string_view punct) {
        const token& t = next();
        if (t.kind != token_kind::punct || t.text != punct)
            fail(t.line, "expected '" + std::string(punct) + "', found " + describe(t));
    }
    void expect_word(std::string_view word) {
        const token& t = next();
        if (t.kind != token_kind::identifier || t.text != word)
            fail(t.line, "expected '" + std::string(word) + "', found " + describe(t));
    }
    std::string identifier(std::string_view what) {
        const token& t = next();
        if (t.kind != token_kind::identifier)
            fail(t.line, "expected " + std::string(what) + ", found " + describe(t));
        return t.text;
    }

    // Program and function attributes (buildInfo, FlexibleShapeInformation): checked for balance, not kept.
    void skip_attribute_list() {
        const int line = peek().line;
        int depth = 0;
        do {
            const token& t = next();
            if (t.kind == token_kind::end) fail(line, "unterminated attribute list '['");
            if (t.kind == token_kind::punct) {
                if (t.text == "[" || t.text == "(" || t.text == "{") ++depth;
                if (t.text == "]" || t.text == ")" || t.text == "}") --depth;
            }
        } while (depth > 0);
    }

    function parse_function() {
        function f;
        f.line = peek().line;
        expect_word("func");
        f.name = identifier("a function name");
        expect("<");
        const token& opset = next();
        if (opset.kind != token_kind::identifier || opset.text.size() != 5 ||
            opset.text.rfind("ios", 0) != 0 || opset.text[3] != '1' || opset.text[4] < '5' ||
            opset.text[4] > '8')
            fail(opset.line, "function '" + f.name + "': opset " + describe(opset) +
                                 " is not one of ios15, ios16, ios17, ios18");
        f.opset = opset.text;
        f.opset_version = 10 + (opset.text[4] - '0');
        expect(">");
        expect("(");
        while (!peek_is(")")) {
            if (!f.params.empty()) expect(",");
            named_type param;
            param.line = peek().line;
            param.type = parse_type(0);
            param.name = identifier("a parameter name");
            f.params.push_back(std::move(param));
        }
        expect(")");
        if (peek_is("[")) skip_attribute_list();
        expect("{");
        while (!peek_is("}")) {
            if (peek().kind == token_kind::end)
                fail(peek().line, "function '" + f.name + "' is not closed by '}'");
            f.statements.push_back(parse_statement());
        }
        expect("}");
        f.return_line = peek().line;
        expect("->");
        expect("(");
        while (!peek_is(")")) {
            if (!f.returns.empty()) expect(",");
            f.returns.push_back(identifier("a returned value name"));
        }
        expect(")");
        expect(";");
        return f;
    }

    // True when the next tokens start a type: tensor<, state<, or a bare dtype (1.3 scalars).
    bool at_type() const {
        const token& t = peek();
        if (t.kind != token_kind::identifier) return false;
        if ((t.text == "tensor" || t.text == "state") && peek_is("<", 1)) return true;
        return dtype_from_name(t.text).has_value();
    }

    tensor_type parse_type(int depth) {
        if (depth > max_nesting) fail(peek().line, "types nested too deeply");
        const token& t = next();
        if (t.kind != token_kind::identifier) fail(t.line, "expected a type, found " + describe(t));
        if (t.text == "state") {
            expect("<");
            tensor_type inner = parse_type(depth + 1);
            if (inner.is_state) fail(t.line, "state<state<...>> is not a type");
            inner.is_state = true;
            expect(">");
            return inner;
        }
        if (t.text == "tensor") {
            expect("<");
            tensor_type type;
            type.type = parse_dtype();
            expect(",");
            expect("[");
            while (!peek_is("]")) {
                if (!type.shape.empty()) expect(",");
                const token& dim = next();
                if (dim.kind == token_kind::punct && dim.text == "?") {
                    type.shape.push_back(-1);
                    continue;
                }
                if (dim.kind != token_kind::number ||
                    dim.text.find_first_not_of("0123456789") != std::string::npos || dim.text.size() > 12)
                    fail(dim.line,
                         "expected a dimension (a non-negative integer or '?'), found " + describe(dim));
                type.shape.push_back(std::stoll(dim.text));
                if (type.shape.size() > 64) fail(dim.line, "a type with more than 64 dimensions");
            }
            expect("]");
            expect(">");
            return type;
        }
        const auto scalar = dtype_from_name(t.text);
        if (!scalar)
            fail(t.line, "expected a type (tensor<...>, state<...> or a dtype), found " + describe(t));
        if (!short_scalars_)
            fail(t.line, "the short scalar type '" + t.text +
                             "' needs program(1.3); program(1.0) spells it tensor<" + t.text + ", []>");
        return tensor_type{*scalar, {}, false};
    }

    dtype parse_dtype() {
        const token& t = next();
        const auto type = t.kind == token_kind::identifier ? dtype_from_name(t.text) : std::nullopt;
        if (!type) fail(t.line, "unknown dtype " + describe(t));
        return *type;
    }

    statement parse_statement() {
        statement s;
        s.line = peek().line;
        const bool output_less = peek().kind == token_kind::identifier && peek_is("(", 1);
        if (!output_less) {
            do {
                if (!s.outputs.empty()) expect(",");
                named_type out;
                out.line = peek().line;
                if (!at_type())
                    fail(peek().line,
                         "expected a statement (type name = op(...)), found " + describe(peek()));
                out.type = parse_type(0);
                out.name = identifier("an output name");
                s.outputs.push_back(std::move(out));
            } while (peek_is(","));
            expect("=");
        }
        s.op = identifier("an op name");
        expect("(");
        while (!peek_is(")")) {
            if (!s.inputs.empty()) expect(",");
            s.inputs.push_back(parse_named_argument());
        }
        expect(")");
        if (peek_is("[")) {
            next();
            while (!peek_is("]")) {
                if (!s.attributes.empty()) expect(",");
                s.attributes.push_back(parse_named_argument());
            }
            expect("]");
        }
        expect(";");
        return s;
    }

    std::pair<std::string, argument> parse_named_argument() {
        std::string name = identifier("an argument name");
        expect("=");
        argument arg;
        arg.line = peek().line;
        if (peek_is("(")) {
            next();
            arg.form = argument::kind::tuple;
            while (!peek_is(")")) {
                if (!arg.tuple_names.empty()) expect(",");
                arg.tuple_names.push_back(identifier("a value name in a tuple"));
            }
            expect(")");
        } else if (at_type() && (peek().text == "tensor" || peek().text == "state" || peek_is("(", 1))) {
            arg.form = argument::kind::literal;
            arg.value = parse_literal();
        } else {
            arg.form = argument::kind::name;
            arg.name = identifier("a value name or a literal");
        }
        return {std::move(name), std::move(arg)};
    }

    literal parse_literal() {
        literal lit;
        lit.line = peek().line;
        lit.type = parse_type(0);
        expect("(");
        if (peek().kind == token_kind::identifier && peek().text == "BLOBFILE") {
            next();
            expect("(");
            bool have_path = false;
            bool have_offset = false;
            while (!peek_is(")")) {
                if (have_path || have_offset) expect(",");
                const token& key = next();
                expect("=");
                const literal inner = parse_literal();
                if (key.text == "path" && inner.type.type == dtype::string && inner.type.shape.empty()) {
                    lit.blob_path = inner.text;
                    have_path = true;
                } else if (key.text == "offset" && inner.type.shape.empty() && !is_float(inner.type.type) &&
                           inner.type.type != dtype::string && inner.numbers.size() == 1 &&
                           inner.numbers[0] >= 0 && inner.numbers[0] < 0x1p64) {  // a uint64, cast safely
                    lit.blob_offset = static_cast<std::uint64_t>(inner.numbers[0]);
                    have_offset = true;
                } else {
                    fail(key.line,
                         "BLOBFILE takes path = string and offset = uint64, found " + describe(key));
                }
            }
            expect(")");
            if (!have_path || !have_offset) fail(lit.line, "BLOBFILE needs both path and offset");
            lit.is_blobfile = true;
        } else {
            parse_values(lit, 0);
            std::size_t expected = 1;
            for (std::int64_t d : lit.type.shape) {
                if (d < 0)
                    fail(lit.line, "a literal of type " + type_text(lit.type) + " has an unknown dimension");
                expected = d == 0 ? 0 : expected * static_cast<std::size_t>(d);
                if (expected > (std::size_t{1} << 26)) fail(lit.line, "literal too large");
            }
            const std::size_t got = lit.type.type == dtype::string ? 1 : lit.numbers.size();
            if (got != expected)
                fail(lit.line, "literal of type " + type_text(lit.type) + " has " + std::to_string(got) +
                                   " values, expected " + std::to_string(expected));
        }
        expect(")");
        return lit;
    }

    void parse_values(literal& lit, int depth) {
        if (depth > max_nesting) fail(peek().line, "literal arrays nested too deeply");
        if (peek_is("[")) {
            next();
            bool first = true;
            while (!peek_is("]")) {
                if (!first) expect(",");
                first = false;
                parse_values(lit, depth + 1);
            }
            expect("]");
            return;
        }
        const token& t = next();
        const dtype type = lit.type.type;
        if (type == dtype::string) {
            if (t.kind != token_kind::string || depth != 0 || !lit.type.shape.empty())
                fail(t.line,
                     "a string literal is a rank-0 tensor<string, []> holding \"...\", found " + describe(t));
            lit.text = t.text;
            return;
        }
        if (type == dtype::boolean) {
            if (t.kind != token_kind::identifier || (t.text != "true" && t.text != "false"))
                fail(t.line, "expected true or false, found " + describe(t));
            lit.numbers.push_back(t.text == "true" ? 1.0 : 0.0);
            return;
        }
        const std::string& spelling = t.text;
        const bool special = t.kind == token_kind::identifier && (t.text == "inf" || t.text == "nan");
        if (!special && t.kind != token_kind::number)
            fail(t.line, "expected a number for a " + std::string(dtype_name(type)) + " literal, found " +
                             describe(t));
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(spelling.c_str(), &end);
        if (end != spelling.c_str() + spelling.size())
            fail(t.line,
                 "malformed number '" + spelling + "' in a " + std::string(dtype_name(type)) + " literal");
        if (!is_float(type) && (std::floor(v) != v || !std::isfinite(v)))
            fail(t.line,
                 "integer literal of type " + std::string(dtype_name(type)) + " holds '" + spelling + "'");
        lit.numbers.push_back(v);
    }

    std::vector<token> tokens_;
    std::size_t position_ = 0;
    bool short_scalars_ = false;
};

}  // namespace

program_text parse(std::string_view text) {
    return parser(text).run();
}

}  // namespace anvil_sim::mil
