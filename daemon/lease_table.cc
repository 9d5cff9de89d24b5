#include "daemon/lease_table.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "proto/object_rules.h"

namespace depot {

void LeaseTable::Grant(SessionId session, Namespace& ns, const Location& block, uint64_t charged) {
  Location rest = block;
  rest.size = proto::RoundUpToBlock(block.size);
  leases_[session] = Lease{.ns = &ns,
                           .rest = rest,
                           .start = rest.offset,
                           .end = rest.offset + rest.size,
                           .charged = charged,
                           .returned = {},
                           .used = std::chrono::steady_clock::now()};
  leased_ += rest.size;
}

Result<std::vector<Location>> LeaseTable::Carve(
    SessionId session, const flatbuffers::Vector<const wire::FrameLocation*>& frames) {
  auto it = leases_.find(session);
  if (it == leases_.end()) return Status::ProtocolError("put without a lease");
  Lease& lease = it->second;
  // Every check first: a refused put cuts nothing. Frames from the cursor must lie inside the
  // unconsumed part [cursor, rest_end), in order; `from[i]`: the returned block frame i starts,
  // or -1 for the cursor.
  const uint64_t rest_end = lease.rest.offset + lease.rest.size;
  uint64_t cursor = lease.rest.offset;
  uint64_t bytes = 0;
  std::vector<int> from(frames.size(), -1);
  uint32_t used = 0;  // returned blocks taken by this put, as bits
  for (size_t i = 0; i < frames.size(); ++i) {
    const wire::FrameLocation* f = frames.Get(i);
    if (f->size() == 0) continue;
    bytes += f->size();
    for (size_t r = 0; r < lease.returned.size(); ++r) {
      const Location& block = lease.returned[r];
      if (f->pool() == 0 && f->segment() == block.segment && f->offset() == block.offset &&
          f->size() <= block.size && !(used & (1u << r))) {
        from[i] = static_cast<int>(r);
        used |= 1u << r;
        break;
      }
    }
    if (from[i] >= 0) continue;
    // (The size is checked before it is rounded: a size near 2^64 would round to 0.)
    if (f->pool() != 0 || f->segment() != lease.rest.segment || f->offset() < cursor ||
        f->offset() % proto::kBlockAlign != 0 || f->offset() >= rest_end ||
        f->size() > rest_end - f->offset() ||
        proto::RoundUpToBlock(f->size()) > rest_end - f->offset()) {
      return Status::ProtocolError(fmt::format(
          "put of a frame of {} bytes at {} in segment {} outside its lease ({} to {} in segment "
          "{}, the part before {} used, {} blocks returned)",
          f->size(), f->offset(), f->segment(), lease.start, lease.end, lease.rest.segment, cursor,
          lease.returned.size()));
    }
    cursor = f->offset() + proto::RoundUpToBlock(f->size());
  }
  // Then the cuts, which the checks above make valid: a cut that fails all the same is a broken
  // invariant, reported as an error for this session (whose connection closes), never assumed.
  std::vector<Location> out;
  out.reserve(frames.size());
  Namespace& ns = *lease.ns;
  for (size_t i = 0; i < frames.size(); ++i) {
    const wire::FrameLocation* f = frames.Get(i);
    if (f->size() == 0) {
      out.push_back(Location{});
      continue;
    }
    uint64_t block = proto::RoundUpToBlock(f->size());
    Location frame;
    if (from[i] >= 0) {
      frame = lease.returned[static_cast<size_t>(from[i])];
      leased_ -= frame.size;
      if (block < frame.size) {  // a smaller object: the rest of the block goes back
        auto rest = ns.Split(frame, block);
        if (!rest.ok()) return Broken(rest.status());
        ns.Free({&*rest, 1});
      }
    } else {
      if (f->offset() > lease.rest.offset) {  // a gap the client skipped goes back now
        Location gap = lease.rest;
        auto rest = ns.Split(gap, f->offset() - lease.rest.offset);
        if (!rest.ok()) return Broken(rest.status());
        lease.rest = *rest;
        leased_ -= gap.size;
        ns.Free({&gap, 1});
      }
      frame = lease.rest;
      if (block < lease.rest.size) {
        auto rest = ns.Split(frame, block);
        if (!rest.ok()) return Broken(rest.status());
        lease.rest = *rest;
      } else {  // the frame takes the rest: the cursor is at the lease's end
        lease.rest.offset += lease.rest.size;
        lease.rest.size = 0;
      }
      leased_ -= block;
    }
    frame.size = f->size();
    out.push_back(frame);
  }
  for (size_t r = lease.returned.size(); r-- > 0;) {
    if (used & (1u << r)) lease.returned.erase(lease.returned.begin() + static_cast<ptrdiff_t>(r));
  }
  // A lease used up stays (empty) until the session's next lease or its close, which credit what
  // its gaps and padding still hold of the quota.
  lease.charged -= std::min(lease.charged, bytes);
  lease.used = std::chrono::steady_clock::now();
  return out;
}

Status LeaseTable::Broken(const Status& why) {
  spdlog::error("lease table: a cut its checks allowed failed: {}", why.message());
  return Status::ProtocolError("depotd could not cut a put from its lease: " + why.message());
}

std::optional<Location> LeaseTable::TakeBack(SessionId session, const Location& frame) {
  auto it = leases_.find(session);
  if (it == leases_.end() || frame.size == 0) return std::nullopt;
  Lease& lease = it->second;
  Location block = frame;
  block.size = proto::RoundUpToBlock(frame.size);
  uint64_t held = 0;
  for (const Location& r : lease.returned) held += r.size;
  if (block.pool != 0 || block.segment != lease.rest.segment || block.offset < lease.start ||
      block.offset >= lease.end || block.size > lease.end - block.offset ||
      lease.returned.size() >= kMaxReturned || held + block.size > lease.end - lease.start) {
    return std::nullopt;
  }
  lease.returned.push_back(block);
  lease.charged += block.size;
  leased_ += block.size;
  return block;
}

uint64_t LeaseTable::End(SessionId session) {
  auto it = leases_.find(session);
  if (it == leases_.end()) return 0;
  Lease& lease = it->second;
  if (lease.rest.size > 0) {
    leased_ -= lease.rest.size;
    lease.ns->Free({&lease.rest, 1});
  }
  for (const Location& block : lease.returned) {
    leased_ -= block.size;
    lease.ns->Free({&block, 1});
  }
  uint64_t charged = lease.charged;
  leases_.erase(it);
  return charged;
}

std::vector<SessionId> LeaseTable::Holders() const {
  std::vector<SessionId> out;
  out.reserve(leases_.size());
  for (const auto& [session, lease] : leases_) out.push_back(session);
  return out;
}

std::vector<SessionId> LeaseTable::IdleSince(std::chrono::steady_clock::time_point since) const {
  std::vector<SessionId> out;
  for (const auto& [session, lease] : leases_) {
    if (lease.used < since) out.push_back(session);
  }
  return out;
}

}  // namespace depot
