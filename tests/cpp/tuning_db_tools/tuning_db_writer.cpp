// A writer process for the tuning DB's multi-process tests.
//
//   kiln_tuning_db_writer DB WRITER_ID BATCHES BATCH_SIZE [PAD_BYTES]
//
// Adds BATCHES batches of BATCH_SIZE records to workload "00000000000000aa",
// each trace naming (writer, batch, index) so the test can account for every
// record. Prints "begin B" before and "commit B" after each batch, flushed,
// so a test can kill it in the middle of a batch. PAD_BYTES of filler per
// trace make a batch take long enough to be interrupted.
#include <cstdio>
#include <string>

#include "kiln/tuning_db/database.h"

namespace db = kiln::tuning_db;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s DB WRITER_ID BATCHES BATCH_SIZE [PAD_BYTES]\n", argv[0]);
    return 2;
  }
  try {
    const std::string path = argv[1];
    const int writer = std::stoi(argv[2]);
    const int batches = std::stoi(argv[3]);
    const int batch_size = std::stoi(argv[4]);
    const std::string pad(argc > 5 ? std::stoul(argv[5]) : 0, 'x');
    auto database = db::Database::open(path);
    database.add_workload({"00000000000000aa", "shared_matmul", R"({"ops":["matmul"]})"});
    db::TuningRun run;
    run.machine = "writer-" + std::to_string(writer);
    const std::string run_uid = database.start_run(run);
    for (int b = 0; b < batches; ++b) {
      std::vector<db::Record> batch;
      for (int i = 0; i < batch_size; ++i) {
        db::Record r;
        r.workload_key = "00000000000000aa";
        r.target.target = "llvm -mcpu=znver3";
        r.trace = "[{\"writer\":" + std::to_string(writer) + ",\"batch\":" + std::to_string(b) +
                  ",\"i\":" + std::to_string(i) + ",\"pad\":\"" + pad + "\"}]";
        r.run_times = {1e-3 * (1 + i), 1e-3 * (2 + i)};
        r.run_uid = run_uid;
        batch.push_back(std::move(r));
      }
      std::printf("begin %d\n", b);
      std::fflush(stdout);
      database.add_records(batch);
      std::printf("commit %d\n", b);
      std::fflush(stdout);
    }
    database.end_run(run_uid);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer: %s\n", e.what());
    return 1;
  }
}
