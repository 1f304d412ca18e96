// Fuzzes the JSON config parser and the command line (docs/configuration.md). Neither may crash or
// let an exception out; an accepted config must hold only values the rest of the program
// can live with (every limit in its documented range), a rejected one must leave the
// settings untouched and say why on one line, and a flag must override the file.
//
// Input layout: everything before the first 0xFF byte is the command line, split at NUL
// bytes; everything after it is a JSON document, given both to apply_json directly and
// as the file named by any --config flag. 0xFF never occurs in UTF-8, so no useful
// argument or document needs it.

#include "config/parse.hpp"
#include "config/settings.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace config = fk::config;

// Every field, so that two settings can be compared without operator==.
std::string describe(const config::settings& s) {
    std::ostringstream out;
    out << s.listen_host << '|' << s.listen_port << '|' << s.store << '|' << s.threads << '|'
        << static_cast<int>(s.log_level) << '|' << s.http.max_header_bytes << '|'
        << s.http.max_body_bytes << '|' << s.http.header_timeout.count() << '|'
        << s.http.idle_timeout.count() << '|' << s.http.body_timeout.count() << '|'
        << s.http.write_timeout.count() << '|' << s.http.max_connections << '|' << s.postgres.schema
        << '|' << s.postgres.pool_size << '|' << s.postgres.queue_limit << '|'
        << s.postgres.connect_timeout.count() << '|' << s.postgres.statement_timeout.count() << '|'
        << s.postgres.fence_cache_size << '|' << s.file.fence_cache_size << '|'
        << s.shutdown_timeout.count();
    for (const auto& [name, op] : s.operations)
        out << '|' << name.size() << ':' << name << '=' << op.sql.size() << ':' << op.sql << ':'
            << op.expose_errors;
    return out.str();
}

bool in_range(std::int64_t v, std::int64_t lo, std::int64_t hi) {
    return v >= lo && v <= hi;
}

bool positive_timeout(config::millis m) {
    return in_range(m.count(), 1, 3'600'000);
}

// What any accepted configuration must satisfy, whatever its source.
void check_accepted(const config::settings& s) {
    FK_FUZZ_CHECK(!s.listen_host.empty() && s.listen_host.size() <= 253);
    FK_FUZZ_CHECK(config::parse_store_url(s.store).has_value());
    FK_FUZZ_CHECK(in_range(s.threads, 0, 1024));
    FK_FUZZ_CHECK(config::effective_threads(s) >= 1);
    FK_FUZZ_CHECK(config::effective_pool_size(s) >= 1);
    FK_FUZZ_CHECK(in_range(static_cast<int>(s.log_level), 0, 3));
    FK_FUZZ_CHECK(s.http.max_header_bytes >= 1024 && s.http.max_header_bytes <= 1024 * 1024);
    FK_FUZZ_CHECK(s.http.max_body_bytes >= 1 && s.http.max_body_bytes <= 1024 * 1024 * 1024);
    FK_FUZZ_CHECK(positive_timeout(s.http.header_timeout));
    FK_FUZZ_CHECK(positive_timeout(s.http.idle_timeout));
    FK_FUZZ_CHECK(positive_timeout(s.http.body_timeout));
    FK_FUZZ_CHECK(positive_timeout(s.http.write_timeout));
    FK_FUZZ_CHECK(s.http.max_connections >= 1 && s.http.max_connections <= 1'000'000);
    FK_FUZZ_CHECK(!s.postgres.schema.empty() && s.postgres.schema.size() <= 63);
    FK_FUZZ_CHECK(in_range(s.postgres.pool_size, 0, 1024));
    FK_FUZZ_CHECK(s.postgres.queue_limit <= 1'000'000);
    FK_FUZZ_CHECK(positive_timeout(s.postgres.connect_timeout));
    FK_FUZZ_CHECK(positive_timeout(s.postgres.statement_timeout));
    FK_FUZZ_CHECK(s.postgres.fence_cache_size >= 1 && s.postgres.fence_cache_size <= 10'000'000);
    FK_FUZZ_CHECK(s.file.fence_cache_size >= 1 && s.file.fence_cache_size <= 10'000'000);
    FK_FUZZ_CHECK(positive_timeout(s.shutdown_timeout));
    for (const auto& [name, op] : s.operations) {
        FK_FUZZ_CHECK(!name.empty() && name.size() <= 64);
        // libpq takes the SQL as a C string.
        FK_FUZZ_CHECK(op.sql.find('\0') == std::string::npos);
        FK_FUZZ_CHECK(op.sql.find_first_not_of(" \t\r\n") != std::string::npos);
    }
}

// The caller prints the message and exits 2: it must say something, on one line.
void check_message(const config::parse_error& e) {
    FK_FUZZ_CHECK(!e.message.empty());
    FK_FUZZ_CHECK(std::none_of(e.message.begin(), e.message.end(),
                               [](char c) { return c == '\n' || c == '\r' || c == '\0'; }));
}

void fuzz_apply_json(std::string_view doc) {
    config::settings s;
    const std::string before = describe(s);
    const auto error = config::apply_json(doc, s);
    if (error) {
        check_message(*error);
        FK_FUZZ_CHECK(describe(s) == before); // a rejected document changes nothing
        return;
    }
    check_accepted(s);
    // Applying the same document again is a no-op: keys set values, they don't accumulate.
    config::settings again = s;
    FK_FUZZ_CHECK(!config::apply_json(doc, again));
    FK_FUZZ_CHECK(describe(again) == describe(s));
}

const std::string& config_path() {
    static const std::string path = [] {
        const char* dir = std::getenv("TMPDIR");
        return std::string(dir && *dir ? dir : "/tmp") + "/fk_fuzz_config_" +
               std::to_string(::getpid()) + ".json";
    }();
    return path;
}

std::string flag_of(const std::string& arg) {
    return arg.substr(0, arg.find('='));
}

// Points every --config at the file holding the document, so that the fuzzer can never
// make the parser read /dev/stdin, a FIFO or the fuzzer's own files. Mirrors how the
// parser takes a flag's value: "--flag=value", or the next argument unless it starts
// with "--".
bool redirect_config(std::vector<std::string>& args) {
    bool any = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i].size() < 3 || args[i].compare(0, 2, "--") != 0)
            continue;
        if (flag_of(args[i]) != "--config")
            continue;
        any = true;
        if (args[i].find('=') != std::string::npos)
            args[i] = "--config=" + config_path();
        else if (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0)
            args[++i] = config_path();
    }
    return any;
}

// The value of the last occurrence of `flag`, taken the way the parser takes it.
std::optional<std::string> last_value(const std::vector<std::string>& args, const char* flag) {
    std::optional<std::string> found;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
            continue;
        const auto eq = arg.find('=');
        const std::string name = arg.substr(0, eq);
        std::optional<std::string> value;
        if (eq != std::string::npos)
            value = arg.substr(eq + 1);
        else if (name != "--help" && name != "--version" && i + 1 < args.size() &&
                 args[i + 1].compare(0, 2, "--") != 0)
            value = args[++i];
        if (name == flag)
            found = value;
    }
    return found;
}

void fuzz_command_line(std::vector<std::string> args, std::string_view doc) {
    if (redirect_config(args)) {
        std::ofstream(config_path(), std::ios::binary | std::ios::trunc)
            .write(doc.data(), static_cast<std::streamsize>(doc.size()));
    }
    const auto result = config::parse_command_line(args);
    if (const auto* error = std::get_if<config::parse_error>(&result)) {
        check_message(*error);
        return;
    }
    const auto& cl = std::get<config::command_line>(result);
    if (cl.show_help || cl.show_version)
        return;
    check_accepted(cl.values);
    // A flag overrides the file: the last --listen / --store / --log-level wins.
    if (const auto listen = last_value(args, "--listen")) {
        const auto hp = config::parse_listen(*listen);
        FK_FUZZ_CHECK(hp.has_value());
        FK_FUZZ_CHECK(hp->first == cl.values.listen_host && hp->second == cl.values.listen_port);
    }
    if (const auto store = last_value(args, "--store"))
        FK_FUZZ_CHECK(*store == cl.values.store);
    if (const auto threads = last_value(args, "--threads")) {
        const auto digits = threads->find_first_not_of('0'); // "007" means 7
        FK_FUZZ_CHECK(digits != std::string::npos);
        FK_FUZZ_CHECK(std::to_string(cl.values.threads) == threads->substr(digits));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const auto split = input.find('\xff');
    const std::string_view line = input.substr(0, split);
    const std::string_view doc = split == std::string_view::npos ? input : input.substr(split + 1);

    fuzz_apply_json(doc);

    // parse_listen on its own: an accepted address has a non-empty host.
    if (const auto hp = config::parse_listen(line))
        FK_FUZZ_CHECK(!hp->first.empty());

    if (split != std::string_view::npos) {
        std::vector<std::string> args;
        std::size_t start = 0;
        while (start <= line.size() && args.size() < 64) {
            const auto nul = line.find('\0', start);
            args.emplace_back(line.substr(start, nul - start));
            if (nul == std::string_view::npos)
                break;
            start = nul + 1;
        }
        if (line.empty())
            args.clear();
        fuzz_command_line(std::move(args), doc);
    }
    return 0;
}
