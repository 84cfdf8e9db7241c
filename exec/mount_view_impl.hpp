#pragma once
// The filesystem view's parts (mount_view.hpp), shared by its two files:
//   mount_view.cpp   build_view: the new root, its mounts in stages, the pivot into it
//   view_seal.cpp    seal_view: sluice's files written, what they replace bound, the root read-only
//   view_sockets.cpp the granted Unix sockets, one file each
// Private to exec/: nothing outside includes it.
#include "exec/mount_view.hpp"

#include <cstdint>
#include <string>
#include <sys/types.h>

namespace sluice::exec::detail {

// What failed at `path`, with errno's reason.
std::string err(const std::string &what, const std::string &path);
// mkdir -p; components that exist (also in read-only mounts) are fine.
bool make_dirs(const std::string &path, mode_t mode);
// An empty file at `path` (with its directories), or the one there.
bool make_file(const std::string &path);
// Sets mount attributes on `path`, and with `recursive` on every mount below it too.
bool set_attr(const std::string &path, std::uint64_t attrs, bool recursive);

// view_sockets.cpp: the granted Unix sockets (view_spec::sockets) bound into the new root, the host's
// root still at `old_root`. Returns an empty string, or what failed.
std::string show_sockets(const view_spec &spec, const std::string &old_root, const std::string &new_root);

} // namespace sluice::exec::detail
