// depot::Status and depot::Result<T>: how every expected failure is reported, by the client library
// and inside the daemon alike. A Status is a code plus a message a person can act on.
#ifndef DEPOT_STATUS_H_
#define DEPOT_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace depot {

// Both are [[nodiscard]]: a result dropped without a look is a compile warning (an error in the
// builds of scripts/test). One that truly needs no look is discarded with a (void) cast and a
// comment saying why.
class [[nodiscard]] Status {
 public:
  // The values are those of the wire protocol's Code enum, one to one.
  enum class Code : uint16_t {
    kOk = 0,
    kNotFound = 1,
    kTimeout = 2,
    kStoreFull = 3,
    kAlreadyExists = 4,
    kInvalidArgument = 5,
    kProtocolError = 6,
    kDisconnected = 7,
    kPermissionDenied = 8,
    kUnavailable = 9,
    kQuotaExceeded = 10,  // a per-user or per-connection limit of the daemon's config
    kDataLoss = 11,       // bytes that no longer match the checksum recorded at seal
  };

  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status StoreFull(std::string m) { return {Code::kStoreFull, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status ProtocolError(std::string m) { return {Code::kProtocolError, std::move(m)}; }
  static Status Disconnected(std::string m) { return {Code::kDisconnected, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status QuotaExceeded(std::string m) { return {Code::kQuotaExceeded, std::move(m)}; }
  static Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsTimeout() const { return code_ == Code::kTimeout; }
  bool IsStoreFull() const { return code_ == Code::kStoreFull; }
  bool IsAlreadyExists() const { return code_ == Code::kAlreadyExists; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsProtocolError() const { return code_ == Code::kProtocolError; }
  bool IsDisconnected() const { return code_ == Code::kDisconnected; }
  bool IsPermissionDenied() const { return code_ == Code::kPermissionDenied; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  bool IsQuotaExceeded() const { return code_ == Code::kQuotaExceeded; }
  bool IsDataLoss() const { return code_ == Code::kDataLoss; }

  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NotFound: object 5f0c... does not exist", or "OK".
  std::string ToString() const {
    return ok() ? "OK" : std::string(CodeName(code_)) + ": " + message_;
  }

  static std::string_view CodeName(Code c) {
    switch (c) {
      case Code::kOk:
        return "OK";
      case Code::kNotFound:
        return "NotFound";
      case Code::kTimeout:
        return "Timeout";
      case Code::kStoreFull:
        return "StoreFull";
      case Code::kAlreadyExists:
        return "AlreadyExists";
      case Code::kInvalidArgument:
        return "InvalidArgument";
      case Code::kProtocolError:
        return "ProtocolError";
      case Code::kDisconnected:
        return "Disconnected";
      case Code::kPermissionDenied:
        return "PermissionDenied";
      case Code::kUnavailable:
        return "Unavailable";
      case Code::kQuotaExceeded:
        return "QuotaExceeded";
      case Code::kDataLoss:
        return "DataLoss";
    }
    return "Unknown";
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// A T or the Status that explains why there is none. Reading the value of a failed Result is a
// programming error (it throws std::bad_variant_access).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be OK

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace depot

#endif  // DEPOT_STATUS_H_
