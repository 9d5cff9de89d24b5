#include "daemon/lease_table.h"

#include <fmt/format.h>

#include <algorithm>

namespace depot {
namespace {

// The alignment of host blocks (SegmentedPoolOptions::alignment): frames start on it, and each
// takes its size rounded up to it.
constexpr uint64_t kAlign = 64;
uint64_t RoundUp(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

}  // namespace

void LeaseTable::Grant(SessionId session, Namespace& ns, const Location& block, uint64_t charged) {
  Location rest = block;
  rest.size = RoundUp(block.size);
  leases_[session] = Lease{&ns, rest, rest.offset + rest.size, charged};
  leased_ += rest.size;
}

Result<std::vector<Location>> LeaseTable::Carve(
    SessionId session, const flatbuffers::Vector<const wire::FrameLocation*>& frames) {
  auto it = leases_.find(session);
  if (it == leases_.end()) return Status::ProtocolError("put without a lease");
  Lease& lease = it->second;
  // Every check first: a refused put cuts nothing.
  uint64_t cursor = lease.rest.offset;
  uint64_t bytes = 0;
  for (const wire::FrameLocation* f : frames) {
    if (f->size() == 0) continue;
    if (f->pool() != 0 || f->segment() != lease.rest.segment || f->offset() < cursor ||
        f->offset() % kAlign != 0 || f->offset() > lease.end ||
        RoundUp(f->size()) > lease.end - f->offset() || f->size() > lease.end) {
      return Status::ProtocolError(fmt::format(
          "put of a frame of {} bytes at {} in segment {} outside its lease ({} to {} in segment "
          "{}, the part before {} used)",
          f->size(), f->offset(), f->segment(), lease.rest.offset, lease.end, lease.rest.segment,
          cursor));
    }
    cursor = f->offset() + RoundUp(f->size());
    bytes += f->size();
  }
  std::vector<Location> out;
  out.reserve(frames.size());
  Namespace& ns = *lease.ns;
  for (const wire::FrameLocation* f : frames) {
    if (f->size() == 0) {
      out.push_back(Location{});
      continue;
    }
    if (f->offset() > lease.rest.offset) {  // a gap the client skipped goes back now
      Location gap = lease.rest;
      lease.rest = *ns.Split(gap, f->offset() - lease.rest.offset);
      leased_ -= gap.size;
      ns.Free({&gap, 1});
    }
    Location frame = lease.rest;
    uint64_t block = RoundUp(f->size());
    if (block < lease.rest.size) {
      lease.rest = *ns.Split(frame, block);
    } else {
      lease.rest.size = 0;  // the frame takes the rest
    }
    leased_ -= block;
    frame.size = f->size();
    out.push_back(frame);
  }
  // A lease used up stays (empty) until the session's next lease or its close, which credit what
  // its gaps and padding still hold of the quota.
  lease.charged -= std::min(lease.charged, bytes);
  return out;
}

uint64_t LeaseTable::End(SessionId session) {
  auto it = leases_.find(session);
  if (it == leases_.end()) return 0;
  Lease& lease = it->second;
  if (lease.rest.size > 0) {
    leased_ -= lease.rest.size;
    lease.ns->Free({&lease.rest, 1});
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

}  // namespace depot
