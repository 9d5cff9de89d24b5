#include "daemon/session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

namespace depot {

namespace {
// Messages one session handles before the loop serves the others.
constexpr int kMessagesPerTurn = 64;
// Turns of its put ring a request waits at most (Serve), a turn's records each.
constexpr int kRingTurnsPerRequest = 32;
}  // namespace

Session::Session(Socket socket, Store& store, std::function<void(Session*)> on_closed)
    : socket_(std::move(socket)),
      store_(store),
      on_closed_(std::move(on_closed)),
      reader_(kPreHelloMaxBody),
      handshake_(socket_.get_executor()) {}

void Session::Start(PeerCredentials creds) {
  creds_ = std::move(creds);
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  auto opened = store_.Open(this, creds_);
  if (!opened.ok()) return Fail(opened.status(), 0);
  id_ = *opened;
  handshake_.expires_after(store_.options().handshake_timeout);
  handshake_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->closed_ || self->failing_ || self->greeted_) return;
    self->Fail(Status::Timeout(fmt::format("no hello within {} ms of connecting",
                                           self->store_.options().handshake_timeout.count())),
               0);
  });
  Read();
}

void Session::Read() {
  if (closed_ || failing_) return;
  socket_.async_wait(Socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       if (self->closed_) return;
                       if (ec) {
                         spdlog::warn("session {} (pid {}): wait failed: {}", self->id_,
                                      self->creds_.pid, ec.message());
                         self->Close();
                         return;
                       }
                       self->ReadNow();
                     });
}

void Session::ReadNow() {
  if (closed_ || failing_) return;
  std::span<uint8_t> space = reader_.Space();
  ssize_t n = ::recv(socket_.native_handle(), space.data(), space.size(), MSG_DONTWAIT);
  if (n > 0) {
    reader_.Filled(static_cast<size_t>(n));
    Serve();
  } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    Read();  // a HandleArrived took the bytes first
  } else {
    if (n < 0 && errno != ECONNRESET) {
      spdlog::warn("session {} (pid {}): read failed: {}", id_, creds_.pid, std::strerror(errno));
    }
    Close();
  }
}

void Session::HandleArrived() {
  if (closed_ || failing_ || !greeted_ || handling_) return;
  int pending = 0;
  if (::ioctl(socket_.native_handle(), FIONREAD, &pending) != 0) pending = 0;
  // Only the bytes there now: a client that keeps writing cannot keep the drain going.
  while (pending > 0) {
    std::span<uint8_t> space = reader_.Space();
    ssize_t n = ::recv(socket_.native_handle(), space.data(),
                       std::min<size_t>(space.size(), static_cast<size_t>(pending)), MSG_DONTWAIT);
    if (n <= 0) break;  // the wait for readability sees a closed or failed socket
    reader_.Filled(static_cast<size_t>(n));
    pending -= static_cast<int>(n);
  }
  auto put = static_cast<uint16_t>(proto::MsgType::kPut);
  while (!closed_ && !failing_) {
    if (Throttled() && reader_.NextType() != put) {
      paused_ = true;  // Flush serves the rest once the replies drain
      return;
    }
    if (!ParseOne()) return;
  }
}

int Session::fd() const {
  return closed_ ? -1 : const_cast<Socket&>(socket_).native_handle();  // asio's is not const
}

void Session::Serve() {
  if (closed_ || failing_) return;
  int budget = kMessagesPerTurn;
  while (budget > 0 && !Throttled()) {
    if (greeted_ && reader_.Whole() && ring_turns_ < kRingTurnsPerRequest) {
      // Its puts come before its next request, a turn of them at a time; past a few turns (a
      // client that keeps its ring full) the request takes the rest at once.
      Result<bool> left = store_.TakeRingTurn(id_);
      if (!left.ok()) {
        Fail(left.status(), 0);
        return;
      }
      if (*left) {
        ++ring_turns_;
        budget = 0;
        break;
      }
    }
    ring_turns_ = 0;
    if (!ParseOne()) break;
    --budget;
  }
  if (closed_ || failing_) return;
  // Whole messages left for later, a put among them perhaps: the next drain reads this session
  // although its socket may take no more bytes.
  if (greeted_ && reader_.Whole()) store_.NoteUnhandled(id_);
  if (Throttled()) {
    paused_ = true;  // Flush serves again once the replies drain
  } else if (budget == 0) {
    boost::asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Serve(); });
  } else {
    Read();
  }
}

bool Session::ParseOne() {
  proto::FrameReader::Frame frame;
  std::string err;
  proto::FrameReader::Cut cut = reader_.Next(frame, err);
  if (cut == proto::FrameReader::Cut::kPartial) return false;
  const proto::Header& h = frame.header;
  if (cut == proto::FrameReader::Cut::kBadHeader) {
    store_.NoteProtocolError();
    Fail(Status::ProtocolError(greeted_ ? err : err + " before hello"), h.request_id);
    return false;
  }
  if ((h.type & proto::kReplyBit) || !proto::VerifyBody(h.type, frame.body)) {
    store_.NoteProtocolError();
    Fail(Status::ProtocolError(fmt::format("malformed {} message: the body does not verify",
                                           proto::TypeName(h.type))),
         h.request_id);
    return false;
  }
  handling_ = true;
  Status st = store_.Handle(id_, h, frame.body);
  handling_ = false;
  if (!st.ok()) {
    Fail(st, h.request_id);
    return false;
  }
  if (!greeted_) {
    greeted_ = true;  // the store answers nothing before hello
    reader_.set_max_body(store_.options().max_message_size);
  }
  return true;
}

void Session::Fail(const Status& status, uint64_t request_id) {
  spdlog::warn("session {} (pid {} uid {}): {}; closing the connection", id_, creds_.pid,
               creds_.uid, status.message());
  failing_ = true;  // Flush closes the connection once the error is written
  Send(proto::EncodeError(request_id, proto::ToWire(status.code()), status.message()), {});
}

void Session::Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) {
  if (closed_) return;
  out_bytes_ += message.size();
  out_.push_back(Outbound{std::move(message), std::move(fds)});
  if (!write_waiting_) Flush();
}

// Writes as much as the socket takes now; waits for writability for the rest. A message's fds
// go with its first byte; more than kMaxFdsPerSend fds go one chunk per byte.
void Session::Flush() {
  while (!out_.empty()) {
    Outbound& m = out_.front();
    size_t fds_left = m.fds.size() - m.fds_sent;
    size_t nfds = std::min<size_t>(fds_left, proto::kMaxFdsPerSend);
    std::span<const uint8_t> data(m.bytes.data() + m.bytes_sent, m.bytes.size() - m.bytes_sent);
    if (fds_left > nfds) data = data.first(1);
    std::vector<int> raw;
    for (size_t i = 0; i < nfds; ++i) raw.push_back(m.fds[m.fds_sent + i].get());
    ssize_t n = proto::SendWithFds(socket_.native_handle(), data, raw, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        write_waiting_ = true;
        socket_.async_wait(Socket::wait_write,
                           [self = shared_from_this()](const boost::system::error_code& ec) {
                             self->write_waiting_ = false;
                             if (!ec && !self->closed_) self->Flush();
                           });
        return;
      }
      if (errno != EPIPE && errno != ECONNRESET) {
        spdlog::warn("session {} (pid {}): write failed: {}", id_, creds_.pid,
                     std::strerror(errno));
      }
      // Not from inside a caller that may be iterating over sessions.
      boost::asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
      return;
    }
    m.bytes_sent += static_cast<size_t>(n);
    m.fds_sent += nfds;
    out_bytes_ -= static_cast<size_t>(n);
    if (m.bytes_sent == m.bytes.size() && m.fds_sent == m.fds.size()) out_.pop_front();
    if (paused_ && !Throttled()) {
      paused_ = false;
      boost::asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Serve(); });
    }
  }
  if (failing_)
    boost::asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  handshake_.cancel();
  store_.Close(id_);
  spdlog::info("client disconnected: session {} pid {} uid {}", id_, creds_.pid, creds_.uid);
  boost::system::error_code ec;
  socket_.close(ec);
  out_.clear();
  out_bytes_ = 0;
  if (on_closed_) on_closed_(this);
}

}  // namespace depot
