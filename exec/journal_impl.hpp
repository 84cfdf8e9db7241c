#pragma once
// The journal's parts (journal.hpp), shared by the files that each hold one concern of it:
//   journal.cpp          a run's life: prepare (and finish what a crash left), stage_end, apply
//   journal_record.cpp   the run's record on disk: meta.json, its steps, the workspace's lock
//   journal_steps.cpp    the steps themselves: plan from the layer, apply, undo, file moves
//   journal_review.cpp   `sluice runs`, `sluice undo`, `sluice diff`
//   journal_staged.cpp   `sluice apply` and `sluice discard` of a staged run
// Private to exec/: nothing outside includes it.
#include "exec/journal.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <ctime>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace sluice::exec::journal::detail {

namespace js = boost::json;

// One step of a run's record. "r": what is at `path` is replaced by the upper layer's entry
// (after), or removed (a whiteout: !after); what was there (before) is kept in before/. "m": a
// directory both sides have gets the upper one's mode and times.
struct op {
  std::string path;
  char kind = 'r';
  bool before = false, after = false;
  mode_t mode = 0, umode = 0;              // "m": the workspace's and the upper layer's mode
  timespec mtime{}, umtime{};              // and modification times
  std::string stamp;                        // "r" with after: what the workspace held once applied
  int batch = 0;                            // a staged run's n-th apply: its before/ is before/N
};

// journal_steps.cpp: files and the steps that move them.
std::string join(const std::string &a, const std::string &rel);
// Where step `o` keeps what it replaced.
std::string before_of(const std::string &dir, const op &o);
void remove_tree(const std::string &p);
bool lexists(const std::string &p, struct stat *out = nullptr);
[[noreturn]] void fail(const std::string &what, const std::string &path);
int run_program(const std::vector<std::string> &argv);
std::string stamp_of(const std::string &p);
void plan_dir(const std::string &upper, const std::string &ws, const std::string &rel, std::vector<op> &ops);
void apply_steps(const std::string &dir, const std::string &ws, std::vector<op> &ops);
void undo_steps(const std::string &dir, const std::string &ws, const std::vector<op> &ops);

// journal_record.cpp: the record and the lock.
void write_meta(const std::string &dir, const js::object &meta);
js::object read_meta(const std::string &dir);
std::string text(const js::object &o, const char *k);
std::vector<op> ops_of(const js::object &meta);
js::array ops_json(const std::vector<op> &ops);
counts count(const std::vector<op> &ops);
int take_lock(const std::string &runs, const std::string &workspace, std::string &holder);
void set_holder(int fd, const std::string &id);
std::vector<std::string> run_ids(const std::string &runs);
std::int64_t now_seconds();
std::string find_run(const std::string &runs, const std::string &id);

} // namespace sluice::exec::journal::detail
