// doctest_main.cpp - the one translation unit that defines doctest's main() for each test binary.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
