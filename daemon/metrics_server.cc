#include "daemon/metrics_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <charconv>
#include <optional>
#include <string_view>

namespace depot {
namespace {

// "host:port" or "[v6]:port" into an endpoint; nullopt with `why` set when it is not one.
std::optional<boost::asio::ip::tcp::endpoint> ParseEndpoint(const std::string& listen,
                                                            std::string& why) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    why = "expected an IP address and a port, such as 127.0.0.1:9464 or [::1]:9464";
    return std::nullopt;
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint16_t port = 0;
  std::string_view p(listen.data() + colon + 1, listen.size() - colon - 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size()) {
    why = fmt::format("`{}` is not a port (0 to 65535)", p);
    return std::nullopt;
  }
  boost::system::error_code bad;
  auto address = boost::asio::ip::make_address(host, bad);
  if (bad) {
    why = fmt::format("`{}` is not an IP address (names are not looked up)", host);
    return std::nullopt;
  }
  return boost::asio::ip::tcp::endpoint(address, port);
}

// The whole answer, for a request head `head`.
std::string Answer(std::string_view head, const std::function<std::string()>& render) {
  auto reply = [](std::string_view status, std::string_view type, const std::string& body,
                  bool with_body) {
    return fmt::format(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        status, type, body.size(), with_body ? body : "");
  };
  std::string_view line = head.substr(0, head.find("\r\n"));
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    return reply("400 Bad Request", "text/plain", "not an HTTP/1 request\n", true);
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (method != "GET" && method != "HEAD") {
    return reply("405 Method Not Allowed", "text/plain", "only GET /metrics\n", true);
  }
  if (target != "/metrics" && !target.starts_with("/metrics?")) {
    return reply("404 Not Found", "text/plain", "only /metrics is served here\n", method == "GET");
  }
  return reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(), method == "GET");
}

}  // namespace

// One scrape: reads the request head, writes the answer, closes. Holds itself alive through
// its handlers; the timer closes the socket when the head, or the whole exchange, takes too long.
// It is in the server's list of open connections from its start until it closes.
class MetricsServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<Shared> shared)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        in_(kMaxRequestBytes),
        shared_(std::move(shared)),
        place_(shared_->open.insert(shared_->open.end(), this)) {}
  ~Connection() { Close(); }

  void Run() {
    auto self = shared_from_this();
    auto started = std::chrono::steady_clock::now();
    timer_.expires_at(started + kHeadTimeout);
    Arm();
    boost::asio::async_read_until(
        socket_, in_, "\r\n\r\n", [self, started](const boost::system::error_code& ec, size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          // The head is in: the answer has what is left of the exchange's time.
          self->timer_.expires_at(started + kTimeout);
          self->Arm();
          if (ec == boost::asio::error::not_found) {  // the head passed kMaxRequestBytes
            return self->Send(
                "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n");
          }
          if (ec) return self->Close();
          std::string_view head(static_cast<const char*>(self->in_.data().data()), n);
          self->Send(Answer(head, self->shared_->render));
        });
  }

  // True until the whole request head has arrived (or the connection closed).
  bool reading() const { return reading_ && !closed_; }
  // Reading, and not one byte came yet, nor waits to be read: a scraper sends its request as
  // soon as it connects, so such a connection is the likeliest to be holding a place idle.
  bool silent() const {
    boost::system::error_code ec;
    return reading() && in_.size() == 0 && socket_.available(ec) == 0 && !ec;
  }

  // Closes the socket, ending what is under way, and leaves the server's list; once only.
  void Close() {
    if (closed_) return;
    closed_ = true;
    shared_->open.erase(place_);
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
  }

 private:
  // Waits for the timer's expiry as set; an expiry changed meanwhile cancels the earlier wait.
  void Arm() {
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->Close();
    });
  }
  void Send(std::string answer) {
    out_ = std::move(answer);
    auto self = shared_from_this();
    boost::asio::async_write(socket_, boost::asio::buffer(out_),
                             [self](const boost::system::error_code&, size_t) { self->Close(); });
  }

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::asio::streambuf in_;
  std::string out_;
  std::shared_ptr<Shared> shared_;
  std::list<Connection*>::iterator place_;
  bool reading_ = true;
  bool closed_ = false;
};

MetricsServer::MetricsServer(boost::asio::io_context& io, RenderFn render)
    : acceptor_(io), retry_(io), shared_(std::make_shared<Shared>(Shared{{}, std::move(render)})) {}

MetricsServer::~MetricsServer() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
}

std::string MetricsServer::CheckAddress(const std::string& listen) {
  std::string why;
  return ParseEndpoint(listen, why) ? "" : why;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(boost::asio::io_context& io,
                                                            const std::string& listen,
                                                            RenderFn render) {
  std::string why;
  auto endpoint = ParseEndpoint(listen, why);
  if (!endpoint) return Status::InvalidArgument(fmt::format("metrics_listen {}: {}", listen, why));
  std::unique_ptr<MetricsServer> server(new MetricsServer(io, std::move(render)));
  boost::system::error_code ec;
  boost::asio::ip::tcp::acceptor& a = server->acceptor_;
  if (a.open(endpoint->protocol(), ec); !ec)
    a.set_option(boost::asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(*endpoint, ec);
  if (!ec) a.listen(64, ec);
  if (ec) {
    return Status::Unavailable(fmt::format("cannot serve metrics on {}: {}", listen, ec.message()));
  }
  if (!endpoint->address().is_loopback()) {
    spdlog::warn(
        "metrics are served on {}, which is not a loopback address: anyone who can "
        "reach it can read them",
        listen);
  }
  server->Accept();
  return server;
}

std::string MetricsServer::address() const {
  boost::system::error_code ec;
  boost::asio::ip::tcp::endpoint e = acceptor_.local_endpoint(ec);
  if (ec) return "";
  return e.address().is_v6() ? fmt::format("[{}]:{}", e.address().to_string(), e.port())
                             : fmt::format("{}:{}", e.address().to_string(), e.port());
}

void MetricsServer::Accept() {
  acceptor_.async_accept(
      [this](const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket) {
        if (ec == boost::asio::error::operation_aborted) return;
        if (ec) {
          // Out of descriptors, say: try again shortly rather than spin.
          spdlog::warn("metrics endpoint: accept failed: {}", ec.message());
          retry_.expires_after(std::chrono::milliseconds(100));
          retry_.async_wait([this](const boost::system::error_code& e) {
            if (!e) Accept();
          });
          return;
        }
        // A full table makes room rather than turning the newcomer away: else whoever holds every
        // place with silent connections, reopening each as it times out, keeps every scraper out.
        if (shared_->open.size() >= kMaxConnections) MakeRoom();
        std::make_shared<Connection>(std::move(socket), shared_)->Run();
        Accept();
      });
}

void MetricsServer::MakeRoom() {
  std::list<Connection*>& open = shared_->open;
  // The oldest that sent nothing, else the oldest still reading its head, else the oldest: so a
  // scraper whose request has come is closed only after every silent connection has been.
  auto victim = std::find_if(open.begin(), open.end(), [](Connection* c) { return c->silent(); });
  if (victim == open.end()) {
    victim = std::find_if(open.begin(), open.end(), [](Connection* c) { return c->reading(); });
  }
  (victim != open.end() ? *victim : open.front())->Close();
}

}  // namespace depot
