#include "daemon/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "daemon/replies.h"
#include "daemon/request_limits.h"
#include "depot/units.h"

namespace depot {

Store::Store(boost::asio::io_context& io, StoreOptions options)
    : io_(io),
      options_(std::move(options)),
      access_(options_.access),
      devices_(options_.devices),
      namespaces_(
          io, options_.namespaces, devices_,
          NamespaceHooks{
              .retired = [this](const Namespace& ns, uint32_t pool,
                                uint32_t id) { return OnSegmentRetired(ns, pool, id); },
              .reclaim = [this](Namespace&, const StoredObject& o,
                                const Location& f) { return ReturnToLease(o, f); },
              .revoke_leases = [this] { return RevokeIdleLeases(); },
              .freed =
                  [this](const StoredObject& o) {
                    quotas_.Credit(o.creator_uid, o.creator, o.size());
                  },
              .event = [this](const Namespace& ns, TableEvent e, const StoredObject& o,
                              SessionId by) { events_.Emit(EventBus::KindOf(e), &o, by, &ns); },
              .restored =
                  [this](Namespace& ns, const Guid& g, const Status& st) {
                    st.ok() ? waits_.Wake(ns.table(), g) : waits_.Fail(ns.table(), g, st);
                  },
              .post = [&io](std::function<void()> f) { boost::asio::post(io, std::move(f)); },
          }),
      quotas_(options_.user_quota, options_.client_quota),
      waits_(io, options_.get_waits, [this](GetWait& w) { AnswerGet(w); }),
      segments_([this](Namespace& ns, uint32_t pool, uint32_t id) {
        ns.Dropped(pool, id);
        namespaces_.spill().SegmentDropped();
      }),
      started_(std::chrono::steady_clock::now()),
      handshakes_(options_.max_handshakes_per_user, "connections that have not said hello",
                  "max_handshakes_per_user"),
      references_(options_.max_references_per_user, "objects held through depotd",
                  "max_references_per_user"),
      pins_timer_(io),
      rings_(
          io,
          [this](SessionId s, std::span<const uint8_t> body, bool held) {
            return OnRingPut(s, body, held);
          },
          [this](SessionId s, const Status& st) {
            if (auto it = sessions_.find(s); it != sessions_.end()) it->second.peer->Abort(st);
          },
          [this](uid_t uid) { return waits_.guids_by_user().contains(uid); }) {}

Result<std::unique_ptr<Store>> Store::Create(boost::asio::io_context& io, StoreOptions options,
                                             std::vector<KeptFd> kept) {
  std::unique_ptr<Store> store(new Store(io, std::move(options)));
  // The names of what the last daemon kept are read before the spill directory makes any
  // namespace; its memory is adopted after the directory is read.
  store->namespaces_.kept().Take(std::move(kept));
  if (Status st = store->namespaces_.LoadSpilled(); !st.ok()) return st;
  store->namespaces_.AdoptKept({store->options_.max_frames, store->options_.max_metadata});
  // Numbered above the last daemon's, so that a resume names one of its sessions only.
  store->next_session_ = store->namespaces_.kept().last_session() + 1;
  // What the last daemon stored counts against its users' quotas again; its owner-scoped objects
  // (kept in memory or read back from spill_dir) wait for their processes to come back
  // (OwnerScopes) until the grace period ends.
  store->namespaces_.ForEachObject([s = store.get()](const StoredObject& o) {
    s->quotas_.ChargeRestored(o.creator_uid, o.size());
    if (o.owner_scoped && o.creator == 0) s->owner_scopes_.Orphan(o);
  });
  store->namespaces_.kept().set_on_grace_end([s = store.get()] { s->OnGraceEnd(); });
  if (!store->owner_scopes_.Orphaned().empty()) store->namespaces_.kept().BeginGrace();
  if (!store->options_.namespaces.per_user) {
    // The one shared namespace exists from the start (prefaulted when asked).
    auto ns = store->namespaces_.For(0);
    if (!ns.ok()) return ns.status();
  }
  return store;
}

Status Store::Handle(SessionId s, const proto::Header& h, std::span<const uint8_t> body) {
  auto it = sessions_.find(s);
  if (it == sessions_.end()) return Status::Disconnected("session is closed");
  auto type = static_cast<proto::MsgType>(h.type);
  if (it->second.ns == nullptr && type != proto::MsgType::kHello) {
    NoteProtocolError();
    return Status::ProtocolError(
        fmt::format("expected hello as the first message, got {}", proto::TypeName(h.type)));
  }
  ++requests_;
  ++it->second.requests;
  auto start = std::chrono::steady_clock::now();
  try {
    // Its puts written into its ring come before this request.
    if (Status taken = rings_.Take(s); !taken.ok()) return taken;
    if (Status words = CheckSlotWords(s); !words.ok()) return words;
    Status st = Dispatch(s, it->second, h, body);
    counters_.ObserveRequest(h.type, std::chrono::steady_clock::now() - start);
    // The session closes on these; protocol errors were counted where they were found.
    if (!st.ok() && !st.IsProtocolError()) ++errors_[static_cast<size_t>(st.code())];
    return st;
  } catch (const std::bad_alloc&) {
    // The daemon's own memory (metadata, replies) ran out: this request fails, the rest go on.
    spdlog::error("out of memory answering {} from session {}", proto::TypeName(h.type), s);
    if (type == proto::MsgType::kPut) {  // no reply to carry the error: the connection closes
      return Status::ProtocolError("depotd ran out of memory while taking a put");
    }
    ReplyError(s, h.request_id,
               Status::Unavailable("depotd ran out of memory while answering this request"));
    return Status::OK();
  } catch (const std::exception& e) {
    // A bug that some input reached: this session closes, every other goes on.
    return Failed(s, proto::TypeName(h.type), e);
  }
}

Status Store::Failed(SessionId s, std::string_view what, const std::exception& e) {
  NoteProtocolError();
  spdlog::error("session {}: handling {} failed ({}); its connection closes", s, what, e.what());
  return Status::ProtocolError(fmt::format(
      "depotd failed while handling {} ({}); the connection is closed", what, e.what()));
}

Status Store::Dispatch(SessionId s, SessionState& st, const proto::Header& h,
                       std::span<const uint8_t> body) {
  auto type = static_cast<proto::MsgType>(h.type);
  uint64_t id = h.request_id;
  if (st.ns != nullptr && DrainFirst(s, h, body)) return Status::OK();
  switch (type) {
    case proto::MsgType::kHello:
      if (st.ns != nullptr) {
        NoteProtocolError();
        return Status::ProtocolError("hello sent twice");
      }
      return OnHello(s, id, *proto::Body<wire::HelloRequest>(body));
    case proto::MsgType::kCreate:
      OnCreate(s, id, body);
      break;
    case proto::MsgType::kSeal:
    case proto::MsgType::kAbort:
      OnSealOrAbort(s, id, type == proto::MsgType::kSeal, *proto::Body<wire::GuidRequest>(body));
      break;
    case proto::MsgType::kGet:
      OnGet(s, id, *proto::Body<wire::GetRequest>(body));
      break;
    case proto::MsgType::kRelease:
      OnRelease(s, *proto::Body<wire::ReleaseRequest>(body));
      break;
    case proto::MsgType::kSegmentsDropped:
      segments_.Dropped(s, *proto::Body<wire::SegmentsRetired>(body));
      break;
    case proto::MsgType::kDelete:
      OnDelete(s, id, *proto::Body<wire::GuidsRequest>(body));
      break;
    case proto::MsgType::kContains:
      OnContains(s, id, *proto::Body<wire::GuidsRequest>(body));
      break;
    case proto::MsgType::kList:
      OnList(s, id, *proto::Body<wire::ListRequest>(body));
      break;
    case proto::MsgType::kStat:
      OnStat(s, id, *proto::Body<wire::GuidRequest>(body));
      break;
    case proto::MsgType::kStatus:
      OnStatus(s, id);
      break;
    case proto::MsgType::kSubscribe:
      events_.Subscribe(s);
      [[fallthrough]];
    case proto::MsgType::kPing:
      st.peer->Send(replies::Empty(type, id), {});
      break;
    case proto::MsgType::kClients:
      OnClients(s, id);
      break;
    case proto::MsgType::kMetrics:
      OnMetrics(s, id);
      break;
    case proto::MsgType::kLease:
      OnLease(s, id, *proto::Body<wire::LeaseRequest>(body));
      break;
    case proto::MsgType::kPut:
      return OnPut(s, *proto::Body<wire::PutRequest>(body));
    case proto::MsgType::kPutsWritten:  // its ring was taken above
      rings_.Poll(s);
      break;
    case proto::MsgType::kHold:
      OnHold(s, id, *proto::Body<wire::GuidsRequest>(body));
      break;
    case proto::MsgType::kIndex:
      OnIndex(s, st, id, *proto::Body<wire::IndexRequest>(body));
      break;
    case proto::MsgType::kResume:
      OnResume(s, id, *proto::Body<wire::ResumeRequest>(body));
      break;
    // No default: a row of proto/messages.h without a case here fails to compile.
    case proto::MsgType::kSegmentsRetired:
    case proto::MsgType::kEvent:
    case proto::MsgType::kError:
      return NotARequest(h.type);
  }
  if (proto::FindMessage(h.type) == nullptr) return NotARequest(h.type);
  return Status::OK();
}

Status Store::NotARequest(uint16_t type) {
  NoteProtocolError();
  return Status::ProtocolError(
      fmt::format("{} is not a request a client may send", proto::TypeName(type)));
}

void Store::Reply(SessionId session, uint64_t request_id, proto::MsgType type,
                  flatbuffers::FlatBufferBuilder& fbb, std::vector<UniqueFd> fds) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  if (Status st = CheckReplySize(fbb.GetSize()); !st.ok()) {
    return ReplyError(session, request_id, st);
  }
  it->second.peer->Send(proto::Encode(proto::ReplyType(type), request_id, fbb), std::move(fds));
}

Status Store::CheckReplySize(size_t size) const {
  if (size <= options_.max_message_size) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "the reply would be at least {} bytes, more than the limit of {} bytes (max_message_size): "
      "ask for less at a time",
      size, options_.max_message_size));
}

void Store::ReplyError(SessionId session, uint64_t request_id, const Status& status) {
  ++errors_[static_cast<size_t>(status.code())];
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.peer->Send(
      proto::EncodeError(request_id, proto::ToWire(status.code()), status.message()), {});
}

void Store::OnSealOrAbort(SessionId s, uint64_t id, bool seal, const wire::GuidRequest& req) {
  if (!req.guid()) return ReplyError(s, id, Status::InvalidArgument("no GUID given"));
  Guid guid = proto::FromWire(*req.guid());
  ObjectTable& table = sessions_.at(s).ns->table();
  Status st = seal ? table.Seal(s, guid, req.checksum()) : table.Abort(s, guid);
  if (!st.ok()) return ReplyError(s, id, st);
  if (seal) waits_.Wake(table, guid);
  sessions_.at(s).peer->Send(
      replies::Empty(seal ? proto::MsgType::kSeal : proto::MsgType::kAbort, id), {});
}

void Store::OnGet(SessionId s, uint64_t id, const wire::GetRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  size_t n = req.guids()->size();
  int64_t timeout = req.timeout_ms();
  if (timeout < -1) {
    return ReplyError(s, id,
                      Status::InvalidArgument(
                          fmt::format("timeout {} ms is invalid (0: poll, -1: forever)", timeout)));
  }
  ObjectTable& table = sessions_.at(s).ns->table();
  GetWait w;
  w.session = s;
  w.uid = sessions_.at(s).creds.uid;
  w.request_id = id;
  w.table = &table;
  w.guids.reserve(n);
  w.acquired.resize(n);
  w.errors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Guid g = proto::FromWire(*req.guids()->Get(i));
    w.guids.push_back(g);
    auto got = namespaces_.spill().Acquire(*sessions_.at(s).ns, s, g);
    if (got.ok()) {
      w.acquired[i] = *got;
    } else if (!SpillStore::Waits(got.status(), timeout)) {
      w.errors[i] = got.status();
    } else {
      ++w.missing;
    }
  }
  if (Status parked = waits_.Park(w, timeout); !parked.ok()) {
    w.ReleaseAll();
    ReplyError(s, id, parked);
  } else if (uid_t uid = sessions_.at(s).creds.uid; waits_.guids_by_user().contains(uid)) {
    rings_.NoteParkedGet(uid);  // the put it waits for (its user's, likely) rings the doorbell
  }
}

void Store::AnswerGet(GetWait& w) {
  auto sit = sessions_.find(w.session);
  if (sit == sessions_.end()) return;
  flatbuffers::FlatBufferBuilder fbb(1024);
  auto results = replies::GetResults(fbb, w);
  // Checked before any segment is recorded as sent: a refused reply hands nothing over.
  if (Status too_large = CheckReplySize(fbb.GetSize()); !too_large.ok()) {
    w.ReleaseAll();
    return ReplyError(w.session, w.request_id, too_large);
  }
  std::vector<uint64_t> keys;
  std::vector<UniqueFd> fds;
  for (const StoredObject* o : w.acquired) {
    if (o == nullptr) continue;
    if (Status c = segments_.Collect(w.session, o->frames(), false, keys, fds); !c.ok()) {
      w.ReleaseAll();
      return ReplyError(w.session, w.request_id, c);
    }
  }
  auto segments = replies::Segments(fbb, *sit->second.ns, keys);
  fbb.Finish(wire::CreateGetReply(fbb, results, segments));
  Reply(w.session, w.request_id, proto::MsgType::kGet, fbb, std::move(fds));
}

bool Store::OnSegmentRetired(const Namespace& ns, uint32_t pool, uint32_t id) {
  auto holders = segments_.Retire(&ns, pool, id);
  for (SessionId h : holders) sessions_.at(h).peer->Send(replies::SegmentRetired(pool, id), {});
  return !holders.empty();
}

void Store::OnRelease(SessionId s, const wire::ReleaseRequest& req) {
  SessionState& st = sessions_.at(s);
  ObjectTable& table = st.ns->table();
  auto release = [&](uint64_t handle) {
    Status released = table.Release(s, handle);
    if (!released.ok()) spdlog::debug("release from session {}: {}", s, released.message());
  };
  {
    ObjectTable::FreeBatch batch(table);
    if (req.handles()) std::ranges::for_each(*req.handles(), release);
    for (size_t i = 0; req.guids() && i < req.guids()->size(); ++i) {
      auto it = st.guid_holds.find(proto::FromWire(*req.guids()->Get(i)));
      if (it == st.guid_holds.end()) continue;
      release(it->second);
      st.guid_holds.erase(it);
    }
  }
  WatchPins();
}

void Store::WatchPins() {
  // Clients clear their slots without a message: a timer reads them again, soon after an object
  // newly waits for them, then less and less often (each read looks at every slot).
  if (uint64_t made = namespaces_.PinsMade(); made != pins_made_) {
    pins_made_ = made;
    pins_delay_ = kPinsFirst;
    // Sooner than the wait armed, unless that ends sooner still: no stream of new pins can put
    // the read off.
    if (pins_armed_ && std::chrono::steady_clock::now() + kPinsFirst < pins_due_) {
      return ArmPins();
    }
  }
  if (pins_armed_) return;
  if (!namespaces_.FreeUnpinned()) {
    pins_delay_ = kPinsFirst;
    return;
  }
  ArmPins();
}

void Store::ArmPins() {
  pins_armed_ = true;
  pins_timer_.expires_after(pins_delay_);  // cancels a wait armed before
  pins_due_ = pins_timer_.expiry();
  pins_delay_ = std::min(pins_delay_ * 2, kPinsLast);
  pins_timer_.async_wait([this, wait = ++pins_wait_](const boost::system::error_code& ec) {
    if (wait != pins_wait_) return;  // re-armed since
    pins_armed_ = false;
    if (!ec) WatchPins();
  });
}

void Store::OnDelete(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  const SessionState& session = sessions_.at(s);
  ObjectTable& table = session.ns->table();
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<wire::GuidResult>> results;
  {
    ObjectTable::FreeBatch batch(table);  // one read of the slots for all, before the reply
    for (const wire::Guid* g : *req.guids()) {
      Guid guid = proto::FromWire(*g);
      const StoredObject* o = table.Find(guid);
      Status st = o != nullptr && !access_.MayDelete(session.creds, o->creator_uid)
                      ? Status::PermissionDenied(fmt::format(
                            "object {} was created by uid {}; only that user, root and depotd's "
                            "own user may delete it",
                            guid.ToString(), o->creator_uid))
                      : table.Delete(guid, s);
      auto msg = fbb.CreateString(st.message());
      results.push_back(wire::CreateGuidResult(fbb, g, proto::ToWire(st.code()), msg));
    }
  }
  fbb.Finish(wire::CreateGuidsReply(fbb, fbb.CreateVector(results)));
  Reply(s, id, proto::MsgType::kDelete, fbb);
  WatchPins();
}

}  // namespace depot
