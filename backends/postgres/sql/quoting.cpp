#include "backends/postgres/sql/quoting.hpp"

namespace fk::store::pg::sql {
namespace {

// `text` between two `q`, each `q` inside doubled.
std::string enclose(std::string_view text, char q) {
    std::string out(1, q);
    for (char c : text) {
        if (c == q)
            out += q;
        out += c;
    }
    out += q;
    return out;
}

} // namespace

std::string quote_literal(std::string_view text) {
    return enclose(text, '\'');
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
    for (std::size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
        text.replace(pos, from.size(), to);
    return text;
}

std::string with_schema(std::string_view templ, std::string_view schema) {
    return replace_all(std::string(templ), "@S", quote_ident(schema));
}

std::string quote_ident(std::string_view ident) {
    return enclose(ident, '"');
}

bool valid_schema_name(std::string_view schema) noexcept {
    if (schema.empty() || schema.size() > 63)
        return false;
    for (char c : schema)
        if (c == '\0' || c == '$')
            return false;
    return true;
}

} // namespace fk::store::pg::sql
