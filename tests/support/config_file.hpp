#pragma once
// A config file in the temp directory for one test, removed when it goes out of scope.
// Header-only: the config unit tests link nothing from tests/support.

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>

namespace fk_test {

struct config_file {
    std::filesystem::path path;
    // `tag` names the test file in the path, so that a leftover says whose it is.
    config_file(std::string_view tag, std::string_view content) {
        static int counter = 0;
        path = std::filesystem::temp_directory_path() /
               ("fk-config-" + std::string(tag) + "-test-" + std::to_string(::getpid()) + "-" +
                std::to_string(++counter) + ".json");
        std::ofstream(path, std::ios::binary) << content;
    }
    ~config_file() {
        std::error_code ec;
        std::filesystem::remove(path, ec);
    }
    config_file(const config_file&) = delete;
    config_file& operator=(const config_file&) = delete;
};

} // namespace fk_test
