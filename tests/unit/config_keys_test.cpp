#include "config/keys.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace fk::config;

namespace {

struct doc_row {
    std::string type, range, default_cell;
};

std::vector<std::string> cells(const std::string& line) {
    std::vector<std::string> out;
    std::size_t start = 1;
    while (true) {
        const auto bar = line.find(" |", start);
        if (bar == std::string::npos)
            break;
        std::string cell = line.substr(start, bar - start);
        const auto b = cell.find_first_not_of(' ');
        out.push_back(b == std::string::npos ? "" : cell.substr(b));
        start = bar + 2;
    }
    return out;
}

// The key tables of docs/configuration.md ("### Top level", "### `limits`...", ...):
// path → its type, range and default cells.
std::map<std::string, doc_row> documented_keys() {
    std::ifstream in(FK_SOURCE_DIR "/docs/configuration.md");
    REQUIRE(in);
    std::map<std::string, doc_row> rows;
    std::string line, prefix;
    bool in_keys = false;
    while (std::getline(in, line)) {
        if (line.rfind("### ", 0) == 0) {
            in_keys = true;
            if (line == "### Top level") {
                prefix = "";
            } else if (line.rfind("### `", 0) == 0) {
                prefix = line.substr(5, line.find('`', 5) - 5) + ".";
            } else {
                in_keys = false;
            }
            continue;
        }
        if (line.rfind("## ", 0) == 0)
            in_keys = false;
        if (!in_keys || line.rfind("| `", 0) != 0)
            continue;
        const auto c = cells(line);
        REQUIRE(c.size() >= 4);
        const std::string key = c[0].substr(1, c[0].find('`', 1) - 1);
        CHECK_MESSAGE(rows.count(prefix + key) == 0, "documented twice: ", prefix + key);
        rows[prefix + key] = doc_row{c[1], c[2], c[3]};
    }
    return rows;
}

} // namespace

TEST_CASE("docs/configuration.md documents exactly the keys of the code's table") {
    const auto docs = documented_keys();
    std::set<std::string> in_code, in_docs;
    for (const auto& k : config_keys())
        in_code.insert(std::string(k.path));
    for (const auto& [path, row] : docs)
        in_docs.insert(path);
    CHECK(in_docs == in_code);
    CHECK(in_code.size() >= 30);
}

TEST_CASE("docs/configuration.md: each key's type, range and default are the code's") {
    const auto docs = documented_keys();
    for (const auto& k : config_keys()) {
        const std::string path(k.path);
        CAPTURE(path);
        const auto row = docs.find(path);
        if (row == docs.end())
            continue; // reported by the test above
        CHECK(row->second.type == to_string(k.type));
        CHECK(row->second.range == range_text(k));
        // The default cell may add a note in parentheses: "`10000` (10 s)".
        const std::string expected = default_text(k);
        const std::string& cell = row->second.default_cell;
        if (expected.empty()) {
            CHECK(cell.empty());
        } else {
            CHECK_MESSAGE(cell.rfind(expected, 0) == 0, cell, " vs ", expected);
            const std::string rest = cell.substr(std::min(cell.size(), expected.size()));
            CHECK((rest.empty() || rest.rfind(" (", 0) == 0));
        }
    }
}

TEST_CASE("the table's defaults are the settings' defaults and pass its own validation") {
    for (const auto& k : config_keys()) {
        CAPTURE(k.path);
        CHECK_FALSE(k.description.empty());
        if (!k.value || !k.apply)
            continue;
        const nlohmann::json v = k.value(settings{});
        if (v.is_null() || !k.default_note.empty())
            continue; // no default, or one chosen at run time (not a valid config value)
        settings s;
        CHECK_FALSE(k.apply(v, std::string(k.path), s).has_value());
        CHECK(k.value(s) == v);
    }
}

TEST_CASE("integer keys reject one past each end of their range") {
    for (const auto& k : config_keys()) {
        if (k.type != key_type::integer)
            continue;
        CAPTURE(k.path);
        settings s;
        CHECK(k.apply(nlohmann::json(k.min - 1), "x", s).has_value());
        CHECK(k.apply(nlohmann::json(k.max + 1), "x", s).has_value());
        CHECK_FALSE(k.apply(nlohmann::json(k.min), "x", s).has_value());
        CHECK(k.value(s) == k.min);
        CHECK_FALSE(k.apply(nlohmann::json(k.max), "x", s).has_value());
        CHECK(k.value(s) == k.max);
    }
}
