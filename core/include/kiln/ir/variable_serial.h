/**
 * \file variable_serial.h
 * Each Variable's creation order, process-wide. The simplifier orders
 * same-named variables (a loop split twice gives two `j.outer`) by it rather
 * than by address, so one schedule lowers to one text in every build: size
 * variants dedupe by that text (graph/plan_builder.cpp).
 */
#pragma once

#include <cstdint>

namespace kiln {

struct Variable;

/** The serial recorded when `v` was made (0 for a Variable made some other way). */
uint64_t variable_serial(const Variable* v);

}  // namespace kiln
