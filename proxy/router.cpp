#include "proxy/router.hpp"

#include "fence/names.hpp"

#include <boost/beast/core/string.hpp>

#include <array>

namespace fk::proxy {

namespace {

namespace http = boost::beast::http;
using http::verb;

constexpr std::string_view allow_resource = "GET, HEAD, PUT, DELETE";
constexpr std::string_view allow_fence = "GET, HEAD, PUT";
constexpr std::string_view allow_read_only = "GET, HEAD";
constexpr std::string_view allow_post = "POST";

bool is_read(verb m) noexcept {
    return m == verb::get || m == verb::head;
}

bool allowed(route r, verb m) noexcept {
    switch (r) {
    case route::resource:
        return is_read(m) || m == verb::put || m == verb::delete_;
    case route::fence:
    case route::floors:
        return is_read(m) || m == verb::put;
    case route::operation:
    case route::transactions:
        return m == verb::post;
    case route::fences_list:
    case route::healthz:
    case route::readyz:
    case route::metrics:
        return is_read(m);
    case route::not_found:
        break;
    }
    return false;
}

std::string_view allow_of(route r) noexcept {
    switch (r) {
    case route::resource:
        return allow_resource;
    case route::fence:
    case route::floors:
        return allow_fence;
    case route::operation:
    case route::transactions:
        return allow_post;
    case route::fences_list:
    case route::healthz:
    case route::readyz:
    case route::metrics:
        return allow_read_only;
    case route::not_found:
        break;
    }
    return {};
}

bool starts_with_icase(std::string_view s, std::string_view prefix) noexcept {
    return s.size() >= prefix.size() && boost::beast::iequals(s.substr(0, prefix.size()), prefix);
}

// Absolute-form ("http://host:port/path?q") is reduced to origin-form; RFC 9112 §3.2.2
// requires servers to accept it.
std::string_view origin_form(std::string_view target) noexcept {
    for (std::string_view scheme : {std::string_view{"http://"}, std::string_view{"https://"}}) {
        if (starts_with_icase(target, scheme)) {
            auto rest = target.substr(scheme.size());
            auto slash = rest.find_first_of("/?");
            if (slash == std::string_view::npos)
                return "/";
            return rest.substr(slash);
        }
    }
    return target;
}

route_match fail(route_match m, errc e, std::string message) {
    m.error = e;
    m.message = std::move(message);
    return m;
}

std::optional<std::size_t> parse_limit(std::string_view text) noexcept {
    if (text.empty() || text.size() > 7)
        return std::nullopt;
    std::size_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9')
            return std::nullopt;
        v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    if (v < 1 || v > max_list_limit)
        return std::nullopt;
    return v;
}

// The known parameters of a query string, percent-decoded; unknown ones are ignored. A
// malformed escape or a known parameter given twice is an error (its message).
template <std::size_t N> struct query_params {
    std::array<std::optional<std::string>, N> values; // in the order of the names asked for
    std::string error;
};

template <std::size_t N>
query_params<N> read_query(std::string_view query, const std::array<std::string_view, N>& names) {
    query_params<N> out;
    while (!query.empty()) {
        auto amp = query.find('&');
        auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (pair.empty())
            continue;
        auto eq = pair.find('=');
        auto raw_name = pair.substr(0, eq);
        auto raw_value = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);

        auto name = fence::percent_decode(raw_name);
        if (name.error != errc::ok) {
            out.error = "malformed percent-escape in a query parameter name";
            return out;
        }
        std::size_t i = 0;
        while (i < N && names[i] != name.value)
            ++i;
        if (i == N)
            continue;
        if (out.values[i]) {
            out.error = "query parameter '" + name.value + "' given more than once";
            return out;
        }
        auto value = fence::percent_decode(raw_value);
        if (value.error != errc::ok) {
            out.error = "malformed percent-escape in query parameter '" + name.value + "'";
            return out;
        }
        out.values[i] = std::move(value.value);
    }
    return out;
}

// A lock-name prefix: empty (every lock), or valid as a lock name.
bool valid_prefix(std::string_view prefix) noexcept {
    return prefix.empty() || fence::validate_lock_name(prefix) == errc::ok;
}

constexpr std::string_view bad_prefix_message =
    "query parameter 'prefix' is not a valid lock name prefix (UTF-8, no control characters, "
    "at most 1024 bytes)";

// Fills m.query from the listing's query string.
route_match parse_list_query(route_match m, std::string_view query) {
    auto q = read_query<3>(query, {"prefix", "limit", "after"});
    if (!q.error.empty())
        return fail(std::move(m), errc::invalid_request, std::move(q.error));
    auto& [prefix, limit_text, after] = q.values;
    if (limit_text) {
        auto limit = parse_limit(*limit_text);
        if (!limit)
            return fail(std::move(m), errc::invalid_request,
                        "query parameter 'limit' must be an integer from 1 to " +
                            std::to_string(max_list_limit));
        m.query.limit = *limit;
    }
    if (prefix) {
        if (!valid_prefix(*prefix))
            return fail(std::move(m), errc::invalid_request, std::string{bad_prefix_message});
        m.query.prefix = std::move(*prefix);
    }
    // An empty cursor means "from the start".
    if (after && !after->empty()) {
        if (fence::validate_lock_name(*after) != errc::ok)
            return fail(std::move(m), errc::invalid_request,
                        "query parameter 'after' is not a valid lock name");
        m.query.after = std::move(*after);
    }
    return m;
}

// PUT /v1/floors?prefix=P: the prefix into m.name. It is required, so that a request that
// forgot it does not raise the floor of every lock by accident.
route_match parse_floor_query(route_match m, std::string_view query) {
    auto q = read_query<1>(query, {"prefix"});
    if (!q.error.empty())
        return fail(std::move(m), errc::invalid_request, std::move(q.error));
    auto& prefix = q.values[0];
    if (!prefix)
        return fail(std::move(m), errc::invalid_request,
                    "PUT /v1/floors needs the query parameter 'prefix' (pass 'prefix=' to raise "
                    "the floor of every lock)");
    if (!valid_prefix(*prefix))
        return fail(std::move(m), errc::invalid_request, std::string{bad_prefix_message});
    m.name = std::move(*prefix);
    return m;
}

} // namespace

std::string_view to_string(route r) noexcept {
    switch (r) {
    case route::not_found:
        return "not_found";
    case route::resource:
        return "resource";
    case route::fence:
        return "fence";
    case route::fences_list:
        return "fences_list";
    case route::operation:
        return "operation";
    case route::floors:
        return "floors";
    case route::transactions:
        return "transactions";
    case route::healthz:
        return "healthz";
    case route::readyz:
        return "readyz";
    case route::metrics:
        return "metrics";
    }
    return "unknown";
}

route_match match_route(http::verb method, std::string_view target) {
    target = origin_form(target);
    auto qmark = target.find('?');
    std::string_view path = target.substr(0, qmark);
    std::string_view query =
        qmark == std::string_view::npos ? std::string_view{} : target.substr(qmark + 1);

    constexpr std::string_view resources = "/v1/resources/";
    constexpr std::string_view fences = "/v1/fences/";
    constexpr std::string_view operations = "/v1/operations/";

    route_match m;
    std::string_view raw_name;
    if (path == "/healthz")
        m.kind = route::healthz;
    else if (path == "/readyz")
        m.kind = route::readyz;
    else if (path == "/metrics")
        m.kind = route::metrics;
    else if (path == "/v1/fences")
        m.kind = route::fences_list;
    else if (path == "/v1/floors")
        m.kind = route::floors;
    else if (path == "/v1/transactions")
        m.kind = route::transactions;
    else if (path.starts_with(resources)) {
        m.kind = route::resource;
        raw_name = path.substr(resources.size());
    } else if (path.starts_with(fences)) {
        m.kind = route::fence;
        raw_name = path.substr(fences.size());
    } else if (path.starts_with(operations)) {
        m.kind = route::operation;
        raw_name = path.substr(operations.size());
    } else {
        return fail(std::move(m), errc::not_found, "no such route");
    }

    m.allow = allow_of(m.kind);
    if (!allowed(m.kind, method))
        return fail(std::move(m), errc::method_not_allowed,
                    "method not allowed here; allowed: " + std::string{m.allow});

    switch (m.kind) {
    case route::resource: {
        auto key = fence::key_from_path(raw_name);
        if (key.error != errc::ok)
            return fail(std::move(m), key.error,
                        "invalid key: 1 to 1024 bytes of percent-encoded UTF-8 without control "
                        "characters or empty, '.' or '..' segments");
        m.name = std::move(key.value);
        break;
    }
    case route::fence:
    case route::operation: {
        auto name = fence::lock_from_path(raw_name);
        if (name.error != errc::ok)
            return fail(std::move(m), name.error,
                        m.kind == route::fence
                            ? "invalid lock name: 1 to 1024 bytes of percent-encoded UTF-8 "
                              "without control characters"
                            : "invalid operation name");
        m.name = std::move(name.value);
        break;
    }
    case route::fences_list:
        return parse_list_query(std::move(m), query);
    case route::floors:
        // GET takes no parameters: its query string is ignored, as on the other routes.
        if (method == verb::put)
            return parse_floor_query(std::move(m), query);
        break;
    default:
        break;
    }
    return m;
}

} // namespace fk::proxy
