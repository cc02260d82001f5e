// The tuner's progress lines (tuner/progress.h): their wording, and silence
// without a stream. No GPU: the reporter only formats.
#include <catch2/catch.hpp>
#include <sstream>
#include "tuner/progress.h"

using qjit::tuner::time_left;
using qjit::tuner::TuneProgress;

TEST_CASE("time_left: seconds below 90, minutes above, nothing for an unknown time", "[tuner][progress]") {
  CHECK(time_left(12.4) == "~12 s left");
  CHECK(time_left(0.2) == "~1 s left");
  CHECK(time_left(150) == "~2.5 min left");
  CHECK(time_left(-1).empty());
  CHECK(time_left(std::nan("")).empty());
}

TEST_CASE("tuner progress: the lines of a staged search, and none without a stream", "[tuner][progress]") {
  std::ostringstream out;
  TuneProgress say(&out);
  CHECK(say.on());
  say.staged_start("wq_gemm k=64", "NVIDIA H100", "sm_90", 7, 120, 3);
  say.batch_start("screen: sample", 16, 0);
  say.batch_done("screen: sample", 16, 2.5, 0.5, 315.04, true, "{\"algo\":2}");
  say.remaining(32, 4, 7);
  say.family_dropped("tiled: best 1705.22 us at the screen");
  say.confirmed(317.19, 17.6, 315.04, nlohmann::json{{"algo", 2}});
  say.confirm_failed(nlohmann::json{{"algo", 1}});
  say.wrong(nlohmann::json{{"algo", 3}}, "22 of 96 elements off");
  say.baseline("cublas_fp16", 481.77, 350, 11.6);
  say.verifying_winner(16);
  say.winner_verified();
  CHECK(out.str() ==
        "tuning wq_gemm k=64 on NVIDIA H100 (sm_90), staged search (seed 7): 120 candidates, 3 already measured\n"
        "  screen: sample: 16 candidates (0 screened so far)\n"
        "  screen: sample: 16 screened in 2.5 s (waiting on compiles 0.5 s); best 315.04 us (new) {\"algo\":2}\n"
        "  ~32 more to screen, 4+ to confirm; ~7 s left\n"
        "  family dropped: tiled: best 1705.22 us at the screen\n"
        "  confirm:   317.19 us  17.6% of floor, verified (screen 315.04 us)  {\"algo\":2}\n"
        "  confirm: failed  {\"algo\":1}\n"
        "  WRONG {\"algo\":3}: 22 of 96 elements off\n"
        "  baseline cublas_fp16              481.77 us     350 GB/s  11.6% of floor\n"
        "verify: the winner on 16 more launches ... ok\n");

  // The exhaustive search's compile line is redrawn every 16th candidate and at the last.
  std::ostringstream ex;
  TuneProgress exhaustive(&ex);
  for (size_t n = 1; n <= 20; ++n) exhaustive.compiled(n, 20, 5);
  CHECK(ex.str() == "\r  compile: 16/20 ~5 s left   \r  compile: 20/20 ~5 s left   ");

  TuneProgress quiet(nullptr);
  CHECK_FALSE(quiet.on());
  quiet.staged_start("s", "d", "a", 1, 2, 3);
  quiet.measured(1, 2, 3.0, 4.0, 5.0, 6.0, 7.0, nlohmann::json::object());
  quiet.baseline_faster("cublas", 1, 2, "s");  // nothing to check but that nothing crashes without a stream
}
