#pragma once
// Quoting for SQL text we build ourselves (identifiers, literals) and the schema-name
// rule. Pure; safe from any thread.

#include <string>
#include <string_view>

namespace fk::store::pg::sql {

// A double-quoted SQL identifier.
std::string quote_ident(std::string_view ident);
// A single-quoted SQL literal (standard_conforming_strings: only quotes are doubled).
std::string quote_literal(std::string_view text);
// Schema names we accept: 1..63 bytes, no NUL and no '$' (the migration uses dollar
// quoting).
bool valid_schema_name(std::string_view schema) noexcept;
// Every `from` in `text` replaced by `to`.
std::string replace_all(std::string text, std::string_view from, std::string_view to);
// SQL templates use @S for the quoted schema, so that they read like the SQL they are.
std::string with_schema(std::string_view templ, std::string_view schema);

} // namespace fk::store::pg::sql
