// progress.cpp - the progress line.
#include "util/progress.hpp"

#include <algorithm>
#include <cstdio>

namespace mobius {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof(s), u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return s;
}

void draw_progress(const char* label, uint64_t done, uint64_t total, double secs, bool final,
                   const std::string& extra) {
  const int width = 30;
  done = std::min(done, total);
  double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  std::string bar(static_cast<size_t>(frac * width), '#');
  bar.resize(width, '.');
  double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  char eta[32] = "--";
  if (final)
    std::snprintf(eta, sizeof(eta), "%.1fs", secs);
  else if (rate > 0)
    std::snprintf(eta, sizeof(eta), "ETA %.0fs", static_cast<double>(total - done) / rate);
  std::fprintf(stderr, "\r%s [%s] %s / %s  %s/s  %s%s%s   ", label, bar.c_str(),
               human_bytes(static_cast<double>(done)).c_str(),
               human_bytes(static_cast<double>(total)).c_str(), human_bytes(rate).c_str(), eta,
               extra.empty() ? "" : "  ", extra.c_str());
  if (final) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace mobius
