#include "proxy/detail/bad_header.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>

namespace fk::proxy::detail {

namespace {

bool has_control(std::string_view value) noexcept {
    return std::any_of(value.begin(), value.end(), [](char ch) {
        auto c = static_cast<unsigned char>(ch);
        return (c < 0x20 && c != '\t') || c == 0x7f;
    });
}

} // namespace

errc classify_bad_header_value(std::string_view raw) noexcept {
    while (!raw.empty()) {
        auto eol = raw.find("\r\n");
        auto line = raw.substr(0, eol);
        raw = eol == std::string_view::npos ? std::string_view{} : raw.substr(eol + 2);
        if (line.empty())
            break; // end of the head
        auto colon = line.find(':');
        if (colon == std::string_view::npos)
            continue; // the request line, or a line Beast rejects for another reason
        auto name = line.substr(0, colon);
        if (!has_control(line.substr(colon + 1)))
            continue;
        if (boost::beast::iequals(name, "Fencing-Token") ||
            boost::beast::iequals(name, "X-Fencing-Token"))
            return errc::invalid_token;
        if (boost::beast::iequals(name, "Fencing-Lock"))
            return errc::invalid_name;
    }
    return errc::invalid_request;
}

} // namespace fk::proxy::detail
