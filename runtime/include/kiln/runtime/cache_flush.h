/** \file
 * Evicting buffers from the CPU caches, for timings that see memory as a
 * model run does: a kernel measured alone, call after call, finds its
 * weights in cache, while inside a model every layer's weights were pushed
 * out by the layers before it (ResNet-18's 45 MB of weights pass through a
 * 32 MB L3 once per inference).
 */
#ifndef KILN_RUNTIME_CACHE_FLUSH_H
#define KILN_RUNTIME_CACHE_FLUSH_H

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/runtime/module.h"

namespace kiln {

/**
 * Writes back and evicts every cache line of [data, data + bytes) from all
 * cache levels (x86: clflush per line, then a fence; elsewhere a sweep of a
 * scratch buffer larger than any last-level cache). Does not change the
 * bytes. A null pointer or zero bytes does nothing.
 */
void evict_from_cache(const void* data, size_t bytes);

/**
 * Module::time_evaluator with cold buffers: before every call, the tensors
 * args[i] for i in flush_args are evicted from the caches, and each call is
 * timed alone (the eviction is not counted). A repeat takes at least `number`
 * calls, and more until its wall time, evictions included, reaches
 * min_repeat_ms, so a repeat costs about the wall time a warm one does.
 * A repeat's result is the mean of its calls, or with fastest_call its
 * fastest call: on a loaded machine the mean counts every time the
 * scheduler took a core from the kernel mid-call, which hits a kernel on
 * two threads about twice as often as one on a single thread.
 * Throws kiln::Error for a flush index that is not a tensor argument.
 */
TimeResult time_evaluator_cold(const Module& mod, const std::string& name, const std::vector<Arg>& args,
                               const std::vector<size_t>& flush_args, int number = 1, int repeat = 1,
                               double min_repeat_ms = 0, bool fastest_call = false);

}  // namespace kiln

#endif  // KILN_RUNTIME_CACHE_FLUSH_H
