#include "client/src/object_cache.h"

#include <algorithm>

namespace depot::internal {
namespace {

// How many GUIDs ahead of its lookup a batch loads each one's line.
constexpr size_t kAhead = 16;

}  // namespace

void ObjectCache::Remember(const std::shared_ptr<Holding>& h) {
  std::lock_guard lk(mu_);
  entries_.Put(h->guid, h);
}

void ObjectCache::FindMany(std::span<const Guid> guids, std::span<std::shared_ptr<Holding>> found) {
  std::lock_guard lk(mu_);
  if (entries_.size() == 0) return;
  for (size_t i = 0; i < std::min(kAhead, guids.size()); ++i) entries_.Prefetch(guids[i]);
  for (size_t i = 0; i < guids.size(); ++i) {
    if (i + kAhead < guids.size()) entries_.Prefetch(guids[i + kAhead]);
    if (const HoldingTable::Entry* e = entries_.Find(guids[i])) found[i] = e->holding.lock();
  }
}

void ObjectCache::RememberMany(std::span<const std::shared_ptr<Holding>> holdings) {
  std::lock_guard lk(mu_);
  entries_.Reserve(entries_.size() + holdings.size());
  for (size_t i = 0; i < std::min(kAhead, holdings.size()); ++i) {
    entries_.Prefetch(holdings[i]->guid);
  }
  for (size_t i = 0; i < holdings.size(); ++i) {
    if (i + kAhead < holdings.size()) entries_.Prefetch(holdings[i + kAhead]->guid);
    entries_.Put(holdings[i]->guid, holdings[i]);
  }
}

std::vector<std::shared_ptr<Holding>> ObjectCache::All() {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<Holding>> out;
  out.reserve(entries_.size());
  entries_.ForEach([&](const HoldingTable::Entry& e) {
    if (auto h = e.holding.lock()) out.push_back(std::move(h));
  });
  return out;
}

void ObjectCache::Forget(const Holding& h) {
  std::lock_guard lk(mu_);
  entries_.Erase(h.guid, &h);
}

}  // namespace depot::internal
