// SPDX-License-Identifier: MIT
// What a write of the plan file keeps: the disk-wins merge, this process's own stores on top, and the
// limits, oldest entries first out.

#include "plan_merge.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <unordered_map>
#include <utility>

#include "store/future_stamps.hpp"

namespace launchfit::detail {

key_tuple tie_key(const stored_key& k) {
  return {k.device_uuid, k.cc, k.sm_count, k.driver_version, k.kernel, k.policy, k.smem_rule, k.bucket};
}

namespace {
// Two entries of one key in one file (edited by hand, concatenated): the one launchfit would keep, as when it
// writes and as launchfit-plans merge does: where either was measured, the measured rule (replaces_in_file);
// else the newer (stored_at), the later in the file on a tie. The last one used to win, even when older.
bool kept_over(const stored_entry& later, const stored_entry& earlier) noexcept {
  if (later.measurement || earlier.measurement) return replaces_in_file(later, earlier);
  return later.stored_at_ms >= earlier.stored_at_ms;
}
// Whether `h` is kept under `k` (false: an entry of the key already read wins over it).
bool keep_entry(entry_lines& disk, const key_tuple& k, const held& h) {
  const auto it = disk.find(k);
  if (it != disk.end() && !kept_over(h.entry, it->second.entry)) return false;
  disk.insert_or_assign(k, h);
  return true;
}
}  // namespace

std::vector<stored_entry> one_entry_per_key(std::vector<stored_entry> entries, std::size_t* dropped) {
  std::map<key_tuple, std::size_t> at;
  std::vector<stored_entry> out;
  out.reserve(entries.size());
  for (stored_entry& e : entries) {
    key_tuple k = tie_key(e.key);
    if (const auto it = at.find(k); it != at.end()) {
      if (dropped) ++*dropped;
      if (kept_over(e, out[it->second])) out[it->second] = std::move(e);
    } else {
      at.emplace(std::move(k), out.size());
      out.push_back(std::move(e));
    }
  }
  return out;
}

cache_file_contents read_entries(std::string_view text, const disk_view* known, entry_lines& disk,
                                 std::vector<stored_entry>* changed) {
  // An entry is changed when the view held another line, or none, for its key.
  const auto note = [&](const key_tuple& k, const held& h) {
    if (!changed) return;
    const auto seen = known ? known->entries.find(k) : entry_lines::const_iterator{};
    if (!known || seen == known->entries.end() || seen->second.line != h.line) changed->push_back(h.entry);
  };

  // The common case when several processes write: most lines were seen before and need no parsing.
  std::unordered_map<std::string_view, const held*> lines;
  if (known) {
    lines.reserve(known->entries.size());
    for (const auto& [k, h] : known->entries) lines.emplace(h.line, &h);
  }
  struct in_order {
    const held* seen;    // a known line, or
    std::size_t parsed;  // the index of a parsed one
  };
  std::vector<in_order> order;
  std::vector<std::string_view> raw;  // the line of each parsed entry
  std::vector<stored_entry> parsed;
  const bool line_layout = parse_cache_file_lines(
      text,
      [&](std::string_view line) {
        const auto it = lines.find(line);
        if (it != lines.end()) {
          order.push_back({it->second, 0});
          return true;
        }
        order.push_back({nullptr, raw.size()});
        raw.push_back(line);
        return false;
      },
      parsed);
  cache_file_contents contents;
  if (line_layout) {
    contents.status = cache_file_status::ok;
    for (const in_order& o : order) {
      if (o.seen) {
        keep_entry(disk, tie_key(o.seen->entry.key), *o.seen);
        continue;
      }
      const held h{std::move(parsed[o.parsed]), std::string(raw[o.parsed])};
      const key_tuple k = tie_key(h.entry.key);
      if (keep_entry(disk, k, h)) note(k, h);
    }
    return contents;
  }
  disk.clear();
  contents = parse_cache_file(text);  // a file edited by hand, or with bad entries: parsed whole
  for (auto& e : contents.entries) {
    std::string line = cache_file_line(e);
    const held h{std::move(e), std::move(line)};
    const key_tuple k = tie_key(h.entry.key);
    if (keep_entry(disk, k, h)) note(k, h);
  }
  contents.entries.clear();
  return contents;
}

// What a file of no entry takes, as the byte limit counts it (its format line and brackets, with room).
std::size_t frame_bytes() noexcept { return std::strlen(cache_file_format) + 64; }

bool keep_within_limits(entry_lines& disk, std::size_t max_entries, std::size_t max_bytes,
                        const own_lines& own) {
  std::size_t bytes = frame_bytes();
  for (const auto& [k, h] : disk) bytes += h.line.size() + 2;
  if (disk.size() <= max_entries && bytes <= max_bytes) return true;
  // First the entries no launch finds (written before keys named the work's kind: launchfit 0.3 and before),
  // oldest first, whoever wrote them; then this process's own, oldest first.
  std::vector<std::pair<std::uint64_t, const key_tuple*>> unfindable, by_age;
  by_age.reserve(own.size());
  for (const auto& [k, h] : disk) {
    if (key_names_no_work_kind(h.entry.key)) {
      unfindable.emplace_back(h.entry.stored_at_ms, &k);
      continue;
    }
    const auto mine = own.find(k);
    if (mine != own.end() && mine->second == h.line) by_age.emplace_back(h.entry.stored_at_ms, &k);
  }
  std::sort(unfindable.begin(), unfindable.end());
  std::sort(by_age.begin(), by_age.end());
  by_age.insert(by_age.begin(), unfindable.begin(), unfindable.end());
  std::vector<key_tuple> drop;
  std::size_t left = disk.size();
  for (const auto& [t, k] : by_age) {
    if (left <= max_entries && bytes <= max_bytes) break;
    bytes -= disk.at(*k).line.size() + 2;
    drop.push_back(*k);
    --left;
  }
  for (const auto& k : drop) disk.erase(k);
  return left <= max_entries && bytes <= max_bytes;
}

std::string file_text(const entry_lines& disk) {
  const std::string frame = serialize_cache_file({});  // head + tail
  const std::size_t head = frame.find('[') + 2;
  std::string body = frame.substr(0, head);
  std::size_t i = 0;
  for (const auto& [k, h] : disk) body.append(h.line).append(++i < disk.size() ? ",\n" : "\n");
  body.append(frame, head, std::string::npos);
  return body;
}

write_outcome write_file(const write_job& job, const std::vector<stored_entry>& mine, disk_view& view) {
  write_outcome out;
  fd_closer lock;
  switch (take_lock(job.path, lock, out.why, job.lock_wait)) {
    case lock_result::held:
      break;
    case lock_result::busy:
      out.status = write_status::lock_busy;
      return out;
    case lock_result::retry:
      out.status = write_status::retry;
      return out;
    case lock_result::failed:
      return out;
  }
  if (job.sweep_temps) sweep_temp_files(job.path);

  // The file now.
  std::string text;
  file_identity id;
  const read_result r = read_bounded(job.path, job.max_bytes, text, out.why, id);
  if (r == read_result::refused) return out;
  entry_lines disk;
  if (r == read_result::missing) {
    view.valid = false;
  } else if (view.valid && id == view.id) {
    disk = std::move(view.entries);
  } else {
    const cache_file_contents contents = read_entries(text, view.valid ? &view : nullptr, disk, &out.others);
    note_future_stamps(stamp_reader::file, "plan cache file " + job.path, contents.clamped,
                       contents.clamps.empty() ? std::string_view() : contents.clamps.front());
    if (contents.status == cache_file_status::foreign ||
        contents.status == cache_file_status::wrong_version) {
      out.why = "it was replaced by something else: " + contents.problem;
      return out;
    }
    // A damaged file of launchfit's is replaced: `disk` holds what of it still reads, line by line.
  }
  view.valid = false;

  // What this process stored wins over the disk; everything else on disk stays as it is.
  own_lines own = std::move(view.own);
  view.own.clear();
  for (const auto& e : mine) {
    key_tuple k = tie_key(e.key);
    // A measured plan on disk stays unless this one was measured better beyond noise (one rule).
    if (const auto d = disk.find(k); d != disk.end() && !replaces_in_file(e, d->second.entry)) continue;
    held h{e, cache_file_line(e)};
    own.insert_or_assign(k, h.line);
    disk.insert_or_assign(std::move(k), std::move(h));
  }
  for (auto it = own.begin(); it != own.end();) {  // a key another process wrote since is theirs now
    const auto d = disk.find(it->first);
    it = d == disk.end() || d->second.line != it->second ? own.erase(it) : std::next(it);
  }
  if (!keep_within_limits(disk, job.max_entries, job.max_bytes, own)) {
    view.own = std::move(own);
    if (frame_bytes() > job.max_bytes) {  // no entry of anyone's is to blame
      out.why = "LAUNCHFIT_CACHE_MAX_BYTES (" + std::to_string(job.max_bytes) + ") is below what a plan file of no "
                "plan takes (" + std::to_string(frame_bytes()) + " bytes): no plan fits, so this process does not "
                "add to the file";
    } else {
      out.why = "other processes' entries alone exceed this process's limits (" +
                std::to_string(job.max_entries) + " entries, " + std::to_string(job.max_bytes) +
                " bytes; LAUNCHFIT_CACHE_MAX_ENTRIES, LAUNCHFIT_CACHE_MAX_BYTES): a limit never removes what "
                "others wrote, so this process does not add to the file (launchfit-plans prune shrinks it)";
    }
    return out;
  }
  for (auto it = own.begin(); it != own.end();) it = disk.count(it->first) ? std::next(it) : own.erase(it);
  view.own = std::move(own);

  int error = 0;
  if (replace_file(job.path, file_text(disk), view.id, out.why, &error)) {
    out.status = write_status::written;
    view.entries = std::move(disk);
    view.valid = true;
  } else if (transient_errno(error)) {
    out.status = write_status::retry;
  }
  return out;
}

reread_status reread_file(const std::string& path, std::size_t max_bytes, disk_view& view,
                          file_identity& seen, std::vector<stored_entry>& changed, std::size_t& refused) {
  const file_identity now = identity_now(path);
  if (now == seen) return reread_status::unchanged;
  std::string text, why;
  file_identity id;
  const read_result r = read_bounded(path, max_bytes, text, why, id);
  if (r != read_result::ok) {
    view.valid = false;
    seen = r == read_result::missing ? file_identity{} : now;  // not read again until it changes
    return r == read_result::missing ? reread_status::missing : reread_status::refused;
  }
  seen = id;
  entry_lines disk;
  std::vector<stored_entry> found;
  const cache_file_contents contents = read_entries(text, view.valid ? &view : nullptr, disk, &found);
  refused += contents.refused;
  note_future_stamps(stamp_reader::file, "plan cache file " + path, contents.clamped,
                     contents.clamps.empty() ? std::string_view() : contents.clamps.front());
  if (contents.status != cache_file_status::ok && contents.status != cache_file_status::empty) {
    view.valid = false;
    return reread_status::refused;
  }
  view.entries = std::move(disk);
  view.id = id;
  view.valid = true;
  for (auto& e : found) changed.push_back(std::move(e));
  return reread_status::read;
}

}  // namespace launchfit::detail
