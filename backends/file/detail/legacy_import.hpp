#pragma once
// TEMPORARY (not committed): replaced by the helper's legacy import.
#include "backends/make_store.hpp"
#include <optional>
#include <string>
namespace fk::store::detail {
std::optional<open_error> import_legacy_journal(const std::string& root, int root_fd,
                                                int objects_fd);
}
