// Module configuration stored by module: each block of the configuration tree (main, http, server, location)
// holds one typed conf object per module that declared a conf type for that level, reached as
// `loc.module<cache::CacheLocConf>()`. The core conf structs (config/conf.hh) name no module type; a module's
// conf header declares its level:
//
//   struct CacheLocConf {
//     static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
//     ...
//   };
//
// The generic directive setters and merge functions (config/directive.hh: set_flag<&CacheLocConf::lock>,
// inherit<&CacheLocConf::lock>) write and inherit module fields exactly as core fields. A block that never
// touched a module's conf reads the type's default-constructed value (the conf struct's initialisers are
// nginx's defaults). Objects are created on first write, copied with their block, and immutable once the
// configuration is loaded; a read is one bounds check and one indexed load.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kosoku::config {

/// The block level a module conf type belongs to.
enum class ConfLevel { kMain, kHttp, kServer, kLocation };

/// A type with `static constexpr ConfLevel kLevel` is a module conf type.
template <class T>
concept ModuleConf = requires {
  { T::kLevel } -> std::convertible_to<ConfLevel>;
};

namespace detail {
/// Hands out the next slot index (process-wide, starting at 0). Thread-safe.
size_t next_conf_slot();
}  // namespace detail

/// The slot index of module conf type T: fixed for the process once first asked for.
template <ModuleConf T>
size_t conf_slot() {
  static const size_t slot = detail::next_conf_slot();
  return slot;
}

/// The per-block store: one object per module conf type, indexed by conf_slot<T>().
class ModuleConfs {
 public:
  ModuleConfs() = default;
  ModuleConfs(const ModuleConfs& other) { copy_from(other); }
  ModuleConfs& operator=(const ModuleConfs& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  ModuleConfs(ModuleConfs&&) noexcept = default;
  ModuleConfs& operator=(ModuleConfs&&) noexcept = default;
  ~ModuleConfs() = default;

  /// The block's T, created with its defaults on first use (loading only: the tree is const afterwards).
  template <ModuleConf T>
  T& get() {
    size_t i = conf_slot<T>();
    if (i >= boxes_.size()) boxes_.resize(i + 1);
    if (!boxes_[i]) boxes_[i] = std::make_unique<Box<T>>();
    return static_cast<Box<T>&>(*boxes_[i]).value;
  }

  /// The block's T; the defaults when the block never set any of T's directives.
  template <ModuleConf T>
  const T& get() const {
    size_t i = conf_slot<T>();
    if (i < boxes_.size() && boxes_[i]) return static_cast<const Box<T>&>(*boxes_[i]).value;
    static const T kDefaults{};
    return kDefaults;
  }

 private:
  struct BoxBase {
    virtual ~BoxBase() = default;
    virtual std::unique_ptr<BoxBase> clone() const = 0;
  };
  template <class T>
  struct Box final : BoxBase {
    Box() = default;
    explicit Box(const T& v) : value(v) {}
    std::unique_ptr<BoxBase> clone() const override { return std::make_unique<Box>(value); }
    T value{};
  };

  void copy_from(const ModuleConfs& other) {
    boxes_.clear();
    boxes_.resize(other.boxes_.size());
    for (size_t i = 0; i < other.boxes_.size(); ++i) {
      if (other.boxes_[i]) boxes_[i] = other.boxes_[i]->clone();
    }
  }

  std::vector<std::unique_ptr<BoxBase>> boxes_;
};

}  // namespace kosoku::config
