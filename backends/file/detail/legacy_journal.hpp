#pragma once
// The record format of fencekeeper 0.1's journal (ROOT/journal), kept only to convert such
// a directory into the index (legacy_import.hpp). Reader side, plus append_record so that
// tests can write old-format journals; nothing here writes a journal at run time.
// Pure functions, no I/O: any thread.
//
// One text line per record,
//   <crc32c hex8> <TYPE> <field> <field> ...\n
// with fields percent-encoded (space, '%', bytes below 0x21 and 0x7F become %XX) and the
// CRC taken over everything between the first space and the newline.
//
//   V count                                         snapshot header: the next `count`
//                                                   records were verified against disk
//   F lock token ms                                 fence advance
//   P key lock token version ms size crc tmp ctype [body]
//                                                   write (also advances lock's fence);
//                                                   `body`, when present, is a copy of
//                                                   the body (small bodies, "syncfs")
//   D key lock token version ms                     delete (also advances lock's fence)

#include "fence/token.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store::detail::legacy {

enum class record_type : char { verified = 'V', fence = 'F', put = 'P', del = 'D' };

struct record {
    record_type type = record_type::fence;
    std::string key;
    std::string lock;
    fence::token_t token = 0;
    std::int64_t version = 0;
    std::int64_t ms = 0;
    std::uint64_t size = 0;
    std::uint32_t body_crc = 0;
    std::string tmp; // P: name of the temp file in the body's directory ("" in snapshots)
    std::string content_type;
    // P: the body itself, journaled with the record ("journaled bodies", file.flush
    // "syncfs"); the conversion rewrites the file from it. Absent in snapshots and for large
    // bodies. A parsed copy always has `size` bytes and CRC `body_crc`.
    std::optional<std::string> body;
    std::uint64_t count = 0; // V
};

inline record header_record(std::uint64_t count) {
    record r;
    r.type = record_type::verified;
    r.count = count;
    return r;
}

inline record fence_record(std::string lock, fence::token_t token, std::int64_t ms) {
    record r;
    r.type = record_type::fence;
    r.lock = std::move(lock);
    r.token = token;
    r.ms = ms;
    return r;
}

inline record del_record(std::string key, std::string lock, fence::token_t token,
                         std::int64_t version, std::int64_t ms) {
    record r;
    r.type = record_type::del;
    r.key = std::move(key);
    r.lock = std::move(lock);
    r.token = token;
    r.version = version;
    r.ms = ms;
    return r;
}

// A put record without its body fields (size, body_crc, tmp, content_type).
inline record put_record(std::string key, std::string lock, fence::token_t token,
                         std::int64_t version, std::int64_t ms) {
    record r = del_record(std::move(key), std::move(lock), token, version, ms);
    r.type = record_type::put;
    return r;
}

std::string encode_field(std::string_view raw);
std::optional<std::string> decode_field(std::string_view encoded);

// Appends one complete line.
void append_record(std::string& out, const record& r);

struct parsed_journal {
    std::vector<record> records;
    std::size_t valid_bytes = 0; // length of the prefix made of intact records
    // Bytes after valid_bytes that are not intact records (a torn tail, or damage).
    bool damaged = false;
    // An intact record follows the damaged one: this is not a torn tail but damage in
    // the middle of the journal, and replaying only the prefix could lower a fence.
    bool intact_after_damage = false;
};

parsed_journal parse_journal(std::string_view text);

} // namespace fk::store::detail::legacy
