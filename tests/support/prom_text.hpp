#pragma once
// A strict parser for the Prometheus text exposition format 0.0.4, for tests: it rejects
// what Prometheus would reject and also what a correct exporter should never emit
// (samples before their # TYPE, a family split in two, duplicate series, histograms whose
// buckets are not cumulative or whose +Inf bucket differs from _count).
//
// Header-only; used by tests/unit/proxy_metrics_test.cpp.

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fk::test::prom {

using labels = std::map<std::string, std::string>;

struct sample {
    std::string name;
    labels label_set;
    double value = 0;
};

struct family {
    std::string type; // counter, gauge, histogram, summary, untyped
    std::string help;
};

struct exposition {
    std::map<std::string, family> families;
    std::vector<sample> samples;

    // The value of one series; throws when it is absent.
    double value(std::string_view name, const labels& l = {}) const {
        for (const auto& s : samples) {
            if (s.name == name && s.label_set == l) {
                return s.value;
            }
        }
        throw std::runtime_error("no series " + std::string(name));
    }
    bool has(std::string_view name, const labels& l = {}) const {
        for (const auto& s : samples) {
            if (s.name == name && s.label_set == l) {
                return true;
            }
        }
        return false;
    }
    std::size_t count(std::string_view name) const {
        std::size_t n = 0;
        for (const auto& s : samples) {
            n += s.name == name;
        }
        return n;
    }
};

namespace detail {

[[noreturn]] inline void fail(std::size_t line_no, std::string_view line, std::string_view why) {
    throw std::runtime_error("line " + std::to_string(line_no) + ": " + std::string(why) + ": '" +
                             std::string(line) + "'");
}

inline bool metric_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
inline bool metric_name_char(char c) {
    return metric_name_start(c) || (c >= '0' && c <= '9');
}
inline bool label_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool label_name_char(char c) {
    return label_name_start(c) || (c >= '0' && c <= '9');
}

inline bool valid_metric_name(std::string_view n) {
    if (n.empty() || !metric_name_start(n[0])) {
        return false;
    }
    for (char c : n) {
        if (!metric_name_char(c)) {
            return false;
        }
    }
    return true;
}

// Go's strconv.ParseFloat as Prometheus uses it, restricted to what exporters emit:
// decimal or exponent notation, +Inf, -Inf, NaN.
inline bool parse_float(std::string_view t, double& out) {
    if (t == "+Inf" || t == "Inf") {
        out = INFINITY;
        return true;
    }
    if (t == "-Inf") {
        out = -INFINITY;
        return true;
    }
    if (t == "NaN") {
        out = NAN;
        return true;
    }
    if (t.empty()) {
        return false;
    }
    std::string_view body = t;
    if (body[0] == '+' || body[0] == '-') {
        body.remove_prefix(1);
    }
    if (body.empty() || !((body[0] >= '0' && body[0] <= '9') || body[0] == '.')) {
        return false;
    }
    auto [end, ec] = std::from_chars(t.data() + (t[0] == '+' ? 1 : 0), t.data() + t.size(), out);
    return ec == std::errc() && end == t.data() + t.size();
}

// The family a sample belongs to: histogram and summary samples carry a suffix.
inline std::string family_of(const std::map<std::string, family>& families,
                             const std::string& name) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
        if (name.size() > suffix.size() && name.ends_with(suffix)) {
            std::string base = name.substr(0, name.size() - suffix.size());
            auto it = families.find(base);
            if (it != families.end() && (it->second.type == "histogram" ||
                                         (it->second.type == "summary" && suffix != "_bucket"))) {
                return base;
            }
        }
    }
    return name;
}

inline void check_histograms(const exposition& e) {
    for (const auto& [fname, fam] : e.families) {
        if (fam.type != "histogram") {
            continue;
        }
        // Group the buckets by their labels without le.
        std::map<labels, std::vector<std::pair<double, double>>> buckets;
        std::map<labels, double> counts;
        std::set<labels> sums;
        for (const auto& s : e.samples) {
            if (s.name == fname + "_bucket") {
                auto l = s.label_set;
                auto le = l.find("le");
                if (le == l.end()) {
                    throw std::runtime_error(fname + ": bucket without le");
                }
                double bound = 0;
                if (!parse_float(le->second, bound)) {
                    throw std::runtime_error(fname + ": bad le '" + le->second + "'");
                }
                l.erase(le);
                buckets[l].emplace_back(bound, s.value);
            } else if (s.name == fname + "_count") {
                counts[s.label_set] = s.value;
            } else if (s.name == fname + "_sum") {
                sums.insert(s.label_set);
            } else if (s.name == fname) {
                throw std::runtime_error(fname + ": histogram sample without suffix");
            }
        }
        if (buckets.empty()) {
            throw std::runtime_error(fname + ": histogram without buckets");
        }
        for (const auto& [l, bs] : buckets) {
            for (std::size_t i = 1; i < bs.size(); ++i) {
                if (!(bs[i].first > bs[i - 1].first)) {
                    throw std::runtime_error(fname + ": le not increasing");
                }
                if (bs[i].second < bs[i - 1].second) {
                    throw std::runtime_error(fname + ": buckets not cumulative");
                }
            }
            if (!std::isinf(bs.back().first)) {
                throw std::runtime_error(fname + ": no +Inf bucket");
            }
            auto c = counts.find(l);
            if (c == counts.end()) {
                throw std::runtime_error(fname + ": no _count");
            }
            if (c->second != bs.back().second) {
                throw std::runtime_error(fname + ": +Inf bucket != _count");
            }
            if (!sums.contains(l)) {
                throw std::runtime_error(fname + ": no _sum");
            }
        }
        if (counts.size() != buckets.size() || sums.size() != buckets.size()) {
            throw std::runtime_error(fname + ": _count or _sum without buckets");
        }
    }
}

} // namespace detail

// Parses and validates `text`; throws std::runtime_error naming the first bad line.
inline exposition parse(std::string_view text) {
    using namespace detail;
    exposition e;
    if (!text.empty() && text.back() != '\n') {
        throw std::runtime_error("exposition does not end with a newline");
    }
    std::set<std::string> finished;    // families whose samples are complete
    std::string current;               // family of the previous sample or comment
    std::set<std::string> has_samples; // families that have at least one sample
    std::set<std::pair<std::string, labels>> seen;
    auto enter = [&](const std::string& fam, std::size_t no, std::string_view line) {
        if (fam == current) {
            return;
        }
        if (finished.contains(fam)) {
            fail(no, line, "family " + fam + " appears in two groups");
        }
        if (!current.empty()) {
            finished.insert(current);
        }
        current = fam;
    };

    std::size_t no = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        const std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        ++no;
        if (line.empty()) {
            continue;
        }
        if (line[0] == '#') {
            // "# HELP name text" / "# TYPE name type"; other comments are allowed.
            if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
                const bool is_type = line[2] == 'T';
                std::string_view rest = line.substr(7);
                const auto sp = rest.find(' ');
                const std::string name(rest.substr(0, sp));
                if (!valid_metric_name(name)) {
                    fail(no, line, "bad metric name in comment");
                }
                if (sp == std::string_view::npos) {
                    fail(no, line, is_type ? "TYPE without a type" : "HELP without text");
                }
                const std::string_view arg = rest.substr(sp + 1);
                enter(name, no, line);
                auto& fam = e.families[name];
                if (is_type) {
                    if (!fam.type.empty()) {
                        fail(no, line, "second TYPE");
                    }
                    if (has_samples.contains(name)) {
                        fail(no, line, "TYPE after samples");
                    }
                    if (arg != "counter" && arg != "gauge" && arg != "histogram" &&
                        arg != "summary" && arg != "untyped") {
                        fail(no, line, "unknown type");
                    }
                    fam.type = arg;
                } else {
                    if (!fam.help.empty()) {
                        fail(no, line, "second HELP");
                    }
                    if (has_samples.contains(name)) {
                        fail(no, line, "HELP after samples");
                    }
                    for (std::size_t i = 0; i < arg.size(); ++i) {
                        if (arg[i] == '\\' &&
                            (i + 1 == arg.size() || (arg[i + 1] != '\\' && arg[i + 1] != 'n'))) {
                            fail(no, line, "bad escape in HELP");
                        }
                        i += arg[i] == '\\';
                    }
                    fam.help = arg.empty() ? " " : std::string(arg);
                }
            }
            continue;
        }

        sample s;
        std::size_t i = 0;
        while (i < line.size() && metric_name_char(line[i])) {
            ++i;
        }
        s.name = line.substr(0, i);
        if (!valid_metric_name(s.name)) {
            fail(no, line, "bad metric name");
        }
        if (i < line.size() && line[i] == '{') {
            ++i;
            while (true) {
                if (i < line.size() && line[i] == '}') {
                    ++i;
                    break;
                }
                const std::size_t start = i;
                if (i >= line.size() || !label_name_start(line[i])) {
                    fail(no, line, "bad label name");
                }
                while (i < line.size() && label_name_char(line[i])) {
                    ++i;
                }
                std::string lname(line.substr(start, i - start));
                if (lname.starts_with("__")) {
                    fail(no, line, "reserved label name");
                }
                if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
                    fail(no, line, "expected =\"");
                }
                i += 2;
                std::string value;
                while (true) {
                    if (i >= line.size()) {
                        fail(no, line, "unterminated label value");
                    }
                    const char c = line[i++];
                    if (c == '"') {
                        break;
                    }
                    if (c == '\\') {
                        if (i >= line.size()) {
                            fail(no, line, "bad escape");
                        }
                        const char x = line[i++];
                        if (x == '\\' || x == '"') {
                            value += x;
                        } else if (x == 'n') {
                            value += '\n';
                        } else {
                            fail(no, line, "bad escape");
                        }
                    } else {
                        value += c;
                    }
                }
                if (!s.label_set.emplace(lname, value).second) {
                    fail(no, line, "duplicate label");
                }
                if (i < line.size() && line[i] == ',') {
                    ++i;
                } else if (i >= line.size() || line[i] != '}') {
                    fail(no, line, "expected , or }");
                }
            }
        }
        if (i >= line.size() || line[i] != ' ') {
            fail(no, line, "expected a space before the value");
        }
        ++i;
        std::string_view rest = line.substr(i);
        const auto sp = rest.find(' ');
        if (!parse_float(rest.substr(0, sp), s.value)) {
            fail(no, line, "bad value");
        }
        if (sp != std::string_view::npos) {
            std::string_view ts = rest.substr(sp + 1);
            long long t = 0;
            auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), t);
            if (ec != std::errc() || end != ts.data() + ts.size()) {
                fail(no, line, "bad timestamp");
            }
        }

        const std::string fam = family_of(e.families, s.name);
        enter(fam, no, line);
        has_samples.insert(fam);
        // Stricter than Prometheus on purpose: our exporter always documents a family.
        auto f = e.families.find(fam);
        if (f == e.families.end() || f->second.type.empty() || f->second.help.empty()) {
            fail(no, line, "sample before its HELP and TYPE");
        }
        if ((f->second.type == "counter" || f->second.type == "histogram") &&
            !(s.value >= 0 && std::isfinite(s.value))) {
            fail(no, line, "counter value negative or not finite");
        }
        if (!seen.emplace(s.name, s.label_set).second) {
            fail(no, line, "duplicate series");
        }
        e.samples.push_back(std::move(s));
    }
    check_histograms(e);
    return e;
}

} // namespace fk::test::prom
