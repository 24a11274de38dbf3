/* glibc 2.32's <sys/single_threaded.h> for a build against glibc 2.28 (the release wheels):
 * libstdc++'s headers read its flag to skip atomic reference counts in single-threaded
 * processes. Here the flag is a constant "not single-threaded", so they always count atomically
 * (as they did before glibc 2.32). The copy libstdc++.a's own objects read is defined in
 * cxx/static/glibc_compat.cc, with the same value. */
#ifndef TVMRT_SINGLE_THREADED_SHIM_H
#define TVMRT_SINGLE_THREADED_SHIM_H
static const char __libc_single_threaded = 0;
#endif
