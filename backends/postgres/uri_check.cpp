#include "backends/postgres/uri_check.hpp"

#include <libpq-fe.h>

namespace fk::store::pg {

std::optional<std::string> check_conninfo(const std::string& uri) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(uri.c_str(), &err);
    if (opts) {
        PQconninfoFree(opts);
        return std::nullopt;
    }
    std::string message = err ? err : "out of memory";
    PQfreemem(err);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
        message.pop_back();
    return message;
}

} // namespace fk::store::pg
