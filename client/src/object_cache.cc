#include "client/src/object_cache.h"

namespace depot::internal {

void ObjectCache::Remember(const std::shared_ptr<Holding>& h) {
  std::lock_guard lk(mu_);
  entries_[h->guid] = Entry{h, h.get()};
}

void ObjectCache::FindMany(std::span<const Guid> guids, std::span<std::shared_ptr<Holding>> found) {
  std::lock_guard lk(mu_);
  for (size_t i = 0; i < guids.size(); ++i) {
    auto it = entries_.find(guids[i]);
    if (it != entries_.end()) found[i] = it->second.holding.lock();
  }
}

void ObjectCache::RememberMany(std::span<const std::shared_ptr<Holding>> holdings) {
  std::lock_guard lk(mu_);
  for (const auto& h : holdings) entries_[h->guid] = Entry{h, h.get()};
}

std::vector<std::shared_ptr<Holding>> ObjectCache::All() {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<Holding>> out;
  out.reserve(entries_.size());
  for (auto& [guid, e] : entries_) {
    if (auto h = e.holding.lock()) out.push_back(std::move(h));
  }
  return out;
}

void ObjectCache::Forget(const Holding& h) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(h.guid);
  if (it != entries_.end() && it->second.raw == &h) entries_.erase(it);
}

}  // namespace depot::internal
