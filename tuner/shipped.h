// Shipped tuning: `qjit export` records made on common GPUs for the shapes of
// common models (tuned/*.jsonl in the repository, share/qjit/tuned once
// installed; tuned/models.jsonl lists the shapes). A shipped record is never
// launched as it is: `qjit import --shipped` recompiles, verifies and times
// the ones made on this GPU, and `qjit tune` tries a spec's shipped config
// first, as a seed of its search.
#pragma once
#include <string>
#include <vector>
#include "cache/fingerprint.h"
#include "cache/record.h"

namespace qjit::tuner {

// The folder of shipped records: $QJIT_SHIPPED when set (set but empty: none),
// else share/qjit/tuned beside the running binary's prefix, else the source
// tree's tuned/ (a binary run from its build tree). "" when none exists.
std::string shipped_dir();

struct ShippedRecord {
  std::string where;  // "file.jsonl:12"
  cache::RecordLine line;
  cache::DeviceIdentity device;  // the GPU it was tuned on
  std::string templates_hash;    // its op's templates when it was tuned (cache::Fingerprint)
};

struct ShippedSet {
  std::vector<ShippedRecord> records;  // every good line of <dir>/*.jsonl except models.jsonl, in file then line order
  std::vector<std::string> problems;   // "file.jsonl:3: why" for each line that is not a usable record
};

// Reads every record file of `dir` (nothing when dir is ""). A bad line is a
// problem, not an error: the other records stay usable.
ShippedSet read_shipped(const std::string& dir);

// The records tuned with other templates than this build's ("file.jsonl:12:
// wq_gemm's templates changed since it was tuned"): their configs won among
// other kernels. They stay usable (each is compiled, verified and timed here
// before use, so nothing wrong runs) but may no longer be the fastest, so
// they should be made again (docs/tuning.md, "Shipped records").
std::vector<std::string> stale_records(const ShippedSet& set);

// The records tuned on a GPU of this name and compute capability (the same
// product; the driver, SM count of a partitioned GPU and qjit version may differ:
// each record is verified and timed again before use).
std::vector<ShippedRecord> shipped_for(const ShippedSet& set, const cache::DeviceIdentity& device);

// The configs shipped for `spec` on `device`, from shipped_dir(), read once per
// process; problems go to `warn` (once) when given.
std::vector<nlohmann::json> shipped_configs(const codegen::OpSpec& spec, const cache::DeviceIdentity& device,
                                            std::ostream* warn);

}  // namespace qjit::tuner
