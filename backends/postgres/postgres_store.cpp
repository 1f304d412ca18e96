#include "backends/postgres/postgres_store.hpp"

#include <boost/asio/io_context.hpp>

namespace fk::store {
namespace {

// Placeholder until the libpq implementation lands: behaves exactly like a store that is
// still connecting (not ready, every call unavailable).
class connecting_store final : public store {
public:
    net::awaitable<write_result> put(put_request) override {
        co_return unavailable<write_result>();
    }
    net::awaitable<write_result> remove(delete_request) override {
        co_return unavailable<write_result>();
    }
    net::awaitable<object_result> get(std::string, bool) override {
        co_return unavailable<object_result>();
    }
    net::awaitable<write_result> advance_fence(std::string, token_t) override {
        co_return unavailable<write_result>();
    }
    net::awaitable<fence_result> read_fence(std::string) override {
        co_return unavailable<fence_result>();
    }
    net::awaitable<list_result> list_fences(list_request) override {
        co_return unavailable<list_result>();
    }
    bool supports_operations() const noexcept override { return true; }
    net::awaitable<operation_result> run_operation(operation_request) override {
        co_return unavailable<operation_result>();
    }
    bool ready() const noexcept override { return false; }
    void stop() override {}

private:
    template <class R> static R unavailable() {
        R r;
        r.error = errc::unavailable;
        r.message = "postgres store is connecting";
        return r;
    }
};

} // namespace

std::variant<std::unique_ptr<store>, open_error> open_postgres_store(net::io_context&,
                                                                     const config::settings&) {
    return std::unique_ptr<store>(std::make_unique<connecting_store>());
}

} // namespace fk::store
