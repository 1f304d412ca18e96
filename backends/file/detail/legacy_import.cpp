// TEMPORARY (not committed)
#include "backends/file/detail/legacy_import.hpp"
#include <fcntl.h>
#include <unistd.h>
namespace fk::store::detail {
std::optional<open_error> import_legacy_journal(const std::string& root, int root_fd, int) {
    if (::faccessat(root_fd, "journal", F_OK, 0) == 0)
        return open_error{"file store " + root + ": journal conversion not built yet", 1};
    return std::nullopt;
}
} // namespace fk::store::detail
