#pragma once
// The config file's keys, in one table: the JSON validation (config/parse.hpp) walks it,
// and a unit test checks docs/configuration.md's key tables against it. A key's default
// is the value a default-constructed `settings` holds (config/settings.hpp).

#include "config/settings.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::config {

struct parse_error {
    std::string message; // names the flag or key and says what is wrong
};

enum class key_type { integer, string, boolean, object, array };
std::string_view to_string(key_type t) noexcept; // "integer", ... as the docs write it

struct config_key {
    std::string_view path; // "limits.max_body_bytes"; a section is its own key ("limits")
    key_type type = key_type::object;
    std::int64_t min = 0, max = 0; // integers: the accepted range, inclusive
    std::string_view range;        // other types: what is accepted, in the docs' words
    // When the default is not simply the settings' value (a section, a value chosen at
    // run time): the docs' wording of it; else empty.
    std::string_view default_note;
    std::string_view description;
    // Validates `v` (a key of a section) and stores it into `s`; path is for messages.
    // Empty for the sections that apply_json walks through key by key.
    std::function<std::optional<parse_error>(const nlohmann::json& v, const std::string& path,
                                             settings& s)>
        apply;
    // The value in `s`; null when unset. Empty for sections.
    std::function<nlohmann::json(const settings& s)> value;
};

const std::vector<config_key>& config_keys();
const config_key* find_key(std::string_view path) noexcept;

// The range and the default as docs/configuration.md writes them: "1 to 3600000",
// "`16384`", "`\"info\"`", "none", "".
std::string range_text(const config_key& k);
std::string default_text(const config_key& k);

} // namespace fk::config
