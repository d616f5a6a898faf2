// The IR logger (kiln/support/ir_log.h): KILN_DUMP_IR read once for all pipelines.
#include "kiln/support/ir_log.h"

#include <cstdlib>
#include <iostream>

namespace kiln {

const IrDumpSetting& ir_dump_setting() {
  static const IrDumpSetting setting = [] {
    IrDumpSetting s;
    const char* v = std::getenv("KILN_DUMP_IR");
    std::string value = v ? v : "";
    s.on = !value.empty() && value != "0";
    if (s.on && value != "1") s.only = value;
    return s;
  }();
  return setting;
}

IrLog::IrLog(bool force) : on_(force || ir_dump_setting().on), only_(ir_dump_setting().only) {}

void IrLog::print(const std::string& what, const std::string& ir) const { std::cerr << "// " << what << "\n" << ir << "\n"; }

void IrLog::after(const std::string& name, double ms, const std::string& ir) const {
  std::cerr << "// after " << name << " (" << ms << " ms)" << (ir.empty() ? " (unchanged)\n" : "\n" + ir + "\n");
}

}  // namespace kiln
