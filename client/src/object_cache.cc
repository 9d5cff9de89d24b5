#include "client/src/object_cache.h"

#include <algorithm>

namespace depot::internal {
namespace {

// How many GUIDs ahead of its lookup a batch loads each one's line.
constexpr size_t kAhead = 16;

}  // namespace

void ObjectCache::Remember(const std::shared_ptr<Holding>& h) {
  std::lock_guard lk(mu_);
  if (auto displaced = entries_.Put(h->guid, h, h.get()); !displaced.expired()) SetAside(displaced);
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
  std::vector<std::weak_ptr<Holding>> weak(holdings.begin(), holdings.end());  // see Put
  std::lock_guard lk(mu_);
  entries_.Reserve(entries_.size() + holdings.size());
  for (size_t i = 0; i < std::min(kAhead, holdings.size()); ++i) {
    entries_.PrefetchEntry(holdings[i]->guid);
  }
  for (size_t i = 0; i < holdings.size(); ++i) {
    if (i + kAhead < holdings.size()) entries_.PrefetchEntry(holdings[i + kAhead]->guid);
    if (auto displaced = entries_.Put(holdings[i]->guid, std::move(weak[i]), holdings[i].get());
        !displaced.expired()) {
      SetAside(displaced);
    }
  }
}

std::vector<std::shared_ptr<Holding>> ObjectCache::All() {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<Holding>> out;
  out.reserve(entries_.size());
  entries_.ForEach([&](const HoldingTable::Entry& e) {
    if (auto h = e.holding.lock()) out.push_back(std::move(h));
  });
  for (const auto& w : aside_) {
    if (auto h = w.lock()) out.push_back(std::move(h));
  }
  return out;
}

bool ObjectCache::empty() {
  std::lock_guard lk(mu_);
  return entries_.size() == 0 &&
         std::all_of(aside_.begin(), aside_.end(), [](const auto& w) { return w.expired(); });
}

void ObjectCache::Deleted(const Guid& guid) {
  std::lock_guard lk(mu_);
  if (const HoldingTable::Entry* e = entries_.Find(guid); e != nullptr && !e->holding.expired()) {
    SetAside(e->holding);
  }
  entries_.Erase(guid);
}

void ObjectCache::SetAside(std::weak_ptr<Holding> h) {
  if (aside_.size() >= 2 * aside_pruned_ + 64) {
    std::erase_if(aside_, [](const auto& w) { return w.expired(); });
    aside_pruned_ = aside_.size();
  }
  aside_.push_back(std::move(h));
}

void ObjectCache::Forget(const Holding& h) {
  std::lock_guard lk(mu_);
  entries_.Erase(h.guid, &h);
}

}  // namespace depot::internal
