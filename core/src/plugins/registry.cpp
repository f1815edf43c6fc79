// registry.cpp - ModelRegistry: lookups, priority between plugins, near-match suggestions.
#include "mobius/registry.hpp"

#include <algorithm>
#include <cctype>

#include "mobius/error.hpp"
#include "util/untrusted.hpp"

namespace mobius {
namespace {

// The longest name near_matches() compares with the registered types.
constexpr size_t kMaxSuggestedFrom = 256;

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string describe_registrant(const Registration& r) {
  if (r.plugin.empty()) return "in-process registration";
  return "plugin " + quote_name(r.plugin) + " (" + printable(r.plugin_path, 4096) + ")";
}

void ModelRegistry::check_conflict(const Registration& r) const {
  if (r.model_type.empty()) throw Error("[registry] empty model type");
  if (!r.build || !r.parse_config)
    throw Error("[registry] model type " + quote_name(r.model_type) + " has no build or config parser");
  auto it = entries_.find(r.model_type);
  if (it != entries_.end() && it->second.priority == r.priority)
    throw Error("[registry] model type " + quote_name(r.model_type) + " is registered by both " +
                describe_registrant(it->second) + " and " + describe_registrant(r));
}

void ModelRegistry::register_architecture(Registration r) {
  check_conflict(r);
  auto it = entries_.find(r.model_type);
  if (it == entries_.end()) {
    std::string key = r.model_type;
    entries_.emplace(std::move(key), std::move(r));
  } else if (it->second.priority > r.priority) {
    shadowed_.push_back(std::move(r));
  } else {
    shadowed_.push_back(std::move(it->second));
    it->second = std::move(r);
  }
}

void ModelRegistry::register_all(std::vector<Registration> regs) {
  for (size_t i = 0; i < regs.size(); ++i) {
    check_conflict(regs[i]);
    for (size_t j = 0; j < i; ++j)
      if (regs[j].model_type == regs[i].model_type)
        throw Error("[registry] model type " + quote_name(regs[i].model_type) + " registered twice by " +
                    describe_registrant(regs[i]));
  }
  for (auto& r : regs) register_architecture(std::move(r));
}

void ModelRegistry::register_alias(const std::string& new_type, const std::string& existing_type) {
  const bool named = !new_type.empty() && new_type.size() <= 256 &&
                     std::all_of(new_type.begin(), new_type.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
                     });
  if (!named)
    throw Error("[registry] " + quote_name(new_type) +
                " is not a model type name (1 to 256 letters, digits, '_', '-' or '.')");
  if (const Registration* r = get_registration(new_type))
    throw Error("[registry] model type " + quote_name(new_type) + " is already registered by " +
                describe_registrant(*r));
  Registration r = alias_registration(get(existing_type), new_type);
  r.plugin.clear();
  r.plugin_path.clear();
  r.vendor.clear();
  r.priority = kPriorityInProcess;
  r.fallback = false;
  register_architecture(std::move(r));
}

Registration alias_registration(const Registration& target, const std::string& new_type) {
  Registration r = target;
  r.model_type = new_type;
  r.alias_of = target.model_type;
  r.target_plugin = target.alias_of.empty() ? target.plugin : target.target_plugin;
  r.target_path = target.alias_of.empty() ? target.plugin_path : target.target_path;
  r.fallback = false;
  return r;
}

const Registration* ModelRegistry::get_registration(std::string_view model_type) const {
  auto it = entries_.find(model_type);
  return it == entries_.end() ? nullptr : &it->second;
}

bool ModelRegistry::contains(std::string_view model_type) const {
  return entries_.find(model_type) != entries_.end();
}

std::vector<const Registration*> ModelRegistry::fallbacks() const {
  std::vector<const Registration*> out;
  for (const auto& [t, r] : entries_)
    if (r.fallback) out.push_back(&r);
  return out;
}

std::vector<std::string> ModelRegistry::architectures() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;  // std::map keeps them sorted
}

std::vector<std::string> ModelRegistry::near_matches(std::string_view name, size_t max) const {
  std::vector<std::pair<size_t, std::string>> scored;
  // A name this long is no typo of a model type (the edit distance would cost its length times
  // each type's): nothing is near it.
  if (name.size() > kMaxSuggestedFrom) return {};
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  for (const auto& [k, v] : entries_) {
    size_t d = edit_distance(lower, k);
    bool related = k.find(lower) != std::string::npos || lower.find(k) != std::string::npos;
    size_t limit = std::max<size_t>(2, std::min(lower.size(), k.size()) / 3);
    if (d <= limit || related) scored.emplace_back(related ? std::min<size_t>(d, 1) : d, k);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].second);
  return out;
}

const Registration& ModelRegistry::get(std::string_view model_type) const {
  if (const Registration* r = get_registration(model_type)) return *r;
  // The type comes from config.json: quoted printable and cut, never echoed raw.
  std::string msg = "[registry] unknown model type " + quote_name(model_type);
  auto near = near_matches(model_type);
  if (!near.empty()) {
    msg += "; did you mean ";
    for (size_t i = 0; i < near.size(); ++i) msg += (i ? ", " : "") + quote_name(near[i]);
    msg += "?";
  }
  msg += entries_.empty() ? " (no architectures are registered)"
                          : " (" + std::to_string(entries_.size()) + " registered)";
  throw Error(msg);
}

}  // namespace mobius
