// noentry.cpp - a shared object that is not a mobius plugin: it exports no entry point.
extern "C" __attribute__((visibility("default"))) int not_a_plugin(void) { return 42; }
