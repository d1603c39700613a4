// `cache_rules_admin;` — the rules admin API, a content handler for the location (its allow/deny rules
// apply first, in the access phase). Paths are relative to the location's prefix (for a regex or exact
// location: from the first "/rules" segment):
//
//   GET    PREFIX/rules/HOST    200 {"host":"HOST","patterns":[...]}, or 404 {"error":"no rules for host ..."}
//   PUT    PREFIX/rules/HOST    body {"patterns":[...]} (a "host" member, if any, must name HOST):
//                               201 (new) / 200 (replaced) with the stored rules; 400 {"error":...} on bad
//                               JSON, an invalid host or an invalid pattern (RE2's message) — the old rules
//                               stay
//   DELETE PREFIX/rules/HOST    200 {"host":"HOST","deleted":true}, or 404
//   GET    PREFIX/rules[?offset=N&limit=M]
//                               200 {"count":TOTAL,"offset":N,"limit":M,"hosts":[{"host":..,"patterns":[..]},..]}
//                               (limit default 100, at most 1000; stable order between changes)
// HEAD is GET without the body; other methods 405 with Allow. Responses are application/json with
// Cache-Control: no-store.
//
// A change is visible to every core as soon as it is published (before the response); with a
// cache_rules_file the response waits until the file with the change is on disk (fsync'd and renamed), and
// is 500 {"error":...} if that write fails (the change then is applied in memory but not saved).
#pragma once

#include <cstdint>
#include <string>

#include "core/http/exchange.hh"

namespace kosoku::rules {

class RulesCore;

/// Largest PUT body read (bytes); larger is 413 (client_max_body_size may refuse earlier).
inline constexpr size_t kMaxAdminBody = 1 << 20;

/// Per-request state of the admin handler (Exchange::state()).
class AdminState final : public http::ContentState, public http::BodySink {
 public:
  AdminState(RulesCore& core, http::Exchange& ex) : core_(core), ex_(&ex) {}
  ~AdminState() override;

  void start();

  // ContentState
  void on_abort() override;
  void on_writable() override {}
  // BodySink
  void on_body_data(std::string_view data) override;
  void on_body_end() override;
  void on_body_error(int status) override;

  // Waiting for durability (RulesCore::answer_waiters).
  uint64_t generation() const { return generation_; }
  void answer_durable();
  void answer_failed(const std::string& error);
  /// The core goes away: forget it.
  void detach() { waiting_ = false; }

 private:
  void reply(int status, const std::string& body);
  void reply_error(int status, std::string_view message);
  /// Replies now, or once the change of `generation` is durable.
  void reply_after_persist(int status, std::string body, uint64_t generation);
  void handle_put();

  RulesCore& core_;
  http::Exchange* ex_;
  std::string host_;
  std::string body_;
  bool too_large_ = false;
  bool waiting_ = false;
  uint64_t generation_ = 0;
  int pending_status_ = 0;
  std::string pending_body_;
};

class AdminHandler final : public http::ContentHandler {
 public:
  explicit AdminHandler(RulesCore& core) : core_(core) {}
  void handle(http::Exchange& ex) override;

 private:
  RulesCore& core_;
};

/// Splits an admin request path: true with *list (PREFIX/rules) or *host (PREFIX/rules/HOST, as written);
/// false if the path is not an admin path. `loc_prefix`: the prefix location's pattern, or empty.
bool split_admin_path(std::string_view uri, std::string_view loc_prefix, bool* list, std::string_view* host);

}  // namespace kosoku::rules
