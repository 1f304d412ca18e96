#pragma once
// Key → location of its body under ROOT/objects (docs/file-store.md, "Layout").
//
// The key is split on '/'; each segment is percent-encoded (every byte outside
// [A-Za-z0-9._-] becomes %XX, so '~' never survives encoding). Every segment but the
// last becomes a directory "enc~", the last one the file "enc". An encoded segment longer
// than 200 bytes is cut into chunks of at most 200 bytes (never inside a %XX); all chunks
// but the last become directories "chunk~+". A name that would be "." or ".." has its dots
// encoded as %2E. So names are injective, a file never collides with a directory, and
// no component is empty, ".", ".." or longer than NAME_MAX.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store::detail {

inline constexpr std::size_t max_component_bytes = 200;

struct object_path {
    std::vector<std::string> dirs; // directory names below ROOT/objects, outermost first
    std::string file;              // the body's file name inside the last directory

    // "a~/b~" (dirs joined with '/'; "" for ROOT/objects itself): identifies a directory.
    std::string dir_id() const;
};

// nullopt for a key with an empty segment (never the case for a validated key).
std::optional<object_path> object_path_for(std::string_view key);

// The key whose body lives at DIR_ID/FILE under ROOT/objects (the inverse of
// object_path_for; DIR_ID as object_path::dir_id()), or nullopt for a name the encoder
// never produces (a temp file, a stranger's file).
std::optional<std::string> key_for_object(std::string_view dir_id, std::string_view file);

// Percent-encodes one segment (no chunking).
std::string encode_segment(std::string_view segment);

// Temp files: "<file>~tmp~<unique>" in the body's directory.
std::string tmp_name(std::string_view file, std::string_view unique);
bool is_tmp_name(std::string_view name) noexcept;

} // namespace fk::store::detail
