// internal::HoldingTable is the table behind ObjectCache: the holdings of this process by GUID,
// in one flat array (open addressing with linear probing, deletion by backward shift, at most
// half full), beside an array of one-byte tags, seven bits of each entry's hash (0: free). A
// search reads the tags and touches an entry only where its tag matches: a GUID the process does
// not hold, the common case of a first get, costs a line of tags, which stay in the cache (a
// byte a slot: 256 KiB at 100,000 held, where the entries take 10 MiB), and a held one costs
// that line and its entry's. A batch prefetches the lines of the GUIDs it will look for next,
// so that their misses overlap.
//
// Where a GUID lands depends on a key drawn per table: GUIDs come from other processes (a get
// names what another user put), and without the key they could be chosen to pile onto one run
// of slots and slow this process's gets.
//
// Not thread-safe: ObjectCache's mutex guards it.
#ifndef DEPOT_CLIENT_SRC_HOLDING_TABLE_H_
#define DEPOT_CLIENT_SRC_HOLDING_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/prefetch.h"
#include "depot/guid.h"

namespace depot::internal {

struct Holding;

class HoldingTable {
 public:
  struct Entry {
    Guid guid;
    std::weak_ptr<Holding> holding;
    const Holding* raw = nullptr;  // which holding this is, once `holding` has expired; null: free
  };

  HoldingTable();

  // Starts loading the tags where `guid`'s search begins.
  void Prefetch(const Guid& guid) const { depot::Prefetch(&tags_[Home(guid)]); }
  // Starts loading the tags and the entry where `guid`'s search begins: where a Put of a GUID
  // not held yet writes, in the common case.
  void PrefetchEntry(const Guid& guid) const {
    size_t home = Home(guid);
    depot::Prefetch(&tags_[home]);
    depot::Prefetch(&slots_[home]);
  }
  // `guid`'s entry, or null.
  const Entry* Find(const Guid& guid) const;
  // Makes `holding` (which is `raw`) the holding of `guid`, in place of any other: that one, when
  // there was one. The weak_ptr comes made: the atomic increment that makes one waits for every
  // store before it, so a batch makes them all before it writes its entries.
  std::weak_ptr<Holding> Put(const Guid& guid, std::weak_ptr<Holding> holding, const Holding* raw);
  // Forgets `guid`, but only while it names `only` when that is not null. Whether it did.
  bool Erase(const Guid& guid, const Holding* only = nullptr);
  // Makes room for `n` entries in all without growing again (a batch then prefetches lines
  // that stay where they are).
  void Reserve(size_t n);
  size_t size() const { return size_; }
  size_t slots() const { return slots_.size(); }
  static constexpr size_t kept_slots() { return kKeptSlots; }
  // Calls `f(entry)` for each entry.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Entry& e : slots_) {
      if (e.raw != nullptr) f(e);
    }
  }

 private:
  static constexpr size_t kMinSlots = 64;
  // A table that grew is never shrunk below this many slots (160 KiB): a process that gets a
  // batch and lets it go, again and again, otherwise shrank the table step by step as it let go
  // and grew it again for the next batch, and with each cycle glibc gave the freed memory back
  // to the kernel and faulted it in again (about 75 page faults a batch of 1,000: 1,000 gets of
  // 1 KiB took 0.6-1.0 ms instead of 0.1-0.2).
  static constexpr size_t kKeptSlots = 4096;
  uint64_t Hash(const Guid& guid) const;
  size_t Home(const Guid& guid) const { return Hash(guid) & (slots_.size() - 1); }
  static uint8_t TagOf(uint64_t hash) { return static_cast<uint8_t>(0x80 | (hash >> 57)); }
  // The slot that holds `guid` (whose Hash is `hash`), or the free slot where its search ended.
  size_t Seek(const Guid& guid, uint64_t hash) const;
  // Moves every entry into a table of `slots` slots (a power of two).
  void Rehash(size_t slots);

  std::vector<Entry> slots_;
  std::vector<uint8_t> tags_;  // of each slot: TagOf its entry's hash, or 0 where it is free
  size_t size_ = 0;
  uint64_t key_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_HOLDING_TABLE_H_
