#include "proxy/detail/wire.hpp"

#include <boost/beast/http/status.hpp>

namespace fk::proxy::detail {

bool plain_framing(const response& res) {
    return !res.chunked();
}

void append_head(std::string& out, const response& res) {
    const unsigned version = res.version();
    const unsigned code = res.result_int();
    const char line[] = {'H',
                         'T',
                         'T',
                         'P',
                         '/',
                         static_cast<char>('0' + version / 10 % 10),
                         '.',
                         static_cast<char>('0' + version % 10),
                         ' ',
                         static_cast<char>('0' + code / 100 % 10),
                         static_cast<char>('0' + code / 10 % 10),
                         static_cast<char>('0' + code % 10),
                         ' '};
    out.append(line, sizeof line);
    auto reason = res.reason();
    if (reason.empty())
        reason = http::obsolete_reason(static_cast<http::status>(code));
    out.append(reason.data(), reason.size());
    out += "\r\n";
    for (const auto& f : res) {
        const auto name = f.name_string();
        const auto value = f.value();
        out.append(name.data(), name.size());
        out += ": ";
        out.append(value.data(), value.size());
        out += "\r\n";
    }
    out += "\r\n";
}

} // namespace fk::proxy::detail
