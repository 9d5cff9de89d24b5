// ReferenceSlots is one session's reference slots (proto/index_layout.h): a sealed memfd of the
// layout words, index::kSlotCount words, a high-water word, the touches and room for more slots,
// that the daemon maps and sends read-write to the session at hello. The session starts with
// kSlotCount slots and may be granted more (Grant), up to index::kMaxSlots: only the granted
// slots are backed by memory (reserved as they are granted) and read. The
// client publishes in a slot the ObjectId of an object it took from the index, and clears the
// slot when it lets the object go: a hold that costs no message. The daemon reads the slots
// before it frees, evicts or spills an object that left the index (see LockFreeGets).
//
// The slots are the client's to write: their contents are untrusted ids. The memfd is sealed
// against shrinking, so no client can make the daemon's reads fault; an id that names nothing
// keeps nothing, and one that names an object of the namespace keeps it as a get would. Only the
// slots below the high-water word are read, the word clamped to the slots granted: a client that
// writes it too low gives up the protection of its own views only (docs/design.md). So does one
// that overwrites the layout words: while they are not intact, the slots read as empty and no
// touches are taken, and the daemon closes the session at its next request (Intact).
//
// Not thread-safe: the daemon's single loop owns it; the client writes the memory concurrently.
#ifndef DEPOT_DAEMON_REFERENCE_SLOTS_H_
#define DEPOT_DAEMON_REFERENCE_SLOTS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/shared_mapping.h"
#include "common/unique_fd.h"
#include "daemon/object_table.h"
#include "proto/index_layout.h"

namespace depot {

class ReferenceSlots {
 public:
  // A session's slots, all empty, in a memfd named `name`. The memfd's error when it cannot be
  // made.
  static Result<std::unique_ptr<ReferenceSlots>> Create(const std::string& name);

  // Sent to the session: read-write.
  int fd() const { return fd_.get(); }
  // The slots granted (index::kSlotCount at first).
  uint32_t granted() const { return granted_; }
  // Grants slots up to `count` (at most index::kMaxSlots), reserving their memory first. The
  // reservation's error (the grant stays as it was).
  Status Grant(uint32_t count);
  // Whether the layout words are as the daemon wrote them (the client may overwrite them).
  bool Intact() const;

  // Adds every id the slots hold now to `ids` (zeros left out).
  void Collect(std::unordered_set<ObjectId>& ids) const;
  // Calls `fn` with each id the slots hold now (zeros left out, repeats not), collecting
  // nothing: the daemon's reads of every session's slots stay a pass over memory, whatever the
  // client wrote (docs/design.md, "Gets without a round trip").
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (std::span<const uint64_t> used : Used()) {
      for (const uint64_t& slot : used) {
        if (uint64_t id = index::Load(&slot, std::memory_order_acquire); id != 0) fn(id);
      }
    }
  }
  // The ids the slots hold now that `names(id)` says name something, each once. They are looked
  // up again only when the slots changed since the last call (a fingerprint of the words in
  // use): a session that leaves its slots as they are, garbage included, costs a pass over them.
  // An id that named nothing then and names an object now (an id the daemon had not handed out
  // yet: only a hostile client writes one) is missed until the slots change; the caller checks
  // each returned id again, as one may name nothing now.
  template <typename Fn>
  const std::vector<ObjectId>& Naming(Fn&& names) const {
    uint64_t print = Fingerprint();
    if (named_ && named_print_ == print) return *named_;
    named_.emplace();
    ForEach([&](ObjectId id) {
      if (names(id)) named_->push_back(id);
    });
    std::sort(named_->begin(), named_->end());
    named_->erase(std::unique(named_->begin(), named_->end()), named_->end());
    named_print_ = print;
    return *named_;
  }
  // Whether some slot holds `id` now.
  bool Holds(ObjectId id) const;
  // Appends the ids the client noted as taken from the index since the last call: at most the
  // ring's size, the most recent; none when the count went backwards (untrusted, like the slots).
  void TakeTouches(std::vector<ObjectId>& ids);

 private:
  // The slots in use now, as the client says, clamped to the slots granted: the first
  // kSlotCount, then those past the touches; none when the layout words are not intact.
  std::array<std::span<const uint64_t>, 2> Used() const;
  // A hash of the slots in use now and of their count.
  uint64_t Fingerprint() const;

  ReferenceSlots(UniqueFd fd, SharedMapping map) : fd_(std::move(fd)), map_(std::move(map)) {}

  UniqueFd fd_;
  SharedMapping map_;
  uint32_t granted_ = index::kSlotCount;
  uint64_t touches_read_ = 0;                           // the touch count at the last TakeTouches
  mutable std::optional<std::vector<ObjectId>> named_;  // the last Naming's answer
  mutable uint64_t named_print_ = 0;                    // ... and the fingerprint it was for
};

}  // namespace depot

#endif  // DEPOT_DAEMON_REFERENCE_SLOTS_H_
