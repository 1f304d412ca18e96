#include "backends/file/detail/crc32c.hpp"

#include "backends/file/detail/sys.hpp"

#include <array>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fk::store::detail {

namespace {

// Slicing-by-8 tables for the reflected polynomial 0x82F63B78.
constexpr auto make_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[0][i] = c;
    }
    for (std::size_t s = 1; s < 8; ++s)
        for (std::size_t i = 0; i < 256; ++i)
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
}

constexpr auto tables = make_tables();

} // namespace

std::uint32_t crc32c(std::uint32_t crc, std::string_view data) noexcept {
    auto p = reinterpret_cast<const unsigned char*>(data.data());
    std::size_t n = data.size();
    std::uint32_t c = ~crc;
    while (n >= 8) {
        std::uint32_t lo = c ^ (std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 |
                                std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24);
        c = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^
            tables[4][lo >> 24] ^ tables[3][p[4]] ^ tables[2][p[5]] ^ tables[1][p[6]] ^
            tables[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ tables[0][(c ^ *p++) & 0xFF];
    return ~c;
}

int file_matches(int dir, const std::string& name, std::uint64_t size, std::uint32_t crc,
                 bool& ok) {
    ok = false;
    unique_fd fd(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd)
        return errno == ENOENT ? 0 : errno;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return errno;
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != size)
        return 0;
    std::string buf(1 << 20, '\0');
    std::uint32_t c = 0;
    for (;;) {
        ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            break;
        c = crc32c(c, std::string_view(buf.data(), static_cast<std::size_t>(n)));
    }
    ok = c == crc;
    return 0;
}

} // namespace fk::store::detail
