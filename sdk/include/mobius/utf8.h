/*
 * mobius/utf8.h - decoding one UTF-8 sequence of untrusted text, shared by the host and the SDK
 * (both escape what they quote into messages). Plain C, header-only.
 */
#ifndef MOBIUS_UTF8_H
#define MOBIUS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s[i] (of n bytes) and its code point in *cp; 0 when the
 * bytes there are not one (ASCII, a stray continuation byte, a truncated or overlong sequence,
 * a surrogate, or beyond U+10FFFF). */
static inline size_t mobius_utf8_at(const char* s, size_t n, size_t i, uint32_t* cp) {
  const unsigned char u = (unsigned char)s[i];
  size_t len = 0, k;
  uint32_t c = 0, min = 0;
  if (u >= 0xC2 && u <= 0xDF) len = 2, c = u & 0x1F, min = 0x80;
  else if (u >= 0xE0 && u <= 0xEF) len = 3, c = u & 0x0F, min = 0x800;
  else if (u >= 0xF0 && u <= 0xF4) len = 4, c = u & 0x07, min = 0x10000;
  else return 0;
  if (i + len > n) return 0;
  for (k = 1; k < len; ++k) {
    const unsigned char b = (unsigned char)s[i + k];
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

#endif /* MOBIUS_UTF8_H */
