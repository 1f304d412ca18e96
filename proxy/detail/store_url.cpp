#include "proxy/detail/store_url.hpp"

namespace fk::proxy::detail {

std::string redact_store_url(std::string_view url) {
    if (url.starts_with("file:"))
        return std::string{url};
    for (std::string_view scheme : {"postgresql://", "postgres://"}) {
        if (!url.starts_with(scheme))
            continue;
        auto rest = url.substr(scheme.size());
        rest = rest.substr(0, rest.find_first_of("?#"));
        // The last '@', not the first: a password may contain a raw '@' (libpq accepts
        // it), and cutting too much only hides part of the host.
        if (auto at = rest.rfind('@'); at != std::string_view::npos)
            rest.remove_prefix(at + 1);
        return std::string{scheme} + std::string{rest};
    }
    return "(unrecognised store URL)";
}

} // namespace fk::proxy::detail
