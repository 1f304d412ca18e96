#include "proxy/reload.hpp"

#include "backends/log/logging.hpp"
#include "config/parse.hpp"
#include "proxy/auth.hpp"
#include "proxy/preflight.hpp"
#include "proxy/tls.hpp"

#include <nlohmann/json.hpp>

#include <variant>

namespace fk::proxy {

namespace {

reload_result refuse(std::string why, bool tls) {
    logging::write(logging::level::error,
                   tls ? "reload failed: keeping the current auth token or clients, log level and "
                         "TLS certificate"
                       : "reload failed: keeping the current auth token or clients and log level",
                   {{"error", why}});
    return {false, std::move(why)};
}

} // namespace

reload_result reload_settings(const std::vector<std::string>& args, authenticator& auth,
                              tls_credentials* tls) {
    auto parsed = config::parse_command_line(args);
    if (auto* e = std::get_if<config::parse_error>(&parsed))
        return refuse(e->message, tls != nullptr);
    const auto& s = std::get<config::command_line>(parsed).values;

    auto token = resolve_auth(s);
    if (!token.ok())
        return refuse(token.error, tls != nullptr);
    if (!token.token && token.clients.empty() && auth.enabled())
        return refuse("the new configuration has no auth token; a reload does not turn auth "
                      "off (restart to do that)",
                      tls != nullptr);

    tls_context_result fresh;
    if (tls) {
        if (!s.tls.enabled())
            return refuse("the new configuration has no TLS certificate; a reload does not "
                          "turn TLS off (restart to do that)",
                          tls != nullptr);
        fresh = make_tls_context(s.tls);
        if (!fresh.ok())
            return refuse(fresh.error, tls != nullptr);
    } else if (s.tls.enabled()) {
        return refuse("the new configuration has a TLS certificate; a reload does not turn TLS "
                      "on (restart to do that)",
                      tls != nullptr);
    }

    const bool auth_on = token.token.has_value();
    const std::size_t clients = token.clients.size();
    if (clients > 0)
        auth.set_clients(std::move(token.clients));
    else
        auth.set_token(std::move(token.token));
    logging::set_level(s.log_level);
    if (tls) {
        tls->set(std::move(fresh.context));
        logging::write(fresh.expired ? logging::level::warn : logging::level::info,
                       fresh.expired ? "reloaded TLS certificate, which has expired"
                                     : "reloaded TLS certificate",
                       {{"serial", fresh.serial},
                        {"not_after", fresh.not_after},
                        {"mtls", s.tls.client_ca_file.has_value()}});
    }
    std::string source = clients > 0         ? std::to_string(clients) + " scoped clients"
                         : !auth_on          ? "off"
                         : s.auth_token_file ? "file " + *s.auth_token_file
                                             : std::string{auth_token_env};
    logging::write(logging::level::info, "reloaded auth token and log level",
                   {{"log_level", logging::to_string(s.log_level)}, {"auth", source}});
    return {true, "log level " + std::string{logging::to_string(s.log_level)} + ", auth " + source};
}

} // namespace fk::proxy
