#include "backends/postgres/idem_expiry.hpp"

#include "backends/log/logging.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"

#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace fk::store::pg {

std::chrono::milliseconds expiry_period(std::chrono::seconds retention) noexcept {
    using ms = std::chrono::milliseconds;
    return std::clamp<ms>(std::chrono::duration_cast<ms>(retention) / 2, ms(1000), ms(60'000));
}

idem_expiry::idem_expiry(std::shared_ptr<pool> p, std::chrono::seconds retention)
    : pool_(std::move(p)), retention_(retention), timer_(pool_->strand()) {}

void idem_expiry::start() {
    net::co_spawn(pool_->strand(), loop(), net::detached);
}

void idem_expiry::stop() {
    net::post(pool_->strand(), [self = shared_from_this()] { self->timer_.cancel(); });
}

net::awaitable<void> idem_expiry::loop() {
    auto self = shared_from_this();
    const auto period = expiry_period(retention_);
    const auto params = sql::idem_expire_params(retention_, expiry_step);
    while (!pool_->stopped()) {
        timer_.expires_after(period);
        boost::system::error_code ec;
        co_await timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
        // Only while the database is reachable (a sweep of a down database would only
        // add to the requests waiting for a connection).
        while (!pool_->stopped() && pool_->ready()) {
            auto o = co_await pool_->run(sql::name::idem_expire, params, false);
            const bool ok = o.t == exec_outcome::transport::ok && !o.results.empty() &&
                            o.results.front().ok() && !o.results.front().rows.empty();
            if (!ok) {
                if (!pool_->stopped())
                    logging::write(
                        logging::level::warn, "idempotency expiry failed",
                        {{"error", o.results.empty() ? o.error : o.results.front().message}});
                break;
            }
            const auto& cellv = o.results.front().rows.front().front();
            const auto n = cellv ? parse_int(*cellv).value_or(0) : 0;
            if (n < static_cast<std::int64_t>(expiry_step))
                break; // idle until the next period
        }
    }
}

} // namespace fk::store::pg
