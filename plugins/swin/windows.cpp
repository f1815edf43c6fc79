// windows.cpp - the geometry of Swin's windows (swin.hpp), computed when the graph is built: the
// index tables the graph gathers with, each the composition of the reshapes, pads, rolls and
// crops transformers' SwinLayer and SwinPatchMerging perform on a feature map of fixed size.
#include <algorithm>

#include "swin.hpp"

namespace mobius::swin {

std::vector<Resolution> stage_resolutions(const SwinConfig& c) {
  std::vector<Resolution> out;
  Resolution r{c.grid_height(), c.grid_width()};
  for (size_t i = 0; i < c.depths.size(); ++i) {
    out.push_back(r);
    r = {(r.height + 1) / 2, (r.width + 1) / 2};  // SwinEncoder after each downsample
  }
  return out;
}

Windows layer_windows(int64_t height, int64_t width, int64_t window_size, bool shifted) {
  Windows w;
  w.height = height;
  w.width = width;
  w.window = window_size;
  w.shift = shifted ? window_size / 2 : 0;
  // set_shift_and_window_size: a map no larger than the window is one window, unshifted.
  if (std::min(height, width) <= window_size) {
    w.shift = 0;
    w.window = std::min(height, width);
  }
  // maybe_pad: zeros at the bottom and right up to whole windows.
  w.padded_height = height + (w.window - height % w.window) % w.window;
  w.padded_width = width + (w.window - width % w.window) % w.window;
  return w;
}

std::vector<int64_t> Windows::partition() const {
  // Slot (window (wh, ww), token (i, j)) of window_partition(roll(padded, -shift)) reads the
  // padded map at ((wh * w + i + shift) mod Hp, (ww * w + j + shift) mod Wp).
  const int64_t across = padded_width / window;
  std::vector<int64_t> out(static_cast<size_t>(count() * tokens()));
  size_t slot = 0;
  for (int64_t win = 0; win < count(); ++win)
    for (int64_t i = 0; i < window; ++i)
      for (int64_t j = 0; j < window; ++j) {
        const int64_t y = ((win / across) * window + i + shift) % padded_height;
        const int64_t x = ((win % across) * window + j + shift) % padded_width;
        out[slot++] = y < height && x < width ? y * width + x : height * width;
      }
  return out;
}

std::vector<int64_t> Windows::reverse() const {
  // window_reverse, then roll(+shift), then the crop: position (y, x) comes from the shifted
  // map's ((y - shift) mod Hp, (x - shift) mod Wp), which is in window (y' / w, x' / w).
  const int64_t across = padded_width / window;
  std::vector<int64_t> out(static_cast<size_t>(height * width));
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const int64_t ys = (y - shift + padded_height) % padded_height;
      const int64_t xs = (x - shift + padded_width) % padded_width;
      const int64_t win = (ys / window) * across + xs / window;
      out[static_cast<size_t>(y * width + x)] = (win * window + ys % window) * window + xs % window;
    }
  return out;
}

std::vector<int64_t> Windows::regions() const {
  // get_attn_mask: along each axis, [0, n - w) is region 0, [n - w, n - shift) region 1 and
  // [n - shift, n) region 2, on the padded (and already shifted) map; label = 3 * row + column.
  auto region = [this](int64_t v, int64_t n) { return int64_t{v >= n - window} + int64_t{v >= n - shift}; };
  const int64_t across = padded_width / window;
  std::vector<int64_t> out(static_cast<size_t>(count() * tokens()));
  size_t slot = 0;
  for (int64_t win = 0; win < count(); ++win)
    for (int64_t i = 0; i < window; ++i)
      for (int64_t j = 0; j < window; ++j)
        out[slot++] = 3 * region((win / across) * window + i, padded_height) +
                      region((win % across) * window + j, padded_width);
  return out;
}

std::vector<int64_t> relative_position_index(int64_t window) {
  const int64_t n = window * window, side = 2 * window - 1;
  std::vector<int64_t> out(static_cast<size_t>(n * n));
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b)
      out[static_cast<size_t>(a * n + b)] =
          (a / window - b / window + window - 1) * side + (a % window - b % window + window - 1);
  return out;
}

std::vector<int64_t> merge_positions(int64_t height, int64_t width) {
  static constexpr int64_t kOrder[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};  // (row, column)
  const int64_t h2 = (height + 1) / 2, w2 = (width + 1) / 2;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(h2 * w2 * 4));
  for (int64_t i = 0; i < h2; ++i)
    for (int64_t j = 0; j < w2; ++j)
      for (const auto& rc : kOrder) {
        const int64_t y = 2 * i + rc[0], x = 2 * j + rc[1];
        out.push_back(y < height && x < width ? y * width + x : height * width);
      }
  return out;
}

}  // namespace mobius::swin
