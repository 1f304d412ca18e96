#include "fence/rfc3339.hpp"

#include <chrono>

namespace fk::fence {

namespace {

void append_digits(std::string& out, unsigned value, int width) {
    char buf[4];
    for (int i = width - 1; i >= 0; --i) {
        buf[i] = static_cast<char>('0' + value % 10);
        value /= 10;
    }
    out.append(buf, static_cast<std::size_t>(width));
}

} // namespace

void append_rfc3339_ms(std::string& out, std::int64_t unix_ms) {
    using namespace std::chrono;
    // Calendar arithmetic only (no gmtime, no locale): cheap enough for every log line.
    const sys_time<milliseconds> tp{milliseconds{unix_ms}};
    const auto day = floor<days>(tp);
    const year_month_day ymd{day};
    const hh_mm_ss<milliseconds> tod{tp - day};
    append_digits(out, static_cast<unsigned>(static_cast<int>(ymd.year())), 4);
    out += '-';
    append_digits(out, static_cast<unsigned>(ymd.month()), 2);
    out += '-';
    append_digits(out, static_cast<unsigned>(ymd.day()), 2);
    out += 'T';
    append_digits(out, static_cast<unsigned>(tod.hours().count()), 2);
    out += ':';
    append_digits(out, static_cast<unsigned>(tod.minutes().count()), 2);
    out += ':';
    append_digits(out, static_cast<unsigned>(tod.seconds().count()), 2);
    out += '.';
    append_digits(out, static_cast<unsigned>(tod.subseconds().count()), 3);
    out += 'Z';
}

std::string format_rfc3339_ms(std::int64_t unix_ms) {
    std::string out;
    out.reserve(24);
    append_rfc3339_ms(out, unix_ms);
    return out;
}

} // namespace fk::fence
