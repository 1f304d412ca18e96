#include "proxy/detail/rfc3339.hpp"

#include <chrono>
#include <cstdio>

namespace fk::proxy::detail {

std::string format_rfc3339_ms(std::int64_t unix_ms) {
    using namespace std::chrono;
    sys_time<milliseconds> tp{milliseconds{unix_ms}};
    auto day = floor<days>(tp);
    year_month_day ymd{day};
    hh_mm_ss<milliseconds> tod{tp - day};
    char buf[40];
    std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", int(ymd.year()),
                  unsigned(ymd.month()), unsigned(ymd.day()), int(tod.hours().count()),
                  int(tod.minutes().count()), int(tod.seconds().count()),
                  int(tod.subseconds().count()));
    return buf;
}

} // namespace fk::proxy::detail
