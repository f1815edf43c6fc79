// progress.hpp - the one progress line on stderr that long work draws (weights, downloads).
#pragma once

#include <cstdint>
#include <string>

namespace mobius {

// "1.5 GiB", "12 KiB", "512 B".
std::string human_bytes(double bytes);

// Redraws one line in place: "<label> [####....] done / total  rate/s  ETA <extra>"; `final`
// shows the elapsed time instead of the ETA and ends the line.
void draw_progress(const char* label, uint64_t done, uint64_t total, double secs, bool final,
                   const std::string& extra = "");

}  // namespace mobius
