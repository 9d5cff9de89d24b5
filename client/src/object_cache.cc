#include "client/src/object_cache.h"

namespace depot::internal {

void ObjectCache::Remember(const std::shared_ptr<Holding>& h) {
  std::lock_guard lk(mu_);
  entries_[h->guid] = Entry{h, h.get()};
}

void ObjectCache::Forget(const Holding& h) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(h.guid);
  if (it != entries_.end() && it->second.raw == &h) entries_.erase(it);
}

}  // namespace depot::internal
